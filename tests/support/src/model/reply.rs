//! What the fake model answers: a [`Reply`] the server renders in the
//! request's wire format (one JSON body, or an event stream to a request
//! with `"stream": true`), or a [`Canned`] HTTP answer sent as it is; and
//! the [`Script`] that picks the reply for each request.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// A tool call as scripted: (id, name, raw JSON arguments).
pub type Call = (String, String, String);

/// Decides the reply from the parsed request body.
pub type Script = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

/// What the fake model answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Text(String),
    /// Tool calls: (id, name, raw JSON arguments).
    Tools(Vec<Call>),
    /// Text, then tool calls, in one answer.
    TextAndTools(String, Vec<Call>),
    /// To a streamed request, this text, then the end of the body before
    /// the model finished (a dropped connection); to a plain one, a 502.
    CutStream(String),
    /// An HTTP error status with a body (and `retry-after: 0`).
    Status(u16, String),
    /// Exactly this HTTP answer, whatever the wire format.
    Canned(Canned),
}

/// What a wire format renders of a reply: its text and tool calls.
pub(crate) struct Answer {
    pub(crate) text: Option<String>,
    pub(crate) calls: Vec<Call>,
}

impl Reply {
    /// The answer's text and tool calls, or the error status to send (a
    /// cut stream, asked for whole, is a 502).
    pub(crate) fn answer(self) -> Result<Answer, (u16, String)> {
        let answer = |text, calls| Ok(Answer { text, calls });
        match self {
            Self::Text(text) => answer(Some(text), Vec::new()),
            Self::Tools(calls) => answer(None, calls),
            Self::TextAndTools(text, calls) => answer(Some(text), calls),
            Self::Status(code, body) => Err((code, body)),
            Self::CutStream(_) => Err((502, "stream cut".to_owned())),
            // Sent as it is before an answer is asked for; its status and
            // body should one be.
            Self::Canned(canned) => Err((canned.status, canned.body)),
        }
    }
}

impl From<Canned> for Reply {
    fn from(canned: Canned) -> Self {
        Self::Canned(canned)
    }
}

/// One HTTP answer, byte for byte: for tests of a provider's own parsing,
/// errors and retries.
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Canned {
    /// `body` with `status`, as `application/json`.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::typed(status, "application/json", body.into())
    }

    /// A 200 event stream (see [`super::sse`] for its bodies).
    pub fn sse(body: impl Into<String>) -> Self {
        Self::typed(200, "text/event-stream", body.into())
    }

    /// Adds a response header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Answers only after `delay`.
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn typed(status: u16, content_type: &str, body: String) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body,
            delay: Duration::ZERO,
        }
    }
}
