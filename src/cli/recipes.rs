//! `sparkctl recipes list|show|validate|schema`.

use std::path::Path;

use clap::{Args, Subcommand};

use super::{Globals, Output};
use crate::error::{Error, Result};
use crate::places::RecipesDir;
use crate::recipe::{self, resolve_shell_line, Launch, LoadedRecipe};

/// `sparkctl recipes`'s subcommand.
#[derive(Debug, Args)]
pub(crate) struct RecipesArgs {
    #[command(subcommand)]
    command: RecipesCommand,
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

impl RecipesArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let state = super::setup::state_root(g);
        run(&g.recipes_dir(), &state, self.command, out)
    }
}

fn run(found: &RecipesDir, state: &Path, command: RecipesCommand, out: &Output) -> Result<()> {
    let dir = found.path.as_path();
    match command {
        RecipesCommand::List if found.absent() => {
            out.note(format_args!(
                "no recipes: none in ./recipes, none at {}; pass --recipes DIR",
                dir.display()
            ));
            if out.json {
                out.print_json(&Vec::<Listed>::new());
            }
            Ok(())
        }
        RecipesCommand::List => list(dir, out),
        RecipesCommand::Show { name } => show(dir, state, &name, out),
        RecipesCommand::Validate { targets } => validate(dir, &targets, out),
        RecipesCommand::Schema { job } => {
            if job {
                out.print_json(&crate::job::recipe::json_schema());
            } else {
                out.print_json(&recipe::json_schema());
            }
            Ok(())
        }
    }
}

fn list(dir: &Path, out: &Output) -> Result<()> {
    let set = super::recipes_in(dir, out)?;
    let jobs = job_recipes(dir, out)?;
    if out.json {
        let rows: Vec<_> = set
            .recipes
            .iter()
            .map(|l| {
                let r = &l.recipe;
                Listed::Server {
                    name: &r.name,
                    engine: r.engine,
                    runtime: r.runtime(),
                    port: r.server.port,
                    image: r.image.as_deref(),
                    binary: r.binary.as_deref(),
                    runs: runs(r),
                    description: r.description.as_deref(),
                    file: &l.path,
                }
            })
            .chain(jobs.iter().map(|j| {
                let r = &j.recipe;
                Listed::Job {
                    name: &r.name,
                    kind: "job",
                    image: &r.image,
                    description: r.description.as_deref(),
                    file: &j.path,
                }
            }))
            .collect();
        out.print_json(&rows);
        return Ok(());
    }
    let mut table = out.table();
    table.set_header([
        "NAME",
        "ENGINE",
        "RUNTIME",
        "PORT",
        "IMAGE / BINARY",
        "DESCRIPTION",
    ]);
    for l in &set.recipes {
        let r = &l.recipe;
        table.add_row([
            r.name.clone(),
            r.engine.to_string(),
            r.runtime().as_str().to_string(),
            r.server.port.to_string(),
            runs(r),
            r.description.clone().unwrap_or_default(),
        ]);
    }
    add_job_rows(&mut table, &jobs);
    out.print_table(&table);
    Ok(())
}

/// What a recipe runs, in one word or line: its image, else the program it starts.
fn runs(r: &crate::recipe::Recipe) -> String {
    r.image.clone().unwrap_or_else(|| r.program().to_string())
}

fn add_job_rows(table: &mut comfy_table::Table, jobs: &[crate::job::recipe::LoadedJob]) {
    for j in jobs {
        let r = &j.recipe;
        table.add_row([
            r.name.clone(),
            "job".into(),
            "docker".into(),
            "-".into(),
            r.image.clone(),
            r.description.clone().unwrap_or_default(),
        ]);
    }
}

/// A multi-node recipe's containers, node by node, in the order they start.
fn show_group(recipe: &crate::recipe::Recipe, out: &Output) -> Result<()> {
    let plan = crate::node::plan::GroupPlan::new(recipe)?;
    out.title(format_args!(
        "# group: {} nodes, {} GPUs, Ray at {} (created through each node's Engine API, host network)",
        plan.nodes, plan.gpus, plan.ray_address
    ));
    for m in &plan.members {
        out.say(format_args!("[{} {}]", m.node, m.role.as_str()));
        if !m.entrypoint.is_empty() {
            out.say(format_args!(
                "  entrypoint: {}",
                resolve_shell_line(&m.entrypoint)
            ));
        }
        out.say(format_args!("  cmd:        {}", resolve_shell_line(&m.cmd)));
        let env: Vec<String> = m.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.say(format_args!("  env:        {}", resolve_shell_line(&env)));
    }
    out.say(format_args!(
        "ready when:  `{}` reports {} nodes, then the API server answers {} on {}:{}",
        resolve_shell_line(&plan.status_command),
        plan.nodes,
        recipe.with_defaults().health.path.unwrap_or_default(),
        recipe.server.host,
        recipe.server.port
    ));
    Ok(())
}

/// The job recipes beside `dir` that load; the others are named on stderr.
fn job_recipes(dir: &Path, out: &Output) -> Result<Vec<crate::job::recipe::LoadedJob>> {
    let (jobs, broken) = crate::job::load::load_jobs(&crate::job::load::jobs_dir(dir))?;
    for d in broken {
        out.warn(d);
    }
    Ok(jobs)
}

/// What a recipe's starts measured: what it held (beside its declaration) and took.
#[derive(serde::Serialize)]
struct Measured {
    declared_gb: Option<f64>,
    learned_gb: Option<f64>,
    starts: Option<crate::starts::Summary>,
}

impl Measured {
    /// From the state dir when there is one: `recipes show` never makes it.
    fn of(state: &Path, recipe: &crate::recipe::Recipe) -> Measured {
        let state = state
            .is_dir()
            .then(|| crate::state::StateDir::open(state).ok())
            .flatten();
        let learned = state.as_ref().and_then(|s| {
            let key = crate::memory::learned::Key {
                recipe: recipe.name.clone(),
                recipe_hash: recipe.hash(),
                digest: None,
                fingerprint: None,
            };
            crate::memory::learned::of(s, &key)
        });
        Measured {
            declared_gb: recipe.server.memory_gb,
            learned_gb: learned.map(|f| f.gb),
            starts: (state.as_ref())
                .and_then(|s| crate::starts::summary(&crate::starts::of(s, &recipe.name))),
        }
    }

    fn say(&self, name: &str, out: &Output) {
        let declared = self
            .declared_gb
            .map_or("none".into(), |g| format!("{g} GB"));
        let learned = self.learned_gb.map_or("not yet measured".into(), |g| {
            format!("{g:.2} GB at its starts")
        });
        out.say(format_args!(
            "# memory: declared {declared}; held {learned}"
        ));
        if let Some(d) = (self.learned_gb)
            .and_then(|l| crate::memory::learned::Drift::of(name, self.declared_gb, l))
        {
            out.warn(d);
        }
        match &self.starts {
            Some(s) => out.say(format_args!("# starts: {s}")),
            None => out.say("# starts: none measured yet"),
        }
        out.say("");
    }
}

fn show(dir: &Path, state: &Path, name: &str, out: &Output) -> Result<()> {
    let set = super::recipes_in(dir, out)?;
    let jobs = crate::job::load::jobs_dir(dir);
    if !set.knows(name) && jobs.join(format!("{name}.yaml")).is_file() {
        return show_job(&crate::job::load::find_job(&jobs, name)?, out);
    }
    let loaded = set.get(name)?;
    let full = loaded.recipe.with_defaults();
    let resolved = loaded.recipe.resolve(&super::self_exe());
    let steps: Vec<String> = full
        .model
        .iter()
        .flat_map(|m| m.patches.iter().map(ToString::to_string))
        .collect();
    if out.json {
        out.print_json(&Shown {
            file: &loaded.path,
            recipe_hash: loaded.recipe.hash(),
            recipe: &full,
            patch_steps: &steps,
            launch: &resolved,
            equivalent_command: resolved.launch.equivalent_command(),
            group: match &loaded.recipe.nodes {
                Some(_) => Some(crate::node::plan::GroupPlan::new(&loaded.recipe)?),
                None => None,
            },
            measured: Measured::of(state, &loaded.recipe),
        });
        return Ok(());
    }
    out.titled("# recipe", loaded.path.display());
    out.say(format_args!("# hash {}", loaded.recipe.hash()));
    Measured::of(state, &loaded.recipe).say(name, out);
    out.text(serde_yaml_ng::to_string(&full).expect("recipes serialize"));
    out.say("");
    out.title("# patch steps, in order");
    if steps.is_empty() {
        out.say("(none)");
    }
    for (i, step) in steps.iter().enumerate() {
        out.say(format_args!("{}. {step}", i + 1));
    }
    out.say("");
    if loaded.recipe.nodes.is_some() {
        return show_group(&loaded.recipe, out);
    }
    match &resolved.launch {
        Launch::Docker(c) => {
            let (image, entrypoint, cmd) = (&c.image, &c.entrypoint, &c.cmd);
            out.title("# container (created through the Docker Engine API)");
            out.say(format_args!(
                "image:      {image}  (runs by the digest in images.lock)"
            ));
            if !entrypoint.is_empty() {
                out.say(format_args!(
                    "entrypoint: {}",
                    resolve_shell_line(entrypoint)
                ));
            }
            out.say(format_args!("cmd:        {}", resolve_shell_line(cmd)));
            out.say(format_args!(
                "labels:     io.sparkctl.recipe={}, io.sparkctl.recipe-hash, io.sparkctl.run-id",
                resolved.name
            ));
        }
        Launch::Process { program, args, .. } => {
            out.title("# host process (detached; pid + start time recorded)");
            out.say(format_args!("program: {program}"));
            out.say(format_args!("args:    {}", resolve_shell_line(args)));
        }
    }
    out.say(format_args!(
        "health:     GET http://{}:{}{} within {}, then a one-token chat completion within {}",
        resolved.host,
        resolved.port,
        resolved.health_path,
        resolved.health_timeout,
        resolved.completion_timeout
    ));
    out.say("");
    out.title("# equivalent command, for review (sparkctl never runs a shell)");
    out.say(resolve_shell_line(&resolved.launch.equivalent_command()));
    Ok(())
}

fn show_job(loaded: &crate::job::recipe::LoadedJob, out: &Output) -> Result<()> {
    let r = &loaded.recipe;
    let (user, owner) = r.users()?;
    let command = crate::job::container::equivalent_command(r, &r.image, &user);
    if out.json {
        out.print_json(&ShownJob {
            file: &loaded.path,
            kind: "job",
            recipe_hash: r.hash(),
            recipe: r,
            user: &user,
            equivalent_command: &command,
        });
        return Ok(());
    }
    out.titled("# job recipe", loaded.path.display());
    out.say(format_args!("# hash {}", r.hash()));
    out.text(serde_yaml_ng::to_string(r).expect("job recipes serialize"));
    out.say("");
    out.title("# container (created through the Docker Engine API)");
    out.say(format_args!(
        "image:   {}  (runs by the digest in images.lock)",
        r.image
    ));
    out.say(format_args!(
        "user:    {user} (outputs end owned by {owner})"
    ));
    out.say(format_args!(
        "labels:  io.sparkctl.job={}, io.sparkctl.run-id; never auto-removed",
        r.name
    ));
    out.say("");
    out.title("# equivalent command, for review (sparkctl never runs a shell)");
    out.say(resolve_shell_line(&command));
    Ok(())
}

fn validate(dir: &Path, targets: &[String], out: &Output) -> Result<()> {
    let jobs_dir = crate::job::load::jobs_dir(dir);
    let is_job_file = |t: &str| {
        let p = Path::new(t);
        p.is_file()
            && p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|n| n == "jobs")
    };
    let (job_targets, targets): (Vec<String>, Vec<String>) =
        targets.iter().cloned().partition(|t| {
            is_job_file(t)
                || (!Path::new(t).is_file()
                    && jobs_dir.join(format!("{t}.yaml")).is_file()
                    && !recipe::load_dir(dir).is_ok_and(|s| s.knows(t)))
        });
    let jobs = validate_jobs(&jobs_dir, &job_targets, targets.is_empty())?;
    let say_valid = |jobs: &[crate::job::recipe::LoadedJob]| {
        for j in jobs {
            out.say(format_args!(
                "ok  job {:<20} {}",
                j.recipe.name,
                j.path.display()
            ));
        }
        out.say(format_args!("{} job recipe(s) valid", jobs.len()));
    };
    if !job_targets.is_empty() && targets.is_empty() {
        say_valid(&jobs);
        return Ok(());
    }
    validate_serving(dir, &targets, out)?;
    if !out.json && !jobs.is_empty() {
        say_valid(&jobs);
    }
    Ok(())
}

/// The named job recipes, or (`all`) every one in `dir`; any problem fails them all.
fn validate_jobs(
    dir: &Path,
    targets: &[String],
    all: bool,
) -> Result<Vec<crate::job::recipe::LoadedJob>> {
    if targets.is_empty() {
        if !all {
            return Ok(Vec::new());
        }
        let (jobs, broken) = crate::job::load::load_jobs(dir)?;
        if !broken.is_empty() {
            return Err(Error::Invalid(broken));
        }
        return Ok(jobs);
    }
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for t in targets {
        let r = if Path::new(t).is_file() {
            crate::job::load::load_job(Path::new(t))
        } else {
            crate::job::load::find_job(dir, t)
        };
        match r {
            Ok(j) => found.push(j),
            Err(Error::Invalid(mut d)) => errors.append(&mut d),
            Err(e) => return Err(e),
        }
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        Err(Error::Invalid(errors))
    }
}

fn validate_serving(dir: &Path, targets: &[String], out: &Output) -> Result<()> {
    let loaded: Vec<LoadedRecipe> = if targets.is_empty() {
        let set = recipe::load_dir(dir)?;
        set.require_all()?;
        set.recipes
    } else {
        let mut found = Vec::new();
        let mut errors = Vec::new();
        let mut set = None;
        for t in targets {
            let as_file = Path::new(t);
            let result = if as_file.is_file() {
                recipe::load_file(as_file)
            } else {
                if set.is_none() {
                    set = Some(recipe::load_dir(dir)?);
                }
                set.as_ref().expect("loaded above").get(t).cloned()
            };
            match result {
                Ok(l) => found.push(l),
                Err(Error::Invalid(mut d)) => errors.append(&mut d),
                Err(e) => return Err(e),
            }
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        found
    };
    let sets: Vec<_> = loaded
        .iter()
        .flat_map(LoadedRecipe::eval_set_problems)
        .collect();
    if !sets.is_empty() {
        return Err(Error::Invalid(sets));
    }
    if out.json {
        let valid = loaded
            .iter()
            .map(|l| Valid {
                name: &l.recipe.name,
                file: &l.path,
                valid: true,
            })
            .collect();
        out.print_json(&Validated {
            valid,
            diagnostics: Vec::new(),
        });
        return Ok(());
    }
    for l in &loaded {
        out.say(format_args!(
            "ok  {:<24} {}",
            l.recipe.name,
            l.path.display()
        ));
    }
    out.say(format_args!("{} recipe(s) valid", loaded.len()));
    Ok(())
}

/// A row of `recipes list --json`: a server recipe, or a job recipe (`kind: job`).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Listed<'a> {
    Server {
        name: &'a str,
        engine: crate::engine::Engine,
        runtime: crate::recipe::Runtime,
        port: u16,
        image: Option<&'a str>,
        binary: Option<&'a str>,
        /// The image, or the command a process recipe starts (`IMAGE / BINARY` in the table).
        runs: String,
        description: Option<&'a str>,
        file: &'a Path,
    },
    Job {
        name: &'a str,
        kind: &'static str,
        image: &'a str,
        description: Option<&'a str>,
        file: &'a Path,
    },
}

/// `recipes show NAME --json`: the recipe with its defaults, and what it launches.
#[derive(serde::Serialize)]
struct Shown<'a> {
    file: &'a Path,
    recipe_hash: String,
    recipe: &'a crate::recipe::Recipe,
    patch_steps: &'a [String],
    launch: &'a crate::recipe::Resolved,
    equivalent_command: Vec<String>,
    group: Option<crate::node::plan::GroupPlan>,
    measured: Measured,
}

/// `recipes show JOB --json`.
#[derive(serde::Serialize)]
struct ShownJob<'a> {
    file: &'a Path,
    kind: &'static str,
    recipe_hash: String,
    recipe: &'a crate::job::recipe::JobRecipe,
    user: &'a str,
    equivalent_command: &'a [String],
}

/// `recipes validate --json` when every file is valid (else the error's diagnostics).
#[derive(serde::Serialize)]
struct Validated<'a> {
    valid: Vec<Valid<'a>>,
    diagnostics: Vec<crate::error::Diagnostic>,
}

#[derive(serde::Serialize)]
struct Valid<'a> {
    name: &'a str,
    file: &'a Path,
    valid: bool,
}
