//! The door's `/metrics`: its histograms, and the whole page after a fixed run of events
//! against the scrape recorded before its encoder changed (`tests/fixtures/metrics/`).

use super::*;
use crate::bench::gates;
use crate::bench::suite::Check;
use crate::bench::Baseline;
use crate::exposition::Scrape;
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
    let text = exposition::encode(
        Format::Text,
        vec![Box::new(m), Box::new(Serving(vec![Route::Holding]))],
    );
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

/// A capture that is off (its writer on the current tokio runtime).
fn no_capture() -> Arc<Capture> {
    Capture::start(
        std::env::temp_dir().join("sparkctl-metrics-fixture"),
        CaptureConfig {
            on: false,
            max_bytes: DEFAULT_MAX,
        },
        None,
    )
}

/// Each series the door writes, with more than one label set where it has labels: two
/// upstreams (one with no TTFT yet), two models, answers judged, golden rounds, capture.
async fn scripted_page(format: Format) -> String {
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

    // No key has been used: the keys' families are left out, as on a door without keys.
    let dir = std::env::temp_dir().join(format!("sparkctl-metrics-{}", crate::state::new_run_id()));
    let quota = crate::server::quota::Quota::new(&crate::state::StateDir::open(&dir).unwrap());
    let page = page(
        &Arc::new(m),
        routes.to_vec(),
        (&Arc::new(live), &no_capture(), &quota),
        format,
    );
    std::fs::remove_dir_all(dir).unwrap();
    page
}

/// The same HELP and TYPE lines, series and values as before the encoder changed, line by
/// line: names and labels (their order, the bounds as written) the very text; a value
/// differs only where a whole number is now written as a float (`80` → `80.0`).
#[tokio::test]
async fn the_page_holds_what_the_recorded_scrape_held() {
    let page = scripted_page(Format::Text).await;
    assert_eq!(Scrape::parse(&page), Scrape::parse(RECORDED), "{page}");
    let recorded: Vec<&str> = RECORDED.lines().collect();
    assert_eq!(page.lines().count(), recorded.len(), "{page}");
    for (now, then) in page.lines().zip(recorded) {
        let (series, value) = now.rsplit_once(' ').unwrap();
        let whole = value.strip_suffix(".0").map(|v| format!("{series} {v}"));
        assert!(
            now == then || whole.as_deref() == Some(then),
            "{now}\nwas {then}"
        );
    }
}

/// OpenMetrics, for a scraper that asks: the same samples, a counter's family named
/// without its `_total`, and the end marker.
#[tokio::test]
async fn openmetrics_holds_the_same_samples() {
    let open = scripted_page(Format::OpenMetrics).await;
    assert!(open.ends_with("\n# EOF\n"), "{open}");
    assert!(
        open.contains("# TYPE sparkctl_frontdoor_requests counter\n"),
        "{open}"
    );
    let (open, recorded) = (Scrape::parse(&open), Scrape::parse(RECORDED));
    assert_eq!(open.samples, recorded.samples);
}
