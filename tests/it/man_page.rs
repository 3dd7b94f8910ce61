//! `sparkctl man`: the man page generated from the clap definitions names every command
//! `--help` lists, and `man --dir` writes a page per command with every flag its `--help` has.

use crate::support::in_repo;

/// The commands `sparkctl ARGS --help` lists (not `help` itself).
fn commands(args: &[&str]) -> Vec<String> {
    let mut argv = args.to_vec();
    argv.push("--help");
    let help = in_repo(&argv).succeeds().stdout();
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A command's row starts two spaces in; a wrapped description further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags `sparkctl ARGS --help` lists.
fn flags(args: &[&str]) -> Vec<String> {
    let mut argv = args.to_vec();
    argv.push("--help");
    let help = in_repo(&argv).succeeds().stdout();
    help.lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("-").map(|_| l))
        .filter_map(|l| l.split("--").nth(1))
        .filter_map(|f| f.split([' ', '=', '<', ',', '[', '.']).next())
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

/// roff escapes every `-`.
fn roff(s: &str) -> String {
    s.replace('-', "\\-")
}

#[test]
fn the_man_page_names_every_command() {
    let page = in_repo(&["man"]).succeeds().stdout();
    assert!(page.contains(".TH sparkctl 1"), "a roff page:\n{page}");
    let top = commands(&[]);
    let up = flags(&["up"]);
    assert!(up.iter().any(|f| f == "dry-run"), "flags of up: {up:?}");
    for cmd in ["up", "rollback", "bench", "images", "recipes", "sim"] {
        assert!(top.iter().any(|c| c == cmd), "{cmd} in --help: {top:?}");
    }
    for cmd in &top {
        assert!(
            page.contains(&roff(&format!("sparkctl-{cmd}(1)"))),
            "sparkctl-{cmd}(1) missing from the man page:\n{page}"
        );
    }
    for flag in flags(&[]) {
        assert!(page.contains(&roff(&format!("--{flag}"))), "--{flag}");
    }
}

#[test]
fn man_dir_writes_a_page_per_command_with_its_flags() {
    let dir = std::env::temp_dir().join(format!("sparkctl-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let written = in_repo(&["man", "--dir", dir.to_str().unwrap()]).succeeds();
    let mut checked = 0;
    let mut todo: Vec<Vec<String>> = commands(&[]).into_iter().map(|c| vec![c]).collect();
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let file = dir.join(format!("sparkctl-{}.1", path.join("-")));
        let page =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for flag in flags(&args) {
            assert!(
                page.contains(&roff(&format!("--{flag}"))),
                "--{flag} of `sparkctl {}` missing from {}",
                path.join(" "),
                file.display()
            );
        }
        for sub in commands(&args) {
            assert!(
                page.contains(&roff(&format!("sparkctl-{}-{sub}(1)", path.join("-")))),
                "{sub} missing from {}",
                file.display()
            );
            let mut deeper = path.clone();
            deeper.push(sub);
            todo.push(deeper);
        }
        checked += 1;
    }
    assert!(checked >= 30, "pages checked: {checked}");
    written.says(&format!("{} man pages written", checked + 1));
    std::fs::remove_dir_all(&dir).unwrap();
}
