//! The fake model's OpenAI Chat Completions side: a [`super::Reply`] as one
//! `chat.completion` body, or, to a request with `"stream": true`, as
//! `chat.completion.chunk` events whose text and tool arguments are cut
//! into several deltas (usage last, when `stream_options.include_usage`
//! asks for it).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::billing::Format;
use super::reply::{Call, Reply};
use super::server::{Shared, Turn, answer, pieces, status};
use super::sse::{event, held_stream, openai_event};

const PATH: &str = "/v1/chat/completions";

/// `POST /v1/chat/completions`.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(&shared, (Format::OpenAi, PATH), headers, &body, |turn| {
        if turn.request["stream"] == true {
            stream(turn)
        } else {
            whole(turn)
        }
    })
    .await
}

/// The answer as one body.
fn whole(turn: Turn<'_>) -> Response {
    let (text, calls) = match turn.reply.parts() {
        Ok(parts) => parts,
        Err((code, body)) => return status(code, body),
    };
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

/// Builds the chunks of one streamed answer.
struct Chunks<'a> {
    request: &'a Value,
    n: usize,
}

impl Chunks<'_> {
    fn base(&self, choices: Value) -> Value {
        json!({"id": format!("chatcmpl-fake-{}", self.n), "object": "chat.completion.chunk",
               "model": self.request["model"], "choices": choices})
    }

    fn delta(&self, delta: Value, finish: Value) -> Value {
        self.base(json!([{"index": 0, "delta": delta, "finish_reason": finish}]))
    }

    /// The deltas of the calls: each call's head, then its arguments in
    /// pieces.
    fn calls(&self, calls: Vec<Call>) -> Vec<Value> {
        let mut events = Vec::new();
        for (index, (id, name, args)) in calls.into_iter().enumerate() {
            events.push(self.delta(
                json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                        "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in pieces(&args) {
                events.push(self.delta(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        events
    }
}

/// The streamed form of the answer: the same reply as the plain one, its
/// text and each call's arguments cut into several chunks.
fn stream(turn: Turn<'_>) -> Response {
    let Turn {
        request,
        n,
        reply,
        usage,
        hold,
    } = turn;
    let request_id = ("x-request-id", format!("req-{n}"));
    let chunks = Chunks { request, n };
    let (text, calls) = match reply {
        Reply::CutStream(text) => {
            let lines = pieces(&text)
                .into_iter()
                .map(|piece| openai_event(&chunks.delta(json!({"content": piece}), Value::Null)))
                .collect();
            return held_stream(lines, None, hold, request_id);
        }
        reply => match reply.parts() {
            Ok(parts) => parts,
            Err((code, body)) => return status(code, body),
        },
    };
    let mut events = vec![chunks.delta(json!({"role": "assistant", "content": ""}), Value::Null)];
    if !calls.is_empty() {
        events.push(chunks.delta(
            json!({"reasoning_content": "thinking about tools"}),
            Value::Null,
        ));
    }
    let mut first_text = None;
    for piece in pieces(text.as_deref().unwrap_or_default()) {
        first_text.get_or_insert(events.len());
        events.push(chunks.delta(json!({"content": piece}), Value::Null));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.extend(chunks.calls(calls));
    events.push(chunks.delta(json!({}), json!(finish)));
    if request["stream_options"]["include_usage"] == true {
        let mut last = chunks.base(json!([]));
        last["usage"] = usage.openai();
        events.push(last);
    }
    let mut lines: Vec<String> = events.iter().map(openai_event).collect();
    lines.push(event(None, "[DONE]"));
    held_stream(lines, first_text, hold, request_id)
}
