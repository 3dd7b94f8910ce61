//! `sparkctl usage [--since DUR] [--key NAME]`: what each key used at the front door, from
//! the book it keeps (`crate::usage`; a running door writes it within seconds).

use clap::Args;

use super::{in_context, Globals, Output};
use crate::error::Result;
use crate::units::HumanDuration;

#[derive(Debug, Args)]
pub(crate) struct UsageArgs {
    /// Only the hours that began within this long (e.g. 24h, 7d); all kept when left out.
    #[arg(long, value_name = "DURATION")]
    since: Option<HumanDuration>,
    /// One key's use alone.
    #[arg(long, value_name = "NAME")]
    key: Option<String>,
}

impl UsageArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        in_context(g, async |ctx| {
            let book = crate::usage::Book::load(&ctx.state)?;
            let since = (self.since).map_or(0, |d| {
                crate::units::unix_now()
                    .as_secs()
                    .saturating_sub(d.0.as_secs())
            });
            let mut used = book.since(since);
            if let Some(k) = &self.key {
                used.retain(|name, _| name == k);
            }
            if out.json {
                out.print_json(&used);
                return Ok(());
            }
            if used.is_empty() {
                out.say("no use by any key in that time (`sparkctl keys add NAME`)");
                return Ok(());
            }
            let mut t = out.table();
            t.set_header(vec![
                "KEY",
                "REQUESTS",
                "ERRORS",
                "LIMITED",
                "TOKENS IN",
                "TOKENS OUT",
                "WAITED",
            ]);
            for (name, u) in &used {
                let tokens_in = match u.unreported_in {
                    0 => u.tokens_in.to_string(),
                    n => format!("{} ({n} requests unreported)", u.tokens_in),
                };
                let tokens_out = match u.tokens_out_counted {
                    0 => u.tokens_out.to_string(),
                    n => format!("{} ({n} counted from streams)", u.tokens_out),
                };
                t.add_row(vec![
                    name.clone(),
                    u.requests.to_string(),
                    u.errors.to_string(),
                    u.limited.to_string(),
                    tokens_in,
                    tokens_out,
                    format!("{:.1} s", u.waited_ms as f64 / 1e3),
                ]);
            }
            out.print_table(&t);
            Ok(())
        })
    }
}
