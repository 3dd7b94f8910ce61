//! The live page: one self-contained status page the front door serves on the production
//! port, under `/_sparkctl/` (no OpenAI path starts so): production and its warm
//! instances, charts of live TTFT, per-token latency and answer quality drawn from the
//! door's own metrics, each key's use, the recent runs with their HTML reports, the jobs,
//! and the last lines of the door's log. No CDN: the HTML, its script and its style are
//! one document (`page.html`), and its Content-Security-Policy lets it fetch nothing but
//! its own data.
//!
//! The charts' series are sampled here, once a second, from the metrics' running totals
//! (a lock and a few additions): nothing is added to a request's path but the prefix test.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::metrics::Totals;
use super::Door;
use crate::history::{Command, Outcome, RunRecord};
use crate::job::{JobRecord, JobState};
use crate::state::StateDir;

mod link;

/// Where the page lives on the production port.
pub(crate) const PREFIX: &str = "/_sparkctl";
/// How often the charts' series take a point.
const EVERY: Duration = Duration::from_secs(1);
/// Points kept: 15 minutes at one a second.
const POINTS: usize = 900;
const RUNS: usize = 15;
const JOBS: usize = 10;
const LOG_LINES: usize = 20;
const LOG_TAIL: u64 = 16 << 10; // bytes of the log read for its last lines
/// Evidence and errors are trimmed to this many characters on the page.
const TRIM: usize = 240;

const HTML: &str = include_str!("page.html");
/// The page fetches its own data and nothing else; no script or style from elsewhere; no
/// other page may frame it (clickjacking the key form).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";
/// A report runs in an origin of its own (a sandbox): nothing in it can read the page's key
/// or call the door in the page's name.
const REPORT_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
                          style-src 'unsafe-inline'; img-src data:; base-uri 'none'; \
                          form-action 'none'; frame-ancestors 'none'; sandbox allow-scripts";

/// One upstream's traffic over one interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Figures {
    requests: u64,
    /// Mean time to the first token of the answers that began, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    ttft_ms: Option<f64>,
    /// Mean gap per token, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    tpot_ms: Option<f64>,
    /// Answers judged, and the share that passed every check.
    answers: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    good_pct: Option<f64>,
}

/// One point of the charts: unix ms, and each upstream that moved in the interval.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    t: u64,
    by: BTreeMap<String, Figures>,
}

#[derive(Default)]
struct Series {
    metrics: BTreeMap<String, Totals>,
    live: BTreeMap<String, (u64, u64)>,
    points: VecDeque<Point>,
}

impl Series {
    /// A point from the totals now against the totals at the last tick; none when nothing
    /// moved.
    fn tick(
        &mut self,
        t: u64,
        metrics: BTreeMap<String, Totals>,
        live: BTreeMap<String, (u64, u64)>,
    ) {
        let mut by = BTreeMap::new();
        let names: std::collections::BTreeSet<&String> =
            metrics.keys().chain(live.keys()).collect();
        for name in names {
            let (m, m0) = (
                metrics.get(name).copied().unwrap_or_default(),
                self.metrics.get(name).copied().unwrap_or_default(),
            );
            let (l, l0) = (
                live.get(name).copied().unwrap_or_default(),
                self.live.get(name).copied().unwrap_or_default(),
            );
            let mean = |sum: f64, n: u64| (n > 0).then(|| 1000.0 * sum / n as f64);
            let answers = l.0.saturating_sub(l0.0);
            let faulty = l.1.saturating_sub(l0.1);
            let f = Figures {
                requests: m.requests.saturating_sub(m0.requests),
                ttft_ms: mean(m.ttft_sum - m0.ttft_sum, m.ttft_n.saturating_sub(m0.ttft_n)),
                tpot_ms: mean(m.itl_sum - m0.itl_sum, m.itl_n.saturating_sub(m0.itl_n)),
                answers,
                good_pct: (answers > 0)
                    .then(|| 100.0 * answers.saturating_sub(faulty) as f64 / answers as f64),
            };
            if f.requests > 0 || f.ttft_ms.is_some() || f.tpot_ms.is_some() || answers > 0 {
                by.insert(name.clone(), f);
            }
        }
        self.metrics = metrics;
        self.live = live;
        if !by.is_empty() {
            self.points.push_back(Point { t, by });
            while self.points.len() > POINTS {
                self.points.pop_front();
            }
        }
    }
}

/// The page's state: whether it is served, the charts' series, and the signer of its
/// report links.
pub(crate) struct Page {
    /// `SPARKCTL_FRONTDOOR_PAGE=off` neither samples nor serves (to measure its cost).
    enabled: bool,
    series: Mutex<Series>,
    links: Arc<link::Signer>,
}

impl Page {
    pub(crate) fn new(enabled: bool) -> Page {
        Page {
            enabled,
            series: Mutex::default(),
            links: Arc::new(link::Signer::new()),
        }
    }

    fn points(&self) -> Vec<Point> {
        let s = self.series.lock().expect("series");
        s.points.iter().cloned().collect()
    }
}

/// Takes a point of the charts every second until `stopped` turns true.
pub(crate) async fn sample(door: Arc<Door>, mut stopped: watch::Receiver<bool>) {
    if !door.page.enabled {
        return;
    }
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stopped.changed() => return,
        }
        let t = crate::units::unix_now().as_millis() as u64;
        let (metrics, live) = (door.metrics.totals(), door.live.counts());
        door.page
            .series
            .lock()
            .expect("series")
            .tick(t, metrics, live);
    }
}

/// Whether `path` is the page's (its root, its data, a report).
pub(crate) fn owns(path: &str) -> bool {
    path == PREFIX || path.starts_with("/_sparkctl/")
}

fn reply(status: StatusCode, kind: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    r
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"error": {"message": message, "type": "sparkctl_frontdoor", "code": status.as_u16()}});
    reply(status, "application/json", body.to_string())
}

/// Answers a request for one of the page's paths. `authorized`: the door has no API key,
/// or the request carries it. Without it the page comes as an empty shell (401) that asks
/// for the key and fetches its data with it; data is refused, and a report unless its link
/// carries its token (`link`: the data gives the links, so only to those with the key).
/// `door`: the default model's lane; `shared`: the whole door's `models` and `usage` (handed
/// over: the lanes and keys own the page, not it them).
pub(crate) async fn respond(
    door: &Arc<Door>,
    shared: impl FnOnce() -> Value,
    path: &str,
    authorized: bool,
) -> Response<Full<Bytes>> {
    if !door.page.enabled {
        return error(
            StatusCode::NOT_FOUND,
            "the live page is off (SPARKCTL_FRONTDOOR_PAGE=off)",
        );
    }
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    match (rest, authorized) {
        ("" | "/", false) => reply(
            StatusCode::UNAUTHORIZED,
            "text/html; charset=utf-8",
            html(&Value::Null),
        ),
        ("" | "/", true) => match data(shared(), door).await {
            Ok(d) => reply(StatusCode::OK, "text/html; charset=utf-8", html(&d)),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        (r, _) if r.starts_with("/report/") => {
            let (run, token) = r["/report/".len()..]
                .split_once('/')
                .unwrap_or((&r["/report/".len()..], ""));
            match authorized || door.page.links.opens(run, token) {
                true => report(&door.state, run).await,
                false => error(
                    StatusCode::UNAUTHORIZED,
                    "this front door needs `Authorization: Bearer <key>` (or the report's link from the page)",
                ),
            }
        }
        (_, false) => error(
            StatusCode::UNAUTHORIZED,
            "this front door needs `Authorization: Bearer <key>`",
        ),
        ("/data", true) => match data(shared(), door).await {
            Ok(d) => reply(StatusCode::OK, "application/json", d.to_string()),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        _ => error(
            StatusCode::NOT_FOUND,
            "not a page of the front door's (/_sparkctl/ is)",
        ),
    }
}

/// The page with its data inside (null: the shell, which fetches it).
fn html(data: &Value) -> String {
    // Inside a <script> element: `<` is written as \u003c, so no `</script>` can end it.
    let embedded = data.to_string().replace('<', "\\u003c");
    HTML.replace("__SPARKCTL_DATA__", &embedded)
}

/// The page's JSON: the door's status, `shared`, the charts' points, runs, jobs, log.
async fn data(shared: Value, door: &Arc<Door>) -> Result<Value, String> {
    let status = door.status();
    let points = door.page.points();
    let (state, links) = (door.state.clone(), door.page.links.clone());
    let (runs, jobs, events, starts) = tokio::task::spawn_blocking(move || {
        let starts = starts(&state);
        (runs(&state, &links), jobs(&state), events(&state), starts)
    })
    .await
    .map_err(|e| format!("reading the state dir: {e}"))?;
    Ok(json!({
        "now": crate::units::unix_now().as_millis() as u64,
        "door": status,
        "models": shared["models"],
        "usage": shared["usage"],
        "every_s": EVERY.as_secs(),
        "points": points,
        "runs": runs,
        "jobs": jobs,
        "events": events,
        "starts": starts,
    }))
}

/// Each recipe's latest start, step by step, beside the p50 of its kept ones.
fn starts(state: &StateDir) -> Vec<Value> {
    (crate::starts::all(state).into_iter())
        .filter_map(|(recipe, kept)| {
            let at = kept.last()?.at.clone();
            let s = crate::starts::summary(&kept)?;
            Some(json!({"recipe": recipe, "at": at, "last": s.last, "p50_s": s.p50_s, "of": s.of}))
        })
        .collect()
}

/// `s` cut to `TRIM` characters, control characters escaped.
fn trimmed(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(TRIM)
        .flat_map(|c| match c.is_control() && c != '\n' {
            true => c.escape_unicode().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect();
    if s.chars().count() > TRIM {
        out.push('…');
    }
    out
}

/// One run as the page shows it: the fields of its record (`history::RunRecord`, read as
/// it is) that the page's script reads, the command and the outcome as the record writes
/// them, the error and the evidence trimmed, the report as a signed link.
#[derive(Debug, Serialize)]
struct RunRow {
    run_id: String,
    command: Command,
    recipe: String,
    outcome: Outcome,
    started_at: String,
    ttft_p50_ms: Option<f64>,
    decode_tps_p50: Option<f64>,
    error: Option<String>,
    evidence: Vec<String>,
    report: Option<String>,
}

impl RunRow {
    fn of(r: RunRecord, links: &link::Signer) -> RunRow {
        let report = r
            .report
            .as_deref()
            .filter(|p| p.is_file())
            .map(|_| links.path(PREFIX, &r.run_id));
        RunRow {
            error: r.error.as_deref().map(trimmed),
            evidence: r.evidence.iter().take(3).map(|e| trimmed(e)).collect(),
            report,
            run_id: r.run_id,
            command: r.command,
            recipe: r.recipe,
            outcome: r.outcome,
            started_at: r.started_at,
            ttft_p50_ms: r.ttft_p50_ms,
            decode_tps_p50: r.decode_tps_p50,
        }
    }
}

/// One job run as the page shows it, from its record (`job::JobRecord`, read as it is).
#[derive(Debug, Serialize)]
struct JobRow {
    run_id: String,
    job: String,
    state: JobState,
    started_at: String,
    finished_at: Option<String>,
    progress: Option<(u64, u64)>,
    explanation: Option<String>,
}

impl JobRow {
    fn of(j: JobRecord) -> JobRow {
        JobRow {
            explanation: j.explanation().map(trimmed),
            run_id: j.run_id().to_string(),
            job: j.job().to_string(),
            state: j.state(),
            started_at: j.started_at().to_string(),
            finished_at: j.finished_at().map(str::to_string),
            progress: j.progress(),
        }
    }
}

/// The newest `n` records of `dir` that parse (only those are read; run ids sort by time).
fn newest<T: DeserializeOwned>(dir: &Path, keep: impl Fn(&Path) -> bool, n: usize) -> Vec<T> {
    let Ok(mut files) = crate::state::json_files(dir, keep) else {
        return Vec::new();
    };
    files.reverse();
    files
        .iter()
        .filter_map(|p| crate::state::read_json::<T>(p).ok())
        .take(n)
        .collect()
}

/// The newest run records, each with a link to its report (signed: `link`).
fn runs(state: &StateDir, links: &link::Signer) -> Vec<RunRow> {
    let dir = state.root().join("runs");
    newest::<RunRecord>(&dir, |p| state.is_run_record(p), RUNS)
        .into_iter()
        .map(|r| RunRow::of(r, links))
        .collect()
}

/// The newest job runs.
fn jobs(state: &StateDir) -> Vec<JobRow> {
    newest::<JobRecord>(&state.root().join("jobs"), |_| true, JOBS)
        .into_iter()
        .map(JobRow::of)
        .collect()
}

/// The last lines of the front door's log, colour codes removed.
fn events(state: &StateDir) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(path) = state.latest_log("frontdoor") else {
        return Vec::new();
    };
    let Ok(mut f) = std::fs::File::open(&path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)));
    let mut bytes = Vec::new();
    let _ = f.take(LOG_TAIL).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let ansi = regex::Regex::new(r"\x1b\[[0-9;]*[A-Za-z]").expect("a valid pattern");
    let mut lines: Vec<String> = text
        .lines()
        .skip(usize::from(len > LOG_TAIL))
        .filter(|l| !l.trim().is_empty())
        .map(|l| trimmed(&ansi.replace_all(l, "")))
        .collect();
    let keep = lines.len().saturating_sub(LOG_LINES);
    lines.drain(..keep);
    lines
}

/// A run's HTML report, when `run` names a run of this state dir whose report lies inside
/// it: the run id is checked for its characters, the report's real path for its place.
async fn report(state: &StateDir, run: &str) -> Response<Full<Bytes>> {
    let ok_id = !run.is_empty()
        && !run.starts_with('.')
        && run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok_id {
        return error(StatusCode::NOT_FOUND, "no such run");
    }
    let (state, run) = (state.clone(), run.to_string());
    let read = tokio::task::spawn_blocking(move || -> Option<Vec<u8>> {
        let record: RunRecord = crate::state::read_json(&state.run_record_file(&run).ok()?).ok()?;
        let path = inside(&state.root().join("runs"), record.report.as_deref()?)?;
        std::fs::read(path).ok()
    })
    .await
    .ok()
    .flatten();
    match read {
        Some(bytes) => {
            let mut r = reply(StatusCode::OK, "text/html; charset=utf-8", bytes);
            r.headers_mut().insert(
                CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(REPORT_CSP),
            );
            // Its address holds its token: never sent on from it.
            r.headers_mut().insert(
                hyper::header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            r
        }
        None => error(StatusCode::NOT_FOUND, "that run has no report here"),
    }
}

/// `path`, resolved, when it is an HTML file under `dir` (links followed).
fn inside(dir: &Path, path: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let real = std::fs::canonicalize(path).ok()?;
    (real.starts_with(&dir) && real.is_file() && real.extension().is_some_and(|e| e == "html"))
        .then_some(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(requests: u64, ttft: (f64, u64), itl: (f64, u64)) -> Totals {
        Totals {
            requests,
            ttft_sum: ttft.0,
            ttft_n: ttft.1,
            itl_sum: itl.0,
            itl_n: itl.1,
        }
    }

    #[test]
    fn a_point_is_the_difference_of_the_totals_and_quiet_intervals_add_none() {
        let mut s = Series::default();
        let m = BTreeMap::from([("a".to_string(), totals(2, (0.2, 2), (0.1, 20)))]);
        s.tick(1000, m.clone(), BTreeMap::from([("a".to_string(), (2, 0))]));
        // Nothing moved: no point.
        s.tick(2000, m, BTreeMap::from([("a".to_string(), (2, 0))]));
        let m = BTreeMap::from([("a".to_string(), totals(6, (1.0, 6), (0.5, 60)))]);
        s.tick(3000, m, BTreeMap::from([("a".to_string(), (6, 1))]));
        let p: Vec<&Point> = s.points.iter().collect();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].by["a"].ttft_ms, Some(100.0));
        let second = &p[1].by["a"];
        assert_eq!((p[1].t, second.requests, second.answers), (3000, 4, 4));
        assert!((second.ttft_ms.unwrap() - 200.0).abs() < 1e-9);
        assert!((second.tpot_ms.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(second.good_pct, Some(75.0));
    }

    /// The page reads the records as `history` and `jobs` write them, and hands its script
    /// the words they write (`rolled-back`, `failover`, `succeeded`); one `history` cannot
    /// read is left out, as `history` leaves it out.
    #[test]
    fn runs_and_jobs_reach_the_page_as_their_records_say() {
        let dir = std::env::temp_dir().join(format!("sparkctl-page-rows-{}", std::process::id()));
        let state = StateDir::open(&dir).unwrap();
        let mut run = RunRecord::new(Command::Failover, "safe");
        run.outcome = Outcome::RolledBack;
        run.error = Some("x".repeat(TRIM + 10));
        run.evidence = (0..5).map(|i| format!("answer {i}\u{7}")).collect();
        let report = state
            .runs_dir()
            .unwrap()
            .join(&run.run_id)
            .join("report.html");
        std::fs::create_dir_all(report.parent().unwrap()).unwrap();
        std::fs::write(&report, "<html>").unwrap();
        run.report = Some(report);
        run.save(&state).unwrap();
        let mut odd = serde_json::to_value(RunRecord::new(Command::Up, "odd")).unwrap();
        odd["run_id"] = json!("0-odd");
        odd["outcome"] = json!("exploded");
        std::fs::write(dir.join("runs/0-odd.json"), odd.to_string()).unwrap();
        let job = json!({"run_id": "j1", "job": "train", "recipe_hash": "h",
            "recipe_file": "/r.yaml", "recipe": {"name": "train", "image": "i", "argv": ["x"],
            "outputs": []}, "image": "i", "image_digest": "sha256:1", "unpinned": false,
            "container": "c", "container_name": "n", "user": "1:1", "owner": "1:1",
            "started_at": "2025-01-01T00:00:00Z", "started_unix": 1, "state": "succeeded",
            "inputs": [], "outputs": [], "progress": [3, 10]});
        std::fs::create_dir_all(dir.join("jobs")).unwrap();
        std::fs::write(dir.join("jobs/j1.json"), job.to_string()).unwrap();

        let links = link::Signer::new();
        let rows = serde_json::to_value(runs(&state, &links)).unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
        let r = &rows[0];
        assert_eq!(
            (&r["command"], &r["outcome"]),
            (&json!("failover"), &json!("rolled-back"))
        );
        assert_eq!(
            (&r["recipe"], &r["run_id"]),
            (&json!("safe"), &json!(run.run_id))
        );
        let error = r["error"].as_str().unwrap();
        assert!(
            error.ends_with('…') && error.chars().count() == TRIM + 1,
            "{error}"
        );
        assert_eq!(
            r["evidence"],
            json!(["answer 0\\u{7}", "answer 1\\u{7}", "answer 2\\u{7}"])
        );
        let link = r["report"].as_str().unwrap();
        let token = link.rsplit('/').next().unwrap();
        assert!(links.opens(&run.run_id, token), "{link}");
        let jobs = serde_json::to_value(jobs(&state)).unwrap();
        assert_eq!(
            jobs,
            json!([{"run_id": "j1", "job": "train", "state": "succeeded",
                "started_at": "2025-01-01T00:00:00Z", "finished_at": null,
                "progress": [3, 10], "explanation": null}])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_html_under_the_runs_dir_is_a_report() {
        let dir = std::env::temp_dir().join(format!("sparkctl-page-{}", std::process::id()));
        let runs = dir.join("runs/r1");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::write(runs.join("report.html"), "<html>").unwrap();
        std::fs::write(dir.join("secret.html"), "no").unwrap();
        std::fs::write(runs.join("bench.json"), "{}").unwrap();
        let base = dir.join("runs");
        assert!(inside(&base, &runs.join("report.html")).is_some());
        assert!(inside(&base, &runs.join("../../secret.html")).is_none());
        assert!(inside(&base, &runs.join("bench.json")).is_none());
        std::os::unix::fs::symlink(dir.join("secret.html"), runs.join("link.html")).unwrap();
        assert!(inside(&base, &runs.join("link.html")).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
