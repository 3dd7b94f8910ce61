//! `sparkctl recipes list|show|validate|schema`.

use std::path::Path;

use serde_json::json;

use super::output::printable;
use super::{Output, RecipesCommand};
use crate::error::{Error, Result};
use crate::places::RecipesDir;
use crate::recipe::{self, resolve_shell_line, Launch, LoadedRecipe};

pub(crate) fn run(found: &RecipesDir, command: RecipesCommand, out: &Output) -> Result<()> {
    let dir = found.path.as_path();
    match command {
        RecipesCommand::List if found.absent() => {
            eprintln!(
                "no recipes: none in ./recipes, none at {}; pass --recipes DIR",
                printable(&dir.display().to_string())
            );
            if out.json {
                out.print_json(&json!([]));
            }
            Ok(())
        }
        RecipesCommand::List => list(dir, out),
        RecipesCommand::Show { name } => show(dir, &name, out),
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
    let set = super::recipes_in(dir)?;
    let jobs = job_recipes(dir)?;
    if out.json {
        let rows: Vec<_> = set
            .recipes
            .iter()
            .map(|l| {
                let r = &l.recipe;
                json!({
                    "name": r.name, "engine": r.engine, "runtime": r.runtime(), "port": r.server.port,
                    "image": r.image, "binary": r.binary, "description": r.description,
                    "file": l.path,
                })
            })
            .chain(jobs.iter().map(|j| {
                let r = &j.recipe;
                json!({
                    "name": r.name, "kind": "job", "image": r.image,
                    "description": r.description, "file": j.path,
                })
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
        let what = r
            .image
            .clone()
            .or_else(|| r.binary.clone())
            .unwrap_or_else(|| "sparkctl sim".into());
        table.add_row([
            r.name.clone(),
            r.engine.to_string(),
            r.runtime().as_str().to_string(),
            r.server.port.to_string(),
            what,
            printable(r.description.as_deref().unwrap_or_default()).into_owned(),
        ]);
    }
    add_job_rows(&mut table, &jobs);
    out.print_table(&table);
    Ok(())
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
            printable(r.description.as_deref().unwrap_or_default()).into_owned(),
        ]);
    }
}

/// A multi-node recipe's containers, node by node, in the order they start.
fn show_group(recipe: &crate::recipe::Recipe, out: &Output) -> Result<()> {
    let plan = crate::node::plan::GroupPlan::new(recipe)?;
    println!(
        "{}",
        out.bold(&format!(
            "# group: {} nodes, {} GPUs, Ray at {} (created through each node's Engine API, host network)",
            plan.nodes, plan.gpus, plan.ray_address
        ))
    );
    for m in &plan.members {
        println!("[{} {}]", m.node, m.role.as_str());
        if !m.entrypoint.is_empty() {
            println!("  entrypoint: {}", resolve_shell_line(&m.entrypoint));
        }
        println!("  cmd:        {}", resolve_shell_line(&m.cmd));
        let env: Vec<String> = m.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  env:        {}", resolve_shell_line(&env));
    }
    println!(
        "ready when:  `{}` reports {} nodes, then the API server answers {} on {}:{}",
        resolve_shell_line(&plan.status_command),
        plan.nodes,
        recipe.with_defaults().health.path.unwrap_or_default(),
        recipe.server.host,
        recipe.server.port
    );
    Ok(())
}

/// The job recipes beside `dir` that load; the others are named on stderr.
fn job_recipes(dir: &Path) -> Result<Vec<crate::job::recipe::LoadedJob>> {
    let (jobs, broken) = crate::job::load::load_jobs(&crate::job::load::jobs_dir(dir))?;
    for d in broken {
        eprintln!("warning: {}", printable(&d.to_string()));
    }
    Ok(jobs)
}

fn show(dir: &Path, name: &str, out: &Output) -> Result<()> {
    let set = super::recipes_in(dir)?;
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
        out.print_json(&json!({
            "file": loaded.path,
            "recipe_hash": loaded.recipe.hash(),
            "recipe": full,
            "patch_steps": steps,
            "launch": resolved,
            "equivalent_command": resolved.launch.equivalent_command(),
            "group": match &loaded.recipe.nodes {
                Some(_) => Some(crate::node::plan::GroupPlan::new(&loaded.recipe)?),
                None => None,
            },
        }));
        return Ok(());
    }
    println!("{} {}", out.bold("# recipe"), loaded.path.display());
    println!("# hash {}", loaded.recipe.hash());
    let yaml = serde_yaml_ng::to_string(&full).expect("recipes serialize");
    print!("{}", printable(&yaml));
    println!();
    println!("{}", out.bold("# patch steps, in order"));
    if steps.is_empty() {
        println!("(none)");
    }
    for (i, step) in steps.iter().enumerate() {
        println!("{}. {step}", i + 1);
    }
    println!();
    if loaded.recipe.nodes.is_some() {
        return show_group(&loaded.recipe, out);
    }
    match &resolved.launch {
        Launch::Docker(c) => {
            let (image, entrypoint, cmd) = (&c.image, &c.entrypoint, &c.cmd);
            println!(
                "{}",
                out.bold("# container (created through the Docker Engine API)")
            );
            println!("image:      {image}  (runs by the digest in images.lock)");
            if !entrypoint.is_empty() {
                println!("entrypoint: {}", resolve_shell_line(entrypoint));
            }
            println!("cmd:        {}", resolve_shell_line(cmd));
            println!(
                "labels:     io.sparkctl.recipe={}, io.sparkctl.recipe-hash, io.sparkctl.run-id",
                resolved.name
            );
        }
        Launch::Process { program, args, .. } => {
            println!(
                "{}",
                out.bold("# host process (detached; pid + start time recorded)")
            );
            println!("program: {program}");
            println!("args:    {}", resolve_shell_line(args));
        }
    }
    println!(
        "health:     GET http://{}:{}{} within {}, then a one-token chat completion within {}",
        resolved.host,
        resolved.port,
        resolved.health_path,
        resolved.health_timeout,
        resolved.completion_timeout
    );
    println!();
    println!(
        "{}",
        out.bold("# equivalent command, for review (sparkctl never runs a shell)")
    );
    println!(
        "{}",
        resolve_shell_line(&resolved.launch.equivalent_command())
    );
    Ok(())
}

fn show_job(loaded: &crate::job::recipe::LoadedJob, out: &Output) -> Result<()> {
    let r = &loaded.recipe;
    let (user, owner) = r.users()?;
    let command = crate::job::container::equivalent_command(r, &r.image, &user);
    if out.json {
        out.print_json(&json!({
            "file": loaded.path, "kind": "job", "recipe_hash": r.hash(), "recipe": r,
            "user": user, "equivalent_command": command,
        }));
        return Ok(());
    }
    println!("{} {}", out.bold("# job recipe"), loaded.path.display());
    println!("# hash {}", r.hash());
    print!(
        "{}",
        printable(&serde_yaml_ng::to_string(r).expect("job recipes serialize"))
    );
    println!();
    println!(
        "{}",
        out.bold("# container (created through the Docker Engine API)")
    );
    println!("image:   {}  (runs by the digest in images.lock)", r.image);
    println!("user:    {user} (outputs end owned by {owner})");
    println!(
        "labels:  io.sparkctl.job={}, io.sparkctl.run-id; never auto-removed",
        r.name
    );
    println!();
    println!(
        "{}",
        out.bold("# equivalent command, for review (sparkctl never runs a shell)")
    );
    println!("{}", resolve_shell_line(&command));
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
    if !job_targets.is_empty() && targets.is_empty() {
        for j in &jobs {
            println!("ok  job {:<20} {}", j.recipe.name, j.path.display());
        }
        println!("{} job recipe(s) valid", jobs.len());
        return Ok(());
    }
    validate_serving(dir, &targets, out)?;
    if !out.json && !jobs.is_empty() {
        for j in &jobs {
            println!("ok  job {:<20} {}", j.recipe.name, j.path.display());
        }
        println!("{} job recipe(s) valid", jobs.len());
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
    if out.json {
        let rows: Vec<_> = loaded
            .iter()
            .map(|l| json!({"name": l.recipe.name, "file": l.path, "valid": true}))
            .collect();
        out.print_json(&json!({"valid": rows, "diagnostics": []}));
        return Ok(());
    }
    for l in &loaded {
        println!("ok  {:<24} {}", l.recipe.name, l.path.display());
    }
    println!("{} recipe(s) valid", loaded.len());
    Ok(())
}
