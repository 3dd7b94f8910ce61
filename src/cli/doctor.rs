//! `sparkctl doctor [NAME…]`: rendering over `doctor`.

use super::{context, executor, load_recipes, Globals, Output};
use crate::error::Result;

/// `sparkctl doctor`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Recipes to check, in use or not.
    names: Vec<String>,
}

impl DoctorArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        executor()?.block_on(doctor(g, &self.names, out))
    }
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
