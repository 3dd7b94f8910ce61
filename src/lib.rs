//! sparkctl: deploy, verify and roll back LLM inference servers on an NVIDIA DGX Spark.
//!
//! The binary is a thin shell over this library: `cli` parses and renders, the other
//! modules decide and act, one noun each.
//!
//! Everything is crate-private except the binary's entry point and [`testkit`], so rustc's
//! dead-code lint sees the whole crate (`unreachable_pub` keeps a stray `pub` from hiding
//! an unused item; tests/it/layout.rs keeps this surface to these two).
#![warn(unreachable_pub)]

mod adopt;
mod agents;
mod bench;
mod bisect;
mod capture_file;
mod cli;
mod context;
mod deploy;
mod doctor;
mod engine;
mod error;
mod eval;
mod experiment;
mod exposition;
mod frontdoor;
mod history;
mod host;
mod images;
mod import;
mod job;
mod keys;
mod lock;
mod memory;
mod models;
mod node;
mod nvidia;
mod openai;
mod pagecache;
mod patch;
mod places;
mod production;
mod progress;
mod prune;
mod recipe;
mod rollout;
mod runtime;
mod secrets;
mod server;
mod settings;
mod sim;
mod starts;
mod state;
mod stdio;
mod units;
mod upgrade;
mod usage;
mod yaml;

/// The whole command line: parse, run, render; the exit code to end with.
pub use cli::main;

/// The parts the integration tests and the benches drive below the command line, and
/// nothing else: not an API for other programs. An item belongs here only while a test or
/// bench uses it; the types these take and return are public but not re-exported.
pub mod testkit {
    pub use crate::bench::client::{stream, Clients};
    pub use crate::bench::sample::Sample;
    pub use crate::bench::{http_client, load, suite::Suite};
    pub use crate::engine::{Engine, Runtime};
    pub use crate::lock::Lock;
    pub use crate::patch::{fingerprint::fingerprint, safetensors::write_fixture};
    pub use crate::production::Upstream;
    pub use crate::recipe::{load_dir, parse_recipe};
    pub use crate::runtime::docker::container_spec;
    pub use crate::runtime::{ready, Deployment, Event, RunState, StartSpec, Started};
    pub use crate::server::live::Live;
    pub use crate::server::quality::{Answer, Delta};
    pub use crate::yaml::from_slice;
}
