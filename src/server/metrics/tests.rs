//! The door's `/metrics`: its histograms, and the whole page after a fixed run of events
//! against the scrape recorded before its encoder changed (`tests/fixtures/metrics/`).

use super::*;
use crate::bench::gates;
use crate::bench::suite::Check;
use crate::bench::Baseline;
use crate::frontdoor::capture::{CaptureConfig, DEFAULT_MAX};
use crate::production::Upstream;
use crate::server::capture::Capture;
use crate::server::live::{Judging, Live};
use crate::server::quality::Verdict;

/// The door's page as the hand-written encoder wrote it for `scripted_page`'s events.
const RECORDED: &str = include_str!("../../../tests/fixtures/metrics/door.prom");

#[test]
fn histograms_are_cumulative_and_the_text_format_holds() {
    let m = Metrics::default();
    m.ttft("a", 0.03);
    m.ttft("a", 0.3);
    m.itl("a", 0.02, 2);
    m.status("a", 200);
    m.event(Event::Switch);
    let text = m.render(&[Route::Holding]);
    assert!(
        text.contains("sparkctl_frontdoor_ttft_seconds_bucket{upstream=\"a\",le=\"0.05\"} 1"),
        "{text}"
    );
    assert!(text.contains("sparkctl_frontdoor_ttft_seconds_bucket{upstream=\"a\",le=\"0.5\"} 2"));
    assert!(text.contains("sparkctl_frontdoor_ttft_seconds_count{upstream=\"a\"} 2"));
    assert!(text.contains("sparkctl_frontdoor_itl_seconds_bucket{upstream=\"a\",le=\"0.01\"} 2"));
    assert!(text.contains("sparkctl_frontdoor_requests_total{upstream=\"a\",code=\"200\"} 1"));
    assert!(text.contains("sparkctl_frontdoor_switches_total 1"));
    assert!(text.contains("# TYPE sparkctl_frontdoor_ttft_seconds histogram"));
}

fn up(recipe: &str, deployment: &str) -> Upstream {
    Upstream {
        recipe: recipe.into(),
        deployment: deployment.into(),
        url: format!("http://127.0.0.1:8001/{deployment}"),
    }
}

/// An answer judged: the checks that applied, its decode speed, or the server's failure.
fn verdict(checks: &[(Check, bool)], decode_tps: f64, error: Option<&str>) -> Verdict {
    Verdict {
        error: error.map(String::from),
        checks: checks.to_vec(),
        degenerate: None,
        ttft_ms: Some(120.0),
        ttfo_ms: Some(120.0),
        e2el_ms: 900.0,
        tpot_ms: Some(12.5),
        decode_tps: Some(decode_tps),
        evidence: None,
        text: None,
    }
}

/// Each series the door writes, with more than one label set where it has labels: two
/// upstreams (one with no TTFT yet), two models, answers judged, golden rounds, capture.
async fn scripted_page() -> String {
    let m = Metrics::default();
    for (upstream, code) in [("prod", 200), ("prod", 200), ("prod", 503), ("cand", 200)] {
        m.started(upstream);
        m.status(upstream, code);
    }
    m.finished("prod");
    m.error("prod", "connect");
    m.error("cand", "stream");
    m.error("cand", "stream");
    for ttft in [0.03, 0.3, 7.5] {
        m.ttft("prod", ttft);
    }
    m.itl("prod", 0.02, 2);
    m.itl("prod", 0.004, 1);
    m.itl("cand", 0.5, 1);
    for (model, wait) in [("chat", 0.0), ("chat", 0.2), ("chat", 3.0), ("coder", 45.0)] {
        m.waited(model, wait);
    }
    m.loaded("chat");
    m.loaded("coder");
    m.loaded("coder");
    m.unloaded("chat", "ttl");
    m.unloaded("coder", "evicted");
    for e in [
        Event::Held,
        Event::Held,
        Event::Rejected,
        Event::Switch,
        Event::Restart,
    ] {
        m.event(e);
    }
    let routes = [Route::Serving(up("prod", "prod-1")), Route::Holding];

    let live = Live::default();
    let good = [(Check::NonEmpty, true), (Check::NoMarkdown, true)];
    for _ in 0..4 {
        live.record(&up("prod", "prod-1"), verdict(&good, 50.0, None));
    }
    let markdown = [(Check::NonEmpty, true), (Check::NoMarkdown, false)];
    live.record(&up("prod", "prod-1"), verdict(&markdown, 40.0, None));
    live.record(&up("prod", "prod-1"), verdict(&[], 0.0, Some("500")));
    live.record(&up("cand", "cand-1"), verdict(&good, 62.5, None));
    let gates = gates::parse_all(&BTreeMap::from([
        ("no_markdown".to_string(), ">= 90%".to_string()),
        ("non_empty".to_string(), ">= 90%".to_string()),
    ]))
    .unwrap();
    let how = Judging {
        window: 10,
        min_answers: 4,
        sustain: std::time::Duration::from_secs(3600),
    };
    assert!(live
        .judge("prod-1", &gates, how, &Baseline::missing("-"))
        .is_none());
    let round = |failed: &[&str]| crate::server::live::GoldenRound {
        cases: 3,
        failed: failed.iter().map(|f| f.to_string()).collect(),
    };
    live.golden("prod", &round(&[]));
    live.golden("prod", &round(&["capital"]));
    live.golden("cand", &round(&[]));

    let capture = Capture::start(
        std::env::temp_dir().join("sparkctl-metrics-fixture"),
        CaptureConfig {
            on: false,
            max_bytes: DEFAULT_MAX,
        },
        None,
    );
    let mut page = m.render(&routes);
    live.render(&mut page);
    capture.render(&mut page);
    page
}

#[tokio::test]
async fn the_page_holds_what_the_recorded_scrape_held() {
    let page = scripted_page().await;
    assert_eq!(page, RECORDED);
}
