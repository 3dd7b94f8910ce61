//! What cannot be served as asked when several models share the front door: a name no
//! model answers to, a flow that must be told which model, two recipes claiming one.

use std::fmt;

/// A model asked for, or claimed by recipes, that the door cannot serve as asked. Each
/// is bad input (kind `usage`): nothing was changed.
#[derive(Debug)]
pub enum ModelProblem {
    /// `--model NAME` that no production answers to; `known`: the names that do.
    Unknown { name: String, known: Vec<String> },
    /// A flow that acts on one model (`rollback`) while several are served.
    NotNamed { served: Vec<String> },
    /// A production whose recipe's `model.served_name` changed since it was promoted
    /// (`was` and `now` as shown to the user).
    ServedNameMoved {
        recipe: String,
        path: String,
        was: String,
        now: String,
    },
    /// Two productions answering to one name (`files`: the recipes, as shown).
    ClaimedTwice { name: String, files: String },
    /// More than one production says `serve.default: true`.
    TwoDefaults { files: String },
    /// One model's lane taken by a recipe of `model`, which another lane serves already.
    Taken { model: String },
    /// `rollback --to RECIPE --model M` where RECIPE serves another model.
    NotItsModel {
        to: String,
        own: String,
        named: String,
        model: String,
    },
}

impl fmt::Display for ModelProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelProblem::Unknown { name, known } => write!(
                f,
                "no model `{name}` has a production here; {}",
                match known.is_empty() {
                    true => "none has one yet: `sparkctl up NAME` makes one".to_string(),
                    false => format!("the models: {}", known.join(", ")),
                }
            ),
            ModelProblem::NotNamed { served } => write!(
                f,
                "several models are served here ({}); name one: --model NAME",
                served.join(", ")
            ),
            ModelProblem::ServedNameMoved {
                recipe,
                path,
                was,
                now,
            } => write!(
                f,
                "{recipe} ({path}) is production of model {was} but its model.served_name now \
                 names {now}; put model.served_name back, or take it out of production first \
                 (`sparkctl down {recipe} --force`)"
            ),
            ModelProblem::ClaimedTwice { name, files } => write!(
                f,
                "{files} both answer to `{name}` (a served name, an alias or a preset) as \
                 production, so requests for it cannot be told apart: give one of them another \
                 model.served_name, or rename the alias or preset"
            ),
            ModelProblem::TwoDefaults { files } => write!(
                f,
                "{files} both say serve.default: true for their production; requests without \
                 `model` can go to one model only: keep it in one of them"
            ),
            ModelProblem::Taken { model } => write!(
                f,
                "model `{model}` has a production of its own here: its recipe cannot take \
                 another model's place; `sparkctl up RECIPE --add-model` serves it beside"
            ),
            ModelProblem::NotItsModel {
                to,
                own,
                named,
                model,
            } => write!(
                f,
                "{to} serves model {own}, not {named}: drop --model, or roll {model} back to one \
                 of its own recipes"
            ),
        }
    }
}

/// Why sparkctl will not serve a model its job produced (`Error::ModelRefused`).
#[derive(Debug)]
pub enum Unfresh {
    /// Its producing job has not run here.
    NotRun { job: String },
    /// Its producing job's run did not succeed: still running (None), or ended so
    /// (its state, and how in words).
    NotSucceeded {
        job: String,
        run: String,
        ended: Option<(String, Option<String>)>,
    },
    /// It is marked incomplete (`reason`: the marker's).
    Incomplete { reason: String },
    /// An input changed (at `when`, unix seconds) after the job's run started.
    Stale {
        input: std::path::PathBuf,
        when: u64,
        job: String,
        started_at: String,
    },
}

impl fmt::Display for Unfresh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfresh::NotRun { job } => write!(
                f,
                "it is produced by job {job} (model.produced_by), which has not run here; \
                 `sparkctl run {job}` first"
            ),
            Unfresh::NotSucceeded { job, run, ended } => {
                write!(f, "its producing job {job} (run {run}) ")?;
                match ended {
                    None => f.write_str("is still running")?,
                    Some((state, how)) => write!(f, "{state}: {}", how.as_deref().unwrap_or("-"))?,
                }
                write!(
                    f,
                    "; its outputs are marked incomplete. Fix the job and `sparkctl run {job}` \
                     again (`sparkctl logs {job}` shows its output)"
                )
            }
            Unfresh::Incomplete { reason } => write!(f, "it is marked incomplete: {reason}"),
            Unfresh::Stale {
                input,
                when,
                job,
                started_at,
            } => write!(
                f,
                "it is older than its inputs: {} changed at {} after job {job} started \
                 ({started_at}); `sparkctl run {job}` again",
                input.display(),
                crate::units::utc_stamp(*when)
            ),
        }
    }
}
