//! `sparkctl patch NAME [--dry-run|--revert]`: rendering over `patch`.

use super::{with_recipes, Globals, Output};
use crate::error::Result;
use crate::patch::{self, plan::Plan};
use crate::recipe::RecipeSet;
use crate::runtime::Runtimes;
use crate::state::StateDir;

fn render_plan(out: &Output, plan: &Plan, chown_method: &str) {
    out.titled(
        "patch plan for",
        format_args!("{} ({})", plan.recipe, plan.model_dir.display()),
    );
    for s in &plan.steps {
        out.say(format_args!(
            "  {}. {:<18} {}",
            s.step + 1,
            s.kind,
            s.summary
        ));
    }
    if plan.owners.iter().any(|o| !o.paths.is_empty()) {
        out.say(format_args!("  owners change {chown_method}"));
    }
    let diff = plan.diff();
    if !diff.is_empty() {
        out.say("");
        out.text(diff);
    }
    if !plan.checks.is_empty() {
        out.say("");
        for c in &plan.checks {
            out.say(format_args!(
                "  {} step {}: {}: {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.step + 1,
                c.what,
                c.detail
            ));
        }
    }
}

/// `sparkctl patch`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct PatchArgs {
    name: String,
    /// Show the diff and the steps; change nothing.
    #[arg(long, conflicts_with = "revert")]
    dry_run: bool,
    /// Restore the originals byte for byte.
    #[arg(long)]
    revert: bool,
}

impl PatchArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(recipes, &ctx.state, &ctx.runtimes, self, out).await
        })
    }
}

async fn run(
    recipes: &RecipeSet,
    state: &StateDir,
    runtimes: &Runtimes,
    args: PatchArgs,
    out: &Output,
) -> Result<()> {
    let PatchArgs {
        name,
        dry_run,
        revert,
    } = args;
    let name = name.as_str();
    let loaded = recipes.get(name)?;
    if !dry_run {
        let doing = if revert {
            "revert its patches"
        } else {
            "patch it"
        };
        crate::deploy::ensure_not_running(runtimes, name, doing).await?;
    }
    if revert {
        let reverted = patch::revert(loaded)?;
        if out.json {
            out.print_json(&reverted);
        } else if reverted.restored.is_empty() && reverted.removed.is_empty() {
            out.say(format_args!(
                "nothing to revert: {name}'s model dir holds no sparkctl patch"
            ));
        } else {
            for f in &reverted.restored {
                out.say(format_args!("restored {f}"));
            }
            for f in &reverted.removed {
                out.say(format_args!("removed  {f} (the patch created it)"));
            }
        }
        return Ok(());
    }
    let plan = patch::plan::plan(loaded, &patch::repo_dir(loaded))?;
    if dry_run {
        if out.json {
            out.print_json(&Preview {
                diff: plan.diff(),
                plan: &plan,
            });
        } else {
            render_plan(out, &plan, &patch::chown_method(loaded));
            out.say("\nnothing was changed (--dry-run)");
        }
        return Ok(());
    }
    let docker = runtimes.docker().ok().map(|d| d.client());
    let nothing = plan.changes_nothing();
    if !out.json {
        render_plan(out, &plan, &patch::chown_method(loaded));
        out.say("");
    }
    let applied = patch::apply(loaded, plan, state, docker).await?;
    if out.json {
        out.print_json(&applied);
        return Ok(());
    }
    if nothing {
        out.say(format_args!(
            "nothing to change: the model dir already matches {name}'s patch steps"
        ));
    } else {
        out.say(format_args!(
            "patched {} file(s), kept {} original(s) as FILE.orig, gave {} path(s) back to their owner",
            applied.written.len(),
            applied.backed_up.len(),
            applied.owners_changed
        ));
    }
    out.say(format_args!(
        "model fingerprint {} ({} files, {:.1} MB, {:.1} ms)",
        applied.fingerprint.digest,
        applied.fingerprint.files,
        applied.fingerprint.bytes as f64 / 1e6,
        applied.fingerprint.took.as_secs_f64() * 1e3
    ));
    Ok(())
}

/// `patch --dry-run --json`: the plan and the diff it would make.
#[derive(serde::Serialize)]
struct Preview<'a> {
    plan: &'a patch::plan::Plan,
    diff: String,
}
