//! Issue 27: the front door's live page, rendered by a real headless Chromium against a
//! real front door behind an API key: a production that starts looping on live traffic
//! (its `/health` green) is restarted and failed over with no client failing, and the
//! page shows it — production, the warm instance, the TTFT / per-token / quality /
//! request charts drawn from the door's own metrics, the runs with their reports (a click on
//! one opens it in its own sandbox), the log.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, cdp, free_port, Deck, Ran};

const KEY: &str = "page-key-W4r9qTz1Lm";

fn with_key(deck: &Deck, args: &[&str]) -> Ran {
    Ran::of(deck.cmd(args).env("SPARKCTL_FRONTDOOR_API_KEY", KEY))
}

fn sim(deck: &Deck, name: &str, args: &str, extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 200ms, --ttft, 5ms, --token-rate, \"1000\", --tokens, \"40\"{args}]\n  memory_gb: 7\nhealth:\n  timeout: 30s\n{extra}",
            free_port()
        ),
    );
}

/// GET `path` on the door, with the key or not: status and body.
fn get(deck: &Deck, path: &str, key: bool) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--path-as-is", "-w", "\n%{http_code}"]);
    if key {
        cmd.args(["-H", &format!("Authorization: Bearer {KEY}")]);
    }
    let out = cmd
        .arg(format!("{}{path}", deck.door_url()))
        .output()
        .expect("curl runs");
    let text = support::text(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

fn history(deck: &Deck) -> Vec<Value> {
    let v: Value = serde_json::from_str(&with_key(deck, &["--json", "history"]).stdout()).unwrap();
    v.as_array().unwrap().clone()
}

/// Streams answers through the production port, with the key, until stopped; each
/// request's status and whether its stream reached `[DONE]`.
fn client(url: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Vec<(u16, bool)>>>) {
    support::block_on(async move {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let body = json!({"model": "any", "max_tokens": 40, "stream": true,
            "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
        while !stop.load(Ordering::SeqCst) {
            let r = http
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth(KEY)
                .json(&body)
                .send()
                .await;
            let got = match r {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let text = r.text().await.unwrap_or_default();
                    (status, text.contains("[DONE]"))
                }
                Err(_) => (0, false),
            };
            seen.lock().unwrap().push(got);
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
}

/// Chromium, headless: the DOM after the page's scripts ran for a few (virtual) seconds.
fn chromium(url: &str, screenshot: Option<&std::path::Path>) -> String {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1280,1900",
        "--virtual-time-budget=4000",
    ]);
    match screenshot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd
        .arg(url)
        .output()
        .expect("chromium runs (Debian package `chromium`)");
    support::text(&out.stdout)
}

/// The `<svg id="chart-NAME">` element of a DOM, as text.
fn chart<'a>(dom: &'a str, name: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"chart-{name}\""))
        .unwrap_or_else(|| panic!("no chart {name}"));
    let end = dom[start..].find("</svg>").unwrap() + start;
    &dom[start..end]
}

/// `data-n` of each line a chart drew, by upstream.
fn lines(svg: &str) -> Vec<(String, usize)> {
    svg.split("<polyline")
        .skip(1)
        .map(|p| {
            let attr = |name: &str| {
                p.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap_or_default()
                    .to_string()
            };
            assert!(attr("points").split(' ').count() >= 1);
            (attr("data-upstream"), attr("data-n").parse().unwrap())
        })
        .collect()
}

#[test]
fn the_live_page_shows_a_looping_production_failed_over_with_its_charts_in_a_real_browser() {
    let deck = Deck::new("live-page");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(
        deck.dir.join("recipes/suites/tiny.yaml"),
        "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n",
    )
    .unwrap();
    sim(&deck, "safe", "", "");
    // Its benchmark passes (6 requests); past 25 answers it loops, health green.
    sim(
        &deck,
        "prod",
        ", --loop-after, \"25\"",
        "bench:\n  suite: tiny\nfallback: safe\nlive:\n  gates:\n    no_loop: \">= 90%\"\n  window: 10\n  min_answers: 5\n  sustain: 1s\n",
    );
    with_key(&deck, &["rollback", "--to", "safe"]).succeeds();
    with_key(&deck, &["up", "prod", "--yes"]).promoted("prod", deck.door_port);

    let (stop, seen) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let traffic = {
        let (url, stop, seen) = (deck.door_url(), stop.clone(), seen.clone());
        std::thread::spawn(move || client(url, stop, seen))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !history(&deck).iter().any(|r| r["command"] == "failover") {
        assert!(
            Instant::now() < deadline,
            "no failover: {:?}",
            history(&deck)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The fallback serves a few seconds more: its own points on the charts.
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::SeqCst);
    traffic.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() > 40, "{} requests", seen.len());
    assert!(
        seen.iter().all(|s| *s == (200, true)),
        "a client request failed: {:?}",
        seen.iter().find(|s| **s != (200, true))
    );

    // The key is respected: without it, a shell with no data; data and reports refused.
    let (code, shell) = get(&deck, "/_sparkctl/", false);
    assert_eq!(code, 401);
    assert!(shell.contains("id=\"data\">null</script>"), "{shell}");
    assert_eq!(get(&deck, "/_sparkctl/data", false).0, 401);
    // With it (a header, as curl sends it), the page comes with its data inside.
    let (code, full) = get(&deck, "/_sparkctl", true);
    assert_eq!(code, 200);
    assert!(full.contains("id=\"data\">{") && full.contains("\"points\":[{"));
    // Out of the OpenAI paths' way: those are still the upstream's.
    assert_eq!(get(&deck, "/v1/models", true).0, 200);

    let (code, data) = get(&deck, "/_sparkctl/data", true);
    assert_eq!(code, 200, "{data}");
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["door"]["upstream"]["recipe"], "safe");
    // The warm fallback it failed over to serves: no longer warm, so its grace cannot stop it.
    let serving = &data["door"]["upstream"]["deployment"];
    let warm = data["door"]["production"]["warm"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        warm.iter().all(|w| &w["upstream"]["deployment"] != serving),
        "{warm:?}"
    );
    let good = |name: &str| -> Vec<f64> {
        data["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["by"][name]["good_pct"].as_f64())
            .collect()
    };
    // Prod's quality fell on the chart's data; the fallback's answers are all good.
    assert!(good("prod").iter().any(|g| *g < 50.0), "{:?}", good("prod"));
    assert!(good("prod").contains(&100.0), "{:?}", good("prod"));
    assert!(!good("safe").is_empty() && good("safe").iter().all(|g| *g == 100.0));
    // Each recipe's latest start, step by step, in order (issue 46).
    let starts = data["starts"].as_array().unwrap();
    for recipe in ["prod", "safe"] {
        let s = starts.iter().find(|s| s["recipe"] == recipe).unwrap();
        assert!(support::phases_in_order(&s["last"]) > 0.0, "{s}");
        assert!(s["p50_s"].as_f64().unwrap() > 0.0, "{s}");
    }
    let runs = data["runs"].as_array().unwrap();
    let failover = runs.iter().find(|r| r["command"] == "failover").unwrap();
    assert!(
        support::strings(&failover["evidence"])
            .iter()
            .any(|e| e.starts_with("no_loop (a repetition loop")),
        "{failover}"
    );
    let up = runs.iter().find(|r| r["command"] == "up").unwrap();
    let report = up["report"].as_str().expect("up's report is linked");
    let (code, html) = get(&deck, report, true);
    assert_eq!(code, 200);
    assert!(
        html.contains("<html") && html.contains("prod"),
        "{html:.200}"
    );
    // Path-checked: nothing but a run's report under the runs dir.
    for bad in [
        "/_sparkctl/report/../../production.json",
        "/_sparkctl/report/..%2f..%2fproduction.json",
        "/_sparkctl/report/.hidden",
        &format!("/_sparkctl/report/{}", failover["run_id"].as_str().unwrap()),
    ] {
        let (code, body) = get(&deck, bad, true);
        assert_eq!(code, 404, "{bad}: {body}");
    }

    // A client's key, and its use on the page: asked until the door has read the new key.
    let viewer = deck.ok(&["keys", "add", "viewer"]).trim().to_string();
    let ask = || {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {viewer}"))
            .args(["-H", "content-type: application/json", "-d"])
            .arg(r#"{"model":"any","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#)
            .arg(format!("{}/v1/chat/completions", deck.door_url()))
            .output()
            .expect("curl runs");
        support::text(&out.stdout) == "200"
    };
    let began = Instant::now();
    while !ask() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "viewer's key never opened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // In a real browser: the key from the address's fragment, the data fetched with it.
    let url = format!("{}/_sparkctl/#key={KEY}", deck.door_url());
    let dom = chromium(&url, None);
    assert!(
        dom.contains("data-rendered=\"ok:"),
        "the page did not render: {:.600}",
        dom
    );
    for name in ["ttft", "tpot", "quality", "requests"] {
        let drawn = lines(chart(&dom, name));
        for recipe in ["prod", "safe"] {
            assert!(
                drawn.iter().any(|(up, n)| up == recipe && *n >= 2),
                "chart {name}: {drawn:?}"
            );
        }
    }
    for shown in [
        "failover",
        "recovered",
        "front door server pid",
        "Use by key",
        ">viewer<",
    ] {
        assert!(dom.contains(shown), "{shown} not on the page");
    }
    assert!(dom.contains(&format!("href=\"{report}\"")));
    assert!(
        !dom.contains("src=\"http") && !dom.contains("href=\"http"),
        "no CDN"
    );
    report_opened_from_the_page(&deck, &url, report);
    // Without the key, the browser gets the locked shell.
    let locked = chromium(&format!("{}/_sparkctl/", deck.door_url()), None);
    assert!(locked.contains("data-rendered=\"locked\""), "{locked:.600}");

    let shot = deck.dir.join("live-page.png");
    chromium(&url, Some(&shot));
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 30_000, "screenshot is {size} bytes");
    if let Some(dir) = std::env::var_os("SPARKCTL_TEST_SCREENSHOTS") {
        std::fs::copy(&shot, std::path::Path::new(&dir).join("live-page.png")).unwrap();
    }
    // The key reached no file.
    let state = deck.dir.join("state");
    let grep = Command::new("grep")
        .args(["-rl", KEY])
        .arg(&state)
        .output()
        .unwrap();
    assert!(grep.stdout.is_empty(), "{}", support::text(&grep.stdout));
}

/// A user clicks the report's link on the page (opened with the key): the report opens as
/// the door serves it, under its own CSP's sandbox — an origin of its own, so nothing in it
/// can read what the page keeps (the key) or call the door in the page's name; never a
/// document the page made (a blob: is of the page's origin). The link opens that report
/// without the key, and nothing else does.
fn report_opened_from_the_page(deck: &Deck, page_url: &str, report: &str) {
    let mut b = cdp::Browser::start(&deck.dir);
    let (page, page_target) = b.open(page_url);
    b.wait_for(
        &page,
        "(document.body.dataset.rendered || '').startsWith('ok:') && !!document.querySelector('a.report')",
    );
    b.eval(&page, "document.querySelector('a.report').click(), true");
    let deadline = Instant::now() + Duration::from_secs(30);
    let opened = loop {
        let found = b.pages().into_iter().find(|(id, url)| {
            *id != page_target && (url.starts_with("http") || url.starts_with("blob:"))
        });
        if let Some(t) = found {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the click opened no report: {:?}",
            b.pages()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let tab = b.attach(&opened.0);
    // A new window holds about:blank until the link's document comes.
    b.wait_for(
        &tab,
        "location.href !== 'about:blank' && document.readyState === 'complete'",
    );
    let seen = b.eval(
        &tab,
        "JSON.stringify({origin: self.origin, href: location.href, \
         storage: (() => { try { return 'readable: ' + localStorage.length; } catch (e) { return 'denied'; } })(), \
         text: document.body ? document.body.innerText.slice(0, 400) : ''})",
    );
    let seen: Value = serde_json::from_str(seen.as_str().unwrap()).unwrap();
    assert_eq!(
        (seen["origin"].as_str(), seen["storage"].as_str()),
        (Some("null"), Some("denied")),
        "the report is not in its sandbox: {seen}"
    );
    let href = seen["href"].as_str().unwrap();
    assert_eq!(href, format!("{}{report}", deck.door_url()), "{seen}");
    assert!(seen["text"].as_str().unwrap().contains("prod"), "{seen}");
    drop(b);

    // The link alone opens it, with the report's CSP; the run without its token, or with
    // another's, does not.
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null"])
        .arg(format!("{}{report}", deck.door_url()))
        .output()
        .expect("curl runs");
    let head = support::text(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.lines()
            .any(|l| l.starts_with("content-security-policy:")
                && l.contains("sandbox allow-scripts")
                && l.contains("default-src 'none'")),
        "{head}"
    );
    assert!(head.contains("referrer-policy: no-referrer"), "{head}");
    let (bare, token) = report.rsplit_once('/').unwrap();
    assert_eq!(get(deck, bare, false).0, 401);
    let forged = format!("{bare}/{}", "0".repeat(token.len()));
    assert_eq!(get(deck, &forged, false).0, 401);
}
