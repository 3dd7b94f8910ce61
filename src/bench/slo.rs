//! Service-level objectives: what a request must meet to count toward goodput (vLLM bench
//! serve's `--goodput ttft:500 tpot:50`, AIPerf's goodput): TTFT, time per output token and
//! end-to-end latency, each optional; a request meets the SLO when it meets every one set.

use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::HumanDuration;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time to first token, from the request's scheduled send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttft: Option<HumanDuration>,
    /// Time per output token after the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tpot: Option<HumanDuration>,
    /// End-to-end latency, from the scheduled send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e2el: Option<HumanDuration>,
}

fn ms(d: Option<HumanDuration>) -> Option<f64> {
    d.map(|d| d.0.as_secs_f64() * 1e3)
}

impl Slo {
    pub(crate) fn is_empty(&self) -> bool {
        self.ttft.is_none() && self.tpot.is_none() && self.e2el.is_none()
    }

    /// Whether a complete request with these figures (ms) meets every objective set. A
    /// figure the objective needs but the request lacks (one token: no TPOT) does not meet it.
    pub(crate) fn met(&self, ttft: Option<f64>, tpot: Option<f64>, e2el: f64) -> bool {
        let within = |limit: Option<f64>, v: Option<f64>| match limit {
            None => true,
            Some(l) => v.is_some_and(|v| v <= l),
        };
        within(ms(self.ttft), ttft)
            && within(ms(self.tpot), tpot)
            && within(ms(self.e2el), Some(e2el))
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("ttft", self.ttft),
            ("tpot", self.tpot),
            ("e2el", self.e2el),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} <= {v}")))
        .collect();
        f.write_str(&parts.join(", "))
    }
}

/// `ttft=500ms,tpot=50ms` (the flag's form).
impl FromStr for Slo {
    type Err = String;
    fn from_str(text: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("`{part}`: write KEY=DURATION, e.g. ttft=500ms,tpot=50ms")
            })?;
            let d: HumanDuration = value.parse().map_err(|e| format!("`{key}`: {e}"))?;
            match key.trim() {
                "ttft" => slo.ttft = Some(d),
                "tpot" => slo.tpot = Some(d),
                "e2el" => slo.e2el = Some(d),
                other => {
                    return Err(format!(
                        "`{other}` is not an objective; use ttft, tpot or e2el"
                    ))
                }
            }
        }
        if slo.is_empty() {
            return Err("no objective given; e.g. ttft=500ms,tpot=50ms".into());
        }
        Ok(slo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives_parse_and_a_request_meets_all_or_none() {
        let slo: Slo = "ttft=500ms, tpot=50ms".parse().unwrap();
        assert!(slo.met(Some(400.0), Some(20.0), 2000.0));
        assert!(!slo.met(Some(600.0), Some(20.0), 2000.0));
        assert!(!slo.met(Some(400.0), None, 2000.0));
        assert_eq!(slo.to_string(), "ttft <= 500ms, tpot <= 50ms");
        assert!("ttft=fast".parse::<Slo>().unwrap_err().contains("ttft"));
        assert!("itl=5ms".parse::<Slo>().unwrap_err().contains("`itl`"));
    }
}
