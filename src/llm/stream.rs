//! What streamed model calls share: the events a caller hears while the
//! answer arrives ([`StreamEvent`]), the decoder each wire format implements
//! for its events ([`StreamDecoder`]) and the reader that feeds it the body
//! as it arrives ([`EventReader`]), the retry bookkeeping that tells the
//! caller when text already heard is void ([`Restarts`]), and the reading
//! of errors a provider sends inside a stream.
//!
//! Retries: a streamed call is retried exactly like an unstreamed one (the
//! same [`super::RetryPolicy`], the same errors), so a turn's outcome does
//! not depend on streaming. A failure before any text was heard is invisible
//! to the caller; after text was heard, the next attempt first sends
//! [`StreamEvent::Restart`]: the caller drops what it showed of this call
//! and shows the new attempt's text instead.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::failure::error_status;
use super::sse::{SseEvent, SseParser};
use super::{LlmError, ModelResponse};

/// What a streamed call reports while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent<'a> {
    /// The next piece of the answer's text.
    Text(&'a str),
    /// The attempt that sent the text so far failed and is being retried:
    /// that text is void.
    Restart,
}

/// The listener of a streamed call.
pub type OnStream<'a> = &'a (dyn Fn(StreamEvent<'_>) + Send + Sync);

/// Turns one wire format's stream of events into its [`ModelResponse`]
/// (its model and request id left to complete, as
/// [`super::wire::WireFormat::parse`] leaves them).
pub(crate) trait StreamDecoder {
    /// Takes one event; text it carries goes to `on` at once.
    ///
    /// # Errors
    /// An event that cannot be understood, or an error the provider sent in
    /// the stream.
    fn event(&mut self, event: &SseEvent, on: OnStream<'_>) -> Result<(), LlmError>;

    /// Whether the stream said it is complete (nothing more is read).
    fn done(&self) -> bool;

    /// The response, once the body has ended.
    ///
    /// # Errors
    /// A stream cut short, or one whose pieces do not make a response.
    fn finish(self) -> Result<ModelResponse, LlmError>;
}

/// Reads an event stream into a decoder, the body in whatever pieces the
/// network delivers: stops reading once the decoder is done, and at the
/// body's end hands it the last event not followed by a blank line.
pub(crate) struct EventReader<D> {
    parser: SseParser,
    decoder: D,
}

impl<D: StreamDecoder> EventReader<D> {
    pub fn new(decoder: D) -> Self {
        Self {
            parser: SseParser::default(),
            decoder,
        }
    }

    /// Whether the stream said it is complete (nothing more is read).
    pub fn done(&self) -> bool {
        self.decoder.done()
    }

    /// Takes the next piece of the body; the text it completes goes to `on`.
    ///
    /// # Errors
    /// As [`SseParser::feed`] and [`StreamDecoder::event`].
    pub fn feed(&mut self, piece: &[u8], on: OnStream<'_>) -> Result<(), LlmError> {
        for event in self.parser.feed(piece)? {
            self.decoder.event(&event, on)?;
            if self.decoder.done() {
                break;
            }
        }
        Ok(())
    }

    /// The response, once the body has ended (or the decoder is done).
    ///
    /// # Errors
    /// As [`SseParser::finish`] and [`StreamDecoder::finish`].
    pub fn finish(mut self, on: OnStream<'_>) -> Result<ModelResponse, LlmError> {
        if !self.decoder.done()
            && let Some(event) = self.parser.finish()?
        {
            self.decoder.event(&event, on)?;
        }
        self.decoder.finish()
    }
}

/// Tracks whether an attempt has sent text, so the next attempt can tell
/// the caller to drop it.
pub(crate) struct Restarts<'a> {
    on: OnStream<'a>,
    heard: AtomicBool,
}

impl<'a> Restarts<'a> {
    pub fn new(on: OnStream<'a>) -> Self {
        Self {
            on,
            heard: AtomicBool::new(false),
        }
    }

    /// Called as an attempt begins: after an attempt that sent text, the
    /// caller hears [`StreamEvent::Restart`].
    pub fn begin_attempt(&self) {
        if self.heard.swap(false, Ordering::AcqRel) {
            (self.on)(StreamEvent::Restart);
        }
    }

    /// Passes an event on, noting text.
    pub fn pass(&self, event: StreamEvent<'_>) {
        if matches!(event, StreamEvent::Text(text) if !text.is_empty()) {
            self.heard.store(true, Ordering::Release);
        }
        (self.on)(event);
    }
}

/// An error object a provider sent inside a 200 stream
/// (`{"type": …, "message": …}`, with OpenAI-compatible servers sometimes a
/// numeric `code`), classified like the HTTP status it stands for: a rate
/// limit or overload is retried, a server error too, anything else not.
pub(crate) fn in_stream_error(error: &Value, busy: &[u16], secret: &str) -> LlmError {
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| (400..600).contains(code))
        .unwrap_or_else(|| {
            let kind = error
                .get("type")
                .or_else(|| error.get("code"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            status_of_error_type(kind)
        });
    let body = serde_json::json!({ "error": error }).to_string();
    error_status(status, &body, secret, busy)
}

/// The HTTP status an error type stands for (Anthropic's documented types,
/// OpenAI's rate-limit codes); anything unknown counts as a server error.
fn status_of_error_type(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// The error of a body that ended before the stream said it was complete:
/// like a dropped connection, worth another attempt.
pub(crate) fn cut_short() -> LlmError {
    LlmError::Network("the response stream ended before the model finished".to_owned())
}

/// The error of an event whose data is not what the provider documents.
pub(crate) fn bad_event(error: &serde_json::Error) -> LlmError {
    LlmError::InvalidResponse(format!("unexpected event in the response stream: {error}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    #[test]
    fn in_stream_errors_are_classified_like_statuses() {
        let overloaded = json!({"type": "overloaded_error", "message": "Overloaded"});
        assert_eq!(
            in_stream_error(&overloaded, &[529], "k"),
            LlmError::RateLimited {
                status: 529,
                retry_after: None
            }
        );
        let upstream = json!({"code": 502, "message": "upstream sk-k1 down"});
        assert_eq!(
            in_stream_error(&upstream, &[], "sk-k1"),
            LlmError::Server {
                status: 502,
                message: "upstream [redacted] down".to_owned()
            }
        );
        let invalid = json!({"type": "invalid_request_error", "message": "bad"});
        assert!(!in_stream_error(&invalid, &[], "k").is_retryable());
        let limited = json!({"code": "rate_limit_exceeded", "message": "slow"});
        assert!(matches!(
            in_stream_error(&limited, &[], "k"),
            LlmError::RateLimited { status: 429, .. }
        ));
        assert!(in_stream_error(&json!({}), &[], "k").is_retryable());
    }

    #[test]
    fn a_restart_is_sent_only_after_an_attempt_that_sent_text() {
        let heard = Mutex::new(Vec::new());
        let on = |event: StreamEvent<'_>| {
            heard.lock().expect("lock").push(match event {
                StreamEvent::Text(text) => text.to_owned(),
                StreamEvent::Restart => "<restart>".to_owned(),
            });
        };
        let restarts = Restarts::new(&on);
        restarts.begin_attempt();
        restarts.pass(StreamEvent::Text(""));
        restarts.begin_attempt();
        restarts.pass(StreamEvent::Text("Hel"));
        restarts.begin_attempt();
        restarts.pass(StreamEvent::Text("Hello"));
        assert_eq!(
            *heard.lock().expect("lock"),
            ["", "Hel", "<restart>", "Hello"]
        );
    }
}
