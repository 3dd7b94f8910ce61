//! The integration tests, one binary: each former `tests/NAME.rs` is the module `NAME` here
//! (tests/it/NAME.rs), its tests named `NAME::test`. One binary links the crate once where
//! 41 linked it 41 times. `.ci/lib.sh` (run_test_binaries) still runs each module in a
//! process of its own (`it --exact` with the module's tests): the modules were written for
//! that, sharing one per-process block of ports, one sim image build, one second engine.

mod jobs_support;
mod support;

mod adopt;
mod agents;
mod bench;
mod bench_load;
mod bench_options;
mod bisect;
mod capture_replay;
mod damaged_state;
mod doctor;
mod door_guard;
mod error_kinds;
mod eval;
mod experiment;
mod first_run;
mod frontdoor;
mod frontdoor_faults;
mod fuzz_parsers;
mod gpu_plans;
mod images;
mod import;
mod job_lineage;
mod job_resources;
mod jobs;
mod keys;
mod layout;
mod live_page;
mod live_quality;
mod llama_server;
mod man_page;
mod memory;
mod models;
mod models_pressure;
mod models_sleep;
mod nodes;
mod nodes_checks;
mod nodes_sim;
mod pagecache;
mod patch;
mod progress;
mod readiness;
mod recipes_cli;
mod recipes_doc;
mod reliability;
mod rollout;
mod runtimes;
mod security;
mod sim_engine;
mod sim_image;
mod switch_matrix;
mod up;
mod upgrade;
mod upgrade_production;
mod vllm;
