//! Progress from a job's log: the recipe's pattern (`step (\d+)/(\d+)`) read on each line.

/// The recipe's pattern, compiled; matched lines give (done, total).
pub(crate) struct Progress {
    re: regex::Regex,
}

impl Progress {
    /// None when the recipe has no pattern (or, after `check`, never: a bad one).
    pub(crate) fn new(pattern: Option<&str>) -> Option<Progress> {
        regex::Regex::new(pattern?).ok().map(|re| Progress { re })
    }

    /// (done, total) when `line` matches with two numbers.
    pub(crate) fn read(&self, line: &str) -> Option<(u64, u64)> {
        let caps = self.re.captures(line)?;
        let done = caps.get(1)?.as_str().parse().ok()?;
        let total = caps.get(2)?.as_str().parse().ok()?;
        Some((done, total))
    }
}

/// Time left at the rate seen since the first reading (which may come mid-job, when a
/// follower attaches late: the steps before it are not counted as done in no time).
#[derive(Default)]
pub(crate) struct Eta {
    first: Option<(std::time::Instant, u64)>,
}

impl Eta {
    pub(crate) fn update(&mut self, done: u64, total: u64) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        let (t0, d0) = *self.first.get_or_insert((now, done));
        let steps = done.checked_sub(d0).filter(|s| *s > 0)?;
        let per_step = now.duration_since(t0).as_secs_f64() / steps as f64;
        Some(std::time::Duration::from_secs_f64(
            per_step * total.saturating_sub(done) as f64,
        ))
    }
}

/// The last (done, total) in `log`.
pub(crate) fn last_in(pattern: Option<&str>, log: &str) -> Option<(u64, u64)> {
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
        let mut eta = Eta::default();
        assert_eq!(eta.update(50, 100), None, "no rate from one reading");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let left = eta.update(60, 100).unwrap();
        assert!(left >= std::time::Duration::from_millis(70), "{left:?}");
        let log = "step 1/4\nstep 2/4\nsaving\n";
        assert_eq!(last_in(Some(r"step (\d+)/(\d+)"), log), Some((2, 4)));
    }
}
