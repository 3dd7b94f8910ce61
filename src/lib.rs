//! sparkctl: deploy, verify and roll back LLM inference servers on an NVIDIA DGX Spark.
//!
//! The binary is a thin shell over this library: `cli` parses and renders, the other
//! modules decide and act, one noun each.

pub mod adopt;
pub mod bench;
pub mod bisect;
pub mod captured;
pub mod cli;
pub mod context;
pub mod deploy;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod frontdoor;
pub mod history;
pub mod host;
pub mod images;
pub mod import;
pub mod job;
pub mod lock;
pub mod memory;
pub mod node;
pub mod nvidia;
pub mod openai;
pub mod patch;
pub mod places;
pub mod production;
pub mod prune;
pub mod recipe;
pub mod runtime;
pub mod secrets;
pub mod sim;
pub mod state;
pub mod stdio;
pub mod units;
pub mod yaml;

pub use error::{Error, Result};
