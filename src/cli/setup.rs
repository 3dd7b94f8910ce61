//! What every command is given: the tokio executor, logging, the recipes found where
//! sparkctl looks, and the library context built from the global options.

use std::path::PathBuf;

use super::{output, Globals, Output};
use crate::error::{Error, Result};

/// Logs on stderr: sparkctl's own at the level asked for (`-v`, `-vv`, `SPARKCTL_LOG`),
/// every dependency's at most at info, whatever was asked. At debug, bollard logs each
/// request body, and a container's body holds the values of its `env_from_host` secrets
/// (`"Env":["HF_TOKEN=…"]`); the cap is a second filter, so no `SPARKCTL_LOG` directive
/// (`bollard=trace`, `trace`, a span filter) can lift it. Records of the `log` crate
/// (bollard's) arrive with the target `log`, so they are capped too.
pub(super) fn init_tracing(verbose: u8) {
    use tracing_subscriber::filter::{filter_fn, FilterExt};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let asked = crate::settings::environment()
        .log
        .as_deref()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let dependencies_at_most_info = filter_fn(|meta| {
        meta.target().starts_with("sparkctl") || *meta.level() <= tracing::Level::INFO
    });
    let (color, writer) = output::log_records();
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(color)
        .with_filter(asked.and(dependencies_at_most_info));
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// One thread: a CLI's work is waiting, and the benchmark's clock is then read on the thread
/// that polls the socket, with no hop to another worker between a byte's arrival and its
/// timestamp (measured: TTFT error p50 0.38 → 0.29 ms against the simulated engine). CPU
/// work (hashing, copies) goes to the blocking pool.
pub(super) fn executor() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}

/// A worker per core for the front door's server: it carries every stream of production at
/// once, and a burst of chunks from many streams should not queue behind one thread.
pub(super) fn server_executor() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}

/// sparkctl's own path: sim recipes run it as their server.
pub(super) fn self_exe() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "sparkctl".into())
}

impl Globals {
    pub(super) fn recipes_dir(&self) -> crate::places::RecipesDir {
        crate::places::RecipesDir::find(self.recipes.as_deref())
    }
}

pub(super) fn lock_path(cli: &Globals) -> PathBuf {
    cli.lock
        .clone()
        .unwrap_or_else(|| crate::places::lock_path(&cli.recipes_dir().path))
}

/// The recipes dir; files that do not load are named on stderr and skipped, so a command
/// fails only on the recipes it needs (`RecipeSet::get` reports a broken one in full).
/// None found where sparkctl looks: an empty set, so that what needs no recipe still works.
pub(super) fn load_recipes(cli: &Globals, out: &Output) -> Result<crate::recipe::RecipeSet> {
    let dir = cli.recipes_dir();
    if dir.absent() {
        return Ok(crate::recipe::RecipeSet::empty(dir.path));
    }
    recipes_in(&dir.path, out)
}

pub(super) fn recipes_in(dir: &std::path::Path, out: &Output) -> Result<crate::recipe::RecipeSet> {
    let set = crate::recipe::load_dir(dir)?;
    for broken in &set.broken {
        out.warn(broken);
    }
    Ok(set)
}

pub(super) fn state_root(cli: &Globals) -> PathBuf {
    cli.state_dir
        .clone()
        .unwrap_or_else(crate::state::default_root)
}

pub(super) async fn context(cli: &Globals) -> Result<crate::context::Context> {
    let state = crate::state::StateDir::open(&state_root(cli))?;
    let runtimes = crate::runtime::Runtimes::open(&state).await;
    Ok(crate::context::Context {
        lock_path: lock_path(cli),
        settings: crate::settings::Settings::from_env()?,
        state,
        runtimes,
        self_exe: self_exe(),
    })
}

/// Most commands need the library context, some the recipes too; both are built the same
/// way for every command (recipes first, so a broken recipes dir is reported before the state).
pub(super) fn in_context(
    g: &Globals,
    f: impl AsyncFnOnce(&crate::context::Context) -> Result<()>,
) -> Result<()> {
    executor()?.block_on(async {
        let done = f(&context(g).await?).await;
        crate::state::settled().await;
        done
    })
}

pub(super) fn with_recipes(
    g: &Globals,
    out: &Output,
    f: impl AsyncFnOnce(&crate::context::Context, &crate::recipe::RecipeSet) -> Result<()>,
) -> Result<()> {
    executor()?.block_on(async {
        let recipes = load_recipes(g, out)?;
        let done = f(&context(g).await?, &recipes).await;
        crate::state::settled().await;
        done
    })
}
