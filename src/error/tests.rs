//! The error type's promises, checked over the source and the guide.

use super::*;
use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The variants whose payload is a bare `String` (`Failed(String)`, …), read from the
/// enum as declared: whatever they are given is words.
fn bare_string_variants() -> Vec<String> {
    let text = include_str!("mod.rs");
    let body = &text[text.find("pub enum Error {").unwrap()..];
    let body = &body[..body.find("\n}\n").unwrap()];
    body.lines()
        .filter_map(|l| l.trim().strip_suffix("(String),"))
        .map(String::from)
        .collect()
}

/// What follows `open` up to its matching close, skipping string and char literals.
fn bracketed(text: &str, open: usize) -> Option<&str> {
    let b = text.as_bytes();
    let (o, c) = (b[open], if b[open] == b'(' { b')' } else { b'}' });
    let (mut depth, mut i) = (1, open + 1);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') => i += 3,
            x if x == o => depth += 1,
            x if x == c => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[open + 1..i]);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `body` builds a String from words: a `format!`, or a literal with a space in
/// it made a String.
fn builds_words(body: &str) -> bool {
    if body.contains("format!(") {
        return true;
    }
    let made = [".into()", ".to_string()", ".to_owned()"];
    let mut rest = body;
    while let Some(at) = rest.find('"') {
        let lit = &rest[at + 1..];
        let mut end = 0;
        let b = lit.as_bytes();
        while end < b.len() && b[end] != b'"' {
            end += if b[end] == b'\\' { 2 } else { 1 };
        }
        let (words, after) = (&lit[..end.min(lit.len())], &lit[(end + 1).min(lit.len())..]);
        let string = made.iter().any(|m| after.trim_start().starts_with(m))
            || rest[..at].trim_end().ends_with("String::from(");
        if string && words.contains(char::is_whitespace) {
            return true;
        }
        rest = after;
    }
    false
}

/// The sites in `text` that write an error's words: each construction (not a pattern) of
/// a variant with a bare `String`, or one building a String from words for its fields.
fn wordy_sites(text: &str, bare: &[String]) -> Vec<usize> {
    let mut sites = Vec::new();
    for (at, _) in text.match_indices("Error::") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        if text[line_start..at].contains("//") {
            continue;
        }
        let rest = &text[at + "Error::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let after_name = at + "Error::".len() + name.len();
        let gap = text[after_name..].len() - text[after_name..].trim_start().len();
        let open = after_name + gap;
        if !matches!(text.as_bytes().get(open), Some(b'(' | b'{')) {
            continue;
        }
        let Some(body) = bracketed(text, open) else {
            continue;
        };
        let next = text[open + body.len() + 2..].trim_start_matches([')', ' ', '\n']);
        let pattern = body.trim() == "_"
            || body.trim_end().ends_with("..")
            || next.starts_with("=>")
            || next.starts_with('|')
            || (next.starts_with('=') && !next.starts_with("=="));
        if !pattern && (bare.contains(&name) || builds_words(body)) {
            sites.push(text[..at].matches('\n').count() + 1);
        }
    }
    sites
}

/// At most this many (174 when the cap was widened from `Failed`/`Usage` to every
/// construction; 39 since the typed detail; it only comes down).
const WORDED_AT_CALL_SITES: usize = 40;

/// The module's comment says so: callers pass facts and a variant's `Display` words
/// them; what a call site words itself stays a few one-offs. A new failure that recurs
/// wants its variant (or its member of a variant's detail), not a 41st site.
#[test]
fn the_errors_worded_at_their_call_sites_stay_few() {
    let bare = bare_string_variants();
    assert!(bare.contains(&"Failed".to_string()), "{bare:?}");
    // The scanner counts what it should, and not patterns nor facts.
    let probe = "let a = Error::Failed(text);\n\
        let b = Error::Stopped { what: format!(\"pid {pid}\"), fix: String::new() };\n\
        let c = Error::RecipeCannot { recipe, why: \"it is not {a} docker\".into() };\n\
        let d = Error::BadFlag { flag: \"--port\".into(), why: FlagProblem::Zero };\n\
        if matches!(e, Error::Failed(_)) {}\n\
        if let Err(Error::Failed(m)) = r {}\n\
        match e { Error::NoSuch { what, .. } => {} }\n\
        // Error::Failed(\"in a comment\")\n\
        let f = ModelError::Failed(x);";
    assert_eq!(wordy_sites(probe, &bare), [1, 2, 3]);

    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut worded = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(src.join("error"))) {
        let text = std::fs::read_to_string(file).unwrap();
        for line in wordy_sites(&text, &bare) {
            worded.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(
        worded.len() <= WORDED_AT_CALL_SITES,
        "{} errors worded at their call sites: {worded:#?}",
        worded.len()
    );
}

/// Every kind, for the guide's table.
const KINDS: [ErrorKind; 16] = [
    ErrorKind::Usage,
    ErrorKind::Invalid,
    ErrorKind::UnknownRecipe,
    ErrorKind::NotRunning,
    ErrorKind::EngineUnreachable,
    ErrorKind::LockHeld,
    ErrorKind::DoesNotFit,
    ErrorKind::PortTaken,
    ErrorKind::RejectedByGates,
    ErrorKind::Inconclusive,
    ErrorKind::ImageMissing,
    ErrorKind::AlreadyRunning,
    ErrorKind::FrontdoorUnreachable,
    ErrorKind::Interrupted,
    ErrorKind::Io,
    ErrorKind::Failed,
];

#[test]
fn the_guide_lists_every_kind() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/GUIDE.md"))
            .unwrap();
    for kind in KINDS {
        let word = serde_json::to_value(kind).unwrap();
        let row = format!("| `{}` |", word.as_str().unwrap());
        assert!(guide.contains(&row), "docs/GUIDE.md's kinds lack {row}");
    }
}

/// One fact, one kind, whoever meets it.
#[test]
fn the_same_fact_has_the_same_kind() {
    let engine = [Error::EngineUnreachable {
        cause: Reach::Needed(EngineNeed::Container {
            doing: "find",
            name: "x".into(),
        }),
    }];
    let missing = [
        ImageNeed::Start { recipe: "r".into() },
        ImageNeed::OfflinePin,
        ImageNeed::Read,
        ImageNeed::AfterPull,
    ]
    .map(|needed| Error::ImageMissing {
        image: "img:1".into(),
        needed,
    });
    for e in &missing {
        assert_eq!(e.kind(), ErrorKind::ImageMissing);
        assert!(e.to_string().starts_with("image img:1"), "{e}");
        assert!(e.to_string().contains("is not on this machine"), "{e}");
    }
    let undone = Error::Undone {
        what: Undoing::Adopt {
            name: "x".into(),
            put_back: Vec::new(),
            unrecorded: None,
        },
        cause: Box::new(engine.into_iter().next().unwrap()),
    };
    assert_eq!(
        undone.to_string(),
        "adopt x failed: cannot reach the Docker Engine (needed to find container x); is \
         dockerd running and may this user use its socket? `sparkctl doctor` checks the \
         machine\n  put back: nothing had changed"
    );
    assert_eq!(undone.kind(), ErrorKind::EngineUnreachable);
    assert_eq!(undone.exit_code(), 1);
    // A run interrupted on its way is an interrupt to scripts, however it was carried.
    let run = |cause| {
        Error::RunFailed(Box::new(RunFailure {
            what: "up x".into(),
            outcome: "interrupted".into(),
            cause,
            notes: String::new(),
            port: 8000,
            serving: "nothing".into(),
            record: Ok("r.json".into()),
        }))
    };
    let interrupted = run(Error::Interrupted(Interruption::Signal));
    assert_eq!(
        (interrupted.kind(), interrupted.exit_code()),
        (ErrorKind::Interrupted, 130)
    );
    assert!(interrupted
        .to_string()
        .starts_with("up x interrupted: interrupted\n"));
    let refused = run(Error::NotRunning { name: "x".into() });
    assert_eq!(
        (refused.kind(), refused.exit_code()),
        (ErrorKind::NotRunning, 1)
    );
    let bisect = |cause| {
        Error::BisectStopped(Box::new(BisectStopped {
            recipe: "r".into(),
            cause,
            put_back: vec!["stopped r".into()],
            kept: Ok(2),
        }))
    };
    let stopped = bisect(Error::Interrupted(Interruption::Signal));
    assert_eq!(
        (stopped.kind(), stopped.exit_code()),
        (ErrorKind::Interrupted, 130)
    );
    assert_eq!(
        stopped.to_string(),
        "bisect of r stopped: interrupted\n  stopped r\n  2 measurement(s) recorded; \
         `sparkctl bisect r --resume` goes on from them"
    );
    let failed = bisect(Error::NotRunning { name: "x".into() });
    assert_eq!((failed.kind(), failed.exit_code()), (ErrorKind::Failed, 1));
    let job = Error::NoSuch {
        what: Thing::JobRecipe,
        name: "q".into(),
        hint: Hint::None,
    };
    assert_eq!(job.kind(), ErrorKind::UnknownRecipe);
    assert_eq!(job.exit_code(), 2);
}

/// The typed detail words each error as its call site did: a sample across the files,
/// line continuations and optional parts included.
#[test]
fn the_detail_says_what_the_call_sites_said() {
    let short = crate::units::short_digest;
    let (a, b) = (
        "sha256:".to_string() + &"a".repeat(64),
        "sha256:".to_string() + &"b".repeat(64),
    );
    let cases: Vec<(Error, String)> = vec![
        (
            Error::Refused(Refusal::OutputNotWritable {
                file: "/r/j.yaml".into(),
                i: 0,
                path: "/out".into(),
                uid: 0,
                user: "1000:1000".into(),
            }),
            "/r/j.yaml: outputs[0].path /out belongs to uid 0 and the job runs as 1000:1000: it \
             could not write there; `sudo chown -R 1000:1000 /out` or choose another path; \
             nothing was started"
                .into(),
        ),
        (
            Error::RecipeCannot {
                recipe: "cand".into(),
                why: RecipeProblem::RolloutDoesNotFit {
                    mode: "canary",
                    production: "prod".into(),
                    memory: "M".into(),
                },
            },
            "cand: a canary needs production and the candidate running side by side, and it \
             does not fit beside production prod (M); with --no-rollout it is swapped in; \
             nothing was changed"
                .into(),
        ),
        (
            Error::BadFlag(FlagProblem::GoodNotBeforeBad {
                good: "g".into(),
                bad: "b".into(),
                digests: Box::new((a.clone(), b.clone())),
                same: false,
                name: "r".into(),
            }),
            format!(
                "--good g: {} is newer than --bad b ({}) in r's image history; a bisect looks \
                 for the first bad digest after a good one",
                short(&a),
                short(&b)
            ),
        ),
        (
            Error::NoSuch {
                what: Thing::EvalSet,
                name: "x".into(),
                hint: Hint::NotFileNorBuiltIn {
                    yaml: true,
                    file: "/e/x.yaml".into(),
                    built_in: vec!["a".into(), "b".into()],
                },
            },
            "no evaluation set `x`; not a .yaml file, not /e/x.yaml; built in: a, b".into(),
        ),
        (
            Error::AlreadyRunning(Running::Door {
                pid: 7,
                port: 8000,
                for_adopt: true,
            }),
            "a front door of this state dir is already running (pid 7, port 8000); adopt hands \
             over a port that another server holds, not the front door's"
                .into(),
        ),
        (
            Error::Setting {
                name: "SPARKCTL_FRONTDOOR_QUEUE",
                value: "0".into(),
                want: Want::Positive { what: "requests" },
            },
            "SPARKCTL_FRONTDOOR_QUEUE=0 is not a number of requests; unset it or give e.g. \
             SPARKCTL_FRONTDOOR_QUEUE=256"
                .into(),
        ),
    ];
    for (e, said) in cases {
        assert_eq!(e.to_string(), said);
    }
}

/// The same, for the variants of nodes, models, summaries, processes and the door.
#[test]
fn the_detail_says_what_the_call_sites_said_too() {
    let cases: Vec<(Error, String)> = vec![
        (
            Error::ModelRefused {
                model: "/m".into(),
                why: Unfresh::NotSucceeded {
                    job: "train".into(),
                    run: "R1".into(),
                    ended: Some(("failed".into(), None)),
                },
            },
            "refusing the model /m: its producing job train (run R1) failed: -; its outputs are \
             marked incomplete. Fix the job and `sparkctl run train` again (`sparkctl logs \
             train` shows its output)"
                .into(),
        ),
        (
            Error::OnNode {
                node: "head".into(),
                what: NodeProblem::RayShort {
                    nodes: (1, 2),
                    gpus: (1, 2),
                    after: std::time::Duration::from_secs(30),
                    port: 6379,
                },
            },
            "node head: Ray reports 1 of 2 nodes (1 of 2 GPUs) after 30s: a worker never \
             joined; check that the nodes reach each other on their high-speed addresses \
             (`sparkctl doctor RECIPE`) and that port 6379 is open on the head"
                .into(),
        ),
        (
            Error::Reported(Summary::BenchError {
                name: "r".into(),
                reason: "3 of 4 requests failed".into(),
                first: Some("timeout".into()),
                path: "/p.json".into(),
            }),
            "r: 3 of 4 requests failed: timeout (partial samples kept in /p.json)".into(),
        ),
        (
            Error::Stopped(Gone::ImportedPid { pid: 9 }),
            "pid 9, that the recipe was imported from, is not running; nothing to adopt \
             (`sparkctl up NAME` serves the recipe behind the front door)"
                .into(),
        ),
        (
            Error::NotEnded(Stuck::Adopted {
                pid: 9,
                secs: 5,
                state: 'D',
            }),
            "pid 9 did not end after SIGKILL within 5 s (state D: stuck in the kernel, on a \
             disk or a device); it still holds its port"
                .into(),
        ),
        (
            Error::Interrupted(Interruption::BeforeReady {
                name: "r".into(),
                stop_failed: None,
            }),
            "interrupted: stopped r before it was ready; its logs are kept (`sparkctl logs r`)"
                .into(),
        ),
        (
            Error::DoorFailed(DoorProblem::Silent {
                secs: 15,
                log: "/l".into(),
                tail: "x".into(),
            }),
            "the front door did not answer within 15 s; its log /l says:\nx".into(),
        ),
        (
            Error::StateLockHeld { holder: None },
            "another sparkctl is changing state (holder unknown); wait for it to finish, then \
             retry"
                .into(),
        ),
        (
            Error::NotConfirmed(Unconfirmed::Adopt {
                foreign: "pid 9 (vllm)".into(),
            }),
            "adopt stops pid 9 (vllm); confirm, or pass --yes (nothing was changed)".into(),
        ),
    ];
    for (e, said) in cases {
        assert_eq!(e.to_string(), said);
    }
    let open = Error::OpenWithoutKey(Exposure::AdoptKeyed {
        foreign: "pid 9 (vllm)".into(),
        flag: "--api-key".into(),
        port: 8000,
    })
    .to_string();
    assert!(
        open.starts_with(
            "pid 9 (vllm) asked its callers for a key (--api-key, which import left out of the \
             recipe), and the front door would serve port 8000 in its place without an API key"
        ) && open.ends_with("; then `sparkctl adopt` again (nothing was changed)"),
        "{open}"
    );
    let gpus = Error::NoNvidiaRuntime {
        recipe: "r".into(),
        gpus: Some("all".into()),
    };
    assert!(gpus
        .to_string()
        .starts_with("r (server.gpus: all) asks for GPUs but this Docker Engine"));
}
