//! `up`, `start`, `rollback`, `logs`, `down`: their flags, and rendering over `deploy` and
//! `runtime`.

use std::time::Duration;

use clap::Args;

use super::{in_context, with_recipes, Globals, Output};
use crate::deploy::{self, StartPlan};
use crate::error::{Error, Result};
use crate::recipe::{resolve_shell_line, RecipeSet};
use crate::runtime::LogView;

use crate::context::Context;

fn render_plan(out: &Output, plan: &StartPlan) {
    let mem = &plan.memory;
    let verdict = match (mem.fits, mem.must_stop.is_empty()) {
        (true, true) => "fits, nothing to stop".to_string(),
        (true, false) => format!("must stop first: {}", mem.must_stop.join(", ")),
        (false, _) => "does not fit even alone".to_string(),
    };
    out.titled(
        "plan for",
        format_args!("{} ({})", plan.name, plan.runtime.as_str()),
    );
    let mut t = out.table();
    t.add_row(vec!["recipe hash", &plan.recipe_hash]);
    if let Some(fp) = &plan.model_fingerprint {
        t.add_row(vec!["model", fp]);
    }
    t.add_row(vec!["runs", &plan.artifact]);
    t.add_row(vec!["url", &plan.url]);
    t.add_row(vec!["port", "free"]);
    t.add_row(vec!["memory", &format!("{} → {verdict}", mem.describe())]);
    t.add_row(vec![
        "ready within",
        &crate::units::format_duration(plan.health_timeout),
    ]);
    match &plan.group {
        // A group: each node's containers in start order, and the image on each node.
        Some(g) => {
            for m in &g.plan.members {
                let argv = [m.entrypoint.clone(), m.cmd.clone()].concat();
                let key = format!("{} {}", m.node, m.role.as_str());
                t.add_row(vec![key.as_str(), &resolve_shell_line(&argv)]);
            }
            let images: Vec<String> = g
                .images
                .iter()
                .map(|(node, there)| {
                    let how = if *there {
                        "present"
                    } else {
                        "copied from the head at start"
                    };
                    format!("{node}: {how}")
                })
                .collect();
            t.add_row(vec!["image on nodes", &images.join(", ")]);
        }
        None => {
            t.add_row(vec!["command", &resolve_shell_line(&plan.command)]);
        }
    }
    out.print_table(&t);
    for w in &plan.warnings {
        out.say(format_args!("warning: {w}"));
    }
}

/// `sparkctl start`'s flags.
#[derive(Debug, Args)]
pub(crate) struct StartArgs {
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
}

impl StartArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            start(ctx, recipes, self, out).await
        })
    }
}

async fn start(ctx: &Context, recipes: &RecipeSet, args: StartArgs, out: &Output) -> Result<()> {
    let StartArgs {
        name,
        dry_run,
        timeout,
        allow_unpinned,
    } = args;
    let name = name.as_str();
    // Unset: the recipe's health.timeout.
    let timeout: Option<Duration> = timeout.map(|t| t.0);
    let loaded = recipes.get(name)?;
    let lock = crate::lock::Lock::load(&ctx.lock_path)?;
    let opts = deploy::StartOptions {
        lock: &lock,
        allow_unpinned,
        replacing: None,
    };
    let plan = deploy::plan_start(ctx, loaded, &opts).await?;
    if dry_run {
        if out.json {
            out.print_json(&plan);
        } else {
            render_plan(out, &plan);
            out.say("nothing was started (--dry-run)");
        }
        return Ok(());
    }
    let bar = out.spinner();
    bar.message(format_args!("{name}: starting"));
    let report = deploy::start(&ctx.runtimes, &plan, timeout, |w| {
        let mut msg = format!("{name}: {} · {:.1} s", w.health, w.elapsed.as_secs_f64());
        if let Some(line) = w.last_line {
            msg.push_str(" · ");
            msg.push_str(&line.chars().take(100).collect::<String>());
        }
        bar.message(msg);
    })
    .await;
    bar.finish();
    let report = report?;
    // On stderr in both modes, as `status` does: the JSON on stdout holds them too.
    for w in &report.warnings {
        out.warn(w);
    }
    if out.json {
        out.print_json(&report);
    } else {
        let d = &report.deployment;
        out.titled(
            &d.name,
            format_args!(
                "is ready at {} ({} {}, model {}, {:.2} s)",
                d.url(),
                d.runtime.as_str(),
                crate::units::short_id(&d.id),
                report.model,
                report.ready_after_ms / 1e3
            ),
        );
        out.say(format_args!("  start: {}", report.phases));
        out.say(format_args!(
            "  memory: {}",
            report.memory_observed.summary()
        ));
    }
    Ok(())
}

/// `sparkctl logs`'s flags.
#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    name: String,
    #[arg(short, long)]
    follow: bool,
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// A multi-node recipe's containers on this node (its name in the recipe's nodes:).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
}

impl LogsArgs {
    /// A node's containers, the front door's log, a job's run, or a deployment's output.
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let LogsArgs {
            name,
            follow,
            tail,
            node,
        } = self;
        in_context(g, async |ctx| {
            let view = LogView { tail, follow };
            if let Some(node) = node {
                node_logs(ctx, &name, &node, view, out).await
            } else if name == "frontdoor" {
                super::frontdoor::logs(ctx, view, out).await
            } else if crate::job::has_runs(&ctx.state, &name)
                && ctx.runtimes.find(&name).await?.is_none()
            {
                super::jobs::logs(ctx, &name, view, out).await
            } else {
                logs(ctx, &name, view, out).await
            }
        })
    }
}

async fn logs(ctx: &Context, name: &str, view: LogView, out: &Output) -> Result<()> {
    match ctx.runtimes.find(name).await? {
        Some(d) => ctx.runtimes.logs(&d, view, &mut out.log_sink()).await,
        None => Err(Error::NeverRan {
            name: name.into(),
            state_dir: ctx.state.root().to_path_buf(),
        }),
    }
}

/// `logs NAME --node NODE`: a multi-node deployment's containers on one node.
async fn node_logs(
    ctx: &Context,
    name: &str,
    node: &str,
    view: LogView,
    out: &Output,
) -> Result<()> {
    let Some(d) = ctx.runtimes.find(name).await? else {
        return Err(Error::NeverRan {
            name: name.into(),
            state_dir: ctx.state.root().to_path_buf(),
        });
    };
    let docker = ctx.runtimes.docker()?;
    crate::runtime::group::logs(docker, &d, node, view, &mut out.log_sink()).await
}

/// `sparkctl down`'s flags.
#[derive(Debug, Args)]
pub(crate) struct DownArgs {
    name: String,
    #[arg(long)]
    dry_run: bool,
    /// Stop it even when it serves production (the production port then answers 503).
    #[arg(long)]
    force: bool,
}

impl DownArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let DownArgs {
            name,
            dry_run,
            force,
        } = self;
        with_recipes(g, out, async |ctx, recipes| {
            if !recipes.knows(&name) && crate::job::has_runs(&ctx.state, &name) {
                return Err(Error::RecipeCannot {
                    recipe: name.clone(),
                    why: crate::error::RecipeProblem::IsAJob,
                });
            }
            crate::deploy::ensure_known(&ctx.runtimes, recipes, &name).await?;
            down(ctx, &name, dry_run, force, out).await
        })
    }
}

async fn down(ctx: &Context, name: &str, dry_run: bool, force: bool, out: &Output) -> Result<()> {
    let door = crate::frontdoor::Remote::about(&ctx.state, name);
    let stopped = deploy::down(&ctx.runtimes, name, dry_run, Some(&door), force).await?;
    if out.json {
        out.print_json(&Down {
            name,
            stopped: stopped.as_ref().map(|d| d.id.as_str()),
            dry_run,
        });
        return Ok(());
    }
    match stopped {
        None => out.say(format_args!("{name} is not running; nothing to stop")),
        Some(d) => out.say(format_args!(
            "{} {name} ({} {}); its logs are kept: `sparkctl logs {name}`",
            if dry_run { "would stop" } else { "stopped" },
            d.runtime.as_str(),
            crate::units::short_id(&d.id)
        )),
    }
    Ok(())
}

/// `sparkctl up`'s flags.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
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
    /// After the gates pass, copy live requests to the candidate while production answers,
    /// compare the answers, and promote only when WINDOW (requests compared, e.g. 50, or a
    /// duration, e.g. 10m) ends clean.
    #[arg(long, value_name = "WINDOW", num_args = 0..=1, default_missing_value = "", conflicts_with = "canary")]
    shadow: Option<String>,
    /// After the gates pass, send SHARE (e.g. 10%) of the conversations to the candidate and
    /// compare its answers with production's; promote when the window ends clean.
    #[arg(long, value_name = "SHARE")]
    canary: Option<String>,
    /// The rollout's window: requests compared (50) or a duration (10m).
    #[arg(long, value_name = "WINDOW")]
    window: Option<String>,
    /// The share of requests a shadow copies (default 100%).
    #[arg(long, value_name = "SHARE")]
    share: Option<String>,
    /// No shadow nor canary, whatever the recipe's `rollout` says: the candidate takes all
    /// traffic once its gates pass.
    #[arg(long, conflicts_with_all = ["shadow", "canary", "window", "share"])]
    no_rollout: bool,
    /// Serve its model beside the models served now, instead of in place of the one
    /// production (needed only when its recipe has no `serve` section).
    #[arg(long)]
    add_model: bool,
}

impl UpArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            up(ctx, recipes, self, out).await
        })
    }
}

async fn up(ctx: &Context, recipes: &RecipeSet, args: UpArgs, out: &Output) -> Result<()> {
    let UpArgs {
        name,
        dry_run,
        no_promote,
        yes,
        allow_unpinned,
        shadow,
        canary,
        window,
        share,
        no_rollout,
        add_model,
    } = args;
    let rollout = crate::recipe::rollout::Asked {
        shadow: shadow.map(|w| (!w.is_empty()).then_some(w)),
        canary,
        window,
        share,
        off: no_rollout,
    };
    let flow =
        deploy::switch::SwitchContext::open(ctx, recipes, &[&name], dry_run, add_model).await?;
    // Stopping production is asked on a terminal; elsewhere only --yes allows it.
    let confirm = move |question: &str| yes || out.confirm(question);
    let opts = deploy::up::UpOptions {
        dry_run,
        no_promote,
        allow_unpinned,
        confirm: &confirm,
        progress: out,
        lock: None,
        record: None,
        pin_move: None,
        replace: false,
        rollout,
    };
    let record = deploy::up::up(&flow, &name, &opts).await?;
    if out.json {
        out.print_json(&record);
        return Ok(());
    }
    match record.outcome {
        crate::history::Outcome::Planned => out.say("nothing was changed (--dry-run)"),
        crate::history::Outcome::Passed => out.say(format_args!(
            "{name} passed its gates; not promoted (--no-promote)"
        )),
        _ => out.say(format_args!(
            "{name} {}: TTFT p50 {} ms, decode p50 {} tok/s; serving on port {}: {}; run {}",
            record.outcome,
            record.ttft_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
            record
                .decode_tps_p50
                .map_or("-".into(), |v| format!("{v:.1}")),
            ctx.settings.production_port,
            record.serving.clone().unwrap_or_else(|| "nothing".into()),
            record.run_id
        )),
    }
    Ok(())
}

/// `sparkctl rollback`'s flags.
#[derive(Debug, Args)]
pub(crate) struct RollbackArgs {
    /// Roll back to this recipe instead (e.g. the llama-server one).
    #[arg(long, value_name = "NAME")]
    to: Option<String>,
    /// The model whose production rolls back, when several are served (its served name,
    /// or the recipe serving the unnamed one).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// With --to: serve its model beside the models served now, instead of in place of the
    /// one production (needed only when its recipe has no `serve` section).
    #[arg(long, requires = "to")]
    add_model: bool,
    #[arg(long)]
    dry_run: bool,
}

impl RollbackArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            rollback(ctx, recipes, &self, out).await
        })
    }
}

async fn rollback(
    ctx: &Context,
    recipes: &RecipeSet,
    args: &RollbackArgs,
    out: &Output,
) -> Result<()> {
    let (to, dry_run) = (args.to.as_deref(), args.dry_run);
    let add = args.add_model;
    let model = crate::models::of_rollback(&ctx.state, recipes, to, args.model.as_deref(), add)?;
    let needs: Vec<&str> = to.into_iter().collect();
    let flow = deploy::switch::SwitchContext::open(ctx, recipes, &needs, dry_run, add)
        .await?
        .for_model(&model);
    let record = deploy::rollback::rollback(&flow, to, dry_run, out).await?;
    if out.json {
        out.print_json(&record);
    } else if dry_run {
        out.say("nothing was changed (--dry-run)");
    } else {
        out.say(format_args!(
            "rolled back: serving on port {}: {}; run {}",
            ctx.settings.production_port,
            record.serving.clone().unwrap_or_else(|| "nothing".into()),
            record.run_id
        ));
    }
    Ok(())
}

/// `down --json`: which deployment stopped (or would), if any ran.
#[derive(serde::Serialize)]
struct Down<'a> {
    name: &'a str,
    stopped: Option<&'a str>,
    dry_run: bool,
}
