//! A flag (or flag-like argument) whose value cannot be used (`Error::BadFlag`): the flag,
//! the facts, and the fix, worded here.

use std::fmt;
use std::path::PathBuf;

/// Why a flag's value cannot be used. Each says `FLAG: why`, with its fix.
#[derive(Debug)]
pub enum FlagProblem {
    /// A parser's own words about the value (`--command`, `--docker-run`, `--gate`).
    Said { flag: &'static str, why: String },
    /// A rollout flag the recipe's `rollout` or another flag contradicts (`at`: where).
    Rollout { at: String, why: String },
    /// `images pin NAME OLD NEW` with one digest, for a recipe pinned once.
    PinnedOnce { name: String },
    /// `images pin NAME OLD` without NEW.
    OneDigest,
    /// `--listen-fd N` that is not a listening socket.
    NotListening { fd: i32 },
    /// `--node` for a deployment that runs on one engine.
    NodeOfOneEngine { name: String },
    /// `--node NODE` that the deployment does not run on.
    NoSuchNode {
        name: String,
        node: String,
        nodes: Vec<String>,
    },
    /// `--no-promote` with a rollout (`mode`), which ends in a promotion.
    NoPromoteInRollout { mode: &'static str },
    /// `rollback` without `--to`, and no previous production.
    NothingToRollBackTo,
    /// `--builds DIR` with fewer than two builds named `name`.
    TooFewBuilds {
        dir: PathBuf,
        builds: usize,
        name: String,
    },
    /// `bisect --resume` with no unfinished bisect of `name`.
    NoBisectToResume { name: String },
    /// A bisect without one of its ends (`which`: good or bad).
    EndNeeded { which: &'static str, name: String },
    /// `--good` that is not older than `--bad` in `name`'s image history.
    GoodNotBeforeBad {
        good: String,
        bad: String,
        /// The good end's digest and the bad end's.
        digests: Box<(String, String)>,
        same: bool,
        name: String,
    },
    /// A bisect's `--repeat` under 2.
    RepeatUnderTwo,
    /// A digest prefix that names `many` digests of `recipe`'s image.
    AmbiguousDigest {
        prefix: String,
        many: usize,
        recipe: String,
    },
    /// The simulator's `--hold-memory` beyond what it can allocate.
    HoldMemoryTooBig { bytes: u64 },
    /// A `--gate` rule on production without `--against`.
    GateNeedsAgainst,
    /// `images diff` of a value that is not `NAME@DIGEST`.
    NotNameAtDigest { given: String },
    /// `images pin` with neither a recipe nor `--all`.
    NoRecipeNamed,
    /// `import --port` of a port a container publishes.
    PortOfContainer { port: u16 },
    /// `import --pid` of a process with no command line.
    NoCommandLine { pid: u32 },
    /// `--bandwidth-gbps` that is not a positive number.
    Bandwidth,
    /// `bench --repeat 0`.
    RepeatZero,
    /// A `--concurrency` level of 0.
    ConcurrencyZero,
    /// A `--rate` that is not positive.
    Rate,
    /// `keys add NAME` with a name that is not letters, digits, `-`, `_`, `.`.
    KeyName { name: String },
    /// `keys add NAME` for a name a key has.
    KeyExists { name: String },
    /// `keys revoke|rotate NAME` for a name no key has.
    NoKey { name: String, keys: Vec<String> },
}

impl FlagProblem {
    /// The flag, as the message names it.
    pub(super) fn flag(&self) -> String {
        match self {
            FlagProblem::Said { flag, .. } => flag.to_string(),
            FlagProblem::Rollout { at, .. } => at.clone(),
            FlagProblem::PinnedOnce { .. } | FlagProblem::OneDigest => "OLD NEW".into(),
            FlagProblem::NotListening { .. } => "--listen-fd".into(),
            FlagProblem::NodeOfOneEngine { .. } | FlagProblem::NoSuchNode { .. } => "--node".into(),
            FlagProblem::NoPromoteInRollout { .. } => "--no-promote".into(),
            FlagProblem::NothingToRollBackTo => "--to NAME".into(),
            FlagProblem::TooFewBuilds { .. } => "--builds".into(),
            FlagProblem::NoBisectToResume { .. } => "--resume".into(),
            FlagProblem::EndNeeded { which, .. } => format!("--{which} REF"),
            FlagProblem::GoodNotBeforeBad { good, .. } => format!("--good {good}"),
            FlagProblem::RepeatUnderTwo => "--repeat".into(),
            FlagProblem::AmbiguousDigest { prefix, .. } => prefix.clone(),
            FlagProblem::HoldMemoryTooBig { .. } => "--hold-memory".into(),
            FlagProblem::GateNeedsAgainst => "--gate".into(),
            FlagProblem::NotNameAtDigest { given } => given.clone(),
            FlagProblem::NoRecipeNamed => "NAME".into(),
            FlagProblem::PortOfContainer { .. } => "--port".into(),
            FlagProblem::NoCommandLine { .. } => "--pid".into(),
            FlagProblem::KeyName { name }
            | FlagProblem::KeyExists { name }
            | FlagProblem::NoKey { name, .. } => format!("key {name}"),
            FlagProblem::Bandwidth => "--bandwidth-gbps".into(),
            FlagProblem::RepeatZero => "--repeat 0".into(),
            FlagProblem::ConcurrencyZero => "--concurrency 0".into(),
            FlagProblem::Rate => "--rate".into(),
        }
    }
}

/// Why, after the flag and its colon.
impl fmt::Display for FlagProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlagProblem::Said { why, .. } => f.write_str(why),
            FlagProblem::Rollout { why, .. } => write!(f, "{why}; nothing was changed"),
            FlagProblem::PinnedOnce { name } => {
                write!(f, "{name} has been pinned once; give both digests")
            }
            FlagProblem::OneDigest => f.write_str("give both, or neither"),
            FlagProblem::NotListening { fd } => write!(f, "{fd} is not a listening socket"),
            FlagProblem::NodeOfOneEngine { name } => {
                write!(
                    f,
                    "{name} runs on one engine; --node is for recipes with nodes:"
                )
            }
            FlagProblem::NoSuchNode { name, node, nodes } => write!(
                f,
                "{name} has no node `{node}`; its nodes: {}",
                nodes.join(", ")
            ),
            FlagProblem::NoPromoteInRollout { mode } => write!(
                f,
                "a {mode} ends in a promotion; add --no-rollout to stop after the gates"
            ),
            FlagProblem::NothingToRollBackTo => {
                f.write_str("is needed: there is no previous production to roll back to")
            }
            FlagProblem::TooFewBuilds { dir, builds, name } => write!(
                f,
                "{} holds {builds} build(s) named {name} (in it or a directory right below \
                 it); a bisect needs two at least",
                dir.display()
            ),
            FlagProblem::NoBisectToResume { name } => write!(
                f,
                "there is no unfinished bisect of {name}; start one with --good REF --bad REF"
            ),
            FlagProblem::EndNeeded { name, .. } => write!(
                f,
                "is needed (a digest, a run id or a date); `sparkctl images history {name}` \
                 lists the digests"
            ),
            FlagProblem::GoodNotBeforeBad {
                bad,
                digests,
                same,
                name,
                ..
            } => write!(
                f,
                "{} is {} --bad {bad} ({}) in {name}'s image history; a bisect looks for the \
                 first bad digest after a good one",
                crate::units::short_digest(&digests.0),
                if *same {
                    "the same digest as"
                } else {
                    "newer than"
                },
                crate::units::short_digest(&digests.1)
            ),
            FlagProblem::RepeatUnderTwo => {
                f.write_str("must be at least 2: a round's interval needs two runs")
            }
            FlagProblem::AmbiguousDigest { many, recipe, .. } => write!(
                f,
                "names {many} digests of {recipe}'s image; give more of it"
            ),
            FlagProblem::HoldMemoryTooBig { bytes } => write!(f, "{bytes} is too big"),
            FlagProblem::GateNeedsAgainst => f.write_str(
                "a rule on production needs --against NAME|URL: the server to compare with",
            ),
            FlagProblem::NotNameAtDigest { .. } => f.write_str(
                "write NAME@DIGEST, e.g. qat-v2b@sha256:3f2a9c01b7e4 (a unique prefix of a \
                 digest in `sparkctl images history NAME` will do)",
            ),
            FlagProblem::NoRecipeNamed => {
                f.write_str("name a recipe, or pass --all for every recipe with an image")
            }
            FlagProblem::PortOfContainer { port } => write!(
                f,
                "port {port} is published by a container; import it with --container \
                 (`docker ps` names it)"
            ),
            FlagProblem::NoCommandLine { pid } => {
                write!(f, "pid {pid} has no command line (a kernel thread?)")
            }
            FlagProblem::Bandwidth => f.write_str("give the device's peak in GB/s, e.g. 3350"),
            FlagProblem::RepeatZero => f.write_str("give 1 or more runs"),
            FlagProblem::ConcurrencyZero => {
                f.write_str("a level is 1 or more streams (e.g. --concurrency 1,4,16)")
            }
            FlagProblem::Rate => f.write_str("give a positive number of requests per second"),
            FlagProblem::KeyName { .. } => {
                f.write_str("name a key with letters, digits, `-`, `_` and `.`")
            }
            FlagProblem::KeyExists { name } => write!(
                f,
                "it exists: `sparkctl keys rotate {name}` gives it a new secret, `keys revoke \
                 {name}` ends it"
            ),
            FlagProblem::NoKey { keys, .. } if keys.is_empty() => {
                f.write_str("there are no keys: `sparkctl keys add NAME` makes one")
            }
            FlagProblem::NoKey { keys, .. } => {
                write!(f, "there is no such key; the keys: {}", keys.join(", "))
            }
        }
    }
}
