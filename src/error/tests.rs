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

/// The module's comment says so: what recurs is a variant, and the string-built
/// one-offs stay few. A new failure that recurs wants its variant, not a 41st string.
#[test]
fn the_string_built_errors_stay_one_offs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut built = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(src.join("error"))) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("Error::Failed(") || line.contains("Error::Usage(") {
                built.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        built.len() <= 40,
        "{} string-built errors: {built:#?}",
        built.len()
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
        cause: "needed to find container x".into(),
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
        what: "adopt x".into(),
        cause: Box::new(engine.into_iter().next().unwrap()),
        notes: "nothing had changed".into(),
    };
    assert_eq!(undone.kind(), ErrorKind::EngineUnreachable);
    assert_eq!(undone.exit_code(), 1);
    let job = Error::NoSuch {
        what: Thing::JobRecipe,
        name: "q".into(),
        hint: String::new(),
    };
    assert_eq!(job.kind(), ErrorKind::UnknownRecipe);
    assert_eq!(job.exit_code(), 2);
}
