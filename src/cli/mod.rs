//! The command line: clap definitions and dispatch. Rendering lives in `output` and
//! `recipes`; decisions live in the library modules.

mod adopt;
mod bench;
mod bisect;
mod deploy;
mod frontdoor;
mod images;
mod import;
mod init;
mod jobs;
mod man;
mod output;
mod patch;
mod prune;
mod recipes;
mod setup;

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use crate::error::{Error, Result};
use crate::sim::SimConfig;
pub(crate) use output::Output;
use setup::{
    context, in_context, init_tracing, load_recipes, lock_path, recipes_in, runtime, self_exe,
    server_runtime, state_root, with_recipes,
};

/// Deploy, verify and roll back LLM inference servers on a DGX Spark.
#[derive(Debug, Parser)]
#[command(
    name = "sparkctl",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) globals: Globals,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Globals {
    /// Directory of recipes [default: ./recipes when it exists, else
    /// $XDG_CONFIG_HOME/sparkctl/recipes].
    #[arg(long, global = true, env = "SPARKCTL_RECIPES", value_name = "DIR")]
    pub(crate) recipes: Option<PathBuf>,
    /// Where sparkctl keeps deployments and logs [default: $XDG_STATE_HOME/sparkctl].
    #[arg(long, global = true, env = "SPARKCTL_STATE_DIR", value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// The image lock [default: images.lock beside the recipes dir].
    #[arg(long, global = true, env = "SPARKCTL_LOCK", value_name = "FILE")]
    pub(crate) lock: Option<PathBuf>,
    /// Machine-readable JSON output (read commands).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More log output on stderr (-v info, -vv debug); SPARKCTL_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Plan, pin-check, patch, start, health-check, benchmark, gate, then promote or roll back.
    Up {
        name: String,
        /// Print the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Stop after the gates; do not serve on the production port.
        #[arg(long)]
        no_promote: bool,
        /// Do not ask before stopping the production backend.
        #[arg(long)]
        yes: bool,
        /// Run an image that has no digest in images.lock (recorded in the run).
        #[arg(long)]
        allow_unpinned: bool,
    },
    /// Start one recipe's server and wait until it serves (no benchmark, no promotion).
    Start {
        name: String,
        /// Print the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Give up waiting for readiness after this long [default: the recipe's health.timeout].
        #[arg(long, value_name = "DURATION")]
        timeout: Option<crate::units::HumanDuration>,
        /// Run an image that has no digest in images.lock (recorded on the container).
        #[arg(long)]
        allow_unpinned: bool,
    },
    /// Make the previous production serve again.
    Rollback {
        /// Roll back to this recipe instead (e.g. the llama-server one).
        #[arg(long, value_name = "NAME")]
        to: Option<String>,
        #[arg(long)]
        dry_run: bool,
    },
    /// What sparkctl runs: recipe, runtime, digest, port, uptime, health, production.
    Status,
    /// Same as status.
    Ps,
    /// Output of a deployment (kept after it exits).
    Logs {
        name: String,
        #[arg(short, long)]
        follow: bool,
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// A multi-node recipe's containers on this node (its name in the recipe's nodes:).
        #[arg(long, value_name = "NODE")]
        node: Option<String>,
    },
    /// Stop a deployment (its container and logs are kept).
    Down {
        name: String,
        #[arg(long)]
        dry_run: bool,
        /// Stop it even when it serves production (the production port then answers 503).
        #[arg(long)]
        force: bool,
    },
    /// Past runs; `history show RUN` for one.
    History {
        #[command(subcommand)]
        show: Option<HistoryCommand>,
    },
    /// The built-in benchmark against a running recipe or a URL.
    #[command(args_conflicts_with_subcommands = true)]
    Bench(bench::BenchArgs),
    /// Which digest of a recipe's image brought a regression: each digest between a good and a
    /// bad one started beside production, benchmarked until it is judged, binary-searched.
    Bisect(bisect::BisectArgs),
    /// Apply a recipe's model-directory patch steps.
    Patch {
        name: String,
        /// Show the diff and the steps; change nothing.
        #[arg(long, conflicts_with = "revert")]
        dry_run: bool,
        /// Restore the originals byte for byte.
        #[arg(long)]
        revert: bool,
    },
    /// Pin, audit, pull, keep and compare images by sha256 digest; each recipe's history.
    Images {
        #[command(subcommand)]
        command: images::ImagesCommand,
    },
    /// List, show, validate recipes; print their JSON Schema.
    Recipes {
        #[command(subcommand)]
        command: RecipesCommand,
    },
    /// The front door: the process that owns the production port and switches between
    /// deployments without dropping a request.
    Frontdoor {
        #[command(subcommand)]
        command: frontdoor::FrontdoorCommand,
    },
    /// Remove old exited containers and old image digests (all but the newest few per recipe,
    /// and the retained digests); lists them unless --yes.
    Prune {
        /// Exited containers to keep per recipe [default: SPARKCTL_KEEP_EXITED, else 5].
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Newest image digests to keep per recipe [default: SPARKCTL_KEEP_IMAGES, else 3].
        #[arg(long, value_name = "N")]
        keep_images: Option<usize>,
        /// Remove them (without it, only list what would go).
        #[arg(long)]
        yes: bool,
    },
    /// Run a one-shot job (recipes/jobs/JOB.yaml) detached, and follow it (Ctrl-C detaches).
    Run {
        name: String,
        /// Print the plan (image, user, memory, disk, command) and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Start it and return at once.
        #[arg(long)]
        detach: bool,
        /// Do not ask before stopping the production backend to make room.
        #[arg(long)]
        yes: bool,
        /// Run an image that has no digest in images.lock (recorded in the run).
        #[arg(long)]
        allow_unpinned: bool,
    },
    /// Job runs, newest first: state, how each ended, outputs and their fingerprints.
    Jobs,
    /// Stop a running job (its container, logs and partial outputs are kept).
    Stop {
        name: String,
        /// Time between SIGTERM and SIGKILL.
        #[arg(long, value_name = "DURATION", default_value = "10s")]
        grace: crate::units::HumanDuration,
        /// Say what would be stopped; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Check the machine (Docker Engine, NVIDIA runtime, GPU, memory, state dir, front door)
    /// and the recipes in use: production, its fallbacks, what runs. Name recipes to check
    /// those deeply instead (image, GPUs, model dir, donors, port, memory, nodes).
    Doctor {
        /// Recipes to check, in use or not.
        names: Vec<String>,
    },
    /// Lay out the config dir (recipes, suites, jobs, patches, images.lock) with the shipped
    /// examples, so sparkctl works from any directory; files already there are kept.
    Init {
        /// Where [default: $XDG_CONFIG_HOME/sparkctl, else ~/.config/sparkctl].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Write a recipe from what already runs: a host process (--pid, --port), a container
    /// (--container), or a pasted `docker run` or command line. Nothing is started or stopped.
    Import(import::ImportArgs),
    /// Hand the production port from the server NAME was imported from to the front door,
    /// serving NAME: blue/green when memory allows, else a swap with requests held.
    Adopt {
        name: String,
        /// Stop the foreign server without asking.
        #[arg(long)]
        yes: bool,
        /// Say how it would go; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Run an image that has no digest in images.lock.
        #[arg(long)]
        allow_unpinned: bool,
    },
    /// Run the simulated OpenAI-compatible engine (demos and tests; no GPU needed).
    Sim(SimConfig),
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), generated from these definitions: `sparkctl man > sparkctl.1`.
    #[command(hide = true)]
    Man {
        /// Write a page for every command into DIR instead (sparkctl.1, sparkctl-up.1, …).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum HistoryCommand {
    Show { run: String },
}

#[derive(Debug, Subcommand)]
pub(crate) enum RecipesCommand {
    /// One line per recipe.
    List,
    /// The fully resolved recipe and the exact container or command it would run.
    Show { name: String },
    /// Check recipes (all in the directory, or the names/files given).
    Validate { targets: Vec<String> },
    /// The JSON Schema of the recipe format, for editors.
    Schema {
        /// The schema of job recipes (recipes/jobs/*.yaml) instead.
        #[arg(long)]
        job: bool,
    },
}

async fn doctor(cli: &Globals, names: &[String], out: &Output) -> Result<()> {
    let ctx = context(cli).await?;
    let recipes = load_recipes(cli, out)?;
    let scope = match names {
        [] => crate::doctor::Scope::InUse,
        names => crate::doctor::Scope::Named(names),
    };
    let checks = crate::doctor::run(&ctx, &recipes, scope).await?;
    if out.json {
        out.print_json(&checks);
    } else {
        let mut t = out.table();
        for c in &checks {
            t.add_row(vec![c.verdict.mark(), &c.name, &c.detail]);
        }
        out.print_table(&t);
    }
    crate::doctor::outcome(&checks)
}

fn dispatch(cli: Cli) -> Result<()> {
    let out = Output::new(cli.globals.json);
    let g = &cli.globals;
    match cli.command {
        Command::Recipes { command } => recipes::run(&g.recipes_dir(), command, &out),
        Command::Init { dir } => init::run(dir, &g.recipes_dir(), &out),
        Command::Adopt {
            name,
            yes,
            dry_run,
            allow_unpinned,
        } => with_recipes(g, &out, async |ctx, recipes| {
            let args = adopt::AdoptArgs {
                yes,
                dry_run,
                allow_unpinned,
            };
            adopt::run(ctx, recipes, &name, args, &out).await
        }),
        Command::Import(args) => runtime()?.block_on(async {
            let state = crate::state::StateDir::open(&state_root(g))?;
            import::run(g.recipes_dir().path, lock_path(g), &state, args, &out).await
        }),
        Command::Sim(cfg) => runtime()?.block_on(crate::sim::serve(cfg)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "sparkctl", &mut out.generated());
            Ok(())
        }
        Command::Man { dir } => man::run(dir, &out),
        cmd @ (Command::Up { .. }
        | Command::Rollback { .. }
        | Command::History { .. }
        | Command::Start { .. }
        | Command::Status
        | Command::Ps
        | Command::Logs { .. }
        | Command::Down { .. }) => serving(g, cmd, &out),
        Command::Doctor { names } => runtime()?.block_on(doctor(g, &names, &out)),
        cmd @ (Command::Run { .. } | Command::Jobs | Command::Stop { .. }) => {
            job_command(g, cmd, &out)
        }
        Command::Frontdoor { command } => {
            let rt = if matches!(command, frontdoor::FrontdoorCommand::Serve { .. }) {
                server_runtime()?
            } else {
                runtime()?
            };
            rt.block_on(async {
                frontdoor::run(context(g).await?, g.recipes_dir().path, command, &out).await
            })
        }
        Command::Prune {
            keep,
            keep_images,
            yes,
        } => with_recipes(g, &out, async |ctx, recipes| {
            let args = prune::Args {
                keep,
                keep_images,
                yes,
            };
            prune::run(ctx, recipes, args, &out).await
        }),
        Command::Bench(args) => match args.compare {
            Some(bench::BenchCommand::Compare { results, svg, html }) => {
                bench::compare(&results, svg.as_deref(), html.as_deref(), &out)
            }
            None => with_recipes(g, &out, async |ctx, recipes| {
                bench::run(ctx, recipes, args, &out).await
            }),
        },
        Command::Bisect(args) => with_recipes(g, &out, async |ctx, recipes| {
            bisect::run(ctx, recipes, args, &out).await
        }),
        Command::Patch {
            name,
            dry_run,
            revert,
        } => with_recipes(g, &out, async |ctx, recipes| {
            let args = patch::Args { dry_run, revert };
            patch::run(recipes, &ctx.state, &ctx.runtimes, &name, args, &out).await
        }),
        Command::Images { command } => runtime()?.block_on(async {
            let recipes = load_recipes(g, &out)?;
            let docker = crate::runtime::docker::connect().await?;
            let state = crate::state::StateDir::open(&state_root(g))?;
            let at = images::At {
                recipes: &recipes,
                lock_path: &lock_path(g),
                docker: &docker,
                state: &state,
            };
            images::run(&at, command, &out).await
        }),
    }
}

/// The commands that run, watch and stop servers.
fn serving(g: &Globals, command: Command, out: &Output) -> Result<()> {
    match command {
        Command::Up {
            name,
            dry_run,
            no_promote,
            yes,
            allow_unpinned,
        } => {
            let args = deploy::UpArgs {
                dry_run,
                no_promote,
                yes,
                allow_unpinned,
            };
            with_recipes(g, out, async |ctx, recipes| {
                deploy::up(ctx, recipes, &name, args, out).await
            })
        }
        Command::Rollback { to, dry_run } => with_recipes(g, out, async |ctx, recipes| {
            deploy::rollback(ctx, recipes, to.as_deref(), dry_run, out).await
        }),
        Command::History { show } => {
            let run = show.map(|HistoryCommand::Show { run }| run);
            in_context(g, async |ctx| deploy::history(ctx, run.as_deref(), out))
        }
        Command::Start {
            name,
            dry_run,
            timeout,
            allow_unpinned,
        } => {
            let timeout: Option<Duration> = timeout.map(|t| t.0);
            with_recipes(g, out, async |ctx, recipes| {
                let start = deploy::StartArgs {
                    dry_run,
                    allow_unpinned,
                    timeout,
                };
                deploy::start(ctx, recipes, &name, start, out).await
            })
        }
        Command::Status | Command::Ps => in_context(g, async |ctx| {
            for w in crate::deploy::state_warnings(&ctx.state) {
                out.warn(w);
            }
            deploy::status(ctx, out).await
        }),
        Command::Logs {
            name,
            follow,
            tail,
            node,
        } => in_context(g, async |ctx| {
            let view = crate::runtime::LogView { tail, follow };
            if let Some(node) = node {
                deploy::node_logs(ctx, &name, &node, view, out).await
            } else if name == "frontdoor" {
                frontdoor::logs(ctx, view, out).await
            } else if crate::job::has_runs(&ctx.state, &name)
                && ctx.runtimes.find(&name).await?.is_none()
            {
                jobs::logs(ctx, &name, view, out).await
            } else {
                deploy::logs(ctx, &name, view, out).await
            }
        }),
        Command::Down {
            name,
            dry_run,
            force,
        } => with_recipes(g, out, async |ctx, recipes| {
            if !recipes.knows(&name) && crate::job::has_runs(&ctx.state, &name) {
                return Err(Error::Usage(format!(
                    "{name} is a job; `sparkctl stop {name}` stops it (`down` is for servers)"
                )));
            }
            crate::deploy::ensure_known(&ctx.runtimes, recipes, &name).await?;
            deploy::down(ctx, &name, dry_run, force, out).await
        }),
        _ => unreachable!("dispatch routes only serving commands here"),
    }
}

/// `run`, `jobs` and `stop`: container jobs.
fn job_command(g: &Globals, command: Command, out: &Output) -> Result<()> {
    match command {
        Command::Run {
            name,
            dry_run,
            detach,
            yes,
            allow_unpinned,
        } => {
            let args = jobs::RunArgs {
                dry_run,
                detach,
                yes,
                allow_unpinned,
            };
            in_context(g, async |ctx| {
                jobs::run(ctx, &g.recipes_dir().path, &name, args, out).await
            })
        }
        Command::Jobs => in_context(g, async |ctx| jobs::list(ctx, out).await),
        Command::Stop {
            name,
            grace,
            dry_run,
        } => in_context(g, async |ctx| {
            jobs::stop(ctx, &name, grace.0, dry_run, out).await
        }),
        _ => unreachable!("dispatch routes only job commands here"),
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

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
