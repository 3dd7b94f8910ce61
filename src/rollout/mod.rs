//! A rollout: a candidate that passed its gates meets live traffic before it takes it all.
//! Under **shadow** the front door copies live requests to it while production alone
//! answers, and pairs each request's two answers; under **canary** it answers a share of
//! the conversations itself, and its answers are set beside production's over the same
//! window. The door tallies (`Tally`); `analysis` decides — promote, abort, inconclusive —
//! and `up` acts on the decision.

pub(crate) mod agree;
pub(crate) mod analysis;
pub(crate) mod tally;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use analysis::{Decision, Judgement};
pub(crate) use tally::{Sample, Tally};

/// How the candidate meets traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Copies of requests; production answers every client.
    Shadow,
    /// A share of the conversations answered by the candidate.
    Canary,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Shadow => "shadow",
            Mode::Canary => "canary",
        }
    }
}

/// When the evidence is complete: after this many requests compared, or this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Window {
    Requests(u64),
    #[serde(with = "millis")]
    Time(Duration),
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Window::Requests(n) => write!(f, "{n} requests"),
            Window::Time(d) => write!(f, "{}", crate::units::format_duration(*d)),
        }
    }
}

/// The fewest requests a window may compare: fewer decide nothing (`Rules::min_compared`).
pub(crate) const MIN_WINDOW: u64 = 10;
/// The most: each side's answers are kept, up to this many (`tally`).
pub(crate) const MAX_WINDOW: u64 = 5000;

/// Requests compared by default before a candidate is promoted.
pub(crate) const DEFAULT_WINDOW: u64 = 50;
/// The longest a request window waits for its traffic before it ends inconclusive.
pub(crate) const DEFAULT_WITHIN: Duration = Duration::from_secs(3600);

impl Window {
    /// `50` (requests) or `10m` (a duration); why not, in words a user can act on.
    pub(crate) fn parse(text: &str) -> Result<Window, String> {
        let t = text.trim();
        if let Ok(n) = t.parse::<u64>() {
            return match n {
                n if n < MIN_WINDOW => Err(format!(
                    "a window of {n} requests is too few to decide on; give {MIN_WINDOW} or more"
                )),
                n if n > MAX_WINDOW => Err(format!(
                    "{n} requests is more than a window keeps ({MAX_WINDOW}); give a duration \
                     such as 1h for a longer one"
                )),
                n => Ok(Window::Requests(n)),
            };
        }
        match crate::units::parse_duration(t) {
            Ok(d) if d.is_zero() => Err("a window of no time compares nothing".into()),
            Ok(d) => Ok(Window::Time(d)),
            Err(_) => Err(format!(
                "`{text}` is neither a number of requests nor a duration; write e.g. `50` or `10m`"
            )),
        }
    }
}

/// A share of traffic, in percent: (0, 100].
pub(crate) fn parse_share(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let number = t.strip_suffix('%').unwrap_or(t).trim();
    match number.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        Ok(p) => Err(format!(
            "{p}% is outside (0, 100]: give a share such as 10% (at least some, at most all)"
        )),
        Err(_) => Err(format!("`{text}` is not a share; write e.g. `10%`")),
    }
}

/// What a rollout is asked to do: mode, share, window, and the rules its analysis uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) mode: Mode,
    /// % of requests copied (shadow) or of conversations sent (canary).
    pub(crate) share: f64,
    pub(crate) window: Window,
    /// A request window ends inconclusive when its traffic does not come within this.
    #[serde(with = "millis")]
    pub(crate) within: Duration,
    pub(crate) rules: Rules,
}

/// What counts as a regression, and how sure the analysis must be.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rules {
    /// A one-sided test's p-value below this is significant.
    alpha: f64,
    /// Slower by more than this share (0.15: 15%) is a regression, in the time between
    /// tokens.
    pub(crate) itl_tolerance: f64,
    /// The same, for the first token.
    pub(crate) ttft_tolerance: f64,
    /// Answers to greedy (temperature 0) requests that may differ from production's.
    pub(crate) max_disagreement: f64,
    /// Faulty answers (empty, looping, failed, …) the candidate may have beyond
    /// production's share.
    fault_margin: f64,
    /// Requests compared before any verdict but an abort.
    min_compared: u64,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            alpha: 0.01,
            itl_tolerance: 0.15,
            ttft_tolerance: 0.5,
            max_disagreement: 0.2,
            fault_margin: 0.05,
            min_compared: MIN_WINDOW,
        }
    }
}

impl Spec {
    /// The rollout's line in progress and `status`: `shadow of 100% for 50 requests`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} of {}% for {}",
            self.mode.as_str(),
            self.share,
            self.window
        )
    }
}

/// What `POST /rollout` asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Asking {
    pub(crate) spec: Spec,
    pub(crate) candidate: crate::production::Upstream,
    /// The command running it: when it ends, the rollout ends with it.
    pub(crate) owner: Option<crate::host::ProcessId>,
}

/// A rollout as `status`, the page and `up` see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RolloutStatus {
    pub(crate) spec: Spec,
    pub(crate) candidate: crate::production::Upstream,
    pub(crate) started_at: String,
    pub(crate) elapsed_s: f64,
    /// The counts (without the samples).
    pub(crate) tally: Tally,
    pub(crate) judgement: Judgement,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_shares_parse_or_say_what_to_write() {
        assert_eq!(Window::parse("50"), Ok(Window::Requests(50)));
        assert_eq!(
            Window::parse("10m"),
            Ok(Window::Time(Duration::from_secs(600)))
        );
        for bad in ["0", "9", "5001", "0s", "soon", "-3", ""] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_share("10%"), Ok(10.0));
        assert_eq!(parse_share("100"), Ok(100.0));
        for bad in ["0%", "101%", "-5%", "ten", "nan"] {
            let e = parse_share(bad).unwrap_err();
            assert!(e.contains("share") || e.contains("(0, 100]"), "{bad}: {e}");
        }
    }
}
