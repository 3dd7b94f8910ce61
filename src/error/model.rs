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
                "{files} both serve model `{name}` as production, so requests for it cannot be \
                 told apart: give one of them another model.served_name"
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
