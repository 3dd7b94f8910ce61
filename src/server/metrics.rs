//! The front door's `/metrics`: what live traffic saw, per upstream and per model, counted
//! here as it passes (one lock per event), and the page a scrape reads, written by
//! `crate::exposition`'s encoder with the live quality's and the capture's series after.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::capture::Capture;
use super::live::Live;
use super::route::Route;
use crate::exposition::{self, Exposed, Family, Format, Kind, Labels, Page};

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
    /// Observations per bucket (not cumulative), once there is one.
    counts: Vec<u64>,
    sum: f64,
    n: u64,
}

impl Histogram {
    fn observe(&mut self, buckets: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; buckets.len()];
        }
        // In its own bucket only, the first bound at or above it: the encoder adds them up.
        if let Some(i) = buckets.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.n += 1;
    }

    fn write(&self, f: &mut Family<'_>, labels: &Labels<'_>, buckets: &[f64]) -> fmt::Result {
        let counts = buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (*b, self.counts.get(i).copied().unwrap_or(0)));
        f.histogram(labels, counts, self.n, self.sum)
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
    pub(in crate::server) requests: u64,
    pub(in crate::server) ttft_sum: f64,
    pub(in crate::server) ttft_n: u64,
    pub(in crate::server) itl_sum: f64,
    pub(in crate::server) itl_n: u64,
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
    const ALL: [Event; 5] = [
        Event::Held,
        Event::Rejected,
        Event::Switch,
        Event::Restart,
        Event::Failover,
    ];

    /// Its counter's name, less the `_total` the encoder writes.
    fn name(self) -> &'static str {
        match self {
            Event::Held => "sparkctl_frontdoor_held",
            Event::Rejected => "sparkctl_frontdoor_rejected",
            Event::Switch => "sparkctl_frontdoor_switches",
            Event::Restart => "sparkctl_frontdoor_restarts",
            Event::Failover => "sparkctl_frontdoor_failovers",
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
}

impl Exposed for Metrics {
    /// Per upstream, per model, then the events.
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        let i = self.inner.lock().expect("metrics");
        expose_upstreams(page, &i)?;
        expose_models(page, &i)?;
        for e in Event::ALL {
            let n = i.events.get(&e).copied().unwrap_or(0);
            page.family(e.name(), e.help(), Kind::Counter)?
                .counter(&[], n)?;
        }
        Ok(())
    }
}

/// The upstreams in service, one per model's lane.
struct Serving(Vec<Route>);

impl Exposed for Serving {
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        let mut f = page.family(
            "sparkctl_frontdoor_upstream",
            "The upstream in service (1), none while holding.",
            Kind::Gauge,
        )?;
        for u in self.0.iter().filter_map(|r| match r {
            Route::Serving(u) => Some(u),
            _ => None,
        }) {
            let labels = [
                ("recipe", u.recipe.as_str()),
                ("deployment", &u.deployment),
                ("url", &u.url),
            ];
            f.gauge(&labels, 1i64)?;
        }
        Ok(())
    }
}

/// The door's `/metrics` in `format`: the traffic's figures, the upstreams in service
/// (`routes`, one per lane), then the live quality's and the capture's.
pub(crate) fn page(
    metrics: &Arc<Metrics>,
    routes: Vec<Route>,
    (live, capture, quota): (&Arc<Live>, &Arc<Capture>, &Arc<super::quota::Quota>),
    format: Format,
) -> String {
    exposition::encode(
        format,
        vec![
            Box::new(metrics.clone()),
            Box::new(Serving(routes)),
            Box::new(live.clone()),
            Box::new(capture.clone()),
            Box::new(quota.clone()),
        ],
    )
}

/// A counter per upstream and `label` value (`code="200"`), under one HELP and TYPE.
fn counts_by<K: ToString>(
    page: &mut Page<'_>,
    inner: &Inner,
    (name, label): (&str, &str),
    help: &str,
    counts: impl Fn(&PerUpstream) -> &BTreeMap<K, u64>,
) -> fmt::Result {
    let mut f = page.family(name, help, Kind::Counter)?;
    for (up, u) in &inner.upstreams {
        for (value, n) in counts(u) {
            f.counter(&[("upstream", up), (label, &value.to_string())], *n)?;
        }
    }
    Ok(())
}

/// Requests, errors, in-flight requests and the TTFT and ITL histograms, by upstream.
fn expose_upstreams(page: &mut Page<'_>, inner: &Inner) -> fmt::Result {
    counts_by(
        page,
        inner,
        ("sparkctl_frontdoor_requests", "code"),
        "Requests forwarded, by upstream and status.",
        |u| &u.requests,
    )?;
    counts_by(
        page,
        inner,
        ("sparkctl_frontdoor_errors", "kind"),
        "Requests that failed: connect (no answer) or stream (cut after it began).",
        |u| &u.errors,
    )?;
    let mut f = page.family(
        "sparkctl_frontdoor_in_flight",
        "Requests being answered now.",
        Kind::Gauge,
    )?;
    for (up, u) in &inner.upstreams {
        f.gauge(&[("upstream", up)], u.in_flight)?;
    }
    let mut f = page.family(
        "sparkctl_frontdoor_ttft_seconds",
        "Time to the first token of streamed answers, from the request's arrival.",
        Kind::Histogram,
    )?;
    for (up, u) in &inner.upstreams {
        u.ttft.write(&mut f, &[("upstream", up)], TTFT_BUCKETS)?;
    }
    let mut f = page.family(
        "sparkctl_frontdoor_itl_seconds",
        "Per-token inter-token latency of streamed answers.",
        Kind::Histogram,
    )?;
    for (up, u) in &inner.upstreams {
        u.itl.write(&mut f, &[("upstream", up)], ITL_BUCKETS)?;
    }
    Ok(())
}

fn expose_models(page: &mut Page<'_>, inner: &Inner) -> fmt::Result {
    let mut f = page.family(
        "sparkctl_frontdoor_queue_wait_seconds",
        "What each request waited for its model's server (a switch, a start on demand).",
        Kind::Histogram,
    )?;
    for (model, m) in &inner.models {
        m.wait.write(&mut f, &[("model", model)], WAIT_BUCKETS)?;
    }
    let mut f = page.family(
        "sparkctl_frontdoor_model_loads",
        "Starts of a model's server on demand.",
        Kind::Counter,
    )?;
    for (model, m) in &inner.models {
        f.counter(&[("model", model)], m.loads)?;
    }
    let mut f = page.family(
        "sparkctl_frontdoor_model_unloads",
        "Stops of a model's server: idle past its ttl, or evicted for another model.",
        Kind::Counter,
    )?;
    for (model, m) in &inner.models {
        for (why, n) in &m.unloads {
            f.counter(&[("model", model), ("why", why)], *n)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
