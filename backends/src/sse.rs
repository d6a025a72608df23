//! Server-sent events: splits a byte stream into `data:` payloads, however the bytes are chunked.
//! Keep-alive comments are skipped; `[DONE]` ends the stream. Each byte is scanned once for the blank
//! line that ends an event, and an event may not grow past a limit. Pure: no IO.

/// One parsed event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The `data:` payload of one event (several `data:` lines joined with newlines).
    Data(String),
    /// `data: [DONE]`.
    Done,
}

/// Largest event the parser holds before giving up on the stream, bytes (a chunk of a stream is a few
/// hundred bytes; a usage block with details a few kilobytes).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// An event grew past [`MAX_EVENT_BYTES`] without a blank line ending it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a server-sent event grew past {MAX_EVENT_BYTES} bytes without ending")]
pub struct EventTooLarge;

/// Accumulates bytes and yields complete events.
#[derive(Default, Debug)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already scanned for a blank line (less the three a separator may span).
    scanned: usize,
}

impl SseParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; appends every event completed by them to `out`. Fails when the pending event
    /// passes [`MAX_EVENT_BYTES`].
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some((end, sep)) = find_blank_line(&self.buf[start..], self.scanned) {
            if let Some(e) = parse_event(&self.buf[start..start + end]) {
                out.push(e);
            }
            start += end + sep;
            self.scanned = 0;
        }
        self.buf.drain(..start);
        // The last three bytes may begin a separator that the next read completes.
        self.scanned = self.buf.len().saturating_sub(3);
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(())
    }

    /// Bytes received that do not end an event yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// Position and length of the first blank line, scanning from `from`: a line ending (`\r\n`, `\n` or `\r`,
/// as the event-stream format allows) followed at once by another, in any mix (`\n\n`, `\r\n\r\n`,
/// `\n\r\n`, `\r\r`, …). A `\r` that ends the bytes so far waits for the next byte to say whether it
/// begins `\r\n`, except as the second ending (a `\n` after it is then an empty line, which is no event).
fn find_blank_line(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < buf.len() {
        let first = match buf[i] {
            b'\n' => 1,
            b'\r' => match buf.get(i + 1)? {
                b'\n' => 2,
                _ => 1,
            },
            _ => {
                i += 1;
                continue;
            }
        };
        let j = i + first;
        match *buf.get(j)? {
            b'\n' => return Some((i, first + 1)),
            b'\r' => {
                let second = if buf.get(j + 1) == Some(&b'\n') { 2 } else { 1 };
                return Some((i, first + second));
            }
            _ => i = j,
        }
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
            p.feed(chunk, &mut out).unwrap();
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
    fn any_mix_of_line_endings_ends_an_event() {
        for sep in [
            "\n\n", "\r\n\r\n", "\n\r\n", "\r\n\n", "\r\r", "\n\r", "\r\n\r",
        ] {
            let text = format!("data: {{\"a\":1}}{sep}data: {{\"b\":2}}{sep}data: [DONE]{sep}");
            let want = vec![
                SseEvent::Data("{\"a\":1}".into()),
                SseEvent::Data("{\"b\":2}".into()),
                SseEvent::Done,
            ];
            for piece in [1, 2, 3, 1000] {
                assert_eq!(
                    parse_in_pieces(&text, piece),
                    want,
                    "{sep:?} in pieces of {piece}"
                );
            }
        }
        // One line ending is not a blank line: the event goes on.
        assert!(parse_in_pieces("data: a\r\ndata: b\n", 1).is_empty());
    }

    #[test]
    fn an_unfinished_event_waits_for_its_blank_line() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(b"data: {\"x\":", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.pending() > 0);
        p.feed(b"1}\n\n", &mut out).unwrap();
        assert_eq!(out, vec![SseEvent::Data("{\"x\":1}".into())]);
    }

    #[test]
    fn an_event_without_end_is_refused_once_it_passes_the_limit() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let piece = vec![b'x'; 64 << 10];
        let mut fed = 0;
        let err = loop {
            if let Err(e) = p.feed(&piece, &mut out) {
                break e;
            }
            fed += piece.len();
            assert!(fed <= MAX_EVENT_BYTES, "still accepting after {fed} bytes");
        };
        assert_eq!(err, EventTooLarge);
        assert!(out.is_empty());
    }

    #[test]
    fn a_separator_split_across_reads_is_found() {
        for split in 0..4 {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            let text = b"data: a\r\n\r\ndata: b\n\n";
            let cut = 7 + split; // inside the \r\n\r\n
            p.feed(&text[..cut], &mut out).unwrap();
            p.feed(&text[cut..], &mut out).unwrap();
            assert_eq!(
                out,
                vec![SseEvent::Data("a".into()), SseEvent::Data("b".into())],
                "{split}"
            );
        }
    }
}
