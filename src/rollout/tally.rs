//! What a rollout has seen so far: each side's answers (canary) or each request's pair of
//! answers (shadow), reduced to what the analysis compares, and the traffic's counts.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Mode;

/// Samples kept per side: the longest window of requests.
const KEPT: usize = super::MAX_WINDOW as usize;

/// One answer, as the analysis compares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sample {
    /// What was wrong with it: the server failed it, or the first check it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fault: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ttft_ms: Option<f64>,
    /// Mean time between its tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) itl_ms: Option<f64>,
    /// Its start (escaped, bounded), for the evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
}

/// One request as both answered it (shadow).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pair {
    pub(crate) production: Sample,
    pub(crate) candidate: Sample,
    /// For a greedy request both answered: whether the answers say the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agree: Option<bool>,
}

/// What the front door has seen of a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tally {
    /// Requests the model's lane took while the rollout ran.
    pub(crate) offered: u64,
    /// Copies sent (shadow) or requests sent (canary) to the candidate.
    pub(crate) to_candidate: u64,
    /// Shadow copies not sent: as many copies as allowed were already waiting on the
    /// candidate (a slow candidate never delays production).
    pub(crate) dropped: u64,
    /// Canary requests the candidate failed before its first byte, answered by production.
    pub(crate) retried: u64,
    /// Bytes of the candidate's answers that reached clients (always 0 under shadow).
    pub(crate) candidate_bytes_to_clients: u64,
    /// Shadow: each request's pair of answers.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(in crate::rollout) pairs: VecDeque<Pair>,
    /// Canary: production's answers over the same window.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(in crate::rollout) production: VecDeque<Sample>,
    /// Canary: the candidate's answers.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(in crate::rollout) candidate: VecDeque<Sample>,
}

fn keep<T>(v: &mut VecDeque<T>, x: T) {
    if v.len() >= KEPT {
        v.pop_front();
    }
    v.push_back(x);
}

impl Tally {
    pub(crate) fn pair(&mut self, p: Pair) {
        keep(&mut self.pairs, p);
    }

    pub(crate) fn answer(&mut self, candidate: bool, s: Sample) {
        match candidate {
            true => keep(&mut self.candidate, s),
            false => keep(&mut self.production, s),
        }
    }

    /// Requests compared: pairs (shadow), the candidate's answers (canary).
    pub(crate) fn compared(&self, mode: Mode) -> u64 {
        match mode {
            Mode::Shadow => self.pairs.len() as u64,
            Mode::Canary => self.candidate.len() as u64,
        }
    }

    /// The same tally without its samples: counts for `status` and the page.
    pub(crate) fn counts(&self) -> Tally {
        Tally {
            pairs: VecDeque::new(),
            production: VecDeque::new(),
            candidate: VecDeque::new(),
            ..self.clone()
        }
    }
}
