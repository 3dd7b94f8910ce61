//! `sparkctl init`: rendering over `places::init`.

use std::path::{Path, PathBuf};

use super::{Globals, Output};
use crate::error::Result;
use crate::places::{FileOutcome, RecipesDir};

fn tilde(path: &Path) -> String {
    crate::settings::environment().tilde(path)
}

/// `sparkctl init`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// Where [default: $XDG_CONFIG_HOME/sparkctl, else ~/.config/sparkctl].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl InitArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        run(self.dir, &g.recipes_dir(), out)
    }
}

fn run(dir: Option<PathBuf>, found: &RecipesDir, out: &Output) -> Result<()> {
    let root = dir.unwrap_or_else(crate::places::config_dir);
    let report = crate::places::init(&root)?;
    if out.json {
        out.print_json(&report);
        return Ok(());
    }
    for (rel, outcome) in &report.files {
        let what = match outcome {
            FileOutcome::Written => "wrote",
            FileOutcome::Kept => "kept ",
            FileOutcome::KeptDiffers => "kept (yours differs from the shipped one)",
        };
        out.say(format_args!("{what} {}", tilde(&root.join(rel))));
    }
    out.say(format_args!(
        "{} written, {} already there, in {}",
        report.count(FileOutcome::Written),
        report.count(FileOutcome::Kept) + report.count(FileOutcome::KeptDiffers),
        tilde(&root)
    ));
    let recipes = root.join("recipes");
    if std::path::absolute(&found.path).ok() != std::path::absolute(&recipes).ok() {
        out.say(format_args!(
            "note: from here sparkctl reads {} first (./recipes, --recipes or SPARKCTL_RECIPES \
             win over the config dir); elsewhere it reads {}",
            tilde(&found.path),
            tilde(&recipes)
        ));
    } else {
        out.say(format_args!(
            "sparkctl reads its recipes from {} wherever it runs (unless ./recipes, --recipes \
             or SPARKCTL_RECIPES say otherwise); `sparkctl recipes list` shows them",
            tilde(&recipes)
        ));
    }
    Ok(())
}
