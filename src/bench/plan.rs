//! One benchmark, planned: what it measures, the suite, and how it runs. A recipe's bench
//! section with the command line's flags over it, each flag the user did not give left
//! `None` (or empty) until it is resolved here against the recipe's value, so a flag given
//! wins whatever its value. `bench NAME|URL` and `up`'s benchmarks are both one.

use std::path::Path;

use super::baseline::Baseline;
use super::gates::{self, GateRule, Gates};
use super::load::LoadSpec;
use super::result::{BenchResult, Target};
use super::slo::Slo;
use super::suite::{Suite, DEFAULT_SUITE};
use super::{bound, replay, Options};
use crate::error::{Error, Result};
use crate::state::StateDir;

/// A recipe's bench section as the benchmark reads it (the recipe module owns its format).
/// A URL has none: the built-in suite, no gates.
pub(crate) struct RecipeBench {
    /// The suite's spec: built in, a name in the suites dir, a file, or `captured`.
    pub(crate) suite: String,
    pub(crate) gates: Gates,
    pub(crate) slo: Option<Slo>,
    pub(crate) load: Option<LoadSpec>,
    /// The evaluation sets (`bench.eval`), loaded.
    pub(crate) eval: Option<crate::eval::Plan>,
}

impl Default for RecipeBench {
    fn default() -> Self {
        RecipeBench {
            suite: DEFAULT_SUITE.into(),
            gates: Gates::default(),
            slo: None,
            load: None,
            eval: None,
        }
    }
}

/// What the command line sets over a recipe's bench section; `None` or empty: not given.
#[derive(Default)]
pub(crate) struct Overrides {
    pub(crate) suite: Option<String>,
    /// `captured` or a capture file, sent instead of a suite.
    pub(crate) replay: Option<String>,
    /// The load flags as given (their `gates` stay empty: the rules are `gates` below),
    /// resolved against the recipe's `bench.load` by the plan.
    pub(crate) options: Options,
    /// `NAME=RULE`, each over the recipe's gate of that name.
    pub(crate) gates: Vec<String>,
    /// The device's peak memory bandwidth, GB/s, over the recipe's and the machine's.
    pub(crate) bandwidth_gbps: Option<f64>,
}

/// One benchmark, resolved: the target, the suite, the options.
pub(crate) struct Plan {
    pub(crate) target: Target,
    suite: Suite,
    pub(crate) options: Options,
}

impl Plan {
    /// `over` over `recipe`'s bench section; a bad flag is an error naming it.
    pub(crate) fn new(
        mut target: Target,
        recipe: RecipeBench,
        over: Overrides,
        suites_dir: &Path,
        state: &StateDir,
    ) -> Result<Plan> {
        if let Some(g) = over.bandwidth_gbps {
            if !(g.is_finite() && g > 0.0) {
                return Err(Error::BadFlag(crate::error::FlagProblem::Bandwidth));
            }
            target.set_bound(Ok(bound::declared(
                g,
                bound::Source::Flag,
                "--bandwidth-gbps",
            )));
        }
        let mut gates = recipe.gates;
        for g in &over.gates {
            let g: GateRule = g
                .parse()
                .map_err(|e| crate::bench::gates::bad_gate_flag(&e))?;
            gates.insert(g.name.clone(), g);
        }
        let suite = match &over.replay {
            Some(from) => replay::captured(from, state)?,
            None => replay::load_suite(
                over.suite.as_deref().unwrap_or(&recipe.suite),
                suites_dir,
                state,
            )?,
        };
        over.options.check()?;
        let options = Options {
            slo: over.options.slo.or(recipe.slo),
            eval: over.options.eval.or(recipe.eval),
            gates,
            ..over.options
        }
        .with_recipe_load(recipe.load.as_ref());
        Ok(Plan {
            target,
            suite,
            options,
        })
    }

    /// Sets `fields` (dotted paths) in every request of the suite: a try's `--request`.
    pub(crate) fn set_request_fields(&mut self, fields: &[(String, serde_json::Value)]) {
        self.suite.fields = fields.to_vec();
    }

    /// Alone, without a baseline, the gates relative to production have nothing to compare
    /// with: they are left out (their names returned, to be said) rather than left undecided.
    pub(crate) fn leave_out_relative_gates(
        &mut self,
        baseline: &Baseline<BenchResult>,
    ) -> Vec<String> {
        match baseline {
            Baseline::Measured(_) => Vec::new(),
            Baseline::Missing(_) | Baseline::NoProduction => {
                gates::take_relative(&mut self.options.gates)
            }
        }
    }

    /// Runs it; `baseline` is production's result, or why there is none to trust.
    pub(crate) async fn run(
        self,
        baseline: &Baseline<BenchResult>,
        progress: impl FnMut(usize, usize, &str),
    ) -> Result<BenchResult> {
        super::run(&self.suite, self.target, &self.options, baseline, progress).await
    }
}

impl Options {
    /// The load flags that cannot mean anything.
    fn check(&self) -> Result<()> {
        if self.repeat == Some(0) {
            return Err(Error::BadFlag(crate::error::FlagProblem::RepeatZero));
        }
        if self.concurrency.contains(&0) {
            return Err(Error::BadFlag(crate::error::FlagProblem::ConcurrencyZero));
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(Error::BadFlag(crate::error::FlagProblem::Rate));
        }
        Ok(())
    }
}
