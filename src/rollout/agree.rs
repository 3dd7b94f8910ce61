//! Whether two answers to one greedy request say the same thing. Two servers of one model
//! answer a temperature-0 request with the same words, or nearly (batching and kernels
//! shift a token now and then, after which the rest may differ); a server that is wrong
//! differs from the first words on. So: the same words, or a long common start, or most
//! of the words shared.

/// Words compared: lower-cased, punctuation at their edges dropped.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether `a` and `b` agree.
pub(crate) fn agree(a: &str, b: &str) -> bool {
    let (a, b) = (words(a), words(b));
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    if short.is_empty() {
        return false;
    }
    // A token that came out differently late in the answer: the start carries it.
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    if common * 2 >= long.len() {
        return true;
    }
    dice(short, long) >= 0.8
}

/// The Dice coefficient of the two answers' word multisets.
fn dice(a: &[String], b: &[String]) -> f64 {
    let mut counts: std::collections::HashMap<&str, i64> = Default::default();
    for w in a {
        *counts.entry(w).or_default() += 1;
    }
    let shared: i64 = b
        .iter()
        .map(|w| match counts.get_mut(w.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                1
            }
            _ => 0,
        })
        .sum();
    2.0 * shared as f64 / (a.len() + b.len()) as f64
}

#[cfg(test)]
mod tests {
    use super::agree;

    #[test]
    fn the_same_answer_agrees_and_a_wrong_one_does_not() {
        assert!(agree(
            "The capital of France is Paris.",
            "the capital of France is Paris"
        ));
        // One token different late: the start is long and common.
        assert!(agree(
            "Paris is the capital and largest city of France, on the Seine.",
            "Paris is the capital and largest city of France, by the Seine river."
        ));
        assert!(!agree(
            "The capital of France is Paris.",
            "The capital of France is Lyon, a city in the south of Spain."
        ));
        assert!(!agree(
            "2 + 3 = 5",
            "2 + 3 equals 23, which is a prime number greater"
        ));
        assert!(!agree("", "Paris"));
        assert!(agree("", ""));
    }
}
