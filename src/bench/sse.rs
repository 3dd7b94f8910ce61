//! Server-sent events, parsed from raw bytes: lines may split anywhere (inside a UTF-8
//! character too), events may span several `data:` lines, and `\r\n` is as good as `\n`.

/// Collects bytes and yields each complete event's data.
#[derive(Default)]
pub(crate) struct Parser {
    /// The unfinished line a chunk ended in.
    line: Vec<u8>,
    /// The `data` lines of the event being read.
    data: Vec<String>,
}

impl Parser {
    /// Feeds a chunk; returns the events it completed (their `data`, lines joined by `\n`).
    ///
    /// The front door runs this on every chunk it passes: a line that lies whole in the
    /// chunk is read where it lies, and the buffer of a split one is kept for the next.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = (&rest[..end], &rest[end + 1..]);
            rest = after;
            if self.line.is_empty() {
                self.line_ended(line, &mut events);
            } else {
                let mut split = std::mem::take(&mut self.line);
                split.extend_from_slice(line);
                self.line_ended(&split, &mut events);
                split.clear();
                self.line = split;
            }
        }
        self.line.extend_from_slice(rest);
        events
    }

    fn line_ended(&mut self, line: &[u8], events: &mut Vec<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            match self.data.len() {
                0 => {}
                1 => events.extend(self.data.pop()),
                _ => events.push(std::mem::take(&mut self.data).join("\n")),
            }
        } else if let Some(value) = line.strip_prefix(b"data:") {
            // Whole lines only: a character split across chunks is complete by now.
            let value = value.strip_prefix(b" ").unwrap_or(value);
            self.data.push(String::from_utf8_lossy(value).into_owned());
        }
        // Comments (`:`), `event:`, `id:` and `retry:` carry nothing the benchmark uses.
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

    #[test]
    fn every_split_of_a_stream_yields_the_events_of_the_whole() {
        let stream = "data: {\"a\":\"東京\"}\r\n\r\n: ping\n\ndata: x\ndata: y\n\nevent: e\ndata: [DONE]\n\n"
            .as_bytes();
        let whole = Parser::default().feed(stream);
        assert_eq!(whole, vec!["{\"a\":\"東京\"}", "x\ny", "[DONE]"]);
        for i in 0..stream.len() {
            for j in i..stream.len() {
                let mut p = Parser::default();
                let mut got = p.feed(&stream[..i]);
                got.extend(p.feed(&stream[i..j]));
                got.extend(p.feed(&stream[j..]));
                assert_eq!(got, whole, "split at {i} and {j}");
                assert!(!p.pending());
            }
        }
    }
}
