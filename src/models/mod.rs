//! Several models behind one port. A model is what a client names in a request's `model`:
//! a recipe's `model.served_name`. Recipes that name the same one are candidates for one
//! another (`up` of one replaces the other's production); recipes that name none serve the
//! unnamed model, the one production of a setup that never named one, which clients reach
//! by its production recipe's name (or by any name while it is the only model). Each model
//! has its own production, rollback stack and warm instances (`production.json`); the front
//! door routes each request to its model's production (`frontdoor::lanes`).

use std::collections::BTreeMap;

use crate::error::{Error, ModelProblem, Result};
use crate::production::{Book, Entry, Production};
use crate::recipe::{LoadedRecipe, Recipe, RecipeSet};

/// The model of recipes that name no served name.
pub(crate) const UNNAMED: &str = "";

/// The model `r` serves.
pub(crate) fn of(r: &Recipe) -> String {
    r.model
        .as_ref()
        .and_then(|m| m.served_name.clone())
        .unwrap_or_default()
}

/// The name clients send for `model`, whose production is `p`: the model itself, or the
/// unnamed model's production recipe (None while it has none).
pub(crate) fn answers_to(model: &str, p: &Production) -> Option<String> {
    match model {
        UNNAMED => (p.current.as_ref())
            .or(p.previous.last())
            .map(|e| e.recipe.clone()),
        m => Some(m.to_string()),
    }
}

/// A file written before there were several models names none: its recipes say which
/// model its production is.
pub(crate) fn settle(file: &mut Book, recipes: &RecipeSet) {
    if file.settled() {
        return;
    }
    let top = file.top();
    let recipe = (top.current.as_ref())
        .or(top.previous.last())
        .and_then(|e| recipes.get(&e.recipe).ok());
    file.settle(recipe.map(|l| of(&l.recipe)).unwrap_or_default());
}

/// production.json with its top model settled by `recipes`, or empty when there is none
/// (an unreadable one is the callers' to report: they read it again).
pub(crate) fn book(state: &crate::state::StateDir, recipes: &RecipeSet) -> Book {
    let mut file = Book::load(state).unwrap_or_default();
    settle(&mut file, recipes);
    file
}

/// The models that have a production, by the name clients send.
pub(crate) fn served(file: &Book) -> BTreeMap<String, String> {
    (file.lanes().into_iter())
        .filter(|(_, p)| p.current.is_some())
        .filter_map(|(m, p)| Some((answers_to(&m, &p)?, m)))
        .collect()
}

/// The model a user names (`--model`): a model, or the recipe the unnamed one serves.
pub(crate) fn named(file: &Book, name: &str) -> Result<String> {
    let lanes = file.lanes();
    if let Some((m, _)) = lanes.iter().find(|(m, p)| {
        !m.is_empty() && m.as_str() == name || answers_to(m, p).as_deref() == Some(name)
    }) {
        return Ok(m.clone());
    }
    let known: Vec<String> = (lanes.iter())
        .filter_map(|(m, p)| answers_to(m, p))
        .collect();
    Err(Error::Model(ModelProblem::Unknown {
        name: name.to_string(),
        known,
    }))
}

/// The model whose production, or warm instance, is `recipe`'s.
pub(crate) fn serving(file: &Book, recipe: &str) -> Option<String> {
    file.lanes().into_iter().find_map(|(m, p)| {
        let current = p.current.as_ref().is_some_and(|e| e.recipe == recipe);
        let warm = p.warm.iter().any(|w| w.upstream.recipe == recipe);
        (current || warm).then_some(m)
    })
}

/// The model a flow acts on when it names none (`rollback`): the only one with a
/// production, else the user must say.
pub(crate) fn only(file: &Book) -> Result<String> {
    let served = served(file);
    match served.len() {
        0 => Ok(file.model_id().to_string()),
        1 => Ok(served.into_values().next().unwrap_or_default()),
        _ => Err(Error::Model(ModelProblem::NotNamed {
            served: served.into_keys().collect(),
        })),
    }
}

/// The model requests without `model` go to: the only one served, or the one whose
/// production recipe says `serve.default: true`.
pub(crate) fn default_of(file: &Book, recipes: &RecipeSet) -> Option<String> {
    let lanes = file.lanes();
    let served: Vec<(&String, &Entry)> = (lanes.iter())
        .filter_map(|(m, p)| Some((m, p.current.as_ref()?)))
        .collect();
    if let [(m, _)] = served.as_slice() {
        return Some((*m).clone());
    }
    let defaults: Vec<&String> = (served.iter())
        .filter(|(_, e)| recipes.get(&e.recipe).is_ok_and(is_default))
        .map(|(m, _)| *m)
        .collect();
    match defaults.as_slice() {
        [m] => Some((*m).clone()),
        _ => None,
    }
}

fn is_default(l: &LoadedRecipe) -> bool {
    crate::recipe::serve::is_default(&l.recipe)
}

/// The lane a flow that makes `loaded` production changes: its own model's, unless one
/// model is served and serving several was not chosen — then that one's, in its place
/// (the lane takes `loaded`'s model at the switch, so `rollback` brings the old one back).
/// Several are chosen by `add` (`--add-model`), by a `serve` section in `loaded` or in a
/// production's recipe, or by two models served already.
pub(crate) fn landing(
    file: &Book,
    recipes: &RecipeSet,
    loaded: &LoadedRecipe,
    add: bool,
) -> String {
    let own = of(&loaded.recipe);
    let served = served(file);
    let several = crate::recipe::serve::chooses_several;
    if add || several(&loaded.recipe) || served.values().any(|m| *m == own) {
        return own;
    }
    let productions: Vec<(&String, String)> = (served.values())
        .filter_map(|m| Some((m, file.lane(m).current?.recipe)))
        .collect();
    let chosen =
        (productions.iter()).any(|(_, r)| recipes.get(r).is_ok_and(|l| several(&l.recipe)));
    match productions.as_slice() {
        [(only, _)] if !chosen => (*only).clone(),
        _ => own,
    }
}

/// The file once `recipe` (serving `model`) is production in `lane`: what `up` and
/// `rollback` check before they change anything.
pub(crate) fn with_production(file: &Book, lane: &str, model: &str, recipe: &str) -> Book {
    let mut next = file.lane(lane);
    if let Some(old) = next.current.take() {
        next.previous.push(old);
    }
    next.current = Some(Entry {
        recipe: recipe.to_string(),
        since: String::new(),
        run_id: None,
        bench: None,
        upstream: None,
        image: None,
        pin_move: None,
    });
    file.with_lane_as(lane, model, next)
}

/// Every model's production is a recipe that still names that model, no two productions
/// answer to one name (served, alias or preset), and at most one is the default. A recipe whose file is gone claims
/// nothing.
pub(crate) fn check(file: &Book, recipes: &RecipeSet) -> Result<()> {
    let mut claims: BTreeMap<String, Vec<&LoadedRecipe>> = BTreeMap::new();
    let mut defaults = Vec::new();
    let lanes = file.lanes();
    for (m, p) in &lanes {
        let Some(l) = p.current.as_ref().and_then(|e| recipes.get(&e.recipe).ok()) else {
            continue;
        };
        let now = of(&l.recipe);
        if &now != m {
            return Err(Error::Model(ModelProblem::ServedNameMoved {
                recipe: l.recipe.name.clone(),
                path: l.path.display().to_string(),
                was: shown(m),
                now: shown(&now),
            }));
        }
        if let Some(name) = answers_to(m, p) {
            claims.entry(name).or_default().push(l);
        }
        // Its aliases and presets are names it answers to as well.
        for name in (l.recipe.serve.iter()).flat_map(|s| s.aliases.iter().chain(s.presets.keys())) {
            claims.entry(name.clone()).or_default().push(l);
        }
        if is_default(l) {
            defaults.push(l);
        }
    }
    if let Some((name, both)) = claims.iter().find(|(_, c)| c.len() > 1) {
        return Err(Error::Model(ModelProblem::ClaimedTwice {
            name: name.clone(),
            files: files(both),
        }));
    }
    if defaults.len() > 1 {
        return Err(Error::Model(ModelProblem::TwoDefaults {
            files: files(&defaults),
        }));
    }
    Ok(())
}

/// A model as a user reads it.
pub(crate) fn shown(model: &str) -> String {
    match model {
        UNNAMED => "(none: the unnamed model)".to_string(),
        m => format!("`{m}`"),
    }
}

fn files(recipes: &[&LoadedRecipe]) -> String {
    (recipes.iter())
        .map(|l| format!("{} ({})", l.recipe.name, l.path.display()))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Another model's production is never stopped to make room for a start: its clients would
/// lose it. `loaded`'s own model's production may stop (a swap).
pub(crate) fn refuse_stopping_others(
    ctx: &crate::context::Context,
    loaded: &LoadedRecipe,
    memory: &crate::memory::MemoryPlan,
) -> Result<()> {
    let others: Vec<String> = (in_the_way(ctx, loaded, memory).into_iter())
        .map(|(m, r)| match m.as_str() {
            UNNAMED => format!("{r} (the unnamed model)"),
            m => format!("{r} (model {m})"),
        })
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    Err(Error::DoesNotFit {
        name: loaded.recipe.name.clone(),
        plan: memory.describe(),
        unfit: crate::error::Unfit::BesideModels(others),
    })
}

/// The other models' productions (and candidates on trial) that `memory` would stop for
/// `loaded`: (model, recipe).
pub(crate) fn in_the_way(
    ctx: &crate::context::Context,
    loaded: &LoadedRecipe,
    memory: &crate::memory::MemoryPlan,
) -> Vec<(String, String)> {
    let Ok(mut file) = Book::load(&ctx.state) else {
        return Vec::new();
    };
    if let Some(recipes) = loaded
        .path
        .parent()
        .and_then(|d| crate::recipe::load_dir(d).ok())
    {
        settle(&mut file, &recipes);
    }
    let own = of(&loaded.recipe);
    // A candidate under a rollout is no model's to stop either, its own model's included.
    let on_trial =
        (file.lanes().into_iter()).filter_map(|(m, p)| Some((m, p.candidate?.upstream.recipe)));
    (file.lanes().into_iter())
        .filter(|(m, _)| *m != own)
        .filter_map(|(m, p)| Some((m, p.current?.recipe)))
        .chain(on_trial)
        .filter(|(_, r)| memory.must_stop.contains(r))
        .collect()
}

/// The model `rollback` acts on: `--to`'s (where it lands: `landing`), which `--model`
/// (when given too) must be; or `--model`'s; or the only one served.
pub(crate) fn of_rollback(
    state: &crate::state::StateDir,
    recipes: &RecipeSet,
    to: Option<&str>,
    model: Option<&str>,
    add: bool,
) -> Result<String> {
    let file = book(state, recipes);
    let named = model.map(|m| named(&file, m)).transpose()?;
    match (to, named) {
        (Some(to), named) => {
            let own = landing(&file, recipes, recipes.get(to)?, add);
            match named {
                Some(m) if m != own => Err(Error::Model(ModelProblem::NotItsModel {
                    to: to.to_string(),
                    own: shown(&own),
                    named: shown(&m),
                    model: model.unwrap_or_default().to_string(),
                })),
                _ => Ok(own),
            }
        }
        (None, Some(m)) => Ok(m),
        (None, None) => only(&file),
    }
}

/// The model a user names for reading (`history --model`): one a recipe here serves, or
/// one with a production.
pub(crate) fn known(file: &Book, recipes: &RecipeSet, name: &str) -> Result<String> {
    if recipes.recipes.iter().any(|l| of(&l.recipe) == name) && !name.is_empty() {
        return Ok(name.to_string());
    }
    named(file, name)
}
