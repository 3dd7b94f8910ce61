//! A gate's rule as written: an operator and a number (`>= 60%`, `<= 200ms`), or, for the
//! evaluation gate, production's figure and an offset in points (`>= production - 3`).

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ge,
    Le,
    Lt,
    Gt,
}

/// `OP NUMBER[%|ms]` (`>= 60%`, `== 0%`, `<= 200ms`, `>= 25`) or `OP production [± N]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rule {
    pub(crate) op: Op,
    /// The number; for a rule on production, the offset from production's figure.
    pub(crate) threshold: f64,
    /// `production - 3`: the figure judged is the difference from production's.
    pub(crate) of_production: bool,
}

impl FromStr for Rule {
    type Err = String;
    fn from_str(rule: &str) -> Result<Rule, String> {
        let bad = || {
            format!(
                "`{rule}` is not a gate rule: write an operator and a number, e.g. \"== 0%\", \
                 \">= 60%\" or \"<= 1500ms\" (eval_accuracy also takes \">= production - 3\")"
            )
        };
        let r = rule.trim();
        let (op, text) = [
            ("==", Op::Eq),
            (">=", Op::Ge),
            ("<=", Op::Le),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .into_iter()
        .find_map(|(t, op)| r.strip_prefix(t).map(|rest| (op, rest)))
        .ok_or_else(bad)?;
        let text = text.trim();
        let (of_production, text) = match text.strip_prefix("production") {
            Some(rest) => (true, rest.trim()),
            None => (false, text),
        };
        let number = text
            .strip_suffix('%')
            .or_else(|| text.strip_suffix("ms"))
            .unwrap_or(text)
            .trim();
        let threshold: f64 = match (of_production, number) {
            (true, "") => 0.0,
            (true, n) => {
                let (sign, n) = match (n.strip_prefix('-'), n.strip_prefix('+')) {
                    (Some(n), _) => (-1.0, n),
                    (_, Some(n)) => (1.0, n),
                    _ => return Err(bad()),
                };
                sign * n.trim().parse::<f64>().map_err(|_| bad())?
            }
            (false, n) => n.parse().map_err(|_| bad())?,
        };
        if !threshold.is_finite() {
            return Err(bad());
        }
        Ok(Rule {
            op,
            threshold,
            of_production,
        })
    }
}

impl Op {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ge => ">=",
            Op::Le => "<=",
            Op::Lt => "<",
            Op::Gt => ">",
        }
    }
}

impl Rule {
    pub(crate) fn holds(self, value: f64) -> bool {
        let t = self.threshold;
        match self.op {
            Op::Eq => (value - t).abs() < 1e-9,
            Op::Ge => value >= t - 1e-9,
            Op::Le => value <= t + 1e-9,
            Op::Lt => value < t,
            Op::Gt => value > t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_rules_read_as_an_offset_in_points() {
        let r: Rule = ">= production - 3".parse().unwrap();
        assert!(r.of_production && r.op == Op::Ge && r.threshold == -3.0);
        assert!(r.holds(-2.0) && !r.holds(-4.0));
        let r: Rule = ">=production".parse().unwrap();
        assert_eq!((r.of_production, r.threshold), (true, 0.0));
        assert_eq!(
            ">= production + 1.5".parse::<Rule>().unwrap().threshold,
            1.5
        );
        assert!(">= production 3".parse::<Rule>().is_err());
        assert!(">= productoin - 3".parse::<Rule>().is_err());
        let r: Rule = ">= 60%".parse().unwrap();
        assert!(!r.of_production && r.threshold == 60.0);
    }
}
