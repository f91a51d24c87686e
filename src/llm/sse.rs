//! Server-sent events, as both providers stream them: a small line parser
//! that takes the body in whatever pieces the network delivers and yields
//! complete events.
//!
//! It follows the parts of the SSE format providers use: `event:` and
//! `data:` fields (several `data:` lines join with `\n`), comments (lines
//! starting with `:`) and unknown fields ignored, an event dispatched at a
//! blank line, lines ending in `\n` or `\r\n`. Lines are split on bytes, so a
//! multi-byte character cut between two pieces is joined before it is
//! decoded; a line that is not UTF-8 is an error, never a panic.

use super::LlmError;

/// The longest line accepted, in bytes: a provider's chunk is a few
/// kilobytes, and a stream that never ends a line must not grow the buffer
/// without limit.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Turns body pieces into events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    event: String,
    data: Vec<String>,
    /// Whether the event under construction has any field yet.
    started: bool,
}

impl SseParser {
    /// Feeds one piece of the body; returns the events it completed.
    ///
    /// # Errors
    /// A line that is not UTF-8, or longer than the limit.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, LlmError> {
        let mut events = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&byte| byte == b'\n') {
            self.pending.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let mut line = std::mem::take(&mut self.pending);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.line(&line)? {
                events.push(event);
            }
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(LlmError::InvalidResponse(
                "the event stream sent a line longer than 16 MiB".to_owned(),
            ));
        }
        Ok(events)
    }

    /// The end of the body: a last event not followed by a blank line is
    /// still dispatched (a server may close right after its last line).
    ///
    /// # Errors
    /// An unfinished line that is not UTF-8.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, LlmError> {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            if let Some(event) = self.line(&line)? {
                return Ok(Some(event));
            }
        }
        Ok(self.dispatch())
    }

    fn line(&mut self, line: &[u8]) -> Result<Option<SseEvent>, LlmError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        let line = std::str::from_utf8(line).map_err(|_| {
            LlmError::InvalidResponse("the event stream is not valid UTF-8".to_owned())
        })?;
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => {
                value.clone_into(&mut self.event);
                self.started = true;
            }
            "data" => {
                self.data.push(value.to_owned());
                self.started = true;
            }
            // `id:`, `retry:` and unknown fields mean nothing to a model
            // stream.
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        if !std::mem::take(&mut self.started) {
            return None;
        }
        let event = SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data).join("\n"),
        };
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
        }
    }

    /// Feeds `body` cut at every `step` bytes.
    fn parse_in_pieces(body: &[u8], step: usize) -> Result<Vec<SseEvent>, LlmError> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for piece in body.chunks(step) {
            events.extend(parser.feed(piece)?);
        }
        events.extend(parser.finish()?);
        Ok(events)
    }

    #[test]
    fn events_come_out_whole_however_the_body_is_cut() {
        let body = "event: message_start\ndata: {\"a\":1}\n\n: a comment\r\n\r\ndata: l1\ndata: l2\r\nid: 7\nretry: 10\n\ndata:no space\n\nevent: ping\n\ndata: ünïcödé ✓\n\n";
        let expected = vec![
            event("message_start", "{\"a\":1}"),
            event("", "l1\nl2"),
            event("", "no space"),
            event("ping", ""),
            event("", "ünïcödé ✓"),
        ];
        for step in 1..=body.len() {
            assert_eq!(
                parse_in_pieces(body.as_bytes(), step).expect("parses"),
                expected,
                "cut every {step} bytes"
            );
        }
    }

    #[test]
    fn a_last_event_without_a_blank_line_is_dispatched() {
        assert_eq!(
            parse_in_pieces(b"data: [DONE]", 3).expect("parses"),
            vec![event("", "[DONE]")]
        );
        assert_eq!(
            parse_in_pieces(b"data: x\n", 100).expect("parses"),
            vec![event("", "x")]
        );
        assert!(parse_in_pieces(b"", 1).expect("parses").is_empty());
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        let error = parse_in_pieces(b"data: \xff\xfe\n\n", 2).expect_err("invalid");
        assert!(matches!(error, LlmError::InvalidResponse(_)), "{error:?}");
    }
}
