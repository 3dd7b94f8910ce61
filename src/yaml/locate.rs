//! Finds where a key path (`server.port`, `model.patches[1].copy-from`) stands in
//! YAML text, so checks made after parsing can still point at a line and column.
//!
//! It reads block-style YAML by indentation, which is how recipes are written; in
//! flow style (`{…}`, `[…]`) it points at the nearest enclosing key it can find.

#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    no: usize,
    indent: usize,
    text: &'a str,
}

#[derive(Debug, PartialEq)]
enum Segment<'p> {
    Key(&'p str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(Segment::Key(key));
        }
        while let Some(close) = rest.find(']') {
            if let Ok(i) = rest[1..close].parse() {
                out.push(Segment::Index(i));
            }
            rest = &rest[close + 1..];
        }
    }
    out
}

fn lines(src: &str) -> Vec<Line<'_>> {
    src.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let text = raw.trim_start();
            let skip = text.is_empty() || text.starts_with('#') || text == "---";
            (!skip).then(|| Line {
                no: i + 1,
                indent: raw.len() - text.len(),
                text: text.trim_end(),
            })
        })
        .collect()
}

/// The lines that make up the value of the entry on `lines[0]`.
fn value_block<'a>(lines: &[Line<'a>]) -> Vec<Line<'a>> {
    let head = lines[0];
    lines[1..]
        .iter()
        .take_while(|l| l.indent > head.indent || (l.indent == head.indent && is_item(l.text)))
        .copied()
        .collect()
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

pub(crate) fn key_of(text: &str) -> Option<&str> {
    let colon = text.find(':')?;
    let key = text[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some(key)
}

/// 1-based (line, column) of `path` in `src`, or of its nearest ancestor found.
pub(crate) fn locate(src: &str, path: &str) -> Option<(usize, usize)> {
    let mut block = lines(src);
    let mut found: Option<(usize, usize)> = None;
    for seg in segments(path) {
        let Some(first) = block.first() else {
            // A flow sequence on the parent's line (`args: [a, b]`): point at the element.
            if let (Segment::Index(n), Some((line, _))) = (&seg, found) {
                return flow_item(src, line, *n).or(found);
            }
            break;
        };
        let indent = first.indent;
        let siblings = block.iter().enumerate().filter(|(_, l)| l.indent == indent);
        let hit = match seg {
            Segment::Key(key) => siblings
                .into_iter()
                .find(|(_, l)| key_of(l.text) == Some(key))
                .map(|(i, _)| i),
            Segment::Index(n) => siblings
                .into_iter()
                .filter(|(_, l)| is_item(l.text))
                .nth(n)
                .map(|(i, _)| i),
        };
        let Some(i) = hit else { break };
        let line = block[i];
        found = Some((line.no, line.indent + 1));
        let mut rest: Vec<Line> = block[i..].to_vec();
        if matches!(seg, Segment::Index(_)) {
            // Inside a sequence item the entry starts after "- ", two columns in.
            let inner = line.text[1..].trim_start();
            rest[0] = Line {
                no: line.no,
                indent: line.indent + (line.text.len() - inner.len()),
                text: inner,
            };
            // The item is every line indented past its dash: the keys beside the first
            // one too (`- prompt: …` then `check: …`).
            let mut item = vec![rest[0]];
            item.extend(
                block[i + 1..]
                    .iter()
                    .take_while(|l| l.indent > line.indent)
                    .copied(),
            );
            block = item;
        } else {
            block = value_block(&rest);
        }
    }
    found
}

/// Column of the n-th element of a one-line flow sequence (`args: [a, b, c]`) on `line`.
fn flow_item(src: &str, line: usize, n: usize) -> Option<(usize, usize)> {
    let text = src.lines().nth(line - 1)?;
    let open = text.find('[')?;
    let mut start = open + 1;
    let mut quote: Option<char> = None;
    let mut index = 0;
    for (i, c) in text[open + 1..].char_indices() {
        let at = open + 1 + i;
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, ',' | ']') => {
                if index == n {
                    let lead = text[start..at].len() - text[start..at].trim_start().len();
                    return Some((line, start + lead + 1));
                }
                index += 1;
                start = at + 1;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "\
# a recipe
name: demo
server:
  port: 8000
  args: [--a, \"0.85\", --b]
  env:
    A: b
model:
  path: /m
  patches:
    - wrap-vl-config: {}
    - copy-from:
        donor: /d
        files: [x]
bench:
  gates:
    thinking_leak: \"== 0%\"
";

    #[test]
    fn finds_nested_keys_items_and_flow_elements() {
        assert_eq!(locate(SRC, "name"), Some((2, 1)));
        assert_eq!(locate(SRC, "server.port"), Some((4, 3)));
        assert_eq!(locate(SRC, "server.env.A"), Some((7, 5)));
        assert_eq!(locate(SRC, "model.patches[1]"), Some((12, 5)));
        assert_eq!(
            locate(SRC, "model.patches[1].copy-from.donor"),
            Some((13, 9))
        );
        assert_eq!(locate(SRC, "server.args[1]"), Some((5, 15)));
        assert_eq!(locate(SRC, "bench.gates.thinking_leak"), Some((17, 5)));
    }

    #[test]
    fn falls_back_to_the_nearest_ancestor() {
        assert_eq!(locate(SRC, "server.user"), Some((3, 1)));
        assert_eq!(locate(SRC, "nothing"), None);
    }

    #[test]
    fn keys_beside_an_items_first_key_are_found() {
        let src = "items:\n  - prompt: a\n    check: {x: 1}\n  - prompt: b\n    check: {y: 2}\n";
        assert_eq!(locate(src, "items[1].check"), Some((5, 5)));
        assert_eq!(locate(src, "items[0].prompt"), Some((2, 5)));
    }

    #[test]
    fn sequences_at_the_parent_indent_count_as_its_value() {
        let src = "server:\n  args:\n  - --x\n  - --y\n  port: 1\n";
        assert_eq!(locate(src, "server.args[1]"), Some((4, 3)));
        assert_eq!(locate(src, "server.port"), Some((5, 3)));
    }
}
