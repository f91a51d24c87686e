//! The fake model's HTTP side: its routes (`POST /v1/chat/completions`,
//! `POST /v1/messages`, `GET /v1/models`), what every request goes through
//! (recorded, counted in flight, delayed, scripted, billed) before its wire
//! format renders the answer, and the answers that are the same in both
//! formats (a canned one, an error status, the model list).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::anthropic::Anthropic;
use super::billing::{Billed, Billing, Format, Usage};
use super::load::{InFlight, Load};
use super::openai::OpenAi;
use super::recorded::Recorded;
use super::reply::{Answer, Canned, Reply, Script};

/// What the server shares with its handlers and its [`super::FakeLlm`].
pub(crate) struct Shared {
    pub(crate) script: Script,
    pub(crate) requests: Mutex<Vec<Recorded>>,
    /// Waited before each answer.
    pub(crate) delay: Duration,
    pub(crate) load: Arc<Mutex<Load>>,
    pub(crate) billing: Arc<dyn Billing>,
    /// While true, event streams stop after their first text delta.
    pub(crate) hold: watch::Sender<bool>,
}

/// One request as a wire format's renderer sees it.
pub(crate) struct Turn<'a> {
    pub(crate) request: &'a Value,
    /// How many requests the server had received once this one was in.
    pub(crate) n: usize,
    pub(crate) usage: Usage,
    pub(crate) hold: &'a watch::Sender<bool>,
}

/// How one wire format renders an answer.
pub(crate) trait Render {
    const FORMAT: Format;
    /// The route it answers.
    const PATH: &'static str;

    /// The answer as one body.
    fn whole(turn: &Turn<'_>, answer: Answer) -> Response;

    /// The answer as an event stream, to a request with `"stream": true`.
    fn stream(turn: &Turn<'_>, answer: Answer) -> Response;

    /// An event stream of `text` that ends before the model finished.
    fn cut_stream(turn: &Turn<'_>, text: &str) -> Response;
}

/// The fake model's routes.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(OpenAi::PATH, post(answer::<OpenAi>))
        .route(Anthropic::PATH, post(answer::<Anthropic>))
        .route("/v1/models", get(models))
        .with_state(shared)
}

/// Takes one request: records it (counted in flight while it waits the
/// server's delay), answers 400 when the billing model refuses it as the
/// provider would, asks the script, and sends a canned reply as it is;
/// any other is billed and rendered in the format `R` (an error status as
/// it is in both).
async fn answer<R: Render>(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let request = record(&shared, R::PATH, headers, &text).await;
    let n = shared.requests.lock().expect("lock").len();
    let billed = Billed {
        format: R::FORMAT,
        body: &text,
        request: &request,
    };
    if let Some(message) = shared.billing.refusal(&billed) {
        let body = json!({"type": "error",
                          "error": {"type": "invalid_request_error", "message": message}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let reply = (shared.script)(&request);
    if let Reply::Canned(canned) = reply {
        return canned_response(canned).await;
    }
    let usage = shared.billing.usage(&billed);
    let turn = Turn {
        request: &request,
        n,
        usage,
        hold: &shared.hold,
    };
    let stream = request["stream"] == true;
    match reply {
        Reply::CutStream(text) if stream => R::cut_stream(&turn, &text),
        reply => match reply.answer() {
            Err((code, body)) => status(code, body),
            Ok(answer) if stream => R::stream(&turn, answer),
            Ok(answer) => R::whole(&turn, answer),
        },
    }
}

/// Records a request and waits the server's delay; returns its parsed body
/// (`null` when it is not JSON).
async fn record(shared: &Shared, path: &str, headers: HeaderMap, text: &str) -> Value {
    let key = serde_json::from_str::<Value>(text)
        .ok()
        .map(|body| conversation(&body))
        .unwrap_or_default();
    let _in_flight = InFlight::enter(&shared.load, key);
    shared.requests.lock().expect("lock").push(Recorded {
        path: path.to_owned(),
        headers,
        body: text.to_owned(),
    });
    if !shared.delay.is_zero() {
        tokio::time::sleep(shared.delay).await;
    }
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// What tells a request's conversation apart: its first message after the
/// system prompt.
fn conversation(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .find(|message| message["role"] != "system")
        .map(|message| message["content"].to_string())
        .unwrap_or_default()
}

/// A canned reply, after its delay.
async fn canned_response(reply: Canned) -> Response {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let status = StatusCode::from_u16(reply.status).expect("status");
    let mut response = (status, reply.body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_str(&value).expect("header value"),
        );
    }
    response
}

/// An error status with `body`, asking for no wait before a retry.
fn status(code: u16, body: String) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, [("retry-after", "0")], body).into_response()
}

/// The model list (`GET /v1/models`, both wire formats): `fake-model`,
/// what the gateway's test settings name. Answered 401 without a key.
async fn models(headers: HeaderMap) -> Response {
    let keyed = headers.contains_key("authorization") || headers.contains_key("x-api-key");
    if !keyed {
        return status(401, r#"{"error":{"message":"no key"}}"#.to_owned());
    }
    axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
        .into_response()
}

/// `text` cut into three pieces (fewer when it is shorter), at character
/// boundaries: how the streams deliver text and tool arguments.
pub(crate) fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}
