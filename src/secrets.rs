//! Values that must never reach a log, a file or a terminal: the host variables a recipe
//! passes to its server by name (`server.env_from_host`, e.g. HF_TOKEN), the secrets in a
//! command line `import` reads, in a captured request, or in a message quoting either. The
//! CLI caps dependency logs at info (bollard logs request bodies at debug); these helpers
//! are for sparkctl's own logs and files. What a secret looks like is said once, here: by
//! its name (`api_key`, `--hf-token`, `sessionToken`), or by its shape (`sk-…`, `hf_…`, a
//! JWT).

use bollard::models::ContainerCreateBody;

/// What stands in for a secret's value.
pub(crate) const REDACTED: &str = "<redacted>";

/// `NAME=value` entries with the value of each name in `secret` replaced.
pub(crate) fn redact_env(env: &[String], secret: &[String]) -> Vec<String> {
    env.iter()
        .map(|entry| match entry.split_once('=') {
            Some((name, _)) if secret.iter().any(|s| s == name) => format!("{name}={REDACTED}"),
            _ => entry.clone(),
        })
        .collect()
}

/// A container spec fit for a log line: the `secret` names' values replaced.
pub(crate) fn redacted(spec: &ContainerCreateBody, secret: &[String]) -> ContainerCreateBody {
    let mut copy = spec.clone();
    copy.env = spec.env.as_deref().map(|env| redact_env(env, secret));
    copy
}

/// The words of a name, split at `_`, `-`, `.` and case changes, lowercased.
fn name_words(name: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        let boundary = !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && prev_lower);
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
        prev_lower = c.is_ascii_lowercase();
    }
    words.push(word);
    words
}

/// Whether an object key names a secret (`api_key`, `sessionToken`, `Authorization`): one
/// of its words is a secret's (`max_tokens` is not).
pub(crate) fn secret_key(key: &str) -> bool {
    const SECRET: &[&str] = &[
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "session",
        "bearer",
    ];
    name_words(key).iter().any(|w| SECRET.contains(&w.as_str()))
}

/// Whether a command-line flag (`--api-key`, `--hf-token`, `-password`) takes a secret as
/// its value. Narrower than `secret_key`: a flag such as `--session-id` or `--no-auth`
/// takes no secret, and a boolean flag taken for a secret's would take the next argument
/// with it.
pub(crate) fn secret_flag(flag: &str) -> bool {
    const SECRET: &[&str] = &[
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "credentials",
        "bearer",
    ];
    let words = name_words(flag.trim_start_matches('-'));
    words.iter().any(|w| SECRET.contains(&w.as_str()))
        || words.windows(2).any(|p| p[0] == "api" && p[1] == "key")
}

/// Whether a word looks like a credential: a known prefix, a bearer token, a JWT.
pub(crate) fn secret_word(word: &str) -> bool {
    let w =
        word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-' && c != '.');
    let long_after = |prefix: &str, n: usize| {
        w.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= n
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
    };
    [
        "sk-",
        "sk_",
        "hf_",
        "ghp_",
        "gho_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "AIza",
    ]
    .iter()
    .any(|p| long_after(p, 12))
        || (w.starts_with("eyJ") && w.matches('.').count() == 2 && w.len() > 30)
}

/// A string with secret-looking words replaced: those of a known shape, the word after a
/// `Bearer`, the value of a `name=value` whose name is a secret's, and `secret` wherever it
/// appears.
pub(crate) fn scrub(text: &str, secret: Option<&str>) -> String {
    let known = |w: &str| secret.is_some_and(|s| !s.is_empty() && w.contains(s));
    let mut out = String::with_capacity(text.len());
    let mut bearer = false;
    for piece in text.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end();
        // The word without the punctuation around it, which stays.
        let core = word.trim_matches(|c: char| c.is_ascii_punctuation() && !"_-.".contains(c));
        let core = core.trim_end_matches('.');
        let hidden = match core.split_once('=') {
            _ if bearer && !core.is_empty() => Some(core),
            _ if secret_word(core) || known(core) => Some(core),
            Some((name, value))
                if !value.is_empty() && (secret_key(name) || secret_word(value)) =>
            {
                Some(value)
            }
            _ => None,
        };
        bearer = core.eq_ignore_ascii_case("bearer");
        match hidden {
            Some(h) => {
                let at = piece.find(h).unwrap_or(0);
                out.push_str(&piece[..at]);
                out.push_str(REDACTED);
                out.push_str(&piece[at + h.len()..]);
            }
            None => out.push_str(piece),
        }
    }
    match secret {
        Some(s) if !s.is_empty() && out.contains(s) => out.replace(s, REDACTED),
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_values_are_replaced() {
        let spec = ContainerCreateBody {
            env: Some(vec![
                "HF_TOKEN=secret123".into(),
                "VLLM_LOGGING=DEBUG".into(),
                "HF_TOKEN_EXTRA=x=y".into(),
            ]),
            ..Default::default()
        };
        let shown = format!("{:?}", redacted(&spec, &["HF_TOKEN".into()]));
        assert!(!shown.contains("secret123"), "{shown}");
        assert!(shown.contains("HF_TOKEN=<redacted>"), "{shown}");
        assert!(shown.contains("VLLM_LOGGING=DEBUG") && shown.contains("HF_TOKEN_EXTRA=x=y"));
    }

    #[test]
    fn secrets_are_known_by_their_name_or_their_shape() {
        for (flag, secret) in [
            ("--api-key", true),
            ("--hf-token", true),
            ("-password", true),
            ("--apiKey", true),
            ("--max-tokens", false),
            ("--max-num-batched-tokens", false),
            ("--tokenizer", false),
            ("--session-id", false),
            ("--kv-cache-dtype", false),
        ] {
            assert_eq!(secret_flag(flag), secret, "{flag}");
        }
        assert_eq!(
            scrub(
                "--label token=abc123 --x max_tokens=5 sk-live-0123456789abcdef",
                None
            ),
            "--label token=<redacted> --x max_tokens=5 <redacted>"
        );
        assert_eq!(
            scrub("the word42 here", Some("word42")),
            "the <redacted> here"
        );
    }
}
