//! Job recipes (`recipes/jobs/NAME.yaml`): a one-shot container run — quantize, train,
//! export, convert — as reviewed data. Loaded and checked like serving recipes: the same
//! YAML front door, the same diagnostics naming file, line and key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::recipe::{with_container_settings, PatchStep, Resources};
use crate::units::ByteSize;

with_container_settings! {
    /// One job recipe file.
    #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct JobRecipe {
        /// Must equal the file name without `.yaml`; what users type (`sparkctl run NAME`).
        pub(crate) name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(crate) description: Option<String>,
        /// Container image as written (a tag); the digest that runs comes from images.lock.
        pub(crate) image: String,
        /// Replaces the image's entrypoint (left out: the image's own, e.g. NGC's setup script).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) entrypoint: Vec<String>,
        /// The command, one argv entry each. sparkctl never builds a shell string; a recipe
        /// that wants a shell says so: `[bash, -c, "pip install … && python3 x.py"]`.
        pub(crate) argv: Vec<String>,
        /// Working directory inside the container.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(crate) workdir: Option<String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub(crate) env: BTreeMap<String, String>,
        /// Names of host variables passed through (HF_TOKEN); never printed or stored.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) env_from_host: Vec<String>,
        /// Mounted read-only; fingerprinted into the job's lineage.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) inputs: Vec<Input>,
        /// Mounted read-write, created (owned by the invoking user) before the start, verified
        /// and fingerprinted after it.
        pub(crate) outputs: Vec<Output>,
        /// Read-write mounts that are neither inputs nor results (a Hugging Face cache).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub(crate) caches: Vec<Input>,
    }
    then {
        // Left undescribed, as the job schema has always had them.
        gpus; ipc;
        /// `invoking-user` (default: outputs are never root-owned), `root` (an image that
        /// insists; outputs are given back to the invoking user afterwards) or `UID:GID`.
        user;
        /// Memory the job needs from the unified pool, in GB: servers stop to make room.
        memory_gb;
        /// A regex with two groups, done and total, matched against each log line
        /// (e.g. `step (\d+)/(\d+)`): a progress bar with an ETA.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(crate) progress: Option<String>,
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {
    /// Host path (`~` is expanded).
    pub(crate) path: String,
    /// Where it appears inside the container.
    pub(crate) mount: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Output {
    /// Host directory (`~` is expanded); created if missing.
    pub(crate) path: String,
    pub(crate) mount: String,
    /// What the job will write here: the free-disk check refuses before anything starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<ByteSize>,
    /// What must hold once the job ends, as patch expectations (`expect`, `expect-files`,
    /// `expect-safetensors`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_yaml_ng::with::singleton_map_recursive"
    )]
    #[schemars(with = "Vec<PatchStep>")]
    pub(crate) expect: Vec<PatchStep>,
}

/// Who the container runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RunAs {
    /// The invoking user (behind sudo, the sudo user).
    InvokingUser,
    /// Root inside the container; outputs are chowned back afterwards.
    Root,
    Id(u32, u32),
}

impl JobRecipe {
    pub(crate) fn resources(&self) -> Resources {
        Resources::of(self.gpus.as_ref(), self.ipc, self.shm_size, &self.ulimits)
    }

    pub(crate) fn run_as(&self) -> RunAs {
        match self.user.as_deref() {
            None | Some("invoking-user") => RunAs::InvokingUser,
            Some("root") | Some("0") | Some("0:0") => RunAs::Root,
            Some(other) => {
                let (u, g) = other.split_once(':').unwrap_or((other, other));
                RunAs::Id(u.parse().unwrap_or(0), g.parse().unwrap_or(0))
            }
        }
    }

    /// `UID:GID` the container runs as, and who owns the outputs afterwards (the invoking
    /// user: behind sudo, the sudo user).
    pub(crate) fn users(&self) -> Result<(String, crate::patch::owner::Owner)> {
        let owner = crate::patch::owner::resolve("invoking-user").map_err(Error::Failed)?;
        let user = match self.run_as() {
            RunAs::InvokingUser => owner.to_string(),
            RunAs::Root => "0:0".to_string(),
            RunAs::Id(u, g) => format!("{u}:{g}"),
        };
        Ok((user, owner))
    }

    /// sha256 of the recipe as written (canonical JSON): any change to what runs changes it.
    pub(crate) fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let canonical = serde_json::to_vec(self).expect("job recipes serialize");
        format!("sha256:{}", crate::units::hex(&Sha256::digest(&canonical)))
    }
}

/// A job recipe, loaded.
pub(crate) type LoadedJob = crate::recipe::Loaded<JobRecipe>;

/// A recipe's host path as the engine needs it: `~` expanded, and absolute (a relative
/// path in a bind would name a Docker volume instead of a directory).
pub(crate) fn host_path(path: &str) -> PathBuf {
    let p = PathBuf::from(crate::recipe::expand_home(path));
    std::path::absolute(&p).unwrap_or(p)
}

/// The JSON Schema of job recipes, for editors.
pub(crate) fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(JobRecipe)).expect("a schema is always JSON")
}
