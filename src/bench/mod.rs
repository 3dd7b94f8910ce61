//! The built-in benchmark: streamed requests only, no prompt ever repeated, TTFT and TTFO
//! apart, tokens from `usage`, per-token timing from per-chunk counts, warm-ups excluded,
//! n ≥ 5, percentiles, the server's own timings beside the client's, quality and speed
//! gates with three outcomes, and a JSON result with every sample and its context. Beyond
//! the suite: load levels and sweeps (`load`), context depth (`depth`), repeated runs with
//! confidence intervals (`stats`), the server's metrics (`scrape`) and the roofline.

mod assemble;
mod baseline;
pub(crate) mod bound;
pub(crate) mod client;
pub(crate) mod degenerate;
pub(crate) mod depth;
pub(crate) mod export;
pub(crate) mod gates;
pub(crate) mod html;
pub mod load;
pub(crate) mod metric;
mod plan;
pub(crate) mod quality;
mod reader;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod result;
pub(crate) mod roofline;
mod rule;
pub(crate) mod sample;
pub(crate) mod scrape;
pub(crate) mod server;
pub(crate) mod slo;
pub(crate) mod sse;
pub(crate) mod stats;
pub(crate) mod suite;
pub(crate) mod sweep;
pub(crate) mod target;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use assemble::{assemble, Phases};
pub(crate) use baseline::Baseline;
use client::Clients;
use load::{Arrival, LoadRun, Profile, Sweep};
pub(crate) use plan::{Overrides, Plan, RecipeBench};
use result::{BenchResult, Target};
use sample::Sample;
use slo::Slo;
use suite::{ServerKind, Suite, Tag};
use sweep::SweepResult;

/// How a benchmark runs.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) warmup: Option<usize>,
    pub(crate) runs: Option<usize>,
    /// Closed-loop levels: this many simultaneous streams each.
    pub(crate) concurrency: Vec<usize>,
    /// An open-loop level: requests per second.
    pub(crate) rate: Option<f64>,
    pub(crate) arrival: Option<Arrival>,
    /// Seed of Poisson arrivals [default: 1].
    pub(crate) seed: Option<u64>,
    /// Requests per load level [default: 40].
    pub(crate) requests: Option<usize>,
    pub(crate) sweep: Option<Sweep>,
    pub(crate) slo: Option<Slo>,
    /// Prior-context depths (tokens) to ask the same question behind.
    pub(crate) depths: Vec<usize>,
    /// Runs of the whole suite, for confidence intervals (1: none); unset: the recipe's
    /// `bench.load.repeat`, else 1.
    pub(crate) repeat: Option<usize>,
    pub(crate) gates: gates::Gates,
    /// Evaluation sets asked after the suite (a recipe's `bench.eval`).
    pub(crate) eval: Option<crate::eval::Plan>,
}

impl Options {
    /// Fills what the command line left unset from a recipe's `bench.load`.
    pub(crate) fn with_recipe_load(mut self, spec: Option<&load::LoadSpec>) -> Options {
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
        self.repeat = self.repeat.or(l.repeat);
        self.seed = self.seed.or(l.seed);
        self
    }
}

pub fn http_client() -> Result<Clients> {
    Clients::new().map_err(Error::Failed)
}

/// The kind of server a recipe's engine runs.
pub(crate) fn server_kind(engine: crate::engine::Engine) -> ServerKind {
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
            open_first: true,
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
            let mut s = client::stream_in(&self.clients, &self.url, case.api, &body).await;
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
pub(crate) async fn run(
    suite: &Suite,
    mut target: Target,
    opts: &Options,
    production: &Baseline<BenchResult>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchResult> {
    let (b, before) = connect(suite, &mut target, opts).await?;
    let warmup = opts.warmup.unwrap_or(suite.warmup);
    let runs = opts.runs.unwrap_or(suite.runs);
    let repeat = opts.repeat.unwrap_or(1).max(1);
    // A replay's load options pace the replay itself; nothing else runs.
    let (mut samples, replayed) = match suite.replay {
        Some(_) => {
            let (s, r) = replay::run(&b, opts, &mut progress).await;
            (s, Some(r))
        }
        None => (
            run_suite(&b, warmup, runs, repeat, &mut progress).await,
            None,
        ),
    };
    mark_impossible(&target, &mut samples);
    let mut phases = match replayed {
        Some(_) => Phases::default(),
        None => run_phases(&b, opts, runs, &mut progress).await,
    };
    if let Some(plan) = &opts.eval {
        phases.eval = Some(evaluate(&b, plan, production, &mut progress).await);
    }
    phases.server_side = server_side(&b, before, &phases).await;
    phases.repeat = repeat;
    let (warmup, runs) = match replayed {
        Some(_) => (0, 1),
        None => (warmup, runs),
    };
    let mut result = assemble(
        suite,
        target,
        opts,
        production,
        samples,
        phases,
        (warmup, runs),
    );
    result.replay = replayed;
    Ok(result)
}

/// The evaluation sets against the server, beside production's answers to them: those the
/// plan brings (asked of production just now), else those of production's last result.
async fn evaluate(
    b: &Bench<'_>,
    plan: &crate::eval::Plan,
    production: &Baseline<BenchResult>,
    progress: &mut impl FnMut(usize, usize, &str),
) -> crate::eval::Evaluation {
    let report = crate::eval::evaluate(
        &b.clients.pooled,
        &b.url,
        &b.info.model,
        &plan.sets,
        |done, total, key| progress(done, total, &format!("evaluation {key}")),
    )
    .await;
    let theirs = match (&plan.production, production) {
        (Some(p), _) => p.clone(),
        (None, Baseline::Measured(r)) => r
            .eval
            .as_ref()
            .map(|e| e.candidate().clone())
            .ok_or_else(|| "production's last result has no evaluation".to_string()),
        (None, Baseline::Missing(why)) => Err(why.clone()),
        (None, Baseline::NoProduction) => Err("there is no production".to_string()),
    };
    crate::eval::Evaluation::new(report, theirs)
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
    let ttft_mean_ms = match (&before, &after) {
        (Ok(b), Ok(a)) => scrape::ttft_mean_ms(b, a),
        _ => None,
    };
    scrape::ServerSide {
        url,
        unavailable: before.as_ref().err().cloned(),
        before: before.ok(),
        after: after.ok(),
        ttft_mean_ms,
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
        eval: None,
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
        if let Some(max) = roofline::tps_at(target, depth) {
            s.impossible = s.decode_tps.is_some_and(|d| d > max);
        }
    }
}

/// The fixed load levels asked for, every one (1 stream too: the suite's requests are not
/// a load level): closed-loop concurrency levels, then the rate.
fn load_levels(opts: &Options) -> Vec<Profile> {
    let mut out: Vec<Profile> = opts
        .concurrency
        .iter()
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
        let why = levels.last().and_then(|prev| sweep::saturated(prev, &r));
        let prev_level = levels.last().map(|x| x.profile.level());
        levels.push(r);
        if let (Some(why), Some(level)) = (why, prev_level) {
            knee = Some(sweep::Knee {
                level,
                saturated_at: p.level(),
                why,
            });
            break;
        }
    }
    SweepResult::new(sweep, levels, knee)
}
