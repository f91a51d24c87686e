//! The fake model's OpenAI Chat Completions side: an answer as one
//! `chat.completion` body, or, to a request with `"stream": true`, as
//! `chat.completion.chunk` events whose text and tool arguments are cut
//! into several deltas (usage last, when `stream_options.include_usage`
//! asks for it).

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::billing::Format;
use super::reply::{Answer, Call};
use super::server::{Render, Turn, pieces};
use super::sse::{event, held_stream, openai_event};

/// The Chat Completions format.
pub(crate) struct OpenAi;

impl Render for OpenAi {
    const FORMAT: Format = Format::OpenAi;
    const PATH: &'static str = "/v1/chat/completions";

    fn whole(turn: &Turn<'_>, Answer { text, calls }: Answer) -> Response {
        let (message, finish) = if calls.is_empty() {
            (json!({"role": "assistant", "content": text}), "stop")
        } else {
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
                })
                .collect();
            (
                json!({"role": "assistant", "content": text, "tool_calls": calls, "reasoning_content": "thinking about tools"}),
                "tool_calls",
            )
        };
        let n = turn.n;
        let body = json!({
            "id": format!("chatcmpl-fake-{n}"),
            "object": "chat.completion",
            "model": turn.request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": turn.usage.openai()
        });
        ([("x-request-id", format!("req-{n}"))], axum::Json(body)).into_response()
    }

    /// The same answer as the plain one, its text and each call's
    /// arguments cut into several chunks.
    fn stream(turn: &Turn<'_>, Answer { text, calls }: Answer) -> Response {
        let mut events = vec![delta(turn, json!({"role": "assistant", "content": ""}))];
        if !calls.is_empty() {
            events.push(delta(
                turn,
                json!({"reasoning_content": "thinking about tools"}),
            ));
        }
        let mut first_text = None;
        for piece in pieces(text.as_deref().unwrap_or_default()) {
            first_text.get_or_insert(events.len());
            events.push(delta(turn, json!({"content": piece})));
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        events.extend(call_deltas(turn, calls));
        events.push(chunk(turn, json!({}), json!(finish)));
        if turn.request["stream_options"]["include_usage"] == true {
            let mut last = base(turn, json!([]));
            last["usage"] = turn.usage.openai();
            events.push(last);
        }
        let mut lines: Vec<String> = events.iter().map(openai_event).collect();
        lines.push(event(None, "[DONE]"));
        held_stream(lines, first_text, turn.hold, request_id(turn))
    }

    /// The text's chunks, without a finish reason or `[DONE]`.
    fn cut_stream(turn: &Turn<'_>, text: &str) -> Response {
        let lines = pieces(text)
            .into_iter()
            .map(|piece| openai_event(&delta(turn, json!({"content": piece}))))
            .collect();
        held_stream(lines, None, turn.hold, request_id(turn))
    }
}

fn request_id(turn: &Turn<'_>) -> (&'static str, String) {
    ("x-request-id", format!("req-{}", turn.n))
}

/// A chunk with these `choices`.
fn base(turn: &Turn<'_>, choices: Value) -> Value {
    json!({"id": format!("chatcmpl-fake-{}", turn.n), "object": "chat.completion.chunk",
           "model": turn.request["model"], "choices": choices})
}

/// A chunk of the first choice: its `delta` and `finish_reason`.
fn chunk(turn: &Turn<'_>, delta: Value, finish: Value) -> Value {
    base(
        turn,
        json!([{"index": 0, "delta": delta, "finish_reason": finish}]),
    )
}

/// A chunk of the first choice carrying `delta`, before the finish.
fn delta(turn: &Turn<'_>, delta: Value) -> Value {
    chunk(turn, delta, Value::Null)
}

/// The deltas of the calls: each call's head, then its arguments in
/// pieces.
fn call_deltas(turn: &Turn<'_>, calls: Vec<Call>) -> Vec<Value> {
    let mut events = Vec::new();
    for (index, (id, name, args)) in calls.into_iter().enumerate() {
        events.push(delta(
            turn,
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                    "function": {"name": name, "arguments": ""}}]}),
        ));
        for piece in pieces(&args) {
            events.push(delta(
                turn,
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
            ));
        }
    }
    events
}
