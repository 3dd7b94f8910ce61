//! Values that must never reach a log or a terminal: the host variables a recipe passes to
//! its server by name (`server.env_from_host`, e.g. HF_TOKEN). The CLI caps dependency logs
//! at info (bollard logs request bodies at debug); these helpers are for sparkctl's own logs.

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
}
