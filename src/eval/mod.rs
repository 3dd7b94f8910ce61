//! Evaluation sets: prompts with checkable answers (a number, a JSON shape, a tool call
//! with its arguments, an instruction's form), scored per item, so that a gate can judge
//! whether a model still gets answers right, not only whether it answers fast. The
//! candidate and production are compared on the same items (`paired`); the benchmark runs
//! a recipe's sets beside its suite (`bench.eval`), and the simulated engine answers the
//! built-in ones.

mod check;
pub(crate) mod gate;
pub(crate) mod paired;
mod run;
mod set;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use check::Answer;
pub(crate) use gate::Evaluation;
pub(crate) use run::evaluate;
pub(crate) use set::{built_in_names, load_all, EvalSet};

use crate::error::{Error, Result};

/// One item as one server answered it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ItemResult {
    /// `SET#INDEX@DIGEST`: what pairs it with another server's answer to the same item.
    key: String,
    set: String,
    index: usize,
    /// The question, shortened.
    #[serde(default)]
    prompt: String,
    right: bool,
    /// The answer (its text, or `name(arguments)` for a tool call), shortened.
    #[serde(default)]
    answer: String,
    /// Why it is wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    why: Option<String>,
    /// Why there is no answer (the request failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<String>,
    ms: f64,
}

impl ItemResult {
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn prompt(&self) -> &str {
        &self.prompt
    }

    pub(crate) fn right(&self) -> bool {
        self.right
    }

    pub(crate) fn answer(&self) -> &str {
        &self.answer
    }

    pub(crate) fn why(&self) -> Option<&str> {
        self.why.as_deref()
    }

    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }
}

/// One set's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SetScore {
    set: String,
    items: usize,
    right: usize,
    /// Items the server failed to answer (counted as not right).
    failed: usize,
    accuracy_pct: f64,
    seconds: f64,
    items_per_minute: f64,
}

impl SetScore {
    pub(crate) fn set(&self) -> &str {
        &self.set
    }

    pub(crate) fn items(&self) -> usize {
        self.items
    }

    pub(crate) fn right(&self) -> usize {
        self.right
    }

    pub(crate) fn failed(&self) -> usize {
        self.failed
    }

    pub(crate) fn accuracy_pct(&self) -> f64 {
        self.accuracy_pct
    }

    pub(crate) fn items_per_minute(&self) -> f64 {
        self.items_per_minute
    }
}

/// One server's answers to the items of some sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Report {
    url: String,
    model: String,
    sets: Vec<SetScore>,
    right: usize,
    total: usize,
    accuracy_pct: f64,
    seconds: f64,
    items_per_minute: f64,
    items: Vec<ItemResult>,
}

fn pct(right: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        right as f64 / total as f64 * 100.0
    }
}

fn per_minute(n: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds * 60.0
    } else {
        0.0
    }
}

impl Report {
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    pub(crate) fn sets(&self) -> &[SetScore] {
        &self.sets
    }

    pub(crate) fn right(&self) -> usize {
        self.right
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }

    pub(crate) fn accuracy_pct(&self) -> f64 {
        self.accuracy_pct
    }

    pub(crate) fn seconds(&self) -> f64 {
        self.seconds
    }

    pub(crate) fn items_per_minute(&self) -> f64 {
        self.items_per_minute
    }

    pub(crate) fn items(&self) -> &[ItemResult] {
        &self.items
    }

    /// The report of `items`, in the order they were asked, over `seconds`.
    pub(crate) fn of(url: String, model: String, items: Vec<ItemResult>, seconds: f64) -> Report {
        let mut sets: Vec<SetScore> = Vec::new();
        for i in &items {
            let at = match sets.iter().position(|s| s.set == i.set) {
                Some(at) => at,
                None => {
                    sets.push(SetScore {
                        set: i.set.clone(),
                        items: 0,
                        right: 0,
                        failed: 0,
                        accuracy_pct: 0.0,
                        seconds: 0.0,
                        items_per_minute: 0.0,
                    });
                    sets.len() - 1
                }
            };
            let s = &mut sets[at];
            s.items += 1;
            s.right += usize::from(i.right);
            s.failed += usize::from(i.failed.is_some());
            s.seconds += i.ms / 1e3;
        }
        for s in &mut sets {
            s.accuracy_pct = pct(s.right, s.items);
            s.items_per_minute = per_minute(s.items, s.seconds);
        }
        let right = items.iter().filter(|i| i.right).count();
        Report {
            url,
            model,
            right,
            total: items.len(),
            accuracy_pct: pct(right, items.len()),
            items_per_minute: per_minute(items.len(), seconds),
            seconds,
            sets,
            items,
        }
    }

    /// Each item it answered (by key), and whether rightly: what is paired with another's.
    pub(crate) fn answered(&self) -> std::collections::BTreeMap<&str, bool> {
        self.items
            .iter()
            .filter(|i| i.failed.is_none())
            .map(|i| (i.key.as_str(), i.right))
            .collect()
    }

    /// The items it got wrong or did not answer.
    pub(crate) fn missed(&self) -> impl Iterator<Item = &ItemResult> {
        self.items.iter().filter(|i| !i.right)
    }
}

/// What a benchmark evaluates: the sets, and production's answers to them when a gate
/// compares with production (or why there are none).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) sets: Vec<EvalSet>,
    pub(crate) production: Option<std::result::Result<Report, String>>,
}

/// The plan of a recipe's `bench.eval` (None when it names no set): its sets, loaded from
/// the recipes dir's `evals/` or built in.
pub(crate) fn plan(names: &[String], recipes_dir: &Path) -> Result<Option<Plan>> {
    if names.is_empty() {
        return Ok(None);
    }
    Ok(Some(Plan {
        sets: load_all(names, &dir_of(recipes_dir))?,
        production: None,
    }))
}

/// Whether the set `name` can be found from a recipe in `recipes_dir`; why not.
pub(crate) fn exists(name: &str, recipes_dir: &Path) -> std::result::Result<(), String> {
    let file = dir_of(recipes_dir).join(format!("{name}.yaml"));
    if built_in_names().contains(&name)
        || file.is_file()
        || (name.ends_with(".yaml") && Path::new(name).is_file())
    {
        return Ok(());
    }
    Err(format!(
        "no evaluation set `{name}`: not built in ({}) and no {}",
        built_in_names().join(", "),
        file.display()
    ))
}

/// Where a recipes dir keeps its own evaluation sets.
pub(crate) fn dir_of(recipes_dir: &Path) -> std::path::PathBuf {
    recipes_dir.join("evals")
}

/// The model a server at `url` serves (the first it lists), or why it cannot be asked.
pub(crate) async fn model_at(client: &reqwest::Client, url: &str) -> Result<String> {
    let listing = crate::openai::list_models(client, url, Duration::from_secs(10))
        .await
        .map_err(|e| e.at(url))?;
    crate::openai::first_model(&listing)
        .map(|(id, _)| id.to_string())
        .ok_or_else(|| Error::Server {
            url: url.to_string(),
            problem: crate::error::ServerProblem::NoModel,
        })
}

/// A client for evaluations: no proxy (servers are local), a bounded connect.
pub(crate) fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| Error::HttpClient {
            cause: e.to_string(),
        })
}

/// `sparkctl eval`: the sets against the server at `url`, beside the server at `against`
/// (asked the same items) when one is given.
pub(crate) async fn compare(
    url: &str,
    against: Option<&str>,
    sets: &[EvalSet],
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Evaluation> {
    let client = client()?;
    let model = model_at(&client, url).await?;
    let total: usize = sets.iter().map(|s| s.items.len()).sum();
    let scale = if against.is_some() { 2 } else { 1 };
    let report = evaluate(&client, url, &model, sets, |d, _, k| {
        progress(d, total * scale, k)
    })
    .await;
    let theirs = match against {
        Some(other) => {
            let model = model_at(&client, other).await?;
            Ok(evaluate(&client, other, &model, sets, |d, _, k| {
                progress(total + d, total * 2, k)
            })
            .await)
        }
        None => Err("no other server was asked (--against NAME|URL)".to_string()),
    };
    Ok(Evaluation::new(report, theirs))
}

/// The built-in item whose prompt (and system prompt) a request carries: the simulated
/// engine answers these.
pub(crate) fn built_in_item(
    system: Option<&str>,
    prompt: &str,
) -> Option<(&'static EvalSet, usize)> {
    static SETS: std::sync::OnceLock<Vec<EvalSet>> = std::sync::OnceLock::new();
    let sets = SETS.get_or_init(set::built_in);
    sets.iter().find_map(|s| {
        s.items
            .iter()
            .position(|i| i.prompt == prompt && s.system_of(i) == system)
            .map(|i| (s, i))
    })
}
