//! What `import` leaves out of a recipe because it is a secret: a flag's value (`--api-key
//! X`, `--hf-token=X`), a secret-looking argument (`sk-…`), and the same inside one word of
//! a script (`bash -c '… --api-key X'`, `LLAMA_API_KEY=X server …`). Done before anything
//! else reads the command line, so no note, comment or error can quote it; the values are
//! kept in memory only, to be replaced wherever they would still appear.

use std::sync::LazyLock;

use regex::{Captures, Regex};

use crate::secrets::{secret_flag, secret_key, secret_word, REDACTED};

/// What was left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeftOut {
    /// The flags (or variable names) whose values were left out, in the order seen.
    flags: Vec<String>,
    /// Secret-looking arguments with no flag of their own.
    bare: usize,
    /// The values themselves: never written; replaced wherever they would appear.
    values: Vec<String>,
}

impl LeftOut {
    pub(crate) fn flags(&self) -> &[String] {
        &self.flags
    }

    fn flag(&mut self, flag: &str, value: &str) {
        if !self.flags.iter().any(|f| f == flag) {
            self.flags.push(flag.to_string());
        }
        self.value(value);
    }

    fn value(&mut self, value: &str) {
        let v = value.trim_matches(['"', '\'']);
        if !v.is_empty() && !self.values.iter().any(|x| x == v) {
            self.values.push(v.to_string());
        }
    }

    /// Whether a flag left out is the server's own access key: then the server checked who
    /// called it, and whatever serves in its place must too.
    pub(crate) fn access_key(&self) -> bool {
        self.flags.iter().any(|f| access_key(f))
    }

    /// `text` with every value left out replaced, and whatever else looks like a secret.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.known(&crate::secrets::scrub(text, None))
    }

    /// `text` with every value left out replaced.
    pub(crate) fn known(&self, text: &str) -> String {
        let mut out = text.to_string();
        for v in &self.values {
            out = out.replace(v.as_str(), REDACTED);
        }
        out
    }

    /// The lines the recipe's comments say about it.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .flags
            .iter()
            .map(|f| {
                format!(
                    "{f}: its value is a secret and was left out; give it through the \
                     environment (server.env_from_host names the variable) if the engine \
                     reads one"
                )
            })
            .collect();
        if self.bare > 0 {
            notes.push(format!(
                "{} argument(s) that look like secrets were left out; give them through the \
                 environment (server.env_from_host) if the server needs them",
                self.bare
            ));
        }
        notes
    }
}

/// Whether a flag (or variable) left out held an access key (`--api-key`, `--password`,
/// `VLLM_API_KEY`) rather than a credential the server uses elsewhere (`--hf-token`).
pub(crate) fn access_key(flag: &str) -> bool {
    let f = flag.to_ascii_lowercase();
    f.contains("key") || f.contains("password") || f.contains("passwd")
}

/// Removes the secrets from `words` (a command line's arguments), noting them in `left`.
pub(crate) fn drop_from(words: &mut Vec<String>, left: &mut LeftOut) {
    let mut kept: Vec<String> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let flag = w.starts_with('-') && w.len() > 1;
        let pair = w.split_once('=');
        if let Some((name, value)) = pair.filter(|(n, _)| flag && secret_flag(n)) {
            // `--api-key=X`
            left.flag(name, value);
        } else if flag && pair.is_none() && secret_flag(w) && i + 1 < words.len() {
            // `--api-key X`: both go (a flag at the very end has nothing to leave out).
            left.flag(w, &words[i + 1]);
            i += 1;
        } else if w.chars().any(char::is_whitespace) {
            kept.push(from_script(w, left));
        } else if let Some((name, value)) = pair.filter(|(n, v)| {
            // `API_KEY=X` (to `env`, to a launcher), or `name=sk-…`.
            (!flag && crate::recipe::env_name_ok(n) && secret_key(n)) || secret_word(v)
        }) {
            left.flag(name, value);
        } else if secret_word(w) {
            // `--some-flag sk-…`: the flag goes with it.
            match kept.pop() {
                Some(prev) if is_bare_flag(&prev) => left.flag(&prev, w),
                prev => {
                    kept.extend(prev);
                    left.bare += 1;
                    left.value(w);
                }
            }
        } else {
            kept.push(w.clone());
        }
        i += 1;
    }
    *words = kept;
}

fn is_bare_flag(w: &str) -> bool {
    w.starts_with('-') && w.len() > 1 && !w.contains('=')
}

/// `--flag VALUE` / `--flag=VALUE` inside a script; a value does not start with `-`.
static SCRIPT_FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(^|\s)(--?[A-Za-z0-9][A-Za-z0-9_-]*)(=|\s+)("[^"]*"|'[^']*'|[^\s"';&|-][^\s"';&|]*)"#,
    )
    .expect("a valid regex")
});
/// `NAME=VALUE` inside a script (an assignment before a command, an `export`).
static SCRIPT_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(^|\s)([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s"';&|]*)"#)
        .expect("a valid regex")
});
static SCRIPT_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"[^\s"';&|=]+"#).expect("a valid regex"));

/// One word that is a script (`bash -c '…'`): its secrets taken out of it, as from a
/// command line of its own.
fn from_script(script: &str, left: &mut LeftOut) -> String {
    let flags = SCRIPT_FLAG.replace_all(script, |c: &Captures| {
        if secret_flag(&c[2]) {
            left.flag(&c[2], &c[4]);
            c[1].to_string()
        } else {
            c[0].to_string()
        }
    });
    let assigned = SCRIPT_ASSIGNMENT.replace_all(&flags, |c: &Captures| {
        if secret_key(&c[2]) && !c[3].is_empty() {
            left.flag(&c[2], &c[3]);
            c[1].to_string()
        } else {
            c[0].to_string()
        }
    });
    let words = SCRIPT_WORD.replace_all(&assigned, |c: &Captures| {
        if secret_word(&c[0]) {
            left.bare += 1;
            left.value(&c[0]);
            String::new()
        } else {
            c[0].to_string()
        }
    });
    // What was taken out leaves its spaces; a script's own ends are not its meaning.
    match words.trim() == script.trim() {
        true => script.to_string(),
        false => words.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dropped(line: &str) -> (Vec<String>, LeftOut) {
        let mut words = crate::import::words::split(line).unwrap();
        let mut left = LeftOut::default();
        drop_from(&mut words, &mut left);
        (words, left)
    }

    #[test]
    fn secrets_go_wherever_they_are_in_the_line_and_nothing_else_does() {
        let (words, left) = dropped(
            "-m /m --api-key K1 --max-tokens 5 --tokenizer /t --hf-token=K2 --x sk-live-0123456789ab",
        );
        assert_eq!(
            words,
            ["-m", "/m", "--max-tokens", "5", "--tokenizer", "/t"]
        );
        assert_eq!(left.flags, ["--api-key", "--hf-token", "--x"]);
        assert!(left.access_key());
        let (words, left) = dropped(
            "-c 'LLAMA_API_KEY=K3 exec llama-server -m /m --api-key \"K4\" --port 9 --verbose --password K5'",
        );
        assert_eq!(words, ["-c", "exec llama-server -m /m  --port 9 --verbose"]);
        assert_eq!(left.flags, ["--api-key", "--password", "LLAMA_API_KEY"]);
        let text = left.scrub("said K3, K4 and K5 then sk-live-0123456789abcd");
        assert_eq!(
            text,
            "said <redacted>, <redacted> and <redacted> then <redacted>"
        );
        let (words, left) = dropped("serve --port 8000 --api-key");
        assert_eq!(words, ["serve", "--port", "8000", "--api-key"]);
        assert!(left.flags.is_empty() && !left.access_key());
    }
}
