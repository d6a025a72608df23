//! Server-sent events: splits a byte stream into `data:` payloads, however the bytes are chunked.
//! Keep-alive comments are skipped; `[DONE]` ends the stream. Pure: no IO.

/// One parsed event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data:` payload of one event (several `data:` lines joined with newlines).
    Data(String),
    /// `data: [DONE]`.
    Done,
}

/// Accumulates bytes and yields complete events.
#[derive(Default, Debug)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; appends every event completed by them to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        self.buf.extend_from_slice(bytes);
        while let Some((end, sep)) = find_blank_line(&self.buf) {
            let event: Vec<u8> = self.buf.drain(..end + sep).collect();
            if let Some(e) = parse_event(&event[..end]) {
                out.push(e);
            }
        }
    }

    /// Bytes received that do not end an event yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Position and length of the first blank line (`\n\n`, `\r\n\r\n` or `\r\r`).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' && buf[i + 1] == b'\n' {
            return Some((i, 2));
        }
        if buf[i] == b'\r'
            && buf[i + 1] == b'\n'
            && buf.get(i + 2) == Some(&b'\r')
            && buf.get(i + 3) == Some(&b'\n')
        {
            return Some((i, 4));
        }
        if buf[i] == b'\r' && buf[i + 1] == b'\r' {
            return Some((i, 2));
        }
        i += 1;
    }
    None
}

fn parse_event(raw: &[u8]) -> Option<SseEvent> {
    let text = String::from_utf8_lossy(raw);
    let mut data: Vec<&str> = Vec::new();
    for line in text.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        if line.starts_with(':') {
            continue; // keep-alive comment
        }
        if let Some(rest) = line.strip_prefix("data:") {
            data.push(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    if data.is_empty() {
        return None;
    }
    let payload = data.join("\n");
    Some(if payload.trim() == "[DONE]" {
        SseEvent::Done
    } else {
        SseEvent::Data(payload)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(text: &str, piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(piece) {
            p.feed(chunk, &mut out);
        }
        out
    }

    #[test]
    fn events_split_across_reads_or_packed_in_one_read_parse_the_same() {
        let text = ": keep-alive\n\ndata: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
        let want = vec![
            SseEvent::Data("{\"a\":1}".into()),
            SseEvent::Data("{\"b\":2}".into()),
            SseEvent::Data("line1\nline2".into()),
            SseEvent::Done,
        ];
        for piece in [1, 2, 3, 7, 1000] {
            assert_eq!(parse_in_pieces(text, piece), want, "piece size {piece}");
        }
    }

    #[test]
    fn an_unfinished_event_waits_for_its_blank_line() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(b"data: {\"x\":", &mut out);
        assert!(out.is_empty());
        assert!(p.pending() > 0);
        p.feed(b"1}\n\n", &mut out);
        assert_eq!(out, vec![SseEvent::Data("{\"x\":1}".into())]);
    }
}
