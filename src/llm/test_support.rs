//! Test scaffolding the provider modules share: a scripted fake provider
//! server that records every request ([`FakeServer`]), the test key, a
//! [`Fixture`] per provider (where it listens, its model, a success body, a
//! history), and the failure scenarios every provider must handle alike:
//! rate limits and server errors retried, rejections not, the last error kept
//! once retries are spent, slow servers timed out, and no key in any error.
//! For streamed calls: [`Reply::sse`] answers with an event stream,
//! [`decode_in_pieces`] runs a stream decoder over a body cut anywhere, and
//! [`Heard`] records what a streamed call passed on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use secrecy::SecretString;

use super::sse::SseParser;
use super::stream::{StreamDecoder, StreamEvent};
use super::{
    Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind, RetryPolicy,
    build_provider,
};
use crate::domain::{ChatMessage, ToolSpec};

/// What a streamed call passed on: its text, `<restart>` for each restart.
#[derive(Debug, Default)]
pub struct Heard(Mutex<String>);

impl Heard {
    pub fn on(&self, event: StreamEvent<'_>) {
        let mut heard = self.0.lock().expect("lock");
        match event {
            StreamEvent::Text(text) => heard.push_str(text),
            StreamEvent::Restart => heard.push_str("<restart>"),
        }
    }

    pub fn text(&self) -> String {
        self.0.lock().expect("lock").clone()
    }
}

/// Runs a fresh decoder over `body` fed in pieces of `step` bytes, as the
/// streamed attempt does; returns its response (response headers: `headers`)
/// and what it passed on.
pub fn decode_in_pieces<D: StreamDecoder>(
    decoder: D,
    body: &str,
    step: usize,
    headers: &HeaderMap,
) -> (Result<ModelResponse, LlmError>, String) {
    let heard = Heard::default();
    let on = |event: StreamEvent<'_>| heard.on(event);
    let result = (|| {
        let mut decoder = decoder;
        let mut parser = SseParser::default();
        for piece in body.as_bytes().chunks(step.max(1)) {
            for event in parser.feed(piece)? {
                if decoder.done() {
                    break;
                }
                decoder.event(&event, &on)?;
            }
        }
        if let Some(event) = parser.finish()?
            && !decoder.done()
        {
            decoder.event(&event, &on)?;
        }
        decoder.finish(headers)
    })();
    (result, heard.text())
}

/// Scenario: `body` decoded (by `decode`, given the body and a piece
/// size) cut one byte at a time (every boundary) and at other sizes (events
/// and characters cut at every offset among them) always gives `expected`
/// and passes on `heard`.
pub fn a_stream_cut_anywhere_decodes_alike(
    decode: impl Fn(&str, usize) -> (Result<ModelResponse, LlmError>, String),
    body: &str,
    expected: &ModelResponse,
    heard: &str,
) {
    for step in (1..=32).chain([64, 127, 512, body.len()]) {
        let (response, passed_on) = decode(body, step);
        assert_eq!(response.as_ref(), Ok(expected), "cut every {step} bytes");
        assert_eq!(passed_on, heard);
    }
}

/// `events` as an event stream body: each JSON value a `data:` event (with
/// its `event:` name when given).
pub fn sse_body(events: &[(Option<&str>, String)]) -> String {
    events
        .iter()
        .map(|(name, data)| match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        })
        .collect()
}

/// The API key the provider tests use (and check never leaks).
pub const KEY: &str = "sk-secret-123";

/// Retries with millisecond delays, so tests stay fast.
pub fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(5),
    }
}

/// One provider as its tests see it.
pub struct Fixture {
    pub kind: ProviderKind,
    /// What follows the fake server's address in the base URL. It ends in a
    /// slash on purpose: the provider must trim it.
    pub path: &'static str,
    pub model: &'static str,
    pub max_tokens: u32,
    /// A successful response whose content is "hi".
    pub ok_body: fn() -> String,
    /// The history the scenarios send.
    pub history: fn() -> Vec<ChatMessage>,
}

impl Fixture {
    /// The provider at `base_url`, with the test key.
    pub fn provider(
        &self,
        base_url: &str,
        retry: RetryPolicy,
        timeout: Duration,
    ) -> Arc<dyn Provider> {
        let endpoint = Endpoint {
            kind: self.kind,
            base_url: base_url.to_owned(),
            api_key: SecretString::from(KEY),
            timeout,
            retry,
        };
        build_provider(endpoint, reqwest::Client::new())
    }

    /// A fake server answering from `script`, and the provider pointed at
    /// it (three fast retries, a generous timeout).
    pub async fn start(&self, script: Vec<Reply>) -> (FakeServer, Arc<dyn Provider>) {
        let server = FakeServer::start(script).await;
        let provider = self.provider(
            &format!("{}{}", server.base, self.path),
            fast_retry(3),
            Duration::from_secs(10),
        );
        (server, provider)
    }

    /// A request for the fixture's model: system prompt "You are terse.",
    /// cache key "session-42".
    pub fn request<'a>(
        &self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolSpec],
    ) -> ModelRequest<'a> {
        ModelRequest {
            model: self.model,
            system: "You are terse.",
            messages,
            tools,
            cache_key: "session-42",
            max_tokens: self.max_tokens,
        }
    }

    /// Sends the fixture's history, without tools.
    pub async fn ask(&self, provider: &dyn Provider) -> Result<ModelResponse, LlmError> {
        let messages = (self.history)();
        provider.complete(&self.request(&messages, &[])).await
    }
}

/// A 429 asking for no wait (`error_body` its body) is retried at once, and
/// the retry sends the very same bytes.
pub async fn a_rate_limit_with_retry_after_zero_is_retried(fixture: &Fixture, error_body: &str) {
    let (server, provider) = fixture
        .start(vec![
            Reply::json(429, error_body).header("retry-after", "0"),
            Reply::json(200, (fixture.ok_body)()),
        ])
        .await;
    let response = fixture.ask(provider.as_ref()).await.expect("success");
    assert_eq!(response.content.as_deref(), Some("hi"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Every retry sends the very same bytes.
    assert_eq!(requests[0].body, requests[1].body);
}

/// Two transient failures in a row are retried until the success.
pub async fn transient_failures_are_retried(fixture: &Fixture, first: Reply, second: Reply) {
    let (server, provider) = fixture
        .start(vec![first, second, Reply::json(200, (fixture.ok_body)())])
        .await;
    fixture.ask(provider.as_ref()).await.expect("success");
    assert_eq!(server.requests().len(), 3);
}

/// A 400 (`body`) fails at once with the provider's `message`.
pub async fn a_bad_request_is_not_retried(fixture: &Fixture, body: &str, message: &str) {
    let (server, provider) = fixture
        .start(vec![
            Reply::json(400, body),
            Reply::json(200, (fixture.ok_body)()),
        ])
        .await;
    let error = fixture.ask(provider.as_ref()).await.expect_err("rejected");
    assert_eq!(
        error,
        LlmError::Rejected {
            status: 400,
            message: message.to_owned()
        }
    );
    assert_eq!(server.requests().len(), 1);
}

/// Four transient failures (`script`) spend the three retries; the error is
/// the last one, `last`.
pub async fn exhausted_retries_return_the_last_error(
    fixture: &Fixture,
    script: Vec<Reply>,
    last: LlmError,
) {
    let (server, provider) = fixture.start(script).await;
    let error = fixture.ask(provider.as_ref()).await.expect_err("exhausted");
    assert_eq!(error, last);
    assert_eq!(server.requests().len(), 4);
}

/// A server slower than the timeout is a [`LlmError::Timeout`].
pub async fn a_slow_server_times_out(fixture: &Fixture) {
    let server = FakeServer::start(vec![
        Reply::json(200, (fixture.ok_body)()).delayed(Duration::from_secs(2)),
    ])
    .await;
    let provider = fixture.provider(
        &format!("{}{}", server.base, fixture.path),
        fast_retry(0),
        Duration::from_millis(200),
    );
    let error = fixture.ask(provider.as_ref()).await.expect_err("timeout");
    assert_eq!(error, LlmError::Timeout);
}

/// Each of `bodies`, sent with a 200, is an [`LlmError::InvalidResponse`];
/// returns those errors in order.
pub async fn bodies_that_are_invalid_responses(
    fixture: &Fixture,
    bodies: &[&str],
) -> Vec<LlmError> {
    let script = bodies.iter().map(|body| Reply::json(200, *body)).collect();
    let (_server, provider) = fixture.start(script).await;
    let mut errors = Vec::new();
    for _ in bodies {
        let error = fixture.ask(provider.as_ref()).await.expect_err("invalid");
        assert!(matches!(error, LlmError::InvalidResponse(_)), "{error:?}");
        errors.push(error);
    }
    errors
}

/// The errors of `calls` failing calls against `script`, then of a call to
/// an unreachable URL that itself contains the key; none shows the key.
pub async fn errors_never_show_the_key(
    fixture: &Fixture,
    script: Vec<Reply>,
    calls: usize,
) -> Vec<LlmError> {
    let (_server, provider) = fixture.start(script).await;
    let mut errors = Vec::new();
    for _ in 0..calls {
        errors.push(fixture.ask(provider.as_ref()).await.expect_err("fails"));
    }
    // A connection failure to a URL that itself contains the key.
    let port = closed_port().await;
    let unreachable = fixture.provider(
        &format!("http://127.0.0.1:{port}/{KEY}{}", fixture.path),
        fast_retry(0),
        Duration::from_secs(5),
    );
    errors.push(
        fixture
            .ask(unreachable.as_ref())
            .await
            .expect_err("unreachable"),
    );
    for error in &errors {
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(KEY), "{shown}");
    }
    errors
}

/// One canned answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Reply {
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    /// A 200 event stream.
    pub fn sse(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".to_owned(), "text/event-stream".to_owned())],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("request body is UTF-8")
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("ascii header").to_owned())
    }
}

/// A running fake server; it stops with the test's runtime.
pub struct FakeServer {
    pub base: String,
    shared: Arc<Shared>,
}

impl FakeServer {
    /// Starts on an ephemeral port, answering from `script` in order (and
    /// with a 500 once the script is exhausted).
    pub async fn start(script: Vec<Reply>) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            requests: Mutex::default(),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            shared,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().expect("lock").clone()
    }
}

/// A port nothing listens on.
pub async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("local addr").port()
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().expect("lock").push(Recorded {
        path: uri.path().to_owned(),
        headers,
        body: body.to_vec(),
    });
    let reply = shared.script.lock().expect("lock").pop_front();
    let Some(reply) = reply else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response();
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = (
        StatusCode::from_u16(reply.status).expect("status"),
        reply.body,
    )
        .into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_str(&value).expect("header value"),
        );
    }
    response
}
