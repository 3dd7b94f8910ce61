//! A recipe's `serve` section: how the front door serves its model beside others on the one
//! production port (`crate::models`): when its server is unloaded, kept, started with the
//! front door, and whether requests naming no model go to it.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diag::Report;
use super::Recipe;
use crate::engine::Engine;
use crate::units::HumanDuration;

/// The shortest `ttl`: an idle model unloaded faster than it loads would only thrash.
const MIN_TTL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Serve {
    /// Unloaded (its server stopped) after this long without a request, e.g. `10m`; the
    /// next request that names it starts it again. None: it stays loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ttl: Option<HumanDuration>,
    /// Never unloaded for room nor by `ttl`: started with the front door, and kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) keep: bool,
    /// Started with the front door rather than by the first request that names it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    preload: bool,
    /// Requests that name no `model` go to this recipe's model while it is production (with
    /// one model behind the front door, every request goes to it anyway).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    default: bool,
    /// `auto`: evicted or past its `ttl`, the model is put to sleep (vLLM's sleep mode:
    /// sparkctl starts it with `--enable-sleep-mode` in development mode) instead of
    /// stopped, and woken for its next request; `off` (the default): stopped.
    #[serde(default, skip_serializing_if = "Sleep::is_off")]
    pub(crate) sleep: Sleep,
    /// Requests its server answers at once; more wait at the front door and are let in
    /// turn by key, so one flooding client cannot starve another. Left out: read from the
    /// server's own flag (`--parallel`/`-np`, vLLM's `--max-num-seqs`, the sim's
    /// `--slots`); with none there, the door holds nothing back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slots: Option<u32>,
    /// Other names clients may ask for this model by; its server is sent its own name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) aliases: Vec<String>,
    /// Names that set request fields: a request naming one goes to this model with these
    /// fields set over its own (e.g. `chat_template_kwargs: {enable_thinking: false}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) presets: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_read_from_the_servers_own_flags() {
        let of = |a: &[&str]| super::slots_in(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(of(&["-m", "x.gguf", "--parallel", "2"]), Some(2));
        assert_eq!(of(&["-np", "4"]), Some(4));
        assert_eq!(of(&["--max-num-seqs=8"]), Some(8));
        assert_eq!(of(&["--slots", "0"]), None);
        assert_eq!(of(&["--port", "1"]), None);
    }
}

/// Its aliases' and presets' names: legal, none twice nor its own name, and a preset that
/// sets no `model` (where it goes is the recipe's).
fn names(out: &mut Report, r: &Recipe, s: &Serve) {
    let own = r.model.as_ref().and_then(|m| m.served_name.clone());
    let mut seen: Vec<&str> = own.iter().map(String::as_str).collect();
    let given = (s.aliases.iter().map(|a| ("serve.aliases", a)))
        .chain(s.presets.keys().map(|p| ("serve.presets", p)));
    for (key, name) in given {
        let legal = !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if !legal {
            out.bad(
                key,
                format!("`{name}` is no name a client can send"),
                "give a name without spaces, e.g. qwen-fast",
            );
        } else if seen.contains(&name.as_str()) {
            out.bad(
                key,
                format!("`{name}` is given twice (or is the model's own name)"),
                "give each alias and preset a name of its own",
            );
        }
        seen.push(name);
    }
    for (name, fields) in &s.presets {
        if fields.contains_key("model") {
            out.bad(
                "serve.presets",
                format!("preset `{name}` sets `model`"),
                "leave `model` out: a preset goes to the model of the recipe it is in",
            );
        }
    }
}

/// Whether an idle model sleeps rather than stops (`serve.sleep`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Sleep {
    #[default]
    Off,
    Auto,
}

impl Sleep {
    fn is_off(&self) -> bool {
        *self == Sleep::Off
    }
}

/// Whether `r`'s serve section chooses to serve several models: any key but `sleep`, which
/// a single model may set too.
pub(crate) fn chooses_several(r: &Recipe) -> bool {
    r.serve.as_ref().is_some_and(|s| {
        let alone = Serve {
            sleep: Sleep::Off,
            slots: None,
            aliases: Vec::new(),
            presets: BTreeMap::new(),
            ..s.clone()
        };
        alone != Serve::default()
    })
}

/// What a recipe that sleeps adds to its server's launch: vLLM's flag and development mode
/// (which opens the sleep routes; the front door refuses those routes to clients).
pub(crate) fn sleep_launch(r: &Recipe) -> (Vec<String>, Vec<(String, String)>) {
    let sleeps = r.serve.as_ref().is_some_and(|s| s.sleep == Sleep::Auto);
    if !sleeps || !matches!(r.engine, Engine::Vllm | Engine::Sim) {
        return (Vec::new(), Vec::new());
    }
    let flag = "--enable-sleep-mode";
    let args = match r.server.args.iter().any(|a| a == flag) {
        true => Vec::new(),
        false => vec![flag.to_string()],
    };
    let env = match r.server.env.contains_key(DEV_MODE) {
        true => Vec::new(),
        false => vec![(DEV_MODE.to_string(), "1".to_string())],
    };
    (args, env)
}

/// vLLM's development mode, which its sleep routes need.
const DEV_MODE: &str = "VLLM_SERVER_DEV_MODE";

impl Serve {
    /// Started with the front door: preloaded, or kept.
    pub(crate) fn eager(&self) -> bool {
        self.preload || self.keep
    }
}

/// Whether requests without `model` go to `r`'s model.
pub(crate) fn is_default(r: &Recipe) -> bool {
    r.serve.as_ref().is_some_and(|s| s.default)
}

/// `r`'s serve section, defaults when it has none; its slots read from the server's flags
/// when it gives none.
pub(crate) fn of(r: &Recipe) -> Serve {
    let mut s = r.serve.clone().unwrap_or_default();
    s.slots = s.slots.or_else(|| slots_in(&r.server.args));
    s
}

/// The requests at once a server's own flags give it (0, the sim's "no limit": none).
fn slots_in(args: &[String]) -> Option<u32> {
    const FLAGS: [&str; 4] = ["--parallel", "-np", "--max-num-seqs", "--slots"];
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        let value = match a.split_once('=') {
            Some((flag, v)) if FLAGS.contains(&flag) => Some(v),
            None if FLAGS.contains(&a.as_str()) => args.get(i + 1).map(String::as_str),
            _ => None,
        };
        if let Some(v) = value {
            found = v.trim().parse::<u32>().ok();
        }
    }
    found.filter(|n| *n > 0)
}

pub(super) fn check(out: &mut Report, r: &Recipe) {
    let Some(s) = &r.serve else { return };
    if s.sleep == Sleep::Auto && !matches!(r.engine, Engine::Vllm | Engine::Sim) {
        out.bad(
            "serve.sleep",
            format!("{} has no sleep mode the front door can drive", r.engine),
            match r.engine {
                Engine::LlamaServer => {
                    "llama-server sleeps on its own: put --sleep-idle-seconds N in server.args \
                     and drop serve.sleep"
                }
                _ => "drop serve.sleep: only vllm (and the sim) sleep here",
            },
        );
    }
    names(out, r, s);
    if s.slots == Some(0) {
        out.bad(
            "serve.slots",
            "0 slots would let no request in".to_string(),
            "give the requests its server answers at once (1 or more), or leave it out",
        );
    }
    if let Some(ttl) = s.ttl {
        if ttl.0 < MIN_TTL {
            out.bad(
                "serve.ttl",
                format!("a ttl of {ttl} unloads the model faster than it can serve"),
                "give 1s or more, e.g. 10m; leave it out to keep the model loaded",
            );
        }
        if s.keep {
            out.bad(
                "serve.ttl",
                "a kept model (`serve.keep: true`) is never unloaded, so its ttl would never \
                 apply"
                    .into(),
                "drop `ttl`, or `keep`",
            );
        }
    }
}
