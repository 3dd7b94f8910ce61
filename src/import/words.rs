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
        }
    }
}

/// The words of `line`. `~` stays as written (recipes expand `~/`), `$VAR` outside single
/// quotes is refused rather than guessed.
pub(crate) fn split(line: &str) -> Result<Vec<String>, WordsError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word has begun even when it is empty so far (`''`).
    let mut started = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                // A line continuation joins the lines.
                Some('\n') => {}
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
                            Some('\n') => {}
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
            }
            '#' if !started => break,
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
}
