//! Progress from a job's log: the recipe's pattern (`step (\d+)/(\d+)`) read on each line.

/// The recipe's pattern, compiled; matched lines give (done, total).
pub struct Progress {
    re: regex::Regex,
}

impl Progress {
    /// None when the recipe has no pattern (or, after `check`, never: a bad one).
    pub fn new(pattern: Option<&str>) -> Option<Progress> {
        regex::Regex::new(pattern?).ok().map(|re| Progress { re })
    }

    /// (done, total) when `line` matches with two numbers.
    pub fn read(&self, line: &str) -> Option<(u64, u64)> {
        let caps = self.re.captures(line)?;
        let done = caps.get(1)?.as_str().parse().ok()?;
        let total = caps.get(2)?.as_str().parse().ok()?;
        Some((done, total))
    }
}

/// The last (done, total) in `log`.
pub fn last_in(pattern: Option<&str>, log: &str) -> Option<(u64, u64)> {
    let p = Progress::new(pattern)?;
    log.lines().rev().find_map(|l| p.read(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_done_and_total() {
        let p = Progress::new(Some(r"step (\d+)/(\d+)")).unwrap();
        assert_eq!(p.read("[train] step 50/162 loss=0.9"), Some((50, 162)));
        assert_eq!(p.read("loading"), None);
        assert!(Progress::new(None).is_none());
        let log = "step 1/4\nstep 2/4\nsaving\n";
        assert_eq!(last_in(Some(r"step (\d+)/(\d+)"), log), Some((2, 4)));
    }
}
