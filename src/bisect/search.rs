//! Where a bisect stands: which digest the two ends name (a digest, a run id or a date),
//! and, from the verdicts so far, the next digest to measure or the answer.

use crate::error::{Error, Result};
use crate::images::history::History;

/// What is known of one digest in the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    Good,
    Bad,
    /// Could not be measured (not pullable, did not start): passed over.
    Skipped,
    Unknown,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Measure the digest at this index.
    Measure(usize),
    /// The last good and the first bad digest; indices between them could not be measured.
    Done { last_good: usize, first_bad: usize },
}

/// The next digest to measure: the unknown one nearest the middle of the range between the
/// newest good digest and the oldest bad one after it. `known[0]` is the good end, the
/// last the bad end.
pub(crate) fn next(known: &[Known]) -> Next {
    let first_bad = known
        .iter()
        .position(|k| *k == Known::Bad)
        .unwrap_or(known.len() - 1);
    let last_good = known[..first_bad]
        .iter()
        .rposition(|k| *k == Known::Good)
        .unwrap_or(0);
    let mid = (last_good + first_bad) / 2;
    let open = (last_good + 1..first_bad).filter(|&i| known[i] == Known::Unknown);
    match open.min_by_key(|&i| (i.abs_diff(mid), i)) {
        Some(i) => Next::Measure(i),
        None => Next::Done {
            last_good,
            first_bad,
        },
    }
}

/// How many measurements a range of `candidates` digests between the ends needs at most.
pub(crate) fn steps_for(candidates: usize) -> usize {
    (usize::BITS - candidates.leading_zeros()) as usize
}

/// The history index a REF names: a run id (the digest that run used), a date (what this
/// machine had pinned, pulled or run last by then: `2026-05-01` is up to the end of that
/// day), or a digest (a unique prefix will do).
pub(crate) fn resolve(h: &History, text: &str) -> Result<usize> {
    if let Some(i) = h
        .entries
        .iter()
        .position(|e| e.runs.iter().any(|r| r.run_id == text))
    {
        return Ok(i);
    }
    if let Some(by) = date_bound(text) {
        return h
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.first_seen.as_str() <= by.as_str())
            .max_by(|a, b| a.1.first_seen.cmp(&b.1.first_seen))
            .map(|(i, _)| i)
            .ok_or_else(|| Error::NoSuch {
                what: crate::error::Thing::Digest,
                name: text.to_string(),
                hint: crate::error::Hint::BeforeOldest {
                    recipe: h.recipe.clone(),
                    oldest: h.entries.first().map(|e| e.first_seen.clone()),
                },
            });
    }
    if is_run_id(text) {
        return Err(Error::NoSuch {
            what: crate::error::Thing::Run,
            name: text.to_string(),
            hint: crate::error::Hint::NoRunWithImage {
                recipe: h.recipe.clone(),
            },
        });
    }
    let e = h.lookup(text)?;
    Ok(h.position(&e.digest).expect("looked up in this history"))
}

/// `20261123-015007123-3f2a`.
fn is_run_id(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 8
        && parts[..2]
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_digit()))
}

/// The latest UTC stamp a date (or a stamp) stands for: `2026-05-01` → its last second.
fn date_bound(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let date = b.len() >= 10
        && b[4] == b'-'
        && b[7] == b'-'
        && [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .all(|&i| b[i].is_ascii_digit());
    match (date, b.len()) {
        (true, 10) => Some(format!("{text}T23:59:59Z")),
        (true, 20) if b[10] == b'T' && b[19] == b'Z' => Some(text.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::history::{Entry, Order, RunUse};
    use crate::lock::Source;
    use Known::*;

    #[test]
    fn eight_digests_take_three_steps_to_the_fifth() {
        // Good end 1, bad end 8; 5 onward are bad.
        let truth = |i: usize| if i >= 4 { Bad } else { Good };
        let mut known = vec![Unknown; 8];
        (known[0], known[7]) = (Good, Bad);
        let mut steps = Vec::new();
        loop {
            match next(&known) {
                Next::Measure(i) => {
                    steps.push(i);
                    known[i] = truth(i);
                }
                Next::Done {
                    last_good,
                    first_bad,
                } => {
                    assert_eq!((last_good, first_bad), (3, 4));
                    break;
                }
            }
        }
        assert_eq!(steps, [3, 5, 4]);
        assert!(steps.len() <= steps_for(6));
        assert_eq!(steps_for(6), 3);
        assert_eq!(steps_for(0), 0);
    }

    #[test]
    fn a_skipped_digest_is_passed_over_and_left_in_the_answer() {
        let known = [Good, Unknown, Skipped, Unknown, Bad];
        assert_eq!(next(&known), Next::Measure(1));
        let known = [Good, Good, Skipped, Bad, Bad];
        assert_eq!(
            next(&known),
            Next::Done {
                last_good: 1,
                first_bad: 3
            }
        );
        // A good digest after a bad one does not move the range past the bad one.
        let known = [Good, Bad, Good, Unknown, Bad];
        assert_eq!(
            next(&known),
            Next::Done {
                last_good: 0,
                first_bad: 1
            }
        );
    }

    fn entry(d: &str, seen: &str, run: Option<&str>) -> Entry {
        Entry {
            digest: d.into(),
            registry: true,
            image_id: None,
            created: None,
            first_seen: seen.into(),
            last_seen: seen.into(),
            seen: vec![],
            pinned: false,
            runs: run
                .map(|r| RunUse {
                    run_id: r.into(),
                    at: seen.into(),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            kept: None,
            present: true,
        }
    }

    #[test]
    fn refs_name_digests_by_prefix_run_or_date() {
        let h = History {
            recipe: "sim".into(),
            reference: "r/sim:n".into(),
            source: Source::Registry,
            order: Order::FirstSeen,
            entries: vec![
                entry("sha256:aaaa11", "2026-05-01T10:00:00Z", None),
                entry(
                    "sha256:bbbb22",
                    "2026-05-02T10:00:00Z",
                    Some("20260502-110000000-ab12"),
                ),
                entry("sha256:cccc33", "2026-05-03T10:00:00Z", None),
            ],
            damaged: vec![],
        };
        assert_eq!(resolve(&h, "bbbb22").unwrap(), 1);
        assert_eq!(resolve(&h, "sha256:cccc33").unwrap(), 2);
        assert_eq!(resolve(&h, "20260502-110000000-ab12").unwrap(), 1);
        assert_eq!(resolve(&h, "2026-05-02").unwrap(), 1);
        assert_eq!(resolve(&h, "2026-05-03T09:00:00Z").unwrap(), 1);
        assert!(resolve(&h, "2026-04-30")
            .unwrap_err()
            .to_string()
            .contains("no digest from before then"));
        assert!(resolve(&h, "20260101-000000000-0000")
            .unwrap_err()
            .to_string()
            .contains("no run of sim with an image"));
    }
}
