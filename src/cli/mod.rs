//! The command line: the global options, one variant per command, and dispatch. Each
//! command's file owns its flags (a clap `Args` struct), its `exec`, which turns them into
//! the library's options once, and its rendering; the terminal is `output`'s. Decisions
//! live in the library modules.

mod adopt;
mod bench;
mod bisect;
mod deploy;
mod doctor;
mod eval;
mod experiment;
mod frontdoor;
mod history;
mod images;
mod import;
mod init;
mod jobs;
mod keys;
mod man;
mod memory;
mod output;
mod patch;
mod prune;
mod recipes;
mod setup;
mod status;
mod upgrade;
mod usage;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::error::{Error, Result};
use crate::sim::SimConfig;
pub(crate) use output::Output;
use setup::{
    context, executor, in_context, init_tracing, load_recipes, lock_path, recipes_in, self_exe,
    server_executor, state_root, with_recipes,
};

/// Deploy, verify and roll back LLM inference servers on a DGX Spark.
#[derive(Debug, Parser)]
#[command(
    name = "sparkctl",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = crate::settings::help()
)]
pub(crate) struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Globals {
    /// Directory of recipes [default: ./recipes when it exists, else
    /// $XDG_CONFIG_HOME/sparkctl/recipes].
    #[arg(long, global = true, env = crate::settings::RECIPES, value_name = "DIR")]
    recipes: Option<PathBuf>,
    /// Where sparkctl keeps deployments and logs [default: $XDG_STATE_HOME/sparkctl].
    #[arg(long, global = true, env = crate::settings::STATE_DIR, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The image lock [default: images.lock beside the recipes dir].
    #[arg(long, global = true, env = crate::settings::LOCK, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Machine-readable JSON output: one document on stdout, progress on stderr.
    #[arg(long, global = true)]
    json: bool,
    /// No progress on stderr (steps, spinners, bars); results, warnings and errors stay.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// More log output on stderr (-v info, -vv debug); SPARKCTL_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Plan, pin-check, patch, start, health-check, benchmark, gate, then promote or roll back.
    Up(deploy::UpArgs),
    /// Start one recipe's server and wait until it serves (no benchmark, no promotion).
    Start(deploy::StartArgs),
    /// Make the previous production serve again.
    Rollback(deploy::RollbackArgs),
    /// What sparkctl runs: recipe, runtime, digest, port, uptime, health, production.
    Status(status::StatusArgs),
    /// Same as status.
    Ps(status::StatusArgs),
    /// Output of a deployment (kept after it exits).
    Logs(deploy::LogsArgs),
    /// Stop a deployment (its container and logs are kept).
    Down(deploy::DownArgs),
    /// Past runs; `history show RUN` for one.
    History(history::HistoryArgs),
    /// The built-in benchmark against a running recipe or a URL.
    #[command(args_conflicts_with_subcommands = true)]
    Bench(bench::BenchArgs),
    /// Follow a recipe's image tag: today's digest, if new, fetched, kept and judged by `up`
    /// as the candidate; the pin moves only when it is promoted. Unchanged: nothing runs.
    Upgrade(upgrade::UpgradeArgs),
    /// Ask a running recipe or a URL the evaluation sets' items and score each answer;
    /// `--against` pairs them with another server's answers to the same items.
    Eval(eval::EvalArgs),
    /// Which digest of a recipe's image brought a regression: each digest between a good and a
    /// bad one started beside production, benchmarked until it is judged, binary-searched.
    Bisect(bisect::BisectArgs),
    /// Run a recipe's variants side by side beside production (`--vary KEY=V1|V2`, `--with`,
    /// `--request`): each started on its own port, benchmarked with the base's suite and
    /// gates, stopped; a table, and `--save NAME` writes the chosen one as a recipe.
    Try(experiment::TryArgs),
    /// Apply a recipe's model-directory patch steps.
    Patch(patch::PatchArgs),
    /// Pin, audit, pull, keep and compare images by sha256 digest; each recipe's history.
    Images(images::ImagesArgs),
    /// List, show, validate recipes; print their JSON Schema.
    Recipes(recipes::RecipesArgs),
    /// The front door: the process that owns the production port and switches between
    /// deployments without dropping a request.
    Frontdoor(frontdoor::FrontdoorArgs),
    /// The front door's keys, one per client: `keys add NAME [--models A,B] [--admin]`
    /// prints a key once; `keys list`, `keys revoke NAME`, `keys rotate NAME [--overlap D]`.
    Keys(keys::KeysArgs),
    /// What each key used at the front door: requests, errors, refusals past a limit,
    /// tokens in and out, time waited (`--since 24h`, `--key NAME`).
    Usage(usage::UsageArgs),
    /// What each recipe measurably held at its starts (the memory plan counts it when it is
    /// more than the recipe declares); `memory forget NAME` drops a recipe's figures.
    Memory(memory::MemoryArgs),
    /// Remove old exited containers and old image digests (all but the newest few per recipe,
    /// and the retained digests); lists them unless --yes.
    Prune(prune::PruneArgs),
    /// Run a one-shot job (recipes/jobs/JOB.yaml) detached, and follow it (Ctrl-C detaches).
    Run(jobs::RunArgs),
    /// Job runs, newest first: state, how each ended, outputs and their fingerprints.
    Jobs(jobs::JobsArgs),
    /// Stop a running job (its container, logs and partial outputs are kept).
    Stop(jobs::StopArgs),
    /// Check the machine (Docker Engine, NVIDIA runtime, GPU, memory, state dir, front door)
    /// and the recipes in use: production, its fallbacks, what runs. Name recipes to check
    /// those deeply instead (image, GPUs, model dir, donors, port, memory, nodes).
    Doctor(doctor::DoctorArgs),
    /// Lay out the config dir (recipes, suites, jobs, patches, images.lock) with the shipped
    /// examples, so sparkctl works from any directory; files already there are kept.
    Init(init::InitArgs),
    /// Write a recipe from what already runs: a host process (--pid, --port), a container
    /// (--container), or a pasted `docker run` or command line. Nothing is started or stopped.
    Import(import::ImportArgs),
    /// Hand the production port from the server NAME was imported from to the front door,
    /// serving NAME: blue/green when memory allows, else a swap with requests held.
    Adopt(adopt::AdoptArgs),
    /// Run the simulated OpenAI-compatible engine (demos and tests; no GPU needed).
    Sim(SimConfig),
    /// Print shell completions.
    Completions(man::CompletionsArgs),
    /// Print the man page (roff), generated from these definitions: `sparkctl man > sparkctl.1`.
    #[command(hide = true)]
    Man(man::ManArgs),
}

/// Each command's own `exec`: its flags become the library's options there, once.
fn dispatch(cli: Cli) -> Result<()> {
    let out = Output::new(cli.globals.json, cli.globals.quiet);
    let g = &cli.globals;
    match cli.command {
        Command::Up(args) => args.exec(g, &out),
        Command::Start(args) => args.exec(g, &out),
        Command::Rollback(args) => args.exec(g, &out),
        Command::Status(args) | Command::Ps(args) => args.exec(g, &out),
        Command::Logs(args) => args.exec(g, &out),
        Command::Down(args) => args.exec(g, &out),
        Command::History(args) => args.exec(g, &out),
        Command::Bench(args) => args.exec(g, &out),
        Command::Eval(args) => args.exec(g, &out),
        Command::Upgrade(args) => args.exec(g, &out),
        Command::Bisect(args) => args.exec(g, &out),
        Command::Try(args) => args.exec(g, &out),
        Command::Patch(args) => args.exec(g, &out),
        Command::Images(args) => args.exec(g, &out),
        Command::Recipes(args) => args.exec(g, &out),
        Command::Frontdoor(args) => args.exec(g, &out),
        Command::Prune(args) => args.exec(g, &out),
        Command::Memory(args) => args.exec(g, &out),
        Command::Keys(args) => args.exec(g, &out),
        Command::Usage(args) => args.exec(g, &out),
        Command::Run(args) => args.exec(g, &out),
        Command::Jobs(args) => args.exec(g, &out),
        Command::Stop(args) => args.exec(g, &out),
        Command::Doctor(args) => args.exec(g, &out),
        Command::Init(args) => args.exec(g, &out),
        Command::Import(args) => args.exec(g, &out),
        Command::Adopt(args) => args.exec(g, &out),
        Command::Sim(config) => executor()?.block_on(crate::sim::serve(config)),
        Command::Completions(args) => args.exec(&out),
        Command::Man(args) => args.exec(&out),
    }
}

/// What a shell reports for a command that SIGPIPE ended: `sparkctl … | head -1`.
pub(crate) const BROKEN_PIPE_EXIT: i32 = 128 + libc::SIGPIPE;

/// Parses the command line, runs it, prints any error; returns the process exit code.
pub fn main() -> i32 {
    output::exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    init_tracing(cli.globals.verbose);
    let json = cli.globals.json;
    match dispatch(cli) {
        Ok(()) => 0,
        // The reader went away (`| head -1`): nobody is left to tell.
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            BROKEN_PIPE_EXIT
        }
        Err(err) => {
            output::print_error(&err, json);
            err.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
