//! The built-in benchmark: streamed requests only, no prompt ever repeated, TTFT and TTFO
//! apart, tokens from `usage`, per-token timing from per-chunk counts, warm-ups excluded,
//! n ≥ 5, percentiles, the server's own timings beside the client's, quality and speed
//! gates with three outcomes, and a JSON result with every sample and its context. Beyond
//! the suite: load levels and sweeps (`load`), context depth (`depth`), repeated runs with
//! confidence intervals (`stats`), the server's metrics (`scrape`) and the roofline.

pub mod client;
pub mod depth;
pub mod export;
pub mod gates;
pub mod html;
pub mod load;
pub mod quality;
mod reader;
pub mod report;
pub mod result;
pub mod roofline;
pub mod sample;
pub mod scrape;
pub mod server;
pub mod slo;
pub mod sse;
pub mod stats;
pub mod suite;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use client::Clients;
use gates::Metric;
use load::{Arrival, LoadRun, Profile, Sweep, SweepResult};
use quality::rates;
use result::{BenchResult, CaseSummary, Target};
use sample::Sample;
use slo::Slo;
use suite::{ServerKind, Suite, Tag};

/// How a benchmark runs.
#[derive(Default)]
pub struct Options {
    pub warmup: Option<usize>,
    pub runs: Option<usize>,
    /// Closed-loop levels: this many simultaneous streams each.
    pub concurrency: Vec<usize>,
    /// An open-loop level: requests per second.
    pub rate: Option<f64>,
    pub arrival: Option<Arrival>,
    /// Seed of Poisson arrivals [default: 1].
    pub seed: Option<u64>,
    /// Requests per load level [default: 40].
    pub requests: Option<usize>,
    pub sweep: Option<Sweep>,
    pub slo: Option<Slo>,
    /// Prior-context depths (tokens) to ask the same question behind.
    pub depths: Vec<usize>,
    /// Runs of the whole suite, for confidence intervals (1: none).
    pub repeat: usize,
    pub gates: BTreeMap<String, String>,
}

impl Options {
    /// Fills what the command line left unset from a recipe's `bench.load`.
    pub fn with_recipe_load(mut self, spec: Option<&load::LoadSpec>) -> Options {
        let Some(l) = spec else { return self };
        if self.concurrency.is_empty() {
            self.concurrency = l.concurrency.clone();
        }
        if self.depths.is_empty() {
            self.depths = l.depth.clone();
        }
        self.rate = self.rate.or(l.rate);
        self.arrival = self.arrival.or(l.arrival);
        self.requests = self.requests.or(l.requests);
        // Checked when the recipe was loaded.
        self.sweep = self.sweep.or_else(|| l.sweep.as_deref()?.parse().ok());
        if self.repeat <= 1 {
            self.repeat = l.repeat.unwrap_or(1);
        }
        self.seed = self.seed.or(l.seed);
        self
    }
}

pub fn http_client() -> Result<Clients> {
    Clients::new().map_err(Error::Failed)
}

/// The kind of server a recipe's engine runs.
pub fn server_kind(engine: crate::engine::Engine) -> ServerKind {
    use crate::engine::Engine;
    match engine {
        Engine::LlamaServer => ServerKind::LlamaServer,
        Engine::Vllm => ServerKind::Vllm,
        Engine::Sglang => ServerKind::Sglang,
        Engine::Trtllm | Engine::Openai | Engine::Sim => ServerKind::Other,
    }
}

/// A fresh tag for this benchmark's prompts: a second benchmark against the same server
/// must not find the first one's prompts in its cache.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(crate::units::unix_now().as_nanos());
    format!("{:08x}", h.finish() as u32)
}

/// What every phase of one benchmark shares.
struct Bench<'a> {
    clients: Clients,
    url: String,
    suite: &'a Suite,
    info: server::ServerInfo,
    nonce: String,
    /// The server's `/metrics`, when it answered with known metrics.
    metrics_url: Option<String>,
    slo: Option<Slo>,
}

impl Bench<'_> {
    /// `n` unique single-turn requests for a load level, cycling the suite's single-turn cases.
    fn load_bodies(&self, salt: usize, n: usize) -> Vec<Value> {
        let single: Vec<&suite::Case> = self
            .suite
            .cases
            .iter()
            .filter(|c| c.turns.len() == 1)
            .collect();
        let single = if single.is_empty() {
            self.suite.cases.iter().collect()
        } else {
            single
        };
        (0..n)
            .map(|i| {
                let case = single[i % single.len()];
                // Run numbers past the suite's keep every prompt unique.
                let tag = Tag {
                    nonce: &self.nonce,
                    run: 1_000_000 * (salt + 1) + i,
                    turn: 1,
                };
                let history = [json!({"role": "user", "content": case.turns[0]})];
                self.suite
                    .request(&self.info.model, case, &history, tag, self.info.kind)
            })
            .collect()
    }

    fn level(&self) -> load::Level<'_> {
        load::Level {
            clients: &self.clients,
            url: &self.url,
            metrics_url: self.metrics_url.as_deref(),
            slo: self.slo.as_ref(),
        }
    }

    /// One conversation of a case: its turns in order, stopping at the first failure.
    async fn conversation(
        &self,
        case: &suite::Case,
        run: usize,
        tag_run: usize,
        nonce: &str,
    ) -> Vec<Sample> {
        let mut history: Vec<Value> = Vec::new();
        let mut out = Vec::new();
        for (t, user) in case.turns.iter().enumerate() {
            history.push(json!({"role": "user", "content": user}));
            let tag = Tag {
                nonce,
                run: tag_run,
                turn: t + 1,
            };
            let body = self
                .suite
                .request(&self.info.model, case, &history, tag, self.info.kind);
            let mut s = client::stream(&self.clients, &self.url, &body).await;
            s.case = case.name.clone();
            s.run = run;
            s.turn = t + 1;
            history.push(json!({"role": "assistant", "content": s.content}));
            let failed = !s.ok;
            out.push(s);
            if failed {
                break;
            }
        }
        out
    }
}

/// Runs the suite against `target.url` (`repeat` times), then the load levels, the sweep
/// and the depths asked for; `progress(done, total, what)` after each suite request.
/// `production` is the baseline of the relative gates, or why there is none to trust.
pub async fn run(
    suite: &Suite,
    mut target: Target,
    opts: &Options,
    production: std::result::Result<&BenchResult, &str>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchResult> {
    let (b, before) = connect(suite, &mut target, opts).await?;
    let warmup = opts.warmup.unwrap_or(suite.warmup);
    let runs = opts.runs.unwrap_or(suite.runs);
    let repeat = opts.repeat.max(1);
    let mut samples = run_suite(&b, warmup, runs, repeat, &mut progress).await;
    mark_impossible(&target, &mut samples);
    let mut phases = run_phases(&b, opts, runs, &mut progress).await;
    phases.server_side = server_side(&b, before, &phases).await;
    phases.repeat = repeat;
    Ok(assemble(
        suite,
        target,
        opts,
        production,
        samples,
        phases,
        (warmup, runs),
    ))
}

/// What the server said before the run: its metrics (or why none) and the host's memory.
type Before = (
    std::result::Result<BTreeMap<scrape::Figure, f64>, String>,
    Option<(u64, u64)>,
);

/// Asks the server what it is (filling in `target`) and reads its metrics once.
async fn connect<'a>(
    suite: &'a Suite,
    target: &mut Target,
    opts: &Options,
) -> Result<(Bench<'a>, Before)> {
    let clients = http_client()?;
    let url = target.url.clone();
    let known = target.engine.map(server_kind);
    let info = server::probe(&clients.pooled, &url, known).await?;
    target.model = info.model.clone();
    target.server = info.kind;
    target.server_version = info.version.clone();
    let metrics_url = format!("{url}/metrics");
    let before = scrape::scrape(&clients.pooled, &metrics_url).await;
    let b = Bench {
        clients,
        url,
        suite,
        info,
        nonce: nonce(),
        metrics_url: before.is_ok().then_some(metrics_url),
        slo: opts.slo,
    };
    Ok((b, (before, scrape::meminfo())))
}

/// The server's metrics and the host's memory, before and after.
async fn server_side(
    b: &Bench<'_>,
    (before, memory_before): Before,
    ph: &Phases,
) -> scrape::ServerSide {
    let url = format!("{}/metrics", b.url);
    let after = scrape::scrape(&b.clients.pooled, &url).await;
    let available_min = ph
        .load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()))
        .filter_map(|l| l.server.as_ref()?.host_available_min)
        .min();
    let host_memory = memory_before
        .zip(scrape::meminfo())
        .map(|((total, a), (_, z))| scrape::HostMemory {
            total,
            available_before: a,
            available_after: z,
            available_min,
        });
    scrape::ServerSide {
        url,
        unavailable: before.as_ref().err().cloned(),
        before: before.ok(),
        after: after.ok(),
        host_memory,
    }
}

/// The load levels, the sweep and the depths asked for.
async fn run_phases(
    b: &Bench<'_>,
    opts: &Options,
    runs: usize,
    progress: &mut impl FnMut(usize, usize, &str),
) -> Phases {
    let requests = opts.requests.unwrap_or(40);
    let mut load = Vec::new();
    for (i, p) in load_levels(opts).into_iter().enumerate() {
        progress(1, 1, &format!("load: {p}"));
        load.push(load::run(&b.level(), p, b.load_bodies(i, requests)).await);
    }
    let sweep = match &opts.sweep {
        Some(s) => Some(run_sweep(b, s, opts, requests, progress).await),
        None => None,
    };
    let depth = match (opts.depths.is_empty(), first_single(b.suite)) {
        (false, Some(case)) => {
            progress(1, 1, "context depth");
            let setup = depth::Setup {
                clients: &b.clients,
                url: &b.url,
                suite: b.suite,
                model: &b.info.model,
                kind: b.info.kind,
                nonce: &b.nonce,
                runs: runs.min(5),
            };
            depth::run(&setup, case, &opts.depths).await
        }
        _ => Vec::new(),
    };
    Phases {
        load,
        sweep,
        depth,
        server_side: scrape::ServerSide::default(),
        repeat: 1,
    }
}

fn first_single(suite: &Suite) -> Option<&suite::Case> {
    suite.cases.iter().find(|c| c.turns.len() == 1)
}

/// The suite, `repeat` times over, each with its own prompts.
async fn run_suite(
    b: &Bench<'_>,
    warmup: usize,
    runs: usize,
    repeat: usize,
    progress: &mut impl FnMut(usize, usize, &str),
) -> Vec<Sample> {
    let total: usize = repeat
        * b.suite
            .cases
            .iter()
            .map(|c| (warmup + runs) * c.turns.len())
            .sum::<usize>();
    let mut samples = Vec::new();
    for r in 0..repeat {
        let nonce = if repeat > 1 {
            format!("{}r{r}", b.nonce)
        } else {
            b.nonce.clone()
        };
        for case in &b.suite.cases {
            for run in 0..warmup + runs {
                for mut s in b.conversation(case, run, run, &nonce).await {
                    s.warmup = run < warmup;
                    s.repeat = r;
                    samples.push(s);
                    progress(samples.len(), total, &case.name);
                }
            }
        }
    }
    samples
}

/// Single-stream decode above the bandwidth bound (at the sample's context depth) is not
/// a measurement of decoding.
fn mark_impossible(target: &Target, samples: &mut [Sample]) {
    for s in samples {
        let depth = roofline::depth_of(s.prompt_tokens, s.completion_tokens);
        if let Some(max) = target.roofline_tps_at(depth) {
            s.impossible = s.decode_tps.is_some_and(|d| d > max);
        }
    }
}

/// The fixed load levels asked for: closed-loop concurrency levels, then the rate.
fn load_levels(opts: &Options) -> Vec<Profile> {
    let mut out: Vec<Profile> = opts
        .concurrency
        .iter()
        .filter(|&&n| n > 1)
        .map(|&streams| Profile::Concurrency { streams })
        .collect();
    if let Some(rps) = opts.rate {
        out.push(Profile::Rate {
            rps,
            arrival: opts.arrival.unwrap_or(Arrival::Poisson),
            seed: opts.seed.unwrap_or(1),
        });
    }
    out
}

/// Steps through the sweep's levels until one saturates the server; the knee is the last
/// level before it.
async fn run_sweep(
    b: &Bench<'_>,
    sweep: &Sweep,
    opts: &Options,
    requests: usize,
    progress: &mut impl FnMut(usize, usize, &str),
) -> SweepResult {
    let mut levels: Vec<LoadRun> = Vec::new();
    let mut knee = None;
    let arrival = opts.arrival.unwrap_or(Arrival::Poisson);
    for (i, p) in sweep
        .profiles(arrival, opts.seed.unwrap_or(1))
        .into_iter()
        .enumerate()
    {
        progress(1, 1, &format!("sweep: {p}"));
        let r = load::run(&b.level(), p, b.load_bodies(100 + i, requests)).await;
        let why = levels.last().and_then(|prev| load::saturated(prev, &r));
        let prev_level = levels.last().map(|x| x.profile.level());
        levels.push(r);
        if let (Some(why), Some(level)) = (why, prev_level) {
            knee = Some(load::Knee {
                level,
                saturated_at: p.level(),
                why,
            });
            break;
        }
    }
    SweepResult::new(sweep, levels, knee)
}

/// What the phases beyond the suite measured.
struct Phases {
    load: Vec<LoadRun>,
    sweep: Option<SweepResult>,
    depth: Vec<depth::DepthPoint>,
    server_side: scrape::ServerSide,
    repeat: usize,
}

/// Each metric over `samples` (per-token ones over the streams that describe decoding).
fn latency<'a>(
    samples: impl Iterator<Item = &'a Sample> + Clone,
) -> BTreeMap<Metric, stats::Stats> {
    let pick = |f: fn(&Sample) -> Vec<f64>, decoding: bool| {
        let v: Vec<f64> = samples
            .clone()
            .filter(|s| !decoding || result::per_token_valid(s))
            .flat_map(f)
            .collect();
        stats::stats(&v)
    };
    [
        (
            Metric::Ttft,
            pick(|s| s.ttft_ms.into_iter().collect(), false),
        ),
        (
            Metric::Ttfo,
            pick(|s| s.ttfo_ms.into_iter().collect(), false),
        ),
        (Metric::E2el, pick(|s| vec![s.e2e_ms], false)),
        (
            Metric::Tpot,
            pick(|s| s.tpot_ms.into_iter().collect(), true),
        ),
        (Metric::Itl, pick(|s| s.itl_ms.clone(), true)),
        (
            Metric::Decode,
            pick(|s| s.decode_tps.into_iter().collect(), true),
        ),
    ]
    .into_iter()
    .filter_map(|(m, s)| Some((m, s?)))
    .collect()
}

/// Each metric's p50 per repeated run, as an interval.
fn confidence(samples: &[Sample], repeat: usize) -> BTreeMap<Metric, stats::Interval> {
    if repeat < 2 {
        return BTreeMap::new();
    }
    let per_run: Vec<BTreeMap<Metric, stats::Stats>> = (0..repeat)
        .map(|r| {
            latency(
                samples
                    .iter()
                    .filter(move |s| s.repeat == r && !s.warmup && s.ok),
            )
        })
        .collect();
    Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let p50s: Vec<f64> = per_run
                .iter()
                .filter_map(|l| l.get(&m).map(|s| s.p50))
                .collect();
            Some((m, stats::interval(&p50s)?))
        })
        .collect()
}

/// The best goodput over every load level and sweep level.
fn best_goodput(load: &[LoadRun], sweep: Option<&SweepResult>) -> Option<gates::GoodputFigure> {
    load.iter()
        .chain(sweep.into_iter().flat_map(|s| s.levels.iter()))
        .filter_map(|r| {
            Some(gates::GoodputFigure {
                rps: r.goodput_rps?,
                pct: r.goodput_pct?,
            })
        })
        .max_by(|a, b| a.rps.total_cmp(&b.rps))
}

fn problems_of(samples: &[Sample], load: &[LoadRun], sweep: Option<&SweepResult>) -> Vec<String> {
    let mut out: Vec<String> = samples
        .iter()
        .filter_map(|s| {
            Some(format!(
                "{} run {} turn {}: {}",
                s.case,
                s.run + 1,
                s.turn,
                s.error.as_ref()?
            ))
        })
        .collect();
    for r in load
        .iter()
        .chain(sweep.into_iter().flat_map(|s| s.levels.iter()))
    {
        out.extend(
            r.records
                .iter()
                .filter_map(|x| Some(format!("{}: {}", r.profile, x.error.as_ref()?))),
        );
    }
    out
}

/// A server that failed requests under load failed, whatever the single streams showed.
fn under_load(
    (verdict, reason): (result::Verdict, String),
    ph: &Phases,
) -> (result::Verdict, String) {
    let levels: Vec<&LoadRun> = ph
        .load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()))
        .collect();
    let failed: usize = levels.iter().map(|l| l.server_failures()).sum();
    if failed == 0 || verdict == result::Verdict::Error {
        return (verdict, reason);
    }
    let total: usize = levels.iter().map(|l| l.requests).sum();
    let first = levels
        .iter()
        .find(|l| l.server_failures() > 0)
        .map_or(String::new(), |l| format!(", first at {}", l.profile));
    (
        result::Verdict::Error,
        format!("the server failed {failed} of {total} load requests{first}"),
    )
}

/// The suite's caveats, the roofline's, and the phases' (metrics missing, failed load requests).
fn notes(
    cases: &[CaseSummary],
    samples: &[Sample],
    target: &Target,
    roofline: Option<&roofline::Roofline>,
    ph: &Phases,
) -> Vec<String> {
    let mut notes = result::notes(cases, samples, target);
    notes.extend(roofline.and_then(|r| r.note()));
    if let Some(why) = &ph.server_side.unavailable {
        notes.push(format!("no server-side metrics in this result: {why}"));
    }
    let levels = ph
        .load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()));
    let failed: usize = levels.map(|l| l.failed).sum();
    if failed > 0 {
        notes.push(format!(
            "{failed} load requests failed (see problems): the load figures count completed ones only"
        ));
    }
    notes
}

fn assemble(
    suite: &Suite,
    target: Target,
    opts: &Options,
    production: std::result::Result<&BenchResult, &str>,
    samples: Vec<Sample>,
    ph: Phases,
    (warmup, runs): (usize, usize),
) -> BenchResult {
    let case_of = |s: &Sample| {
        suite
            .cases
            .iter()
            .find(|c| c.name == s.case)
            .expect("samples come from cases")
    };
    let counted = || samples.iter().filter(|s| !s.warmup && s.ok);
    let cases: Vec<CaseSummary> = suite
        .cases
        .iter()
        .map(|c| {
            result::summarize_case(
                c,
                &samples,
                rates(counted().filter(|s| s.case == c.name).map(|s| (s, c))),
            )
        })
        .collect();
    let now = gates::Measures {
        rates: rates(counted().map(|s| (s, case_of(s)))),
        stats: latency(counted()),
        confidence: confidence(&samples, ph.repeat),
        goodput: best_goodput(&ph.load, ph.sweep.as_ref()),
    };
    let p50 = |m: Metric| now.stats.get(&m).map(|s| s.p50);
    let base = production.map(BenchResult::measures);
    let gate_results = gates::evaluate(&opts.gates, &now, base.as_ref().map_err(|e| *e));
    let (verdict, verdict_reason) = under_load(result::verdict(&samples, &gate_results), &ph);
    let roofline = roofline::Roofline::of(&target, &samples, &ph.depth);
    let mut notes = notes(&cases, &samples, &target, roofline.as_ref(), &ph);
    if !opts.depths.is_empty() && ph.depth.is_empty() {
        notes.push(
            "no depth sweep: the suite has no single-turn case to ask behind a context".into(),
        );
    }
    BenchResult {
        sparkctl_version: env!("CARGO_PKG_VERSION").to_string(),
        host: crate::host::hostname(),
        time: crate::units::utc_stamp(crate::units::unix_now().as_secs()),
        target,
        suite: suite.name.clone(),
        warmup,
        runs,
        repeat: ph.repeat,
        usage_estimated: samples.iter().any(|s| s.usage_estimated && s.ok),
        cases,
        quality: now.rates,
        ttft_p50_ms: p50(Metric::Ttft),
        ttfo_p50_ms: p50(Metric::Ttfo),
        decode_tps_p50: p50(Metric::Decode),
        roofline_share: roofline.as_ref().and_then(|r| r.share),
        roofline,
        latency: now.stats,
        confidence: now.confidence,
        goodput: now.goodput,
        slo: opts.slo,
        problems: problems_of(&samples, &ph.load, ph.sweep.as_ref()),
        load: ph.load,
        sweep: ph.sweep,
        depth: ph.depth,
        server_side: Some(ph.server_side),
        gates: gate_results,
        verdict,
        verdict_reason,
        notes,
        samples,
    }
}
