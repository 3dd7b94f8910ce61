//! The candidate against production on the same items: which items each got right, and
//! whether a difference is more than chance — the exact McNemar test on the discordant
//! items (those one got right and the other wrong), one-sided, at 95%. Too few discordant
//! items and no difference can reach significance either way: then a gate that the point
//! estimate would fail is inconclusive, so one unlucky item does not decide.

use serde::{Deserialize, Serialize};

use super::Report;

/// The significance level of the paired test.
pub(crate) const ALPHA: f64 = 0.05;

/// One item as both answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PairedItem {
    key: String,
    candidate: bool,
    production: bool,
}

/// Candidate and production over the items both were asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Paired {
    /// Items both answered (same set, place and content).
    pub(in crate::eval) items: usize,
    candidate_right: usize,
    production_right: usize,
    /// Keys of the items production got right and the candidate wrong.
    lost: Vec<String>,
    /// Keys of the items the candidate got right and production wrong.
    pub(in crate::eval) gained: Vec<String>,
    /// Candidate's accuracy minus production's, in points, over the paired items.
    pub(in crate::eval) difference_points: f64,
    /// One-sided exact McNemar p-value that the candidate is worse (lost ≥ as observed).
    pub(in crate::eval) p_worse: f64,
    /// The same, that it is better.
    pub(in crate::eval) p_better: f64,
    /// Items of either side the other was not asked (another version of the set).
    unpaired: usize,
    per_item: Vec<PairedItem>,
}

/// P(X ≥ k) for X ~ Binomial(n, 1/2): the exact one-sided McNemar p-value.
pub(crate) fn binomial_tail(n: usize, k: usize) -> f64 {
    binomial_tail_p(n, k, 0.5)
}

/// P(X ≥ k) for X ~ Binomial(n, p).
pub(crate) fn binomial_tail_p(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    // ln m! by running sums, then the tail's terms in a stable order.
    let ln_fact: Vec<f64> = std::iter::once(0.0)
        .chain((1..=n).scan(0.0, |acc, x| {
            *acc += (x as f64).ln();
            Some(*acc)
        }))
        .collect();
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let total: f64 = (k..=n)
        .map(|i| {
            let ln_choose = ln_fact[n] - ln_fact[i] - ln_fact[n - i];
            (ln_choose + i as f64 * lp + (n - i) as f64 * lq).exp()
        })
        .sum();
    total.min(1.0)
}

/// The fewest discordant items with which the test can reach significance at all (all
/// of them in one direction): 5 at 95%.
pub(crate) fn min_discordant() -> usize {
    (1..)
        .find(|&n| binomial_tail(n, n) < ALPHA)
        .expect("0.5^n falls")
}

/// Pairs the two reports by item key.
pub(crate) fn pair(candidate: &Report, production: &Report) -> Paired {
    let theirs = production.answered();
    let mut per_item = Vec::new();
    for i in candidate.items.iter().filter(|i| i.failed.is_none()) {
        if let Some(&p) = theirs.get(i.key.as_str()) {
            per_item.push(PairedItem {
                key: i.key.clone(),
                candidate: i.right,
                production: p,
            });
        }
    }
    let n = per_item.len();
    let lost: Vec<String> = per_item
        .iter()
        .filter(|p| p.production && !p.candidate)
        .map(|p| p.key.clone())
        .collect();
    let gained: Vec<String> = per_item
        .iter()
        .filter(|p| p.candidate && !p.production)
        .map(|p| p.key.clone())
        .collect();
    let discordant = lost.len() + gained.len();
    let candidate_right = per_item.iter().filter(|p| p.candidate).count();
    let production_right = per_item.iter().filter(|p| p.production).count();
    Paired {
        items: n,
        candidate_right,
        production_right,
        difference_points: if n == 0 {
            0.0
        } else {
            (candidate_right as f64 - production_right as f64) / n as f64 * 100.0
        },
        p_worse: binomial_tail(discordant, lost.len()),
        p_better: binomial_tail(discordant, gained.len()),
        unpaired: candidate.items.len() + production.items.len() - 2 * n,
        lost,
        gained,
        per_item,
    }
}

impl Paired {
    pub(crate) fn lost(&self) -> &[String] {
        &self.lost
    }

    /// One line: both scores and the discordant counts with the test's p-value.
    pub(crate) fn describe(&self) -> String {
        self.named("candidate", "production")
    }

    /// `describe` with the two sides named (a try's variant against variant 0).
    pub(crate) fn named(&self, mine: &str, theirs: &str) -> String {
        let pct = |r: usize| {
            if self.items == 0 {
                0.0
            } else {
                r as f64 / self.items as f64 * 100.0
            }
        };
        format!(
            "{mine} {}/{} ({:.1}%), {theirs} {}/{} ({:.1}%) on the same {} items: {:+.1} \
             points; {} lost, {} gained (exact McNemar, one-sided: p = {:.3} that it is worse)",
            self.candidate_right,
            self.items,
            pct(self.candidate_right),
            self.production_right,
            self.items,
            pct(self.production_right),
            self.items,
            self.difference_points,
            self.lost.len(),
            self.gained.len(),
            self.p_worse
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_tail_matches_hand_figures() {
        assert!((binomial_tail(5, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((binomial_tail(4, 4) - 1.0 / 16.0).abs() < 1e-12);
        // 6 discordant, 5 of them lost: (6 + 1) / 64.
        assert!((binomial_tail(6, 5) - 7.0 / 64.0).abs() < 1e-12);
        assert_eq!(binomial_tail(0, 0), 1.0);
        assert_eq!(binomial_tail(3, 0), 1.0);
        assert!((binomial_tail(200, 100) - 0.5281).abs() < 1e-3);
        assert_eq!(min_discordant(), 5);
    }
}
