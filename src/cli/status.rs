//! `status` / `ps`: what runs, its role, health, memory and starts, beside the front door.

use std::time::Duration;

use clap::Args;

use super::{in_context, Globals, Output};
use crate::context::Context;
use crate::deploy::{self, Role};
use crate::error::Result;
use crate::units::format_uptime;

/// `sparkctl status` (and `ps`): no flags.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs;

impl StatusArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        in_context(g, async |ctx| {
            for w in crate::deploy::state_warnings(&ctx.state) {
                out.warn(w);
            }
            status(ctx, out).await
        })
    }
}

async fn status(ctx: &Context, out: &Output) -> Result<()> {
    let status = deploy::status::status(ctx).await?;
    for line in &status.healed {
        out.note(format!("==> {line}"));
    }
    for w in &status.warnings {
        out.warn(w);
    }
    if out.json {
        out.print_json(&status.rows);
        return Ok(());
    }
    match &status.door {
        Some(s) => {
            out.say(super::frontdoor::line(s));
            for l in super::frontdoor::model_lines(s) {
                out.say(l);
            }
            for l in super::frontdoor::live_lines(s) {
                out.say(l);
            }
            for l in super::frontdoor::rollout_lines(s) {
                out.say(l);
            }
        }
        None => out.say(
            "front door: not running (`sparkctl frontdoor start`, or the next `up`/`rollback`)",
        ),
    }
    // Jobs hold memory too: say which run (`sparkctl jobs` has the rest).
    let jobs = match crate::job::Runs::of(ctx) {
        Ok(runs) => runs.running().await,
        Err(_) => Vec::new(),
    };
    for j in &jobs {
        out.say(format_args!(
            "job {} running (run {}{}); `sparkctl jobs`",
            j.job(),
            j.run_id(),
            j.recipe()
                .memory_gb
                .map_or(String::new(), |gb| format!(", holds {gb} GB"))
        ));
    }
    if status.rows.is_empty() {
        out.say(format_args!(
            "sparkctl runs nothing (state dir {})",
            ctx.state.root().display()
        ));
        return Ok(());
    }
    print_status_table(&status.rows, out);
    for row in &status.rows {
        if let Some(s) = &row.starts {
            out.say(format_args!("{}: {s}", row.deployment.name));
        }
        if let Some(drift) = row.drift() {
            out.warn(format_args!("{drift}"));
        }
    }
    for row in status.rows.iter().filter(|r| !r.nodes.is_empty()) {
        let parts: Vec<String> = row
            .nodes
            .iter()
            .map(|p| {
                let state = if p.running { "running" } else { "exited" };
                format!("{} {} {state}", p.node, p.role.as_str())
            })
            .collect();
        out.say(format_args!(
            "{} across nodes: {}",
            row.deployment.name,
            parts.join(", ")
        ));
    }
    Ok(())
}

/// The role, and whose when several models are served: `production of coder`.
fn role_of(row: &deploy::status::StatusRow) -> String {
    let role = match row.role {
        Role::Production => "production",
        Role::Warm => "warm",
        Role::Candidate => "candidate",
        Role::None => "-",
    };
    match &row.model {
        Some(m) => format!("{role} of {m}"),
        None => role.to_string(),
    }
}

fn print_status_table(rows: &[deploy::status::StatusRow], out: &Output) {
    let mut t = out.table();
    t.set_header(vec![
        "NAME", "RUNTIME", "ID", "RUNS", "MODEL", "URL", "UPTIME", "HEALTH", "ROLE", "MEMORY",
    ]);
    for row in rows {
        let d = &row.deployment;
        let runs = match &d.image_ref {
            Some(image) => format!("{image} ({})", crate::units::short_id(&d.artifact)),
            None => d.artifact.clone(),
        };
        t.add_row(vec![
            d.name.clone(),
            d.runtime.as_str().to_string(),
            crate::units::short_id(&d.id).to_string(),
            runs,
            d.model_fingerprint
                .as_deref()
                .map(|f| crate::units::short_id(f).to_string())
                .unwrap_or_else(|| "-".into()),
            d.url(),
            row.uptime_s
                .map(|s| format_uptime(Duration::from_secs(s)))
                .unwrap_or_else(|| "-".into()),
            row.health.clone(),
            role_of(row),
            match &row.memory {
                Some(m) => m.summary(),
                None => d
                    .memory_gb
                    .map_or("-".into(), |g| format!("declared {g} GB")),
            },
        ]);
    }
    out.print_table(&t);
}
