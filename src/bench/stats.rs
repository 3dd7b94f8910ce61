//! Percentiles of one run, and the confidence of a figure measured over repeated runs.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Stats {
    pub(in crate::bench) n: usize,
    pub(in crate::bench) p50: f64,
    pub(in crate::bench) p90: f64,
    pub(in crate::bench) p99: f64,
    pub(in crate::bench) min: f64,
    pub(in crate::bench) max: f64,
}

/// Which percentile of a `Stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Pct {
    P50,
    P90,
    P99,
}

impl Stats {
    pub(crate) fn p50(&self) -> f64 {
        self.p50
    }

    pub(crate) fn at(&self, p: Pct) -> f64 {
        match p {
            Pct::P50 => self.p50,
            Pct::P90 => self.p90,
            Pct::P99 => self.p99,
        }
    }
}

/// Nearest-rank percentiles; None for no values.
pub(crate) fn stats(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[(((p / 100.0) * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Stats {
        n: v.len(),
        p50: at(50.0),
        p90: at(90.0),
        p99: at(99.0),
        min: v[0],
        max: v[v.len() - 1],
    })
}

pub(crate) fn median(values: &[f64]) -> Option<f64> {
    stats(values).map(|s| s.p50)
}

/// A figure measured once per repeated run: its mean, spread and 95% interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Interval {
    /// Runs it was measured in.
    pub(crate) n: usize,
    pub(crate) mean: f64,
    /// Sample standard deviation (n − 1).
    pub(crate) sd: f64,
    /// Coefficient of variation: sd / mean.
    pub(crate) cv: f64,
    /// 95% confidence interval of the mean (Student's t, n − 1 degrees of freedom).
    pub(crate) low: f64,
    pub(crate) high: f64,
}

/// The two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub(crate) fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.042 - (df - 30) as f64 * (2.042 - 2.000) / 30.0,
        61..=120 => 2.000 - (df - 60) as f64 * (2.000 - 1.980) / 60.0,
        _ => 1.960,
    }
}

/// The interval of `values` (one per run); None for fewer than two runs.
pub(crate) fn interval(values: &[f64]) -> Option<Interval> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let sd = var.sqrt();
    let half = t975(n - 1) * sd / (n as f64).sqrt();
    Some(Interval {
        n,
        mean,
        sd,
        cv: if mean != 0.0 { sd / mean.abs() } else { 0.0 },
        low: mean - half,
        high: mean + half,
    })
}

/// The 95% interval of `a`'s mean minus `b`'s, as % of `b`'s mean (Welch's t, for runs
/// of unequal spread). None when either side has fewer than two runs or b's mean is 0.
pub(crate) fn relative_difference(a: &Interval, b: &Interval) -> Option<(f64, f64, f64)> {
    if a.n < 2 || b.n < 2 || b.mean == 0.0 {
        return None;
    }
    let (va, vb) = (a.sd.powi(2) / a.n as f64, b.sd.powi(2) / b.n as f64);
    let se = (va + vb).sqrt();
    let df = if se > 0.0 {
        (va + vb).powi(2) / (va.powi(2) / (a.n - 1) as f64 + vb.powi(2) / (b.n - 1) as f64)
    } else {
        f64::INFINITY
    };
    let t = if df.is_finite() {
        t975(df.floor() as usize)
    } else {
        1.96
    };
    let d = a.mean - b.mean;
    let pct = |x: f64| x / b.mean.abs() * 100.0;
    Some((pct(d), pct(d - t * se), pct(d + t * se)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_the_t_interval_of_the_mean() {
        let i = interval(&[10.0, 12.0, 11.0, 13.0, 9.0]).unwrap();
        assert_eq!(i.mean, 11.0);
        assert!((i.sd - 1.5811).abs() < 1e-3);
        // t(4) = 2.776: 11 ± 2.776 · 1.5811 / √5 = 11 ± 1.963.
        assert!((i.low - 9.037).abs() < 1e-2 && (i.high - 12.963).abs() < 1e-2);
        assert!((i.cv - 0.1437).abs() < 1e-3);
        assert!(interval(&[1.0]).is_none());
        let b = interval(&[10.0, 10.5, 9.5]).unwrap();
        let (d, lo, hi) = relative_difference(&i, &b).unwrap();
        assert!((d - 10.0).abs() < 1e-9 && lo < d && d < hi);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = stats(&(1..=100).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!(
            (s.p50, s.p90, s.p99, s.min, s.max),
            (50.0, 90.0, 99.0, 1.0, 100.0)
        );
        assert_eq!(s.at(Pct::P90), 90.0);
    }
}
