//! Degenerate output, recognised as it streams: a repetition loop (the same run of words
//! over and over, one character repeated) or garbled text (replacement and control
//! characters where words should be) — what an engine whose kernels or KV cache went bad
//! produces while `/health` stays green. Incremental and bounded: a ring of word hashes and
//! a counter per period, so the front door can run it on every token of every stream.

/// Longest repeated unit looked for, in words.
const MAX_PERIOD: usize = 32;
/// Word hashes kept: enough to compare the newest with one `MAX_PERIOD` back (a ring of
/// `MAX_PERIOD` or fewer would compare a slot with itself).
const RING: usize = 2 * MAX_PERIOD;
/// A run of non-space characters counts as one word per this many characters, so a
/// stream with no spaces (`!!!!!!!!…`, `0,0,0,…`) still has words to compare.
const WORD_CHARS: u32 = 8;
/// Words that must repeat in a row: at least this many, and the unit at least 4 times.
const MIN_REPEATED: u32 = 12;
const MIN_COPIES: u32 = 4;
/// Garbled: at least this many characters seen, and this share of them unprintable.
const MIN_CHARS: u32 = 32;
const GARBLED_PCT: u32 = 10;

/// What made an answer degenerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Degeneracy {
    /// A unit of `period` words repeated `copies` times in a row.
    Loop { period: usize, copies: u32 },
    /// `pct`% of the characters were replacement or control characters.
    Garbled { pct: u32 },
}

impl std::fmt::Display for Degeneracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Degeneracy::Loop { period, copies } => write!(
                f,
                "a repetition loop ({copies} copies of a {period}-word run in a row)"
            ),
            Degeneracy::Garbled { pct } => {
                write!(f, "garbled text ({pct}% replacement or control characters)")
            }
        }
    }
}

/// The scanner's state for one answer.
#[derive(Debug, Clone)]
pub(crate) struct Scanner {
    ring: [u64; RING],
    /// Words seen so far.
    words: usize,
    /// For each period p: how many words in a row equalled the word p before them.
    run: [u32; MAX_PERIOD + 1],
    /// The word being read: its hash and length.
    hash: u64,
    len: u32,
    chars: u32,
    bad: u32,
    looped: Option<Degeneracy>,
}

impl Default for Scanner {
    fn default() -> Scanner {
        Scanner {
            ring: [0; RING],
            words: 0,
            run: [0; MAX_PERIOD + 1],
            hash: FNV_OFFSET,
            len: 0,
            chars: 0,
            bad: 0,
            looped: None,
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl Scanner {
    /// Reads the next piece of the answer.
    pub(crate) fn feed(&mut self, text: &str) {
        for c in text.chars() {
            self.chars += 1;
            if c == '\u{fffd}' || (c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
                self.bad += 1;
            }
            if c.is_whitespace() {
                self.end_word();
                continue;
            }
            self.hash = (self.hash ^ c as u64).wrapping_mul(FNV_PRIME);
            self.len += 1;
            if self.len == WORD_CHARS {
                self.end_word();
            }
        }
    }

    fn end_word(&mut self) {
        if self.len == 0 {
            return;
        }
        let h = self.hash;
        self.hash = FNV_OFFSET;
        self.len = 0;
        let i = self.words;
        self.ring[i % RING] = h;
        self.words += 1;
        for p in 1..=MAX_PERIOD.min(i) {
            if self.ring[(i - p) % RING] == h {
                self.run[p] += 1;
                let repeated = self.run[p] + p as u32;
                let copies = repeated / p as u32;
                if self.looped.is_none() && self.run[p] >= MIN_REPEATED && copies >= MIN_COPIES {
                    self.looped = Some(Degeneracy::Loop { period: p, copies });
                }
            } else {
                self.run[p] = 0;
            }
        }
    }

    /// What was wrong with the answer so far, if anything (the last word counts once the
    /// answer ended: call `finish` first).
    pub(crate) fn verdict(&self) -> Option<Degeneracy> {
        if let Some(l) = self.looped {
            return Some(l);
        }
        (self.chars >= MIN_CHARS && self.bad * 100 >= self.chars * GARBLED_PCT).then(|| {
            Degeneracy::Garbled {
                pct: self.bad * 100 / self.chars.max(1),
            }
        })
    }

    /// The answer ended: its last word counts.
    pub(crate) fn finish(&mut self) {
        self.end_word();
    }
}

/// Whether a whole answer is degenerate, and how.
pub(crate) fn degenerate(text: &str) -> Option<Degeneracy> {
    let mut s = Scanner::default();
    s.feed(text);
    s.finish();
    s.verdict()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_and_garble_are_found_and_prose_is_not() {
        let phrase = "I think that the answer is ";
        assert!(matches!(
            degenerate(&phrase.repeat(5)),
            Some(Degeneracy::Loop { period: 6, .. })
        ));
        assert!(degenerate(&"0, ".repeat(40)).is_some());
        assert!(degenerate(&"!".repeat(200)).is_some());
        assert!(degenerate(&"ababab".repeat(30)).is_some());
        assert!(matches!(
            degenerate("Tokyo \u{fffd}\u{fffd} is\u{fffd} \u{1}\u{fffd}\u{fffd} the \u{fffd}\u{fffd}\u{fffd}\u{fffd} capital"),
            Some(Degeneracy::Garbled { .. })
        ));
        for fine in [
            "Tokyo is the capital of Japan. It has about 14 million people and many trains.",
            "Three boxes with five balls each make 15 balls. I can say more about that if you would like to hear it. I can say more about that if you would like to hear it.",
            "very very very good",
            "東京は日本の首都です。人口は約千四百万人で、多くの電車があります。東京は日本の首都です。",
            "",
        ] {
            assert_eq!(degenerate(fine), None, "{fine}");
        }
    }

    #[test]
    fn split_anywhere_the_verdict_is_the_same() {
        let text = format!("Sure. {}", "the cat sat on the mat and ".repeat(6));
        let whole = degenerate(&text);
        assert!(whole.is_some());
        for step in [1, 2, 3, 7] {
            let mut s = Scanner::default();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(step) {
                s.feed(&piece.iter().collect::<String>());
            }
            s.finish();
            assert_eq!(s.verdict(), whole, "pieces of {step}");
        }
    }
}
