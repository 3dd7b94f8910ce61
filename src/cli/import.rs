//! `sparkctl import`: rendering over `import`.

use std::path::PathBuf;

use super::{executor, lock_path, state_root, Globals, Output};
use crate::error::Result;
use crate::import::{self, Machine, Seen, Source};

/// Where the recipe comes from: exactly one.
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct From {
    /// A running host process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// The host process listening on this port.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// A running container (id or name); its image digest is pinned into images.lock.
    #[arg(long, value_name = "ID")]
    container: Option<String>,
    /// A pasted `docker run …` line (split like a shell splits it; nothing is run).
    #[arg(long = "docker-run", value_name = "LINE")]
    docker_run: Option<String>,
    /// A pasted host command line (`~/llama.cpp/build/bin/llama-server -m … --port 8003`).
    #[arg(long, value_name = "LINE")]
    command: Option<String>,
}

impl From {
    fn source(&self) -> Source {
        match self {
            From { pid: Some(p), .. } => Source::Pid(*p),
            From { port: Some(p), .. } => Source::Port(*p),
            From {
                container: Some(c), ..
            } => Source::Container(c.clone()),
            From {
                docker_run: Some(l),
                ..
            } => Source::DockerRun(l.clone()),
            From {
                command: Some(l), ..
            } => Source::Command(l.clone()),
            _ => unreachable!("clap requires one source"),
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ImportArgs {
    /// Name of the recipe [default: the served model name, else the model's].
    name: Option<String>,
    #[command(flatten)]
    from: From,
    /// Replace a recipe of that name.
    #[arg(long)]
    force: bool,
    /// Show the recipe; write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// What `--json` prints.
#[derive(serde::Serialize)]
struct Report<'a> {
    name: &'a str,
    path: &'a std::path::Path,
    written: bool,
    pinned: Option<String>,
    unknown: &'a [String],
    recipe: &'a str,
}

impl ImportArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        executor()?.block_on(async {
            let state = crate::state::StateDir::open(&state_root(g))?;
            run(g.recipes_dir().path, lock_path(g), &state, self, out).await
        })
    }
}

async fn run(
    recipes_dir: PathBuf,
    lock_path: PathBuf,
    state: &crate::state::StateDir,
    args: ImportArgs,
    out: &Output,
) -> Result<()> {
    let source = args.from.source();
    let docker = match source {
        Source::Container(_) | Source::DockerRun(_) => crate::runtime::docker::connect().await.ok(),
        _ => None,
    };
    let observed = import::observe(&source, docker.as_ref()).await?;
    let settings = crate::settings::Settings::from_env()?;
    let machine = Machine {
        production_port: settings.production_port,
    };
    let container = match observed.launch() {
        Seen::Container(c) => Some(c.clone()),
        Seen::Process { .. } => None,
    };
    let name = match &args.name {
        Some(n) => n.clone(),
        None => {
            import::default_name(import::draft("imported", observed.clone(), &machine)?.recipe())
        }
    };
    let draft = import::draft(&name, observed, &machine)?;
    let path = recipes_dir.join(format!("{name}.yaml"));
    let (text, _) = import::render(&draft, &path)?;
    if args.dry_run {
        return show(out, &name, &path, false, None, draft.unknown(), &text);
    }
    import::write(&path, &text, args.force)?;
    let pinned = match (&container, &docker, draft.origin()) {
        (Some(c), Some(d), Some(_)) => import::pin_image(d, &lock_path, &name, c, state).await?,
        _ => None,
    };
    if let Some(origin) = draft.origin() {
        import::record::save(state, &name, origin, draft.left_out().flags())?;
    }
    show(out, &name, &path, true, pinned, draft.unknown(), &text)?;
    if !out.json {
        if let (Some(o), Some(port)) = (draft.origin(), draft.seen_port()) {
            out.say(format_args!(
                "`sparkctl adopt {name}` hands port {port} from {} to the front door, serving {name}",
                o.describe()
            ));
            if draft.left_out().access_key() {
                out.say(format_args!(
                    "it asked its callers for a key: the front door will too \
                     (SPARKCTL_FRONTDOOR_API_KEY_FILE names a file, mode 600, holding it)"
                ));
            }
        }
    }
    Ok(())
}

fn show(
    out: &Output,
    name: &str,
    path: &std::path::Path,
    written: bool,
    pinned: Option<String>,
    unknown: &[String],
    text: &str,
) -> Result<()> {
    if out.json {
        out.print_json(&Report {
            name,
            path,
            written,
            pinned,
            unknown,
            recipe: text,
        });
        return Ok(());
    }
    out.text(text);
    if written {
        out.say(format_args!("wrote {}", path.display()));
    } else {
        out.say(format_args!("(dry run: {} not written)", path.display()));
    }
    if let Some(d) = pinned {
        out.say(format_args!("pinned {name} to {d} in images.lock"));
    }
    if !unknown.is_empty() {
        out.say(format_args!(
            "{} thing(s) could not be inferred: see the NOT INFERRED comments",
            unknown.len()
        ));
    }
    Ok(())
}
