//! Recipes: everything needed to serve one backend, as reviewed data.
//!
//! The types here are the recipe file format. `load` turns files into them with
//! diagnostics that name file, line and key; `resolve` fills engine defaults and
//! builds the exact command or container a recipe would run.

mod check;
mod diag;
mod gpus;
mod image_ref;
mod launcher;
pub(crate) mod live;
mod load;
pub(crate) mod nodes;
pub(crate) mod notify;
mod resolve;
pub(crate) mod rollout;
pub(crate) mod serve;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::units::{ByteSize, HumanDuration};

pub(crate) use check::{check_name, env_name_ok, inside, ULIMITS};
pub(crate) use diag::suggest as did_you_mean;
pub(crate) use diag::{diag_at, from_yaml_error, Report};
pub(crate) use image_ref::problem as image_problem;
pub use load::{load_dir, parse_recipe};
pub(crate) use load::{load_file, Loaded, LoadedRecipe, RecipeSet};
pub(crate) use resolve::{
    expand_home, run_tail, shell_quote, ContainerLaunch, Launch, Resolved, Resources,
};

pub(crate) use crate::bench::suite::DEFAULT_SUITE;
pub(crate) use crate::engine::Runtime;

/// Words joined for display, each quoted for a POSIX shell where needed.
pub(crate) fn resolve_shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One recipe file (`recipes/NAME.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Must equal the file name without `.yaml`; it is what users type (`sparkctl up NAME`).
    pub(crate) name: String,
    /// One line for `recipes list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub(crate) engine: Engine,
    /// How the server runs; defaults to the engine's usual runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) runtime: Option<Runtime>,
    /// Container image as written (a tag); the digest that runs comes from images.lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<String>,
    /// Host binary for the process runtime (`~` is expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) binary: Option<String>,
    /// For the process runtime, instead of `binary`: a venv's directory (its `bin/python`
    /// runs) or a Python interpreter, which runs the engine's server module —
    /// `python -m vllm.entrypoints.openai.api_server` (vllm), `python -m
    /// sglang.launch_server` (sglang) — with the recipe's args (`~` is expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) python: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<Model>,
    pub(crate) server: Server,
    #[serde(default)]
    pub(crate) health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bench: Option<Bench>,
    /// Nodes of a multi-node group (vLLM tensor parallel over Ray); the first is the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nodes: Option<nodes::Nodes>,
    /// The recipe the front door switches to when this one, as production, cannot be
    /// brought back (e.g. `llama-server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fallback: Option<String>,
    /// How the front door judges it as production on what it answers: live gates, golden
    /// prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live: Option<live::Live>,
    /// Who is told when `sparkctl upgrade` of it ends: a webhook and/or a command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) notify: Option<notify::Notify>,
    /// How the front door serves its model beside other models on the one port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) serve: Option<serve::Serve>,
    /// How `up` lets the candidate meet live traffic (shadow, canary) before it takes it all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rollout: Option<rollout::Rollout>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Model {
    /// Model directory or file on the host (`~` is expanded).
    pub(crate) path: String,
    /// Where the model is mounted inside the container (docker runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mount: Option<String>,
    /// Name the server answers to in `/v1/models` (`--served-model-name`, `--alias`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) served_name: Option<String>,
    /// Model size in bytes of weights, for roofline context in benchmarks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) weights: Option<ByteSize>,
    /// Weights read per generated token when fewer than all are (MoE: the active experts),
    /// for the roofline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) active_weights: Option<ByteSize>,
    /// KV-cache bytes per token of context (2 × layers × KV heads × head dim × bytes per
    /// value), for the roofline at depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv_bytes_per_token: Option<ByteSize>,
    /// Steps that make the directory servable, applied in order by `sparkctl patch`.
    // Each step is a one-key map (`- copy-from: {...}`), not a YAML tag: that is what
    // people write and what editors complete from the JSON Schema.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_yaml_ng::with::singleton_map_recursive"
    )]
    #[schemars(with = "Vec<PatchStep>")]
    pub(crate) patches: Vec<PatchStep>,
    /// The job (`recipes/jobs/NAME.yaml`) that writes this model: `up` refuses the model
    /// when that job's newest run failed or is older than its inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) produced_by: Option<String>,
}

/// One model-directory patch step. Paths are relative to the model dir and may not leave it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum PatchStep {
    /// Wrap a text-only config.json (`qwen3_5_text`) into the VL form older transformers load.
    WrapVlConfig {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        architecture: Option<String>,
    },
    /// Generic JSON edits at JSON pointers.
    JsonEdit { file: String, ops: Vec<JsonOp> },
    /// Copy files from a donor model (read-only); refuses if the donor lacks any.
    CopyFrom { donor: String, files: Vec<String> },
    /// Write a file shipped in patches/.
    WriteFile {
        path: String,
        from: String,
        #[serde(default, rename = "if-missing")]
        if_missing: bool,
    },
    /// Give files written by containers as root back to a user.
    Chown {
        /// `invoking-user` or `UID:GID`.
        to: String,
    },
    /// A JSON value that must hold before serving.
    Expect {
        file: String,
        pointer: String,
        equals: serde_json::Value,
    },
    /// Files that must exist before serving.
    ExpectFiles { files: Vec<String> },
    /// Every safetensors file's header parses and the tensor count is above zero.
    ExpectSafetensors {},
}

impl PatchStep {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            PatchStep::WrapVlConfig { .. } => "wrap-vl-config",
            PatchStep::JsonEdit { .. } => "json-edit",
            PatchStep::CopyFrom { .. } => "copy-from",
            PatchStep::WriteFile { .. } => "write-file",
            PatchStep::Chown { .. } => "chown",
            PatchStep::Expect { .. } => "expect",
            PatchStep::ExpectFiles { .. } => "expect-files",
            PatchStep::ExpectSafetensors {} => "expect-safetensors",
        }
    }
}

/// One JSON edit: exactly one of set / rename / delete.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum JsonOp {
    Set {
        pointer: String,
        value: serde_json::Value,
    },
    /// Replace a string value `from` with `to` at the pointer (a class rename).
    Rename {
        pointer: String,
        from: String,
        to: String,
    },
    Delete {
        pointer: String,
    },
}

/// Declares a recipe struct with the container settings a server and a job take alike —
/// `gpus`, `ipc`, `shm_size`, `ulimits`, `user`, `memory_gb` — between the fields written
/// before and after them (declaration order is the order of the JSON and of the schema).
/// `gpus`, `ipc`, `user` and `memory_gb` take their docs from the struct (what the last two
/// allow differs; a job's schema has never described the first two). One
/// declaration keeps the two from drifting apart; serde's `flatten` would cost every
/// diagnostic its line number and its list of valid keys.
macro_rules! with_container_settings {
    (
        $(#[$attr:meta])*
        pub(crate) struct $name:ident {
            $($(#[$a:meta])* pub(crate) $before:ident: $bt:ty,)*
        }
        then {
            $(#[$gpus:meta])* gpus;
            $(#[$ipc:meta])* ipc;
            $(#[$user:meta])* user;
            $(#[$memory:meta])* memory_gb;
            $($(#[$b:meta])* pub(crate) $after:ident: $at:ty,)*
        }
    ) => {
        $(#[$attr])*
        pub(crate) struct $name {
            $($(#[$a])* pub(crate) $before: $bt,)*
            $(#[$gpus])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub(crate) gpus: Option<$crate::recipe::Gpus>,
            $(#[$ipc])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub(crate) ipc: Option<$crate::recipe::Ipc>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub(crate) shm_size: Option<$crate::units::ByteSize>,
            /// Ulimits by name; -1 means unlimited.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub(crate) ulimits: BTreeMap<String, i64>,
            $(#[$user])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub(crate) user: Option<String>,
            $(#[$memory])*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub(crate) memory_gb: Option<f64>,
            $($(#[$b])* pub(crate) $after: $at,)*
        }
    };
}
pub(crate) use with_container_settings;

with_container_settings! {
    #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Server {
        /// Port on the host where the server answers.
        pub(crate) port: u16,
        /// Host address to bind; loopback unless the recipe opens it up.
        #[serde(default = "default_host")]
        pub(crate) host: String,
        /// Extra server arguments, one argv entry each (never a shell string).
        #[serde(default)]
        pub(crate) args: Vec<String>,
        /// Environment for the server.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub(crate) env: BTreeMap<String, String>,
        /// Names of host variables passed through (secrets such as HF_TOKEN); never printed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) env_from_host: Vec<String>,
    }
    then {
        /// GPU request: `all`, a count, or `none`.
        gpus;
        /// `host` shares the host IPC namespace (vLLM/SGLang need it for shared memory).
        ipc;
        /// `UID[:GID]` the container runs as.
        user;
        /// Memory the deployment needs from the 128 GB unified pool, in GB.
        memory_gb;
        /// Port the server listens on inside the container; defaults to the engine's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(crate) container_port: Option<u16>,
        /// Bind mounts beside the model's (a Hugging Face cache, a config dir); docker only.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) mounts: Vec<ExtraMount>,
    }
}

/// One more bind mount of a docker recipe: what `docker run -v HOST:CONTAINER[:ro]` asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtraMount {
    /// Host path (`~` is expanded).
    pub(crate) host: String,
    /// Where it appears inside the container (absolute).
    pub(crate) container: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) read_only: bool,
}

fn default_host() -> String {
    "127.0.0.1".into()
}

#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged)]
pub(crate) enum Gpus {
    All,
    None,
    Count(u32),
}

impl Serialize for Gpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Gpus::All => s.serialize_str("all"),
            Gpus::None => s.serialize_str("none"),
            Gpus::Count(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Gpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Scalars arrive as text from YAML; accept `all`, `none` or a whole number.
        let text = String::deserialize(d)?;
        match text.as_str() {
            "all" => Ok(Gpus::All),
            "none" => Ok(Gpus::None),
            n => n.parse().map(Gpus::Count).map_err(|_| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a GPU request; use `all`, `none` or a count"
                ))
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Ipc {
    Host,
    Private,
    Shareable,
}

impl Ipc {
    /// As `docker run --ipc` and the Engine API's IpcMode take it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ipc::Host => "host",
            Ipc::Private => "private",
            Ipc::Shareable => "shareable",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Health {
    /// Readiness path; defaults to the engine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    /// How long loading may take before the start counts as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<HumanDuration>,
    /// How long the one-token chat completion may take once health says ok; no answer by
    /// then means generation is wedged and the start fails. Shorter than `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completion_timeout: Option<HumanDuration>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Bench {
    /// Suite name (built in or recipes/suites/NAME.yaml) or a path.
    #[serde(default = "default_suite")]
    pub(crate) suite: String,
    /// Gate name → rule, e.g. `thinking_leak: "== 0%"`, `ttft_p50_ms: "<= 1500"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) gates: BTreeMap<String, String>,
    /// Objectives for goodput: `{ttft: 500ms, tpot: 50ms}` (e2el too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slo: Option<crate::bench::slo::Slo>,
    /// Load levels, a sweep, context depths and repeats, run beside the suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) load: Option<crate::bench::load::LoadSpec>,
    /// Peak memory bandwidth of the device that serves this recipe, GB/s: the roofline's
    /// bound, over the host's (`SPARKCTL_BANDWIDTH_GBPS`) and the GPU's known figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bandwidth_gbps: Option<f64>,
    /// Evaluation sets asked after the suite, their answers checked item by item: built in
    /// (`arithmetic`, `json-shape`, `tool-calls`, `instructions`), `recipes/evals/NAME.yaml`,
    /// or a path. What the `eval_accuracy` gate judges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) eval: Vec<String>,
}

fn default_suite() -> String {
    DEFAULT_SUITE.into()
}

/// The JSON Schema of the recipe format, for editors (yaml-language-server and the like).
pub(crate) fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Recipe);
    serde_json::to_value(schema).expect("a schema is always JSON")
}

impl std::fmt::Display for PatchStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchStep::WrapVlConfig { model_type, architecture } => write!(
                f,
                "wrap-vl-config: config.json → model_type {}, architectures [{}], original under text_config",
                model_type.as_deref().unwrap_or("qwen3_5"),
                architecture.as_deref().unwrap_or("Qwen3_5ForConditionalGeneration")
            ),
            PatchStep::JsonEdit { file, ops } => {
                write!(f, "json-edit {file}:")?;
                for op in ops {
                    match op {
                        JsonOp::Set { pointer, value } => write!(f, " set {pointer} = {value};")?,
                        JsonOp::Rename { pointer, from, to } => write!(f, " {pointer}: {from} → {to};")?,
                        JsonOp::Delete { pointer } => write!(f, " delete {pointer};")?,
                    }
                }
                Ok(())
            }
            PatchStep::CopyFrom { donor, files } => {
                write!(f, "copy-from {donor}: {}", files.join(", "))
            }
            PatchStep::WriteFile { path, from, if_missing } => write!(
                f,
                "write-file {path} from {from}{}",
                if *if_missing { " (only if missing)" } else { "" }
            ),
            PatchStep::Chown { to } => write!(f, "chown → {to} (helper container when not root)"),
            PatchStep::Expect { file, pointer, equals } => {
                write!(f, "expect {file} {pointer} == {equals}")
            }
            PatchStep::ExpectFiles { files } => write!(f, "expect files: {}", files.join(", ")),
            PatchStep::ExpectSafetensors {} => {
                write!(f, "expect safetensors headers parse with > 0 tensors")
            }
        }
    }
}
