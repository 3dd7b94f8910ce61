//! `sparkctl memory [forget NAME]`: what each recipe measurably held at its starts, which the
//! memory plan counts when it is more than the recipe declares; `forget` drops a recipe's.

use super::{with_recipes, Globals, Output};
use crate::error::Result;

/// `sparkctl memory`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryArgs {
    #[command(subcommand)]
    command: Option<MemoryCommand>,
}

#[derive(Debug, clap::Subcommand)]
enum MemoryCommand {
    /// Forget what NAME held (after a change the recipe's hash does not see, say).
    Forget { name: String },
}

impl MemoryArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            let state = &ctx.state;
            if let Some(MemoryCommand::Forget { name }) = self.command {
                recipes.get(&name)?;
                let n = crate::memory::learned::forget(state, &name)?;
                out.say(format_args!("{name}: {n} learned figures forgotten"));
                return Ok(());
            }
            let all = crate::memory::learned::all(state);
            if out.json {
                out.print_json(&all);
                return Ok(());
            }
            let mut t = out.table();
            t.set_header(vec!["RECIPE", "DECLARES", "HELD", "HOW", "DIGEST", "SEEN"]);
            for (recipe, figures) in &all {
                let declared = (recipes.get(recipe).ok())
                    .and_then(|l| l.recipe.server.memory_gb)
                    .map_or("-".into(), |g| format!("{g} GB"));
                for f in figures {
                    t.add_row(vec![
                        recipe.clone(),
                        declared.clone(),
                        format!("{:.2} GB", f.gb),
                        f.what.clone(),
                        f.key
                            .digest
                            .as_deref()
                            .map_or("-".into(), |d| crate::units::short_digest(d).to_string()),
                        f.at.clone(),
                    ]);
                }
            }
            out.print_table(&t);
            for (recipe, figures) in &all {
                let declared = (recipes.get(recipe).ok()).and_then(|l| l.recipe.server.memory_gb);
                let newest = figures.iter().max_by(|a, b| a.at.cmp(&b.at));
                if let Some(d) =
                    newest.and_then(|f| crate::memory::learned::Drift::of(recipe, declared, f.gb))
                {
                    out.warn(d);
                }
            }
            Ok(())
        })
    }
}
