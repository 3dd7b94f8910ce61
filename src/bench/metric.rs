//! The latency and speed figures measured per request, by name.

use serde::{Deserialize, Serialize};

/// A latency or speed figure measured per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Metric {
    /// Time to the first token of any kind, ms.
    Ttft,
    /// Time to the first output token (content or tool call), ms.
    Ttfo,
    /// Time per output token after the first, ms.
    Tpot,
    /// Inter-token latency, ms.
    Itl,
    /// End-to-end latency, ms.
    E2el,
    /// Single-stream decode speed, tok/s.
    Decode,
}

impl Metric {
    pub(crate) const ALL: [Metric; 6] = [
        Metric::Ttft,
        Metric::Ttfo,
        Metric::Tpot,
        Metric::Itl,
        Metric::E2el,
        Metric::Decode,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Ttfo => "ttfo",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::E2el => "e2el",
            Metric::Decode => "decode",
        }
    }

    /// The suffix of its gate names: a time in ms, or a speed in tok/s.
    pub(super) fn unit(self) -> &'static str {
        if self == Metric::Decode {
            "tps"
        } else {
            "ms"
        }
    }
}
