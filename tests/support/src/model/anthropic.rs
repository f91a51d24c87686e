//! The fake model's Anthropic Messages side: an answer as one `message`
//! body (a thinking block ahead of a text-only answer), or, to a request
//! with `"stream": true`, as the Messages events, text and tool input cut
//! into several deltas.

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::billing::Format;
use super::reply::{Answer, Call};
use super::server::{Render, Turn, pieces};
use super::sse::{anthropic_event, held_stream};

/// The Messages format.
pub(crate) struct Anthropic;

impl Render for Anthropic {
    const FORMAT: Format = Format::Anthropic;
    const PATH: &'static str = "/v1/messages";

    fn whole(turn: &Turn<'_>, Answer { text, calls }: Answer) -> Response {
        let (content, stop) = if calls.is_empty() {
            (
                json!([{"type": "thinking", "thinking": "pondering"}, {"type": "text", "text": text}]),
                "end_turn",
            )
        } else {
            let mut blocks: Vec<Value> = text
                .into_iter()
                .map(|text| json!({"type": "text", "text": text}))
                .collect();
            blocks.extend(calls.into_iter().map(|(id, name, args)| {
                let input: Value = serde_json::from_str(&args).unwrap_or(json!({}));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }));
            (Value::Array(blocks), "tool_use")
        };
        let n = turn.n;
        let body = json!({
            "id": format!("msg_fake_{n}"),
            "type": "message",
            "role": "assistant",
            "model": turn.request["model"],
            "content": content,
            "stop_reason": stop,
            "usage": turn.usage.anthropic()
        });
        ([("request-id", format!("req-{n}"))], axum::Json(body)).into_response()
    }

    /// The same blocks as the plain answer, text and tool input cut into
    /// several deltas.
    fn stream(turn: &Turn<'_>, Answer { text, calls }: Answer) -> Response {
        let mut events = Events::started(turn);
        let reason = if calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        };
        if calls.is_empty() {
            let thought = json!({"type": "thinking_delta", "thinking": "pondering"});
            events.block(
                json!({"type": "thinking", "thinking": ""}),
                vec![thought],
                false,
            );
        }
        if let Some(text) = text {
            events.block(
                json!({"type": "text", "text": ""}),
                text_deltas(&text),
                true,
            );
        }
        events.calls(calls);
        events.events.push(
            json!({"type": "message_delta", "delta": {"stop_reason": reason},
                                  "usage": {"output_tokens": turn.usage.output_tokens}}),
        );
        events.events.push(json!({"type": "message_stop"}));
        let lines = events.events.iter().map(anthropic_event).collect();
        held_stream(lines, events.first_text, turn.hold, request_id(turn))
    }

    /// A text block's deltas, without the block's end or the message's.
    fn cut_stream(turn: &Turn<'_>, text: &str) -> Response {
        let mut events = Events::started(turn).events;
        events.push(start(0, json!({"type": "text", "text": ""})));
        events.extend(text_deltas(text).into_iter().map(|piece| delta(0, piece)));
        let lines = events.iter().map(anthropic_event).collect();
        held_stream(lines, None, turn.hold, request_id(turn))
    }
}

fn request_id(turn: &Turn<'_>) -> (&'static str, String) {
    ("request-id", format!("req-{}", turn.n))
}

fn start(index: usize, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn delta(index: usize, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn stop(index: usize) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

/// The events of one streamed answer, and the index of the event after
/// which a held stream waits.
struct Events {
    events: Vec<Value>,
    first_text: Option<usize>,
    /// The next block's index.
    index: usize,
}

impl Events {
    /// The events of a message begun, its input usage counted.
    fn started(turn: &Turn<'_>) -> Self {
        let message_start = json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{}", turn.n), "type": "message", "role": "assistant",
            "model": turn.request["model"], "content": [], "stop_reason": null,
            "usage": turn.usage.anthropic_start()}});
        Self {
            events: vec![message_start],
            first_text: None,
            index: 0,
        }
    }

    /// A block from its start event and its deltas.
    fn block(&mut self, head: Value, deltas: Vec<Value>, text: bool) {
        self.events.push(start(self.index, head));
        for piece in deltas {
            if text {
                self.first_text.get_or_insert(self.events.len());
            }
            self.events.push(delta(self.index, piece));
        }
        self.events.push(stop(self.index));
        self.index += 1;
    }

    fn calls(&mut self, calls: Vec<Call>) {
        for (id, name, args) in calls {
            let deltas = pieces(&args)
                .into_iter()
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect();
            let head = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
            self.block(head, deltas, false);
        }
    }
}

fn text_deltas(text: &str) -> Vec<Value> {
    pieces(text)
        .into_iter()
        .map(|piece| json!({"type": "text_delta", "text": piece}))
        .collect()
}
