//! Lines in a job's output that sparkctl recognises, each with its cause and the fix the
//! seeds paid for; and how an exit is said in words.

use super::record::Finding;
use crate::runtime::Exit;

/// (text in the line, cause, fix).
const KNOWN: &[(&str, &str, &str)] = &[
    (
        "Tensor.item() cannot be called on meta tensors",
        "the model was loaded with device_map=\"auto\" and some weights stayed on the meta device",
        "load it on one GPU: device_map={\"\": \"cuda:0\"}",
    ),
    (
        "Invalid device string: 'bfloat16'",
        "the ModelOpt 0.37.0 export bug (export_hf_checkpoint after training)",
        "re-export by hand: load the checkpoint, mtq.quantize() again, export_hf_checkpoint() \
         (the qat-export job does this)",
    ),
    (
        "CUDA out of memory",
        "GPU memory ran out (on a Spark: the unified pool, shared with running servers)",
        "stop the servers that hold memory (`sparkctl down NAME`) or declare memory_gb so \
         `sparkctl run` stops them first",
    ),
    (
        "OutOfMemoryError",
        "memory ran out (on a Spark: the unified pool, shared with running servers)",
        "stop the servers that hold memory, or declare memory_gb so `sparkctl run` makes room",
    ),
    (
        "No space left on device",
        "the disk filled up while writing",
        "free space, or declare outputs[].size so `sparkctl run` refuses before it starts",
    ),
    (
        "batch_encode_plus",
        "transformers 5.x removed batch_encode_plus, which ModelOpt 0.37's calibration calls",
        "tokenize the calibration samples yourself and pass input ids to the calibration loop",
    ),
    (
        "Permission denied",
        "the job could not write (or read) a mounted path as the user it runs as",
        "leave `user:` out (the invoking user owns the outputs) or give the path to that user",
    ),
];

/// The known lines in `log`, each cause once, with the first line that showed it.
pub(crate) fn scan(log: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    for line in log.lines() {
        for (needle, cause, fix) in KNOWN {
            if line.contains(needle) && !found.iter().any(|f| f.cause == *cause) {
                found.push(Finding {
                    line: line.trim().chars().take(300).collect(),
                    cause: cause.to_string(),
                    fix: fix.to_string(),
                });
            }
        }
    }
    found
}

/// How a job ended, in words. `stop_requested`: `sparkctl stop` sent the signal.
pub(crate) fn explain(exit: &Exit, stop_requested: bool) -> String {
    if exit.oom_killed {
        return format!(
            "out of memory: the kernel's OOM killer ended it (OOMKilled, exit code {}); stop \
             the servers that hold the unified memory or declare memory_gb so `sparkctl run` \
             makes room",
            exit.code.unwrap_or(137)
        );
    }
    match (exit.code, stop_requested) {
        (Some(0), _) => "exited with code 0".into(),
        (Some(c), true) if c > 128 => format!(
            "stopped by `sparkctl stop` (signal {}, exit code {c})",
            c - 128
        ),
        (Some(137), false) => "exit code 137: killed by SIGKILL, which on a DGX Spark is \
             almost always out of memory (OOM): something else held the unified memory it \
             needed (a running server's container, say); stop servers first or declare memory_gb"
            .into(),
        (Some(143), false) => "exit code 143: ended by SIGTERM from outside sparkctl \
             (`docker stop`, a reboot)"
            .into(),
        (Some(c), false) if c > 128 => {
            format!("exit code {c}: killed by signal {}", c - 128)
        }
        (Some(c), _) => format!("exited with code {c}: the job failed; its log says why"),
        (None, _) => "ended without an exit code".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_lines_are_found_once_with_their_fix() {
        let log = "loading\nRuntimeError: Invalid device string: 'bfloat16'\nagain Invalid device string: 'bfloat16'\n";
        let f = scan(log);
        assert_eq!(f.len(), 1);
        assert!(f[0].fix.contains("re-export"), "{f:?}");
    }

    #[test]
    fn exits_are_named() {
        let exit = |code, oom| Exit {
            code: Some(code),
            signal: None,
            oom_killed: oom,
        };
        assert!(explain(&exit(137, false), false).contains("out of memory (OOM)"));
        assert!(explain(&exit(137, true), false).contains("OOMKilled"));
        assert!(explain(&exit(137, false), true).contains("sparkctl stop"));
        assert!(explain(&exit(3, false), false).contains("code 3"));
    }
}
