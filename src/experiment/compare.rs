//! A try's variants against variant 0: a speed difference is called only where the
//! repeats' 95% intervals do not overlap, and the pick is the best decode p50 among the
//! variants that passed every gate (a failing variant is never picked).

use serde::Serialize;

use super::{Trial, Variant};

/// How a variant's figure stands against variant 0's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Versus {
    Better,
    Worse,
    /// The intervals overlap: no difference is called.
    WithinSpread,
    /// No interval on one side (one run of the suite, or nothing measured).
    Unknown,
}

impl std::fmt::Display for Versus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Versus::Better => "better",
            Versus::Worse => "worse",
            Versus::WithinSpread => "within the spread",
            Versus::Unknown => "–",
        })
    }
}

/// `v`'s interval against `base`'s; `higher_better` for decode speed, not for latency.
pub(crate) fn versus(
    base: Option<(f64, f64)>,
    v: Option<(f64, f64)>,
    higher_better: bool,
) -> Versus {
    let (Some((bl, bh)), Some((vl, vh))) = (base, v) else {
        return Versus::Unknown;
    };
    match (vl > bh, vh < bl) {
        (true, _) if higher_better => Versus::Better,
        (true, _) => Versus::Worse,
        (_, true) if higher_better => Versus::Worse,
        (_, true) => Versus::Better,
        _ => Versus::WithinSpread,
    }
}

/// Decode and TTFT of `v` against variant 0's.
pub(crate) fn against_base(trial: &Trial, v: &Variant) -> (Versus, Versus) {
    let base = trial.variants.first().and_then(|b| b.measured.as_ref());
    let m = v.measured.as_ref();
    if v.index == 0 {
        return (Versus::Unknown, Versus::Unknown);
    }
    (
        versus(
            base.and_then(|b| b.decode_interval),
            m.and_then(|m| m.decode_interval),
            true,
        ),
        versus(
            base.and_then(|b| b.ttft_interval),
            m.and_then(|m| m.ttft_interval),
            false,
        ),
    )
}

/// The variant `--pick` chooses by default: the best decode p50 among those that passed
/// every gate.
pub(crate) fn pick(trial: &Trial) -> Option<usize> {
    trial
        .variants
        .iter()
        .filter(|v| v.passed())
        .filter_map(|v| Some((v.index, v.measured.as_ref()?.decode_tps_p50?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

pub(crate) fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0} ms"))
}

pub(crate) fn tps(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1} tok/s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_is_called_only_outside_the_spread() {
        let base = Some((40.0, 44.0));
        assert_eq!(versus(base, Some((46.0, 50.0)), true), Versus::Better);
        assert_eq!(versus(base, Some((43.0, 50.0)), true), Versus::WithinSpread);
        assert_eq!(versus(base, Some((30.0, 35.0)), true), Versus::Worse);
        assert_eq!(versus(base, Some((30.0, 35.0)), false), Versus::Better);
        assert_eq!(versus(None, Some((30.0, 35.0)), true), Versus::Unknown);
    }
}
