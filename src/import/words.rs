//! A pasted command line split into words as a POSIX shell splits a simple command — quotes,
//! backslashes, line continuations — without expanding or running anything. What a shell
//! would do more (pipes, `;`, `$(…)`, redirections) is refused: sparkctl never runs a shell,
//! so a line that needs one cannot be imported faithfully.

/// Why a pasted line cannot be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WordsError {
    UnclosedQuote(char),
    /// Shell syntax sparkctl will not interpret, e.g. `|`, `;`, `$(`.
    Shell(String),
    /// A second command on this line (from 1): a pasted second line, which a shell would
    /// run after the first, never arguments of it. Its text is not quoted back: it may be
    /// an `export TOKEN=…`.
    SecondCommand(usize),
}

impl std::fmt::Display for WordsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WordsError::UnclosedQuote(q) => write!(f, "a {q} quote is never closed"),
            WordsError::Shell(what) => write!(
                f,
                "`{what}` is shell syntax, and sparkctl never runs a shell; paste the one \
                 command alone, with variables written out"
            ),
            WordsError::SecondCommand(line) => write!(
                f,
                "line {line} holds a second command (a line that does not end in `\\` \
                 starts a new one); paste the one command alone"
            ),
        }
    }
}

/// The words of `line`. `~` stays as written (recipes expand `~/`), `$VAR` outside single
/// quotes is refused rather than guessed. Line ends are a shell's: CRLF as LF (a line
/// copied from Windows), `\` + line end joins two lines, a line end outside quotes ends the
/// command (what follows may only be blank lines and comments).
pub(crate) fn split(line: &str) -> Result<Vec<String>, WordsError> {
    let line = line.replace("\r\n", "\n").replace('\r', "\n");
    let mut words = Vec::new();
    let mut word = String::new();
    // A word has begun even when it is empty so far (`''`).
    let mut started = false;
    // The command ended at a line end: only blanks and comments may follow.
    let mut ended = false;
    let mut line_no = 1;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if ended && !c.is_whitespace() && c != '#' {
            return Err(WordsError::SecondCommand(line_no));
        }
        match c {
            '\\' => match chars.next() {
                // A line continuation joins the lines.
                Some('\n') => line_no += 1,
                Some(next) => {
                    word.push(next);
                    started = true;
                }
                None => {}
            },
            '\'' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(WordsError::UnclosedQuote('\'')),
                    }
                }
            }
            '"' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some('\n') => line_no += 1,
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(WordsError::UnclosedQuote('"')),
                        },
                        Some(ch @ ('$' | '`')) => {
                            return Err(WordsError::Shell(shell_at(ch, chars.peek())))
                        }
                        Some(ch) => word.push(ch),
                        None => return Err(WordsError::UnclosedQuote('"')),
                    }
                }
            }
            c if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
                if c == '\n' {
                    line_no += 1;
                    ended = ended || !words.is_empty();
                }
            }
            // A comment runs to the line's end.
            '#' if !started => while chars.next_if(|n| *n != '\n').is_some() {},
            '|' | ';' | '&' | '<' | '>' | '`' | '(' | ')' => {
                return Err(WordsError::Shell(c.to_string()))
            }
            '$' => return Err(WordsError::Shell(shell_at('$', chars.peek()))),
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(word);
    }
    Ok(words)
}

fn shell_at(c: char, next: Option<&char>) -> String {
    match next {
        Some(n) if c == '$' => format!("${n}"),
        _ => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_as_a_shell_splits_them() {
        let line = "docker run --gpus all --rm \\\n  -v ~/models:/models \\\n  img:1 bash -c 'pip install x && python3 \"a b\".py' \"it's\" a\\ b ''";
        assert_eq!(
            split(line).unwrap(),
            [
                "docker",
                "run",
                "--gpus",
                "all",
                "--rm",
                "-v",
                "~/models:/models",
                "img:1",
                "bash",
                "-c",
                "pip install x && python3 \"a b\".py",
                "it's",
                "a b",
                ""
            ]
        );
    }

    #[test]
    fn shell_syntax_is_refused_not_run() {
        for line in [
            "a | b",
            "a; b",
            "a && b",
            "a $(id)",
            "a `id`",
            "a \"$HOME\"",
            "a > f",
            "$X",
        ] {
            assert!(
                matches!(split(line), Err(WordsError::Shell(_))),
                "{line}: {:?}",
                split(line)
            );
        }
        assert_eq!(split("a 'b"), Err(WordsError::UnclosedQuote('\'')));
        assert_eq!(split("a \"b"), Err(WordsError::UnclosedQuote('"')));
        assert_eq!(split("a '$HOME' # note").unwrap(), ["a", "$HOME"]);
    }

    #[test]
    fn a_line_end_ends_the_command_and_crlf_is_a_line_end() {
        assert_eq!(
            split("a \\\r\n  -b 1 \\\r\n -c\r\n\r\n# done\r\n").unwrap(),
            ["a", "-b", "1", "-c"]
        );
        assert_eq!(split("# first\na b # c\n\n").unwrap(), ["a", "b"]);
        assert_eq!(
            split("a b\nrm -rf ~/models/*"),
            Err(WordsError::SecondCommand(2))
        );
        assert_eq!(
            split("export T=x\r\n\r\nserver --x"),
            Err(WordsError::SecondCommand(3))
        );
        assert_eq!(split("a 'b\nc'").unwrap(), ["a", "b\nc"]);
    }
}
