//! What a `try` cannot do (`Error::Try`): the facts, worded here. Whatever it says,
//! nothing was started or written.

use std::fmt;
use std::path::PathBuf;

/// Why a try, or saving its pick, cannot go on.
#[derive(Debug)]
pub enum TryProblem {
    /// A `--with`/`--vary`/`--request` value that does not read (the parser's words: the
    /// flag, the key and the fix).
    Spec(String),
    /// No change asked: every variant would be the base.
    NothingToTry { name: String },
    /// More variants than `--max` allows.
    TooMany { asked: usize, max: usize },
    /// One variant that cannot run (`label`: what differs; `why`: its problem).
    Variant {
        index: usize,
        name: String,
        label: String,
        why: Box<super::Error>,
    },
    /// A variant that needs what others hold (`memory`: the plan in words).
    NeedsOthers { others: Vec<String>, memory: String },
    /// A variant that does not fit beside production without `--allow-swap`.
    BesideProduction { production: String, memory: String },
    /// A change that cannot be applied to the recipe (`server.args-=` of a flag it lacks).
    Change(String),
    /// The derived recipe does not serialize.
    Serialize(String),
    /// `--resume ID` of a try that is not kept here, or does not read.
    NoSuchTry {
        id: String,
        dir: PathBuf,
        why: String,
    },
    /// `--save` with no variant that passed every gate.
    NothingPassed,
    /// `--pick N` outside the try's variants.
    PickOutOfRange { pick: usize, last: usize },
    /// `--pick N` of a variant that did not pass every gate.
    PickFailed { pick: usize, label: String },
    /// `--save NAME` of a recipe that exists.
    SaveExists { path: PathBuf },
}

impl TryProblem {
    /// Bad input (exit 2) rather than a try that could not go on.
    pub(super) fn is_usage(&self) -> bool {
        !matches!(self, TryProblem::Serialize(_) | TryProblem::NothingPassed)
    }
}

impl fmt::Display for TryProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryProblem::Spec(said) | TryProblem::Change(said) => f.write_str(said),
            TryProblem::NothingToTry { name } => write!(
                f,
                "nothing to try: give --with, --vary or --request (e.g. `sparkctl try {name} \
                 --vary 'server.args+=--enforce-eager|~'`)"
            ),
            TryProblem::TooMany { asked, max } => write!(
                f,
                "{asked} variants asked, at most {max} are run; narrow the --vary lists or raise --max"
            ),
            TryProblem::Variant { index, name, label, why } => match why.as_ref() {
                super::Error::Invalid(diags) => write!(
                    f,
                    "variant {index} ({name}: {label}) is not a valid recipe; nothing was started:\n{}",
                    diags.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n")
                ),
                other => write!(
                    f,
                    "variant {index} ({name}: {label}): {other}; nothing was started"
                ),
            },
            TryProblem::NeedsOthers { others, memory } => write!(
                f,
                "it needs memory that {} hold(s) ({memory}); stop them (`sparkctl down {}`) \
                 first — a try stops nothing but production, and that only with --allow-swap",
                others.join(", "),
                others.first().map_or("", String::as_str)
            ),
            TryProblem::BesideProduction { production, memory } => write!(
                f,
                "it does not fit beside production {production} ({memory}); --allow-swap holds \
                 production's requests at the front door and stops it while such a variant runs"
            ),
            TryProblem::Serialize(why) => write!(f, "a variant does not serialize: {why}"),
            TryProblem::NoSuchTry { id, dir, why } => write!(
                f,
                "no try {id} to resume ({why}); the tries kept are in {}",
                dir.display()
            ),
            TryProblem::NothingPassed => {
                f.write_str("no variant passed every gate: nothing was saved")
            }
            TryProblem::PickOutOfRange { pick, last } => {
                write!(f, "--pick {pick}: the try has variants 0 to {last}")
            }
            TryProblem::PickFailed { pick, label } => write!(
                f,
                "--pick {pick}: variant {pick} ({label}) did not pass every gate; a failing \
                 variant is never saved"
            ),
            TryProblem::SaveExists { path } => write!(
                f,
                "{} exists: --save names a new recipe; nothing was written",
                path.display()
            ),
        }
    }
}
