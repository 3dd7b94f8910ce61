//! Load profiles: closed-loop concurrency (N streams, each sending when its last answer
//! ended) and open-loop arrivals at a rate, constant or Poisson (seeded, so a run can be
//! repeated). Open-loop latency is timed from each request's *scheduled* send, so a server
//! that makes requests queue cannot hide it by slowing the client down (coordinated
//! omission); the achieved send rate is reported beside the rate asked.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{self, Clients};
use super::scrape::{self, During};
use super::slo::Slo;
use super::stats::{stats, Stats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Evenly spaced: 1/rate apart.
    Constant,
    /// Exponential gaps (a Poisson process), seeded.
    Poisson,
}

impl std::str::FromStr for Arrival {
    type Err = String;
    fn from_str(s: &str) -> Result<Arrival, String> {
        match s {
            "constant" => Ok(Arrival::Constant),
            "poisson" => Ok(Arrival::Poisson),
            _ => Err(format!(
                "`{s}` is not an arrival process; use constant or poisson"
            )),
        }
    }
}

/// A recipe's load phases (`bench.load`), run by `up` and `bench` beside the suite; the
/// command line's flags win over each field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadSpec {
    /// Closed-loop levels: this many simultaneous streams each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::bench) concurrency: Vec<usize>,
    /// An open-loop level: requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) arrival: Option<Arrival>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) seed: Option<u64>,
    /// Requests per level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) requests: Option<usize>,
    /// `concurrency:1,2,4,8` or `rate:1,2,4,8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) sweep: Option<String>,
    /// Prior-context depths in tokens, each cold and warm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::bench) depth: Vec<usize>,
    /// Runs of the whole suite, for confidence intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) repeat: Option<usize>,
}

impl LoadSpec {
    /// What is wrong with it, as (key under `bench.load`, message).
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(s) = &self.sweep {
            if let Err(e) = s.parse::<Sweep>() {
                out.push(("sweep", e));
            }
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            out.push((
                "rate",
                "give a positive number of requests per second".into(),
            ));
        }
        if self.repeat == Some(0) || self.requests == Some(0) {
            out.push(("repeat", "repeat and requests are 1 or more".into()));
        }
        if self.concurrency.contains(&0) {
            out.push(("concurrency", "a level is 1 or more streams".into()));
        }
        out
    }
}

/// How requests are offered to the server.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Profile {
    /// Closed loop: this many streams, each sending its next request when the last ended.
    Concurrency { streams: usize },
    /// Open loop: requests at `rps` per second, whatever the server does.
    Rate {
        rps: f64,
        arrival: Arrival,
        seed: u64,
    },
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Profile::Concurrency { streams } => write!(f, "concurrency {streams}"),
            Profile::Rate {
                rps,
                arrival: Arrival::Constant,
                ..
            } => write!(f, "constant {rps} req/s"),
            Profile::Rate {
                rps,
                arrival: Arrival::Poisson,
                seed,
            } => {
                write!(f, "poisson {rps} req/s (seed {seed})")
            }
        }
    }
}

impl Profile {
    /// The level a sweep steps: streams, or requests per second.
    pub(crate) fn level(&self) -> f64 {
        match self {
            Profile::Concurrency { streams } => *streams as f64,
            Profile::Rate { rps, .. } => *rps,
        }
    }
}

/// SplitMix64: a small, seedable generator; the same seed gives the same arrivals.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn next_f64(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// Send times (s from the start) of `n` requests at `rps`. Poisson gaps are drawn from the
/// exponential distribution and then scaled so the n sends span exactly (n − 1)/rps: a
/// Poisson process conditioned on its count, so the asked rate is the schedule's rate
/// exactly (a short run's raw draws would miss it by 1/√n) while the gaps keep their spread.
pub(crate) fn schedule(rps: f64, arrival: Arrival, seed: u64, n: usize) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    let span = (n - 1) as f64 / rps;
    let gaps: Vec<f64> = match arrival {
        Arrival::Constant => vec![1.0; n - 1],
        Arrival::Poisson => {
            let mut rng = SplitMix64(seed);
            (1..n).map(|_| -rng.next_f64().ln()).collect()
        }
    };
    let total: f64 = gaps.iter().sum();
    let scale = if total > 0.0 { span / total } else { 0.0 };
    std::iter::once(0.0)
        .chain(gaps.iter().scan(0.0, |t, g| {
            *t += g * scale;
            Some(*t)
        }))
        .collect()
}

/// One request of a load level, timed from its scheduled send.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    pub(in crate::bench) index: usize,
    /// When it was due, ms from the level's start.
    pub scheduled_ms: f64,
    /// How late the client sent it.
    pub(in crate::bench) send_lag_ms: f64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) failure: Option<super::sample::Failure>,
    /// From the scheduled send (send lag included).
    pub ttft_ms: Option<f64>,
    pub(in crate::bench) tpot_ms: Option<f64>,
    pub(in crate::bench) e2el_ms: f64,
    pub(in crate::bench) itl_ms: Vec<f64>,
    pub(in crate::bench) prompt_tokens: Option<u64>,
    pub(in crate::bench) cached_tokens: Option<u64>,
    pub(in crate::bench) completion_tokens: Option<u64>,
    /// Against the SLO, when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) met_slo: Option<bool>,
}

/// One load level's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadRun {
    pub(in crate::bench) profile: Profile,
    pub(in crate::bench) requests: usize,
    pub(in crate::bench) completed: usize,
    pub failed: usize,
    /// Open loop: the send rate achieved, (n − 1) / (last send − first send).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) achieved_rps: Option<f64>,
    /// From the level's start (the first send is due then) to the last answer's end.
    pub(in crate::bench) duration_s: f64,
    /// Completed requests per second over `duration_s`.
    pub(in crate::bench) request_rps: f64,
    /// Output tokens per second over `duration_s`.
    pub(in crate::bench) output_tps: f64,
    pub(in crate::bench) ttft_ms: Option<Stats>,
    pub(in crate::bench) tpot_ms: Option<Stats>,
    pub(in crate::bench) itl_ms: Option<Stats>,
    pub(in crate::bench) e2el_ms: Option<Stats>,
    pub(in crate::bench) send_lag_ms: Option<Stats>,
    /// Requests per second that met the SLO, and their share (%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) goodput_rps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) goodput_pct: Option<f64>,
    /// What the server's metrics said while it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) server: Option<During>,
    /// Connections opened (and answered) before the level's clock started, one per stream
    /// of a closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) connections_opened: Option<usize>,
    pub records: Vec<Record>,
}

/// Where a level sends and what it asks.
pub struct Level<'a> {
    pub clients: &'a Clients,
    pub url: &'a str,
    /// The server's `/metrics`, when it has one.
    pub metrics_url: Option<&'a str>,
    pub slo: Option<&'a Slo>,
    /// Open a closed loop's connections before its clock starts (true but to measure what
    /// a cold first wave costs).
    pub open_first: bool,
}

fn record(index: usize, scheduled: f64, lag: f64, s: &client::Sample) -> Record {
    Record {
        index,
        scheduled_ms: scheduled,
        send_lag_ms: lag,
        ok: s.ok,
        error: s.error.clone(),
        failure: s.failure,
        ttft_ms: s.ttft_ms.map(|t| t + lag),
        tpot_ms: s.tpot_ms,
        e2el_ms: s.e2e_ms + lag,
        itl_ms: s.itl_ms.clone(),
        prompt_tokens: s.prompt_tokens,
        cached_tokens: s.cached_tokens,
        completion_tokens: s.completion_tokens,
        met_slo: None,
    }
}

/// Sends request `i` when it is due; returns its record.
async fn send_at(
    level_start: Instant,
    due: f64,
    i: usize,
    clients: Clients,
    url: String,
    body: Value,
) -> (Record, Instant) {
    let scheduled = level_start + Duration::from_secs_f64(due);
    tokio::time::sleep_until(scheduled.into()).await;
    let sent = Instant::now();
    let lag = sent.saturating_duration_since(scheduled).as_secs_f64() * 1e3;
    let s = client::stream(&clients, &url, &body).await;
    (record(i, due * 1e3, lag, &s), sent)
}

/// Open loop: every body at its scheduled time. Records, and each request's send instant.
async fn open_loop(
    l: &Level<'_>,
    times: &[f64],
    bodies: Vec<Value>,
    start: Instant,
) -> Vec<(Record, Instant)> {
    let tasks: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let (c, u) = (l.clients.clone(), l.url.to_string());
            tokio::spawn(send_at(start, times[i], i, c, u, body))
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        if let Ok(r) = t.await {
            out.push(r);
        }
    }
    out
}

/// Closed loop: `streams` workers share the bodies, each sending its next as its last ends.
async fn closed_loop(
    l: &Level<'_>,
    streams: usize,
    bodies: Vec<Value>,
    start: Instant,
) -> Vec<(Record, Instant)> {
    let queue = std::sync::Arc::new(std::sync::Mutex::new(bodies.into_iter().enumerate()));
    let workers = (0..streams.max(1)).map(|_| {
        let queue = queue.clone();
        async move {
            let mut out = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, body)) = next else { break };
                let sent = Instant::now();
                let s = client::stream(l.clients, l.url, &body).await;
                let at = sent.duration_since(start).as_secs_f64() * 1e3;
                out.push((record(i, at, 0.0, &s), sent));
            }
            out
        }
    });
    let mut all: Vec<(Record, Instant)> = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flatten()
        .collect();
    all.sort_by_key(|(r, _)| r.index);
    all
}

/// Runs one level: the bodies offered as `profile` says, the server's metrics watched.
pub async fn run(l: &Level<'_>, profile: Profile, bodies: Vec<Value>) -> LoadRun {
    let n = bodies.len();
    let opened = match profile {
        Profile::Concurrency { streams } if l.open_first => {
            Some(client::open_connections(l.clients, l.url, streams.min(n)).await)
        }
        _ => None,
    };
    let start = Instant::now();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(scrape::watch(
        l.clients.pooled.clone(),
        l.metrics_url.map(str::to_string),
        Duration::from_millis(200),
        start,
        stop_rx,
    ));
    let done = match profile {
        Profile::Concurrency { streams } => closed_loop(l, streams, bodies, start).await,
        Profile::Rate { rps, arrival, seed } => {
            let times = schedule(rps, arrival, seed, n);
            open_loop(l, &times, bodies, start).await
        }
    };
    // Before the watcher stops: its last scrape may take a while, and is not the server's time.
    let duration_s = start.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let snaps = watcher.await.unwrap_or_default();
    let mut run = summarize(
        profile,
        done,
        duration_s,
        l.slo,
        (!snaps.is_empty()).then(|| scrape::during(&snaps)),
    );
    run.connections_opened = opened;
    run
}

fn summarize(
    profile: Profile,
    done: Vec<(Record, Instant)>,
    duration_s: f64,
    slo: Option<&Slo>,
    server: Option<During>,
) -> LoadRun {
    let mut records: Vec<Record> = Vec::with_capacity(done.len());
    let mut sends: Vec<Instant> = done.iter().map(|(_, s)| *s).collect();
    sends.sort();
    for (mut r, _) in done {
        r.met_slo = slo.map(|s| r.ok && s.met(r.ttft_ms, r.tpot_ms, r.e2el_ms));
        records.push(r);
    }
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok).collect();
    let pick = |f: &dyn Fn(&Record) -> Option<f64>| {
        stats(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    let achieved_rps = match (profile, sends.first(), sends.last()) {
        (Profile::Rate { .. }, Some(a), Some(b)) if sends.len() > 1 && b > a => {
            Some((sends.len() - 1) as f64 / b.duration_since(*a).as_secs_f64())
        }
        _ => None,
    };
    let tokens: u64 = ok.iter().filter_map(|r| r.completion_tokens).sum();
    let met = records.iter().filter(|r| r.met_slo == Some(true)).count();
    LoadRun {
        profile,
        requests: records.len(),
        completed: ok.len(),
        failed: records.len() - ok.len(),
        achieved_rps,
        duration_s,
        request_rps: ok.len() as f64 / duration_s.max(1e-9),
        output_tps: tokens as f64 / duration_s.max(1e-9),
        ttft_ms: pick(&|r| r.ttft_ms),
        tpot_ms: pick(&|r| r.tpot_ms),
        itl_ms: stats(
            &ok.iter()
                .flat_map(|r| r.itl_ms.iter().copied())
                .collect::<Vec<_>>(),
        ),
        e2el_ms: pick(&|r| Some(r.e2el_ms)),
        send_lag_ms: stats(&records.iter().map(|r| r.send_lag_ms).collect::<Vec<_>>()),
        goodput_rps: slo.map(|_| met as f64 / duration_s.max(1e-9)),
        goodput_pct: slo.map(|_| 100.0 * met as f64 / records.len().max(1) as f64),
        server,
        connections_opened: None,
        records,
    }
}

/// What a sweep steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SweepKind {
    Concurrency,
    Rate,
}

/// `concurrency:1,2,4,8` or `rate:1,2,4,8`: levels tried in order until one saturates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sweep {
    pub(in crate::bench) kind: SweepKind,
    pub(in crate::bench) levels: Vec<f64>,
}

impl std::str::FromStr for Sweep {
    type Err = String;
    fn from_str(text: &str) -> Result<Sweep, String> {
        let help = "write concurrency:1,2,4,8 or rate:1,2,4,8 (levels rising)";
        let (kind, list) = text
            .split_once(':')
            .ok_or_else(|| format!("`{text}`: {help}"))?;
        let kind = match kind.trim() {
            "concurrency" => SweepKind::Concurrency,
            "rate" => SweepKind::Rate,
            other => return Err(format!("`{other}` is not a sweep kind; {help}")),
        };
        let levels = list
            .split(',')
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v > 0.0)
            })
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| format!("`{list}` is not a list of positive numbers; {help}"))?;
        let whole = kind == SweepKind::Rate || levels.iter().all(|v| v.fract() == 0.0);
        if levels.len() < 2 || !levels.windows(2).all(|w| w[1] > w[0]) || !whole {
            return Err(format!(
                "`{list}`: at least two rising levels (whole streams for concurrency); {help}"
            ));
        }
        Ok(Sweep { kind, levels })
    }
}

impl Sweep {
    pub(crate) fn profiles(&self, arrival: Arrival, seed: u64) -> Vec<Profile> {
        self.levels
            .iter()
            .map(|&v| match self.kind {
                SweepKind::Concurrency => Profile::Concurrency {
                    streams: v as usize,
                },
                SweepKind::Rate => Profile::Rate {
                    rps: v,
                    arrival,
                    seed,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_hit_the_asked_rate_and_poisson_repeats_by_seed() {
        let c = schedule(4.0, Arrival::Constant, 0, 9);
        assert_eq!(c, (0..9).map(|i| i as f64 * 0.25).collect::<Vec<_>>());
        let p = schedule(4.0, Arrival::Poisson, 7, 200);
        assert_eq!(p, schedule(4.0, Arrival::Poisson, 7, 200));
        assert_ne!(p, schedule(4.0, Arrival::Poisson, 8, 200));
        assert!((p[199] - 199.0 / 4.0).abs() < 1e-9);
        assert!(p.windows(2).all(|w| w[1] >= w[0]));
        // Exponential gaps: their spread is about their mean (CV ≈ 1), unlike constant ones.
        let gaps: Vec<f64> = p.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((0.7..1.3).contains(&(sd / mean)), "CV {}", sd / mean);
    }
}
