//! Several models behind the production port (`crate::models`): one lane per model (its
//! table, its hold, its production), all sharing one book (production.json, written whole),
//! the metrics, the live quality and the page; and which lane a request goes to, by the
//! `model` its body names. With one model every request goes to it, as it always did.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::demand::Load;
use super::metrics::Metrics;
use super::names::{self, Named};
use super::route::Route;
use super::{capture, live, page, turns, Door};
use crate::frontdoor::status::{ModelState, ModelStatus};
use crate::frontdoor::Config;
use crate::production::Upstream;
use crate::state::StateDir;

/// What every lane shares.
pub(crate) struct Shared {
    pub(in crate::server) state: StateDir,
    pub(in crate::server) config: Config,
    pub(in crate::server) metrics: Arc<Metrics>,
    /// Production judged on what it answers.
    pub(in crate::server) live: Arc<live::Live>,
    /// Production's requests kept for a replay, when asked.
    pub(in crate::server) capture: Arc<capture::Capture>,
    /// The live page's series.
    pub(in crate::server) page: page::Page,
    /// State writes that found the disk full.
    pub(in crate::server) deferred: crate::state::Deferred,
    /// production.json as last written: every model's production.
    pub(in crate::server) book: Mutex<crate::production::Book>,
    /// One change of production at a time, whichever model's: its write, then its route.
    pub(in crate::server) changing: tokio::sync::Mutex<()>,
    /// One start on demand at a time, with the evictions it makes: two models starting at
    /// once would each plan beside the other as absent and together not fit.
    pub(in crate::server) starting: tokio::sync::Mutex<()>,
    /// Every lane, for a start that must evict another model (set once the lanes open).
    lanes: std::sync::OnceLock<std::sync::Weak<Lanes>>,
}

impl Shared {
    pub(crate) fn new(state: StateDir, config: Config, book: crate::production::Book) -> Shared {
        Shared {
            metrics: Arc::new(Metrics::default()),
            live: Arc::new(live::Live::new(config.quality)),
            capture: capture::Capture::start(
                capture::dir(&state),
                capture::read_config(&state),
                config.api_key().ok().flatten(),
            ),
            page: page::Page::new(config.page),
            deferred: crate::state::Deferred::default(),
            book: Mutex::new(book),
            changing: tokio::sync::Mutex::new(()),
            starting: tokio::sync::Mutex::new(()),
            lanes: std::sync::OnceLock::new(),
            state,
            config,
        }
    }

    /// The models that may be evicted for `model`'s start, whose requests wait since
    /// `waiting`: each loaded and serving, not `keep`, not held by a command nor judged by a
    /// rollout, and either idle past a moment (least recently used first) or at the end of
    /// its turn (`turns`: busy, its requests in flight finish first). Beside them, when the
    /// next of the others may go.
    pub(crate) fn evictable(&self, model: &str, waiting: Instant) -> (Vec<Idle>, Option<Instant>) {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let waiters = (self.lanes().and_then(|l| l.now().lanes.get(model).cloned()))
            .map(|d| d.table.waiters())
            .unwrap_or_default();
        let mut idle: Vec<Idle> = (self.other_lanes(model).into_iter())
            .filter(|d| d.demand.load() == Load::Loaded)
            .filter(|d| !d.demand.settings().keep && !d.held_by_a_command())
            .filter(|d| d.rollout.get().is_none())
            .filter_map(|d| {
                let Route::Serving(upstream) = d.table.route() else {
                    return None;
                };
                let for_s = d.table.idle_for();
                let moved_on = d.table.moved_on(&waiters, turns::GAP);
                match turns::way(&d.demand.turn(), for_s, moved_on, waiting, now) {
                    turns::Way::Yields { busy } => Some(Idle {
                        start_s: self.start_cost(&d, &upstream.recipe),
                        door: d,
                        upstream,
                        for_s: for_s.unwrap_or_default(),
                        busy,
                    }),
                    turns::Way::Keeps { until } => {
                        next = Some(next.map_or(until, |n| n.min(until)));
                        None
                    }
                }
            })
            .collect();
        // Models asleep hold little, but may still be in the way: stopping one costs its
        // start (nobody waits for it).
        idle.extend((self.other_lanes(model).into_iter()).filter_map(|d| {
            let (upstream, _) = d.demand.asleep()?;
            let free = !d.demand.settings().keep && !d.held_by_a_command();
            (free && d.table.counts().0 == 0).then(|| Idle {
                start_s: self.start_cost(&d, &upstream.recipe),
                for_s: d.table.idle_for().unwrap_or_default(),
                door: d,
                upstream,
                busy: false,
            })
        }));
        // The idle first, the cheapest to bring back first; those at the end of a turn last.
        idle.sort_by(|a, b| (a.busy.cmp(&b.busy)).then(a.cost().total_cmp(&b.cost())));
        (idle, next)
    }

    /// What bringing `recipe` (the server of `d`'s model) back costs, in seconds: the p50
    /// of its kept starts (`starts`), else the door's last measure of one, else
    /// `UNMEASURED_START_S`.
    fn start_cost(&self, d: &Door, recipe: &str) -> f64 {
        crate::starts::p50_s(&self.state, recipe)
            .or_else(|| d.demand.turn().last_start.map(|t| t.as_secs_f64()))
            .unwrap_or(UNMEASURED_START_S)
    }

    /// Whether `model`, whose requests wait since `waiting`, is the next to start among
    /// the models waiting for room: the one that has waited longest goes first.
    pub(crate) fn first_in_line(&self, model: &str, waiting: Instant) -> bool {
        (self.other_lanes(model).iter())
            .filter(|d| d.table.counts().0 > 0)
            .filter_map(|d| d.demand.turn().waiting_since)
            .all(|other| other >= waiting)
    }

    /// Every lane (None before they open).
    pub(crate) fn lanes(&self) -> Option<Arc<Lanes>> {
        self.lanes.get().and_then(std::sync::Weak::upgrade)
    }

    /// Every lane but `model`'s (none before the lanes open).
    fn other_lanes(&self, model: &str) -> Vec<Arc<Door>> {
        let lanes = self.lanes();
        (lanes.map(|l| l.all()).unwrap_or_default().into_iter())
            .filter(|d| d.model() != model)
            .collect()
    }

    /// The production recipes of the other models marked `keep`: never evicted.
    pub(crate) fn kept(&self, model: &str) -> Vec<String> {
        (self.other_lanes(model).into_iter())
            .filter(|d| d.demand.settings().keep)
            .filter_map(|d| Some(d.production().current?.recipe))
            .collect()
    }
}

/// Another model's lane that nobody uses now.
pub(crate) struct Idle {
    pub(in crate::server) door: Arc<Door>,
    pub(in crate::server) upstream: Upstream,
    /// Since its last request ended (0 when busy).
    pub(in crate::server) for_s: std::time::Duration,
    /// At the end of its turn with requests in flight or due: they finish first.
    pub(in crate::server) busy: bool,
    /// What its start costs, in seconds (`Shared::start_cost`).
    start_s: f64,
}

/// What a start is taken to cost when none was measured (the shortest turn's worth).
const UNMEASURED_START_S: f64 = 10.0;

impl Idle {
    /// What evicting it is likely to cost: the start that brings it back, weighed by how
    /// recently it was used (a model idle for a minute counts half its start; for an hour,
    /// a sixtieth). The cheapest goes first — not the least recently used alone.
    pub(crate) fn cost(&self) -> f64 {
        self.start_s / (1.0 + self.for_s.as_secs_f64() / 60.0)
    }

    /// Its figures, for the log.
    pub(crate) fn shown(&self) -> String {
        format!(
            "{} (start {:.1} s, idle {:.0} s, cost {:.2})",
            self.upstream.recipe,
            self.start_s,
            self.for_s.as_secs_f64(),
            self.cost()
        )
    }
}

/// What a user is told of `door`'s model, with `waiting` requests.
pub(crate) fn state_of(door: &Door, waiting: usize) -> ModelState {
    let (route, load) = (door.table.route(), door.demand.load());
    match (&route, load) {
        (Route::Serving(_) | Route::Suspect(_), _) => ModelState::Serving,
        // Taken out of production (`down --force`) while unloaded: nothing to start.
        (Route::Offline, _) => ModelState::Offline,
        (_, Load::Unloaded(_)) if door.demand.backing_off() => ModelState::Failed,
        (_, Load::Starting) => ModelState::Starting,
        (_, Load::Unloaded(_)) if waiting > 0 => ModelState::Queued,
        (_, Load::Unloaded(_)) if door.demand.asleep().is_some() => ModelState::Asleep,
        (_, Load::Unloaded(super::demand::Unloaded::Evicted)) => ModelState::Evicted,
        (_, Load::Unloaded(_)) => ModelState::Unloaded,
        (Route::Holding, Load::Loaded) => ModelState::Holding,
    }
}

/// Where a request goes, or the front door's own answer.
pub(crate) enum Pick {
    Lane(Arc<Door>),
    /// By an alias or a preset: its body is to be rewritten (`names::rewrite`).
    Renamed(Arc<Door>, Named),
    Answer(StatusCode, Value),
}

/// Every model's lane.
pub(crate) struct Lanes {
    pub(in crate::server) shared: Arc<Shared>,
    /// The routing table: read on every request, replaced whole when it changes (a lane
    /// added or renamed, a new default), never changed in place.
    table: RwLock<Arc<Table>>,
    /// Where recipes are: which production says it is the default.
    recipes_dir: PathBuf,
    /// A lane added after the start (a model's first `up`): its watch starts.
    added: mpsc::UnboundedSender<Arc<Door>>,
}

/// Which lane each model's requests go to, and the model requests without `model` go to
/// when several are served.
#[derive(Clone, Default)]
struct Table {
    lanes: BTreeMap<String, Arc<Door>>,
    default: Option<String>,
    /// The productions' aliases and presets.
    names: Arc<HashMap<String, Named>>,
}

impl Lanes {
    /// A lane per model in `routes`, and the unnamed model's always (it answers 503 while
    /// there is no production at all, as a front door always did).
    pub(crate) fn open(
        shared: Arc<Shared>,
        routes: Vec<(String, Route, Load)>,
        recipes_dir: PathBuf,
    ) -> (Arc<Lanes>, mpsc::UnboundedReceiver<Arc<Door>>) {
        let (added, rx) = mpsc::unbounded_channel();
        let mut lanes = BTreeMap::new();
        let unnamed = (String::new(), Route::Offline, Load::Loaded);
        for (model, route, load) in routes.into_iter().chain([unnamed]) {
            lanes
                .entry(model.clone())
                .or_insert_with(|| Arc::new(Door::lane(shared.clone(), &model, route, load)));
        }
        let lanes = Arc::new(Lanes {
            shared,
            table: RwLock::new(Arc::new(Table {
                lanes,
                ..Table::default()
            })),
            recipes_dir,
            added,
        });
        let _ = lanes.shared.lanes.set(Arc::downgrade(&lanes));
        lanes.refresh();
        (lanes, rx)
    }

    /// The routing table as it is now.
    fn now(&self) -> Arc<Table> {
        self.table.read().expect("routing table").clone()
    }

    /// The routing table replaced by `f` of a copy of it, whole.
    fn replace<T>(&self, f: impl FnOnce(&mut Table) -> T) -> T {
        let mut table = self.table.write().expect("routing table");
        let mut next = Table::clone(&table);
        let out = f(&mut next);
        *table = Arc::new(next);
        out
    }

    /// `model`'s lane, added (with nothing to route to yet) when it has none.
    pub(crate) fn lane(&self, model: &str) -> Arc<Door> {
        if let Some(d) = self.now().lanes.get(model) {
            return d.clone();
        }
        let added = self.replace(|t| {
            if let Some(d) = t.lanes.get(model) {
                return (d.clone(), false);
            }
            let door = Arc::new(Door::lane(
                self.shared.clone(),
                model,
                Route::Offline,
                Load::Loaded,
            ));
            t.lanes.insert(model.to_string(), door.clone());
            (door, true)
        });
        if added.1 {
            let _ = self.added.send(added.0.clone());
        }
        added.0
    }

    /// `from`'s lane serves `to` from now on (`Door::switch`): found under that name. An
    /// empty lane of that name (nothing served) gives way.
    pub(crate) fn renamed(&self, from: &str, to: &str) {
        self.replace(|t| {
            if let Some(d) = t.lanes.remove(from) {
                t.lanes.insert(to.to_string(), d);
            }
        });
    }

    pub(crate) fn all(&self) -> Vec<Arc<Door>> {
        self.now().lanes.values().cloned().collect()
    }

    /// The lanes whose model has a production, by the name clients send.
    fn served(&self) -> Vec<(String, Arc<Door>)> {
        let book = self.shared.book.lock().expect("book").lanes();
        let table = self.now();
        (book.iter())
            .filter(|(_, p)| p.current.is_some())
            .filter_map(|(m, p)| {
                let name = crate::models::answers_to(m, p)?;
                Some((name, table.lanes.get(m)?.clone()))
            })
            .collect()
    }

    /// The lane a caller that names no model means: the only model served, else the
    /// default, else the unnamed model's.
    pub(crate) fn primary(&self) -> Arc<Door> {
        let mut served = self.served();
        if served.len() == 1 {
            return served.remove(0).1;
        }
        let default = self.now().default.clone();
        self.lane(&default.unwrap_or_default())
    }

    /// Reads again which production is the default and each one's `serve` section (after
    /// a switch: the recipes may say otherwise now).
    pub(crate) fn refresh(&self) {
        let Ok(recipes) = crate::recipe::load_dir(&self.recipes_dir) else {
            return;
        };
        let book = self.shared.book.lock().expect("book").clone();
        let default = crate::models::default_of(&book, &recipes);
        let mut serving = Vec::new();
        for (model, p) in book.lanes() {
            let settings = (p.current.as_ref())
                .and_then(|e| recipes.get(&e.recipe).ok())
                .map(|l| crate::recipe::serve::of(&l.recipe))
                .unwrap_or_default();
            self.lane(&model).demand.set_settings(settings.clone());
            if let Some(served) = crate::models::answers_to(&model, &p) {
                serving.push((model, served, settings));
            }
        }
        let given: Vec<names::Given> = (serving.iter())
            .map(|(lane, served, serve)| names::Given {
                lane,
                served,
                serve,
            })
            .collect();
        let names = Arc::new(names::of(&given));
        self.replace(|t| {
            t.default = default;
            t.names = names;
        });
    }

    /// Every model, for `GET /state`.
    pub(crate) fn statuses(&self) -> Vec<ModelStatus> {
        let default = self.now().default.clone();
        (self.all().iter())
            .map(|d| {
                let s = d.status();
                let name = crate::models::answers_to(&d.model(), &s.production)
                    .filter(|_| s.production.current.is_some());
                ModelStatus {
                    waits: name.as_deref().and_then(|n| d.metrics.waits(n)),
                    in_flight: s.in_flight.values().sum(),
                    idle_s: d.table.idle_for().map(|t| t.as_secs_f64()),
                    name,
                    default: default.as_deref() == Some(d.model().as_str()),
                    model: d.model(),
                    upstream: s.upstream,
                    holding: s.holding,
                    waiting: s.waiting,
                    state: state_of(d, s.waiting),
                    load: d.demand.load(),
                    loads: d.demand.loads(),
                    production: s.production,
                    start_failed: d.demand.failure().map(|f| f.shown()),
                    turn: Some(d.demand.turn().status()),
                }
            })
            .filter(|m| !m.production.is_empty())
            .collect()
    }

    /// Whether the model a request naming none goes to can answer — it serves, its
    /// requests are held for a switch, or it is unloaded and may be started — from the
    /// lanes' state alone: nothing is asked of a server, no model is started or used. With
    /// several models and no default, whether any can.
    pub(crate) fn ready(&self) -> bool {
        let served = self.served();
        let default = self.now().default.clone();
        let can = |d: &Door| d.table.route() != Route::Offline && !d.demand.backing_off();
        match served.iter().find(|(_, d)| Some(d.model()) == default) {
            Some((_, d)) if served.len() > 1 => can(d),
            _ => served.iter().any(|(_, d)| can(d)),
        }
    }

    /// Where a request goes. One model served (or none): there, whatever it names. Several:
    /// to the one its body's `model` names, or the default when it names none;
    /// `GET /v1/models` lists them.
    pub(crate) fn pick(&self, method: &Method, path: &str, body: &[u8]) -> Pick {
        let mut served = self.served();
        let table = self.now();
        let listed = method == Method::GET && path == "/v1/models";
        if listed && (served.len() > 1 || !table.names.is_empty()) {
            return Pick::Answer(StatusCode::OK, listing(&served, &table.names));
        }
        // By an alias or a preset: its model, whatever else is served.
        let by_name = (!table.names.is_empty())
            .then(|| named_model(body))
            .flatten()
            .and_then(|m| table.names.get(m.as_str()?).cloned());
        if let Some(named) = by_name {
            if let Some(d) = table.lanes.get(&named.lane) {
                return Pick::Renamed(d.clone(), named);
            }
        }
        if served.len() <= 1 {
            return Pick::Lane(match served.pop() {
                Some((_, d)) => d,
                None => self.primary(),
            });
        }
        let names: Vec<&str> = served.iter().map(|(n, _)| n.as_str()).collect();
        let named = match body.is_empty() {
            true => Value::Null,
            false => match named_model(body) {
                Some(m) => m,
                None => {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "the request's body is not a JSON object, so which model it is for \
                             is unknown; this front door serves several: {}",
                            names.join(", ")
                        ),
                        "invalid_request_body",
                        &names,
                    )
                }
            },
        };
        match named {
            Value::String(m) => match served.iter().find(|(n, _)| *n == m) {
                Some((_, d)) => Pick::Lane(d.clone()),
                None => refuse(
                    StatusCode::NOT_FOUND,
                    format!(
                        "The model `{m}` does not exist behind this front door; its models: {}",
                        names.join(", ")
                    ),
                    "model_not_found",
                    &names,
                ),
            },
            Value::Null => {
                let default = self.now().default.clone();
                match served.iter().find(|(_, d)| Some(d.model()) == default) {
                    Some((_, d)) => Pick::Lane(d.clone()),
                    None => refuse(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "the request names no `model` and no model is the default \
                             (serve.default in its recipe); name one of: {}",
                            names.join(", ")
                        ),
                        "model_required",
                        &names,
                    ),
                }
            }
            other => refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "`model` is {other}, not a name; name one of: {}",
                    names.join(", ")
                ),
                "invalid_model",
                &names,
            ),
        }
    }
}

/// The `model` a JSON object names (`null` when none), reading nothing else of it into
/// memory: a body may be tens of megabytes of prompt. None: the body is no JSON object.
fn named_model(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Named {
        #[serde(default)]
        model: Value,
    }
    // A struct reads a JSON array too, field by field: only an object names a model.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    serde_json::from_slice::<Named>(body).ok().map(|n| n.model)
}

/// An OpenAI-style error that lists the models.
fn refuse(status: StatusCode, message: String, code: &str, models: &[&str]) -> Pick {
    Pick::Answer(
        status,
        json!({"error": {
            "message": message, "type": "invalid_request_error", "param": "model", "code": code,
            "models": models
        }}),
    )
}

/// `GET /v1/models`: every model served, running or not, in OpenAI's shape.
fn listing(served: &[(String, Arc<Door>)], names: &HashMap<String, Named>) -> Value {
    let mut data: Vec<Value> = (served.iter())
        .map(|(name, d)| {
            let p = d.production();
            let waiting = d.table.counts().0;
            let state = state_of(d, waiting).as_str();
            json!({
                "id": name, "object": "model", "created": 0, "owned_by": "sparkctl",
                "sparkctl": {
                    "model": name,
                    "recipe": p.current.as_ref().map(|e| e.recipe.clone()),
                    "state": state,
                },
            })
        })
        .collect();
    data.extend(names::listed(names));
    json!({"object": "list", "data": data})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_objects_model_is_read() {
        let prompt = "x".repeat(1 << 20);
        let body = json!({"messages": [{"role": "user", "content": prompt}], "model": "coder"});
        assert_eq!(
            named_model(body.to_string().as_bytes()),
            Some(json!("coder"))
        );
        assert_eq!(named_model(b" {\"stream\": true}"), Some(Value::Null));
        assert_eq!(named_model(b"{\"model\": 7}"), Some(json!(7)));
        // An array would fill a struct's fields in order: no model.
        assert_eq!(named_model(b"[\"coder\"]"), None);
        assert_eq!(named_model(b"model=coder"), None);
        assert_eq!(named_model(b"{\"model\": \"coder\""), None);
    }
}
