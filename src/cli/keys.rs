//! `sparkctl keys add|list|revoke|rotate`: the front door's keys, one per client, over
//! `crate::keys`. A secret is printed once, at `add` and `rotate`; only its hash is kept.

use clap::{Args, Subcommand};

use super::{in_context, Globals, Output};
use crate::error::Result;
use crate::units::HumanDuration;

/// `sparkctl keys`'s subcommands: none lists the keys.
#[derive(Debug, Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    command: Option<KeysCommand>,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// A new key for a client: its secret is printed once. Past a limit the door answers
    /// 429 with `Retry-After`.
    Add {
        name: String,
        /// The models it may ask for (their served names, comma-separated); every one when
        /// left out.
        #[arg(long, value_delimiter = ',', value_name = "A,B")]
        models: Option<Vec<String>>,
        /// It ends after this long (e.g. 30d, 12h).
        #[arg(long, value_name = "DURATION")]
        expires: Option<HumanDuration>,
        /// The live page, `/metrics` and every model.
        #[arg(long)]
        admin: bool,
        /// Requests it may begin in any minute.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        rpm: Option<u32>,
        /// Requests it may have at once (waiting or answering).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        concurrency: Option<u32>,
        /// Tokens in and out it may use in a UTC day.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        tokens_per_day: Option<u64>,
    },
    /// The keys: names, what they reach, when they end (never a secret).
    List,
    /// Ends a key at once.
    Revoke { name: String },
    /// A new secret for a key; the old one keeps opening for `--overlap`.
    Rotate {
        name: String,
        #[arg(long, value_name = "DURATION")]
        overlap: Option<HumanDuration>,
    },
}

impl KeysArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        in_context(g, async |ctx| {
            let state = &ctx.state;
            match self.command.unwrap_or(KeysCommand::List) {
                KeysCommand::Add {
                    name,
                    models,
                    expires,
                    admin,
                    rpm,
                    concurrency,
                    tokens_per_day,
                } => {
                    let new = crate::keys::NewKey {
                        name: name.clone(),
                        models,
                        admin,
                        expires: expires.map(|d| d.0),
                        limits: crate::keys::Limits {
                            rpm,
                            concurrency,
                            tokens_per_day,
                        },
                    };
                    let secret = crate::keys::add(state, new)?;
                    shown_once(out, &name, &secret);
                }
                KeysCommand::Rotate { name, overlap } => {
                    let secret = crate::keys::rotate(state, &name, overlap.map(|d| d.0))?;
                    shown_once(out, &name, &secret);
                }
                KeysCommand::Revoke { name } => {
                    crate::keys::revoke(state, &name)?;
                    out.say(format_args!(
                        "{name}: revoked; the front door refuses it now"
                    ));
                }
                KeysCommand::List => list(&crate::keys::Keys::load(state)?, out),
            }
            Ok(())
        })
    }
}

/// The secret on stdout (alone, for a script), what to do with it on stderr.
fn shown_once(out: &Output, name: &str, secret: &str) {
    if out.json {
        out.print_json(&serde_json::json!({"name": name, "key": secret}));
    } else {
        out.say(secret);
    }
    out.note(format_args!(
        "{name}: shown once; sparkctl keeps only its hash. A client sends it as \
         `Authorization: Bearer <key>`"
    ));
}

fn list(keys: &crate::keys::Keys, out: &Output) {
    if out.json {
        let rows: Vec<_> = (keys.all().iter())
            .map(|k| {
                serde_json::json!({"name": k.name, "models": k.models, "admin": k.admin,
                    "created": k.created, "expires": k.expires, "limits": k.limits})
            })
            .collect();
        out.print_json(&rows);
        return;
    }
    if keys.all().is_empty() {
        out.say("no keys (`sparkctl keys add NAME`); a loopback front door is open to all");
        return;
    }
    let mut t = out.table();
    t.set_header(vec![
        "NAME", "MODELS", "ADMIN", "LIMITS", "CREATED", "EXPIRES",
    ]);
    for k in keys.all() {
        t.add_row(vec![
            k.name.clone(),
            k.models.as_ref().map_or("all".into(), |m| m.join(", ")),
            if k.admin { "yes" } else { "-" }.into(),
            limits(&k.limits),
            k.created.clone(),
            k.expires.map_or("-".into(), crate::units::utc_stamp),
        ]);
    }
    out.print_table(&t);
}

/// `60 rpm, 2 at once, 100000 tokens/day`, or `-`.
fn limits(l: &crate::keys::Limits) -> String {
    let parts: Vec<String> = [
        l.rpm.map(|n| format!("{n} rpm")),
        l.concurrency.map(|n| format!("{n} at once")),
        l.tokens_per_day.map(|n| format!("{n} tokens/day")),
    ]
    .into_iter()
    .flatten()
    .collect();
    match parts.is_empty() {
        true => "-".into(),
        false => parts.join(", "),
    }
}
