//! Event streams as model providers send them: the text of one event
//! ([`event`]), whole bodies ([`body`], and per wire format
//! [`openai_body`], ending in `[DONE]`, and [`anthropic_body`], each event
//! named by its `type`), and the streamed response the fake model serves,
//! which can hold its events after the first text until released.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::watch;

/// One event: its `event:` line when named, its `data:` line, a blank line.
pub fn event(name: Option<&str>, data: &str) -> String {
    match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// `events` as an event stream body: each a `data:` event (with its
/// `event:` name when given).
pub fn body(events: &[(Option<&str>, String)]) -> String {
    events
        .iter()
        .map(|(name, data)| event(*name, data))
        .collect()
}

/// An OpenAI chunk as an event.
pub fn openai_event(chunk: &Value) -> String {
    event(None, &chunk.to_string())
}

/// An OpenAI stream: each chunk a `data:` event, then `data: [DONE]`.
pub fn openai_body(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(openai_event).collect();
    body.push_str(&event(None, "[DONE]"));
    body
}

/// An Anthropic event, named by its `type`.
pub fn anthropic_event(event_value: &Value) -> String {
    event(event_value["type"].as_str(), &event_value.to_string())
}

/// An Anthropic stream: each event named by its `type`.
pub fn anthropic_body(events: &[Value]) -> String {
    events.iter().map(anthropic_event).collect()
}

/// A 200 event stream of `lines` with the `request_id` header; while `hold`
/// is true, the lines after the `first_text` one wait for its release.
pub(crate) fn held_stream(
    lines: Vec<String>,
    first_text: Option<usize>,
    hold: &watch::Sender<bool>,
    (header, value): (&'static str, String),
) -> Response {
    let held_from = first_text.map(|index| index + 1);
    let hold = hold.subscribe();
    let body = futures_util::stream::unfold(
        (0, lines, hold),
        move |(next, lines, mut hold)| async move {
            let line = lines.get(next)?.clone();
            if Some(next) == held_from {
                let _ = hold.wait_for(|held| !*held).await;
            }
            Some((
                Ok::<_, Infallible>(Bytes::from(line)),
                (next + 1, lines, hold),
            ))
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .header(header, value)
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
