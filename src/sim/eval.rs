//! The simulated engine's answers to the built-in evaluation sets: it knows each item (the
//! sets are built into the binary), so it answers right — except a scripted share
//! (`--eval-wrong 20%`), the same items every time, which it answers fluently and wrong: a
//! "bad night" whose model gets that many points fewer right.

use crate::eval::{Answer, EvalSet};

/// `20%` or `0.2`: a share from 0 to 1.
pub(super) fn share(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a share: give 20% or 0.2")),
    }
}

/// Whether item `i` of `set` is among the `wrong` share answered wrong: the items whose
/// keys sort first, so a given share picks the same items on every run and every server.
fn scripted_wrong(set: &EvalSet, i: usize, wrong: f64) -> bool {
    let n = set.items.len();
    let k = (n as f64 * wrong).round() as usize;
    if k == 0 {
        return false;
    }
    // The key's digest part orders the items pseudo-randomly but fixedly.
    let digest = |j: usize| {
        let key = set.key(j);
        key.rsplit('@').next().unwrap_or_default().to_string()
    };
    let mine = digest(i);
    let before = (0..n)
        .filter(|&j| (digest(j), j) < (mine.clone(), i))
        .count();
    before < k
}

/// The answer to a built-in item, if the request asks one.
pub(super) fn answer(system: Option<&str>, prompt: &str, wrong: f64) -> Option<Answer> {
    let (set, i) = crate::eval::built_in_item(system, prompt)?;
    let check = &set.items[i].check;
    Some(if scripted_wrong(set, i, wrong) {
        check.wrong_answer()
    } else {
        check.right_answer()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_wrong_exactly_and_always_the_same_items() {
        assert_eq!(share("20%"), Ok(0.2));
        assert_eq!(share("0.25"), Ok(0.25));
        assert!(share("120%").is_err());
        let sets = crate::eval::load_all(
            &["arithmetic".to_string()],
            std::path::Path::new("/nonexistent"),
        )
        .unwrap();
        let set = &sets[0];
        let wrong: Vec<usize> = (0..set.items.len())
            .filter(|&i| scripted_wrong(set, i, 0.2))
            .collect();
        assert_eq!(wrong.len(), 5, "{wrong:?}");
        let again: Vec<usize> = (0..set.items.len())
            .filter(|&i| scripted_wrong(set, i, 0.2))
            .collect();
        assert_eq!(wrong, again);
        // A larger share keeps the smaller one's items wrong.
        let more: Vec<usize> = (0..set.items.len())
            .filter(|&i| scripted_wrong(set, i, 0.4))
            .collect();
        assert!(wrong.iter().all(|i| more.contains(i)));
        let item = &set.items[wrong[0]];
        let a = answer(set.system.as_deref(), &item.prompt, 0.2).unwrap();
        assert!(item.check.wrong(&a).is_some());
        let right = (0..set.items.len()).find(|i| !wrong.contains(i)).unwrap();
        let a = answer(set.system.as_deref(), &set.items[right].prompt, 0.2).unwrap();
        assert_eq!(set.items[right].check.wrong(&a), None);
        assert!(answer(None, "hello there", 0.0).is_none());
    }
}
