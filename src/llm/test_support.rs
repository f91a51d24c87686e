//! Test scaffolding for the wire formats: the [`Fixture`] each format's
//! tests implement (where its provider listens on the fake model server,
//! its model, a success body, a history, the tool-calling answer in each
//! form, the failures it answers with), and what runs a provider or a
//! decoder against it: [`start`] (the fake server answering a script, and
//! the provider pointed at it), [`ask`] and [`ask_streamed`], [`decode`]
//! (a stream cut in pieces), [`parse`] and [`Heard`] (what a streamed call
//! passed on). The scenarios themselves are in `conformance`; the server
//! is `switchboard_test_support::model`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderMap;
use secrecy::SecretString;
use switchboard_test_support::model::{Canned, FakeLlm};

use super::http::labelled;
use super::stream::{EventReader, StreamEvent};
use super::wire::WireFormat;
use super::{
    Endpoint, LlmError, ModelRequest, ModelResponse, Provider, RetryPolicy, build_provider,
};
use crate::domain::{ChatMessage, ToolSpec};

/// The API key the provider tests use (and check never leaks).
pub const KEY: &str = "sk-secret-123";

/// What the shared scenarios need of one wire format's tests.
pub trait Fixture: WireFormat + Sized {
    /// The format (a unit value).
    const WIRE: Self;
    /// What follows the fake server's address in the base URL. It ends in a
    /// slash on purpose: the provider must trim it.
    const BASE_PATH: &'static str;
    const MODEL: &'static str;
    const MAX_TOKENS: u32;
    /// The request-id header the tool answer comes with, and its value.
    const ANSWER_ID: (&'static str, &'static str);
    /// What a streamed request's body adds to a plain one's, before its
    /// closing brace.
    const STREAM_FIELDS: &'static str;

    /// A successful response whose content is "hi".
    fn ok_body() -> String;
    /// The history the scenarios send.
    fn history() -> Vec<ChatMessage>;
    fn tools() -> Vec<ToolSpec>;
    /// The unstreamed answer of [`Fixture::tool_response`] (with `text` as
    /// its text): reasoning, text, tool calls.
    fn tool_body(text: &str) -> String;
    /// The same answer as an event stream, its pieces cut across events.
    fn tool_stream() -> String;
    /// What the tool answer parses to, text "Let me chéck.", request id
    /// [`Fixture::ANSWER_ID`]'s.
    fn tool_response() -> ModelResponse;
    /// What the format's server answers when things go wrong.
    fn failures() -> Failures;
}

/// A wire format's failing answers, for the shared scenarios.
pub struct Failures {
    /// The body of a 429.
    pub rate_limited: &'static str,
    /// Two transient failures.
    pub transient: [Canned; 2],
    /// The body of a 400, and the message read from it.
    pub bad_request: (&'static str, &'static str),
    /// Four transient failures, and the error the last one is.
    pub exhausted: (Vec<Canned>, LlmError),
    /// Bodies of a 200 that are no response, each with a text its error
    /// must show.
    pub invalid: Vec<(&'static str, Option<&'static str>)>,
    /// Answers quoting the key, and (by kind and status) the error of each
    /// call made against them.
    pub leaking: (Vec<Canned>, Vec<LlmError>),
    /// Streamed answers that fail (with `Restart` heard after any that sent
    /// text) before the whole tool stream, and what the call then heard.
    pub midway: (Vec<Canned>, &'static str),
}

/// Retries with millisecond delays, so tests stay fast.
pub fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(5),
    }
}

/// The provider of `F` at `base_url`, with the test key.
pub fn provider_at<F: Fixture>(
    base_url: &str,
    retry: RetryPolicy,
    timeout: Duration,
) -> Arc<dyn Provider> {
    let endpoint = Endpoint {
        kind: F::KIND,
        base_url: base_url.to_owned(),
        api_key: SecretString::from(KEY),
        timeout,
        retry,
        cache_ttl: crate::llm::settings::CacheTtl::FiveMinutes,
    };
    build_provider(endpoint, reqwest::Client::new())
}

/// The base URL of `F`'s provider on `server`.
pub fn base_url<F: Fixture>(server: &FakeLlm) -> String {
    format!("{}{}", server.root_url(), F::BASE_PATH)
}

/// A fake server answering `replies` in order, and the provider of `F`
/// pointed at it (three fast retries, a generous timeout).
pub async fn start<F: Fixture>(replies: Vec<Canned>) -> (FakeLlm, Arc<dyn Provider>) {
    let server = FakeLlm::scripted(replies).await;
    let provider = provider_at::<F>(
        &base_url::<F>(&server),
        fast_retry(3),
        Duration::from_secs(10),
    );
    (server, provider)
}

/// A request for `F`'s model: system prompt "You are terse.".
pub fn request<'a, F: Fixture>(
    messages: &'a [ChatMessage],
    tools: &'a [ToolSpec],
) -> ModelRequest<'a> {
    ModelRequest {
        model: F::MODEL,
        system: "You are terse.",
        system_tail: "",
        messages,
        tools,
        tool_choice: crate::llm::ToolChoice::Auto,
        cache_tail: crate::llm::CacheTail::Write,
        idle: std::time::Duration::ZERO,
        max_tokens: F::MAX_TOKENS,
        options: &crate::domain::NO_CALL_OPTIONS,
    }
}

/// Sends `F`'s history, without tools.
pub async fn ask<F: Fixture>(provider: &dyn Provider) -> Result<ModelResponse, LlmError> {
    let messages = F::history();
    provider.complete(&request::<F>(&messages, &[])).await
}

/// Sends `F`'s history without tools, streamed; returns the result and
/// what the call passed on.
pub async fn ask_streamed<F: Fixture>(
    provider: &dyn Provider,
) -> (Result<ModelResponse, LlmError>, String) {
    let messages = F::history();
    let heard = Heard::default();
    let on = |event: StreamEvent<'_>| heard.on(event);
    let result = provider.stream(&request::<F>(&messages, &[]), &on).await;
    (result, heard.text())
}

/// The headers the tool answer comes with.
fn answer_headers<F: Fixture>() -> HeaderMap {
    let (name, value) = F::ANSWER_ID;
    let mut headers = HeaderMap::new();
    headers.insert(name, value.parse().expect("value"));
    headers
}

/// `body` parsed as a successful answer with the tool answer's headers,
/// completed as the provider completes it.
pub fn parse<F: Fixture>(body: &str) -> Result<ModelResponse, LlmError> {
    let response = F::WIRE.parse(body.as_bytes(), KEY)?;
    Ok(labelled(
        response,
        &answer_headers::<F>(),
        F::REQUEST_ID,
        F::MODEL,
    ))
}

/// Runs a fresh decoder over `body` fed in pieces of `step` bytes, as the
/// streamed attempt does (with the tool answer's headers); returns its
/// response and what it passed on.
pub fn decode<F: Fixture>(body: &str, step: usize) -> (Result<ModelResponse, LlmError>, String) {
    let heard = Heard::default();
    let on = |event: StreamEvent<'_>| heard.on(event);
    let result = (|| {
        let mut reader = EventReader::new(F::WIRE.decoder(KEY));
        for piece in body.as_bytes().chunks(step.max(1)) {
            if reader.done() {
                break;
            }
            reader.feed(piece, &on)?;
        }
        let response = reader.finish(&on)?;
        Ok(labelled(
            response,
            &answer_headers::<F>(),
            F::REQUEST_ID,
            F::MODEL,
        ))
    })();
    (result, heard.text())
}

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

/// A port nothing listens on.
pub async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("local addr").port()
}
