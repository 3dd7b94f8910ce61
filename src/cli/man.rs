//! `sparkctl man` and `sparkctl completions`: the manual page and the shell completions,
//! generated from the same clap definitions as `--help`, so they cannot drift from the flags.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::{Cli, Output};
use crate::error::{Error, Result};

/// One page, as roff.
fn render(cmd: clap::Command) -> Result<Vec<u8>> {
    let mut page = Vec::new();
    // The footer names sparkctl's version on every page, not the subcommand's name.
    let source = format!("sparkctl {}", env!("CARGO_PKG_VERSION"));
    clap_mangen::Man::new(cmd)
        .source(source)
        .render(&mut page)
        .map_err(|e| Error::io("rendering the man page", e))?;
    Ok(page)
}

/// The command line as the pages see it: `help` is a flag on every page, not a command.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// A page for `cmd` and one for each of its visible subcommands, named as the SUBCOMMANDS
/// section of the page above names them (`sparkctl-images-pin.1`).
fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, written)?;
    }
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let path = dir.join(format!("{name}.1"));
    crate::state::write_atomic(&path, &render(cmd)?)?;
    written.push(path);
    Ok(())
}

/// `sparkctl man`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Write a page for every command into DIR instead (sparkctl.1, sparkctl-up.1, …).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl ManArgs {
    pub(super) fn exec(self, out: &Output) -> Result<()> {
        run(self.dir, out)
    }
}

/// `sparkctl completions`'s argument.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl CompletionsArgs {
    pub(super) fn exec(self, out: &Output) -> Result<()> {
        let mut cmd = Cli::command();
        clap_complete::generate(self.shell, &mut cmd, "sparkctl", &mut out.generated());
        Ok(())
    }
}

/// `sparkctl man`: sparkctl(1) on stdout; with `--dir`, every command's page into DIR.
fn run(dir: Option<PathBuf>, out: &Output) -> Result<()> {
    let Some(dir) = dir else {
        use std::io::Write;
        let page = render(command())?;
        return out
            .generated()
            .write_all(&page)
            .map_err(|e| Error::io("writing the man page to stdout", e));
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let mut written = Vec::new();
    write_pages(command(), &dir, &mut written)?;
    out.say(format_args!(
        "{} man pages written to {}",
        written.len(),
        dir.display()
    ));
    Ok(())
}
