//! Fuzz target for everything sparkctl parses from a file a person wrote: recipes, suites
//! and images.lock. proptest generates each input from a real file (the shipped recipes,
//! suites and lock, and the bad-recipe corpus) with a few mutations drawn from YAML's
//! syntax and the values that broke sparkctl before (huge durations, deep nesting, tags,
//! duplicate keys, bad UTF-8, malformed digests); every input goes through all three
//! parsers. A parser may refuse an input — that is the point — but must not panic, and no
//! input may take a second.
//!
//! Too long for CI (docs/GUIDE.md: "Fuzzing"):
//!
//!   cargo test --release --test it fuzz_parsers:: -- --ignored --nocapture
//!
//! `FUZZ_CASES` sets the number of inputs (default 1,000,000). It prints the count and the
//! slowest input's time, and fails on a panic (with the input, shrunk) or on an input
//! slower than 1 s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Real files to mutate: what sparkctl reads every day, and the corpus of mistakes.
fn seeds() -> Vec<Vec<u8>> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![repo.join("images.lock")];
    for dir in ["recipes", "recipes/suites", "tests/bad-recipes"] {
        for e in std::fs::read_dir(repo.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// Fragments worth inserting: YAML's indicators and the values that once broke sparkctl.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "? ",
    ", ",
    "\n",
    "\n  ",
    "    ",
    "\t",
    "#",
    "'",
    "\"",
    "&a ",
    "*a",
    "!!str ",
    "!!python/name:os.system ",
    "!x ",
    "~",
    "null",
    "true",
    "<<: ",
    "|\n",
    ">-\n",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "%TAG ! tag:x,2000:\n",
    "\\e[31m",
    "18446744073709551616s",
    "1e400",
    "-2",
    "0s",
    "-1",
    "99999999999999999999t",
    "@sha256:1234",
    "vllm/vLLM:-x",
    "\u{0}",
    "\u{7f}",
    "\u{202e}",
    "é",
    "ﬀ",
    "thinking_leak: \"== 0%\"\n",
    "port: 70000",
    "timeout: 6m",
    "args: [null, true]",
    "name: x\n",
    "name: x\n",
    "gates:\n    a: b\n    a: c\n",
];

#[derive(Debug, Clone)]
enum Mutation {
    Insert {
        at: usize,
        token: usize,
        times: usize,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Bytes {
        at: usize,
        bytes: Vec<u8>,
    },
    DuplicateLine {
        line: usize,
    },
    Truncate {
        at: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 0..TOKENS.len(), prop_oneof![9 => Just(1usize), 1 => 1usize..3000])
            .prop_map(|(at, token, times)| Mutation::Insert { at, token, times }),
        2 => (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        2 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Bytes { at, bytes }),
        1 => any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn apply(mut text: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = text.len();
        let at = |a: usize| if len == 0 { 0 } else { a % (len + 1) };
        match m {
            Mutation::Insert {
                at: a,
                token,
                times,
            } => {
                let piece = TOKENS[*token].repeat(*times);
                let i = at(*a);
                text.splice(i..i, piece.into_bytes());
            }
            Mutation::Delete { at: a, len: n } => {
                let i = at(*a).min(len);
                text.drain(i..(i + n).min(len));
            }
            Mutation::Bytes { at: a, bytes } => {
                let i = at(*a);
                text.splice(i..i, bytes.iter().copied());
            }
            Mutation::DuplicateLine { line } => {
                let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
                let n = line % lines.len().max(1);
                let mut out = Vec::with_capacity(len * 2);
                for (i, l) in lines.iter().enumerate() {
                    out.extend_from_slice(l);
                    out.push(b'\n');
                    if i == n {
                        out.extend_from_slice(l);
                        out.push(b'\n');
                    }
                }
                text = out;
            }
            Mutation::Truncate { at: a } => text.truncate(at(*a)),
        }
    }
    text
}

/// An input that takes this long is a failure.
const SLOW: Duration = Duration::from_secs(1);

/// All three parsers on one input; the slowest of them.
fn parse_all(input: &[u8]) -> Duration {
    let mut slowest = Duration::ZERO;
    // An input is as slow as the fastest of up to three parses: a hang or a blow-up repeats,
    // a loaded CI machine's pause does not (a debug build beside other tests once took
    // 1.96 s over an input with 30 bytes cut out of a shipped recipe).
    let mut timed = |f: &dyn Fn()| {
        let mut least = Duration::MAX;
        for _ in 0..3 {
            let began = Instant::now();
            f();
            least = least.min(began.elapsed());
            if least < SLOW {
                break;
            }
        }
        slowest = slowest.max(least);
    };
    timed(&|| {
        let _ = sparkctl::testkit::parse_recipe(Path::new("recipes/demo-candidate.yaml"), input);
    });
    timed(&|| {
        let _ = sparkctl::testkit::Lock::parse(Path::new("images.lock"), input);
    });
    timed(&|| {
        let _ = sparkctl::testkit::from_slice::<sparkctl::testkit::Suite>(
            Path::new("recipes/suites/quick.yaml"),
            input,
            "see recipes/suites/voice-assistant.yaml",
        );
    });
    slowest
}

#[test]
#[ignore = "a million inputs: minutes, not CI (docs/GUIDE.md: Fuzzing)"]
fn recipe_suite_and_lock_parsers_never_panic_or_hang() {
    let cases: u32 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let seeds = seeds();
    let strategy = (0..seeds.len(), proptest::collection::vec(mutation(), 1..6));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    // runner.run takes a Fn: the tallies live in cells.
    let count = std::cell::Cell::new(0u64);
    let slowest = std::cell::RefCell::new((Duration::ZERO, Vec::new()));
    let began = Instant::now();
    let result = runner.run(&strategy, |(seed, mutations)| {
        let input = apply(seeds[seed].clone(), &mutations);
        let took = parse_all(&input);
        count.set(count.get() + 1);
        if took > slowest.borrow().0 {
            *slowest.borrow_mut() = (took, input.clone());
        }
        if took >= SLOW {
            return Err(TestCaseError::fail(format!("took {took:?}")));
        }
        Ok(())
    });
    let (count, slowest) = (count.get(), slowest.into_inner());
    let shown = String::from_utf8_lossy(&slowest.1);
    println!(
        "fuzz: {count} inputs (each through the recipe, suite and lock parsers) in {:.1?}; \
         slowest input {:.2?} ({} bytes, starts {:?})",
        began.elapsed(),
        slowest.0,
        slowest.1.len(),
        shown.chars().take(80).collect::<String>()
    );
    result.unwrap();
}

#[test]
fn the_fuzz_harness_itself_runs() {
    // A few hundred inputs in CI, so the target keeps compiling and working.
    let seeds = seeds();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(0..seeds.len(), proptest::collection::vec(mutation(), 1..6)),
            |(s, m)| {
                let took = parse_all(&apply(seeds[s].clone(), &m));
                prop_assert!(took < SLOW, "took {took:?}");
                Ok(())
            },
        )
        .unwrap();
}
