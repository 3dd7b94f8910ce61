//! Server-sent events, parsed from raw bytes: lines may split anywhere (inside a UTF-8
//! character too), events may span several `data:` lines, and `\r\n` is as good as `\n`.

/// Collects bytes and yields each complete event's data.
#[derive(Default)]
pub(crate) struct Parser {
    line: Vec<u8>,
    data: Vec<String>,
}

impl Parser {
    /// Feeds a chunk; returns the events it completed (their `data`, lines joined by `\n`).
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &b in chunk {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            // Whole lines only: a character split across chunks is complete by now.
            let text = String::from_utf8_lossy(&line);
            if text.is_empty() {
                if !self.data.is_empty() {
                    events.push(std::mem::take(&mut self.data).join("\n"));
                }
            } else if let Some(value) = text.strip_prefix("data:") {
                self.data
                    .push(value.strip_prefix(' ').unwrap_or(value).to_string());
            }
            // Comments (`:`), `event:`, `id:` and `retry:` carry nothing the benchmark uses.
        }
        events
    }

    /// Whether bytes of an unfinished event are waiting (a stream cut mid-event).
    pub(crate) fn pending(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_lines_multi_line_events_crlf_and_split_utf8() {
        let mut p = Parser::default();
        assert!(p.feed(b"data: {\"a\"").is_empty());
        assert_eq!(p.feed(b":1}\n\n"), vec!["{\"a\":1}"]);
        assert_eq!(
            p.feed(b": keep-alive\n\ndata: x\r\ndata: y\r\n\r\n"),
            vec!["x\ny"]
        );
        let word = "東京".as_bytes();
        assert!(p.feed(&[b"data: ", &word[..2]].concat()).is_empty());
        assert_eq!(p.feed(&[&word[2..], b"\n\n"].concat()), vec!["東京"]);
        assert!(!p.pending());
        p.feed(b"data: [DO");
        assert!(p.pending());
    }
}
