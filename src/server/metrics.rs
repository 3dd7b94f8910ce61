//! The front door's `/metrics`, in the Prometheus text format: what live traffic saw, per
//! upstream. A handful of counters and two histograms need no client library.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::route::Route;

const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const ITL_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0];
/// A request's wait for its model's server: none, a switch, a start on demand.
const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    n: u64,
}

impl Histogram {
    fn observe(&mut self, buckets: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; buckets.len()];
        }
        for (i, b) in buckets.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.n += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, buckets: &[f64]) {
        for (i, b) in buckets.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.n);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.n);
    }
}

/// One upstream's figures (by recipe).
#[derive(Clone, Default)]
struct PerUpstream {
    /// By HTTP status.
    requests: BTreeMap<u16, u64>,
    /// By kind: `connect` (no answer), `stream` (cut after it began).
    errors: BTreeMap<&'static str, u64>,
    in_flight: i64,
    /// When a response body of this upstream last moved.
    last_activity: Option<std::time::Instant>,
    ttft: Histogram,
    itl: Histogram,
}

/// One upstream's running totals: requests, and the sums and counts of the TTFT and
/// per-token histograms (seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) requests: u64,
    pub(crate) ttft_sum: f64,
    pub(crate) ttft_n: u64,
    pub(crate) itl_sum: f64,
    pub(crate) itl_n: u64,
}

pub(crate) use crate::frontdoor::status::Waits;

/// Events outside any one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Event {
    /// A request waited for an upstream (a swap, a restart).
    Held,
    /// A request got 503: the wait was over its bound or the queue full.
    Rejected,
    Switch,
    Restart,
    Failover,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Held => "sparkctl_frontdoor_held_total",
            Event::Rejected => "sparkctl_frontdoor_rejected_total",
            Event::Switch => "sparkctl_frontdoor_switches_total",
            Event::Restart => "sparkctl_frontdoor_restarts_total",
            Event::Failover => "sparkctl_frontdoor_failovers_total",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Event::Held => "Requests that waited for an upstream.",
            Event::Rejected => {
                "Requests answered 503 after waiting their bound or finding the queue full."
            }
            Event::Switch => "Switches of the upstream (promotion, rollback, restart, failover).",
            Event::Restart => "Restarts of production by the watch.",
            Event::Failover => "Switches to the fallback after repeated failures.",
        }
    }
}

#[derive(Default)]
pub(crate) struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    upstreams: BTreeMap<String, PerUpstream>,
    events: BTreeMap<Event, u64>,
    /// Per model (the name clients send).
    models: BTreeMap<String, PerModel>,
}

/// One model's figures.
#[derive(Default)]
struct PerModel {
    /// What each request waited for an upstream, seconds.
    wait: Histogram,
    /// The longest of those waits.
    max_wait: f64,
    /// Its server started on demand.
    loads: u64,
    /// Its server stopped: `ttl`, `evicted`.
    unloads: BTreeMap<&'static str, u64>,
}

impl Metrics {
    fn with(&self, upstream: &str, f: impl FnOnce(&mut PerUpstream)) {
        let mut i = self.inner.lock().expect("metrics");
        // Looked up before inserted: this runs for every chunk of every stream.
        if !i.upstreams.contains_key(upstream) {
            i.upstreams
                .insert(upstream.to_string(), PerUpstream::default());
        }
        f(i.upstreams.get_mut(upstream).expect("inserted above"));
    }

    pub(crate) fn started(&self, upstream: &str) {
        self.with(upstream, |u| {
            u.in_flight += 1;
            u.last_activity = Some(std::time::Instant::now());
        });
    }

    /// A response body of `upstream` moved (a frame, its end).
    pub(crate) fn active(&self, upstream: &str) {
        self.with(upstream, |u| {
            u.last_activity = Some(std::time::Instant::now())
        });
    }

    /// How long no response body of `upstream` moved.
    pub(crate) fn quiet_for(&self, upstream: &str) -> Option<std::time::Duration> {
        let i = self.inner.lock().expect("metrics");
        i.upstreams
            .get(upstream)
            .and_then(|u| u.last_activity)
            .map(|t| t.elapsed())
    }

    pub(crate) fn finished(&self, upstream: &str) {
        self.with(upstream, |u| u.in_flight -= 1);
    }

    pub(crate) fn status(&self, upstream: &str, code: u16) {
        self.with(upstream, |u| *u.requests.entry(code).or_default() += 1);
    }

    pub(crate) fn error(&self, upstream: &str, kind: &'static str) {
        self.with(upstream, |u| *u.errors.entry(kind).or_default() += 1);
    }

    pub(crate) fn ttft(&self, upstream: &str, seconds: f64) {
        self.with(upstream, |u| u.ttft.observe(TTFT_BUCKETS, seconds));
    }

    pub(crate) fn itl(&self, upstream: &str, seconds: f64, tokens: usize) {
        self.with(upstream, |u| {
            u.last_activity = Some(std::time::Instant::now());
            for _ in 0..tokens.max(1) {
                u.itl.observe(ITL_BUCKETS, seconds / tokens.max(1) as f64);
            }
        });
    }

    /// Each upstream's running totals, for the live page's charts (it takes differences).
    pub(crate) fn totals(&self) -> BTreeMap<String, Totals> {
        let i = self.inner.lock().expect("metrics");
        i.upstreams
            .iter()
            .map(|(name, u)| {
                let t = Totals {
                    requests: u.requests.values().sum(),
                    ttft_sum: u.ttft.sum,
                    ttft_n: u.ttft.n,
                    itl_sum: u.itl.sum,
                    itl_n: u.itl.n,
                };
                (name.clone(), t)
            })
            .collect()
    }

    fn with_model(&self, model: &str, f: impl FnOnce(&mut PerModel)) {
        let mut i = self.inner.lock().expect("metrics");
        f(i.models.entry(model.to_string()).or_default());
    }

    /// A request for `model` waited `seconds` for an upstream (0: none).
    pub(crate) fn waited(&self, model: &str, seconds: f64) {
        self.with_model(model, |m| {
            m.wait.observe(WAIT_BUCKETS, seconds);
            m.max_wait = m.max_wait.max(seconds);
        });
    }

    /// What `model`'s requests waited for an upstream, so far.
    pub(crate) fn waits(&self, model: &str) -> Option<Waits> {
        let i = self.inner.lock().expect("metrics");
        let m = i.models.get(model).filter(|m| m.wait.n > 0)?;
        Some(Waits {
            requests: m.wait.n,
            mean_ms: m.wait.sum / m.wait.n as f64 * 1e3,
            max_ms: m.max_wait * 1e3,
        })
    }

    /// `model`'s server was started on demand.
    pub(crate) fn loaded(&self, model: &str) {
        self.with_model(model, |m| m.loads += 1);
    }

    /// `model`'s server was stopped, `why`: `ttl` or `evicted`.
    pub(crate) fn unloaded(&self, model: &str, why: &'static str) {
        self.with_model(model, |m| *m.unloads.entry(why).or_default() += 1);
    }

    pub(crate) fn event(&self, e: Event) {
        *self
            .inner
            .lock()
            .expect("metrics")
            .events
            .entry(e)
            .or_default() += 1;
    }

    /// Prometheus' text format: per upstream, then the events, then the upstreams in
    /// service (one per model).
    pub(crate) fn render(&self, routes: &[Route]) -> String {
        let i = self.inner.lock().expect("metrics");
        let mut out = String::new();
        render_upstreams(&mut out, &i);
        render_models(&mut out, &i);
        for e in [
            Event::Held,
            Event::Rejected,
            Event::Switch,
            Event::Restart,
            Event::Failover,
        ] {
            head(&mut out, e.name(), "counter", e.help());
            let _ = writeln!(
                out,
                "{} {}",
                e.name(),
                i.events.get(&e).copied().unwrap_or(0)
            );
        }
        head(
            &mut out,
            "sparkctl_frontdoor_upstream",
            "gauge",
            "The upstream in service (1), none while holding.",
        );
        for u in routes.iter().filter_map(|r| match r {
            Route::Serving(u) => Some(u),
            _ => None,
        }) {
            let _ = writeln!(
                out,
                "sparkctl_frontdoor_upstream{{recipe=\"{}\",deployment=\"{}\",url=\"{}\"}} 1",
                u.recipe, u.deployment, u.url
            );
        }
        out
    }
}

/// A series' HELP and TYPE lines.
pub(super) fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A counter per upstream and `label` value (`code="200"`), under one HELP and TYPE.
fn counts_by<K: std::fmt::Display>(
    out: &mut String,
    inner: &Inner,
    (name, label): (&str, &str),
    help: &str,
    counts: impl Fn(&PerUpstream) -> &BTreeMap<K, u64>,
) {
    head(out, name, "counter", help);
    for (up, u) in &inner.upstreams {
        for (value, n) in counts(u) {
            let _ = writeln!(out, "{name}{{upstream=\"{up}\",{label}=\"{value}\"}} {n}");
        }
    }
}

/// Requests, errors, in-flight requests and the TTFT and ITL histograms, by upstream.
fn render_upstreams(out: &mut String, inner: &Inner) {
    counts_by(
        out,
        inner,
        ("sparkctl_frontdoor_requests_total", "code"),
        "Requests forwarded, by upstream and status.",
        |u| &u.requests,
    );
    counts_by(
        out,
        inner,
        ("sparkctl_frontdoor_errors_total", "kind"),
        "Requests that failed: connect (no answer) or stream (cut after it began).",
        |u| &u.errors,
    );
    head(
        out,
        "sparkctl_frontdoor_in_flight",
        "gauge",
        "Requests being answered now.",
    );
    for (up, u) in &inner.upstreams {
        let _ = writeln!(
            out,
            "sparkctl_frontdoor_in_flight{{upstream=\"{up}\"}} {}",
            u.in_flight
        );
    }
    head(
        out,
        "sparkctl_frontdoor_ttft_seconds",
        "histogram",
        "Time to the first token of streamed answers, from the request's arrival.",
    );
    for (up, u) in &inner.upstreams {
        u.ttft.render(
            out,
            "sparkctl_frontdoor_ttft_seconds",
            &format!("upstream=\"{up}\""),
            TTFT_BUCKETS,
        );
    }
    head(
        out,
        "sparkctl_frontdoor_itl_seconds",
        "histogram",
        "Per-token inter-token latency of streamed answers.",
    );
    for (up, u) in &inner.upstreams {
        u.itl.render(
            out,
            "sparkctl_frontdoor_itl_seconds",
            &format!("upstream=\"{up}\""),
            ITL_BUCKETS,
        );
    }
}

fn render_models(out: &mut String, inner: &Inner) {
    head(
        out,
        "sparkctl_frontdoor_queue_wait_seconds",
        "histogram",
        "What each request waited for its model's server (a switch, a start on demand).",
    );
    for (model, m) in &inner.models {
        let labels = format!("model=\"{model}\"");
        m.wait.render(
            out,
            "sparkctl_frontdoor_queue_wait_seconds",
            &labels,
            WAIT_BUCKETS,
        );
    }
    head(
        out,
        "sparkctl_frontdoor_model_loads_total",
        "counter",
        "Starts of a model's server on demand.",
    );
    for (model, m) in &inner.models {
        let _ = writeln!(
            out,
            "sparkctl_frontdoor_model_loads_total{{model=\"{model}\"}} {}",
            m.loads
        );
    }
    head(
        out,
        "sparkctl_frontdoor_model_unloads_total",
        "counter",
        "Stops of a model's server: idle past its ttl, or evicted for another model.",
    );
    for (model, m) in &inner.models {
        for (why, n) in &m.unloads {
            let _ = writeln!(
                out,
                "sparkctl_frontdoor_model_unloads_total{{model=\"{model}\",why=\"{why}\"}} {n}"
            );
        }
    }
}

#[cfg(test)]
mod tests;
