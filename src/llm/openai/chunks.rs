//! Decoding a streamed Chat Completion: the `chat.completion.chunk` events
//! (`stream: true`, with `stream_options.include_usage` asking for the
//! usage in a last chunk). Text deltas are passed on as they come,
//! tool-call deltas are joined by their index into whole calls, and the
//! pieces become the same [`ChatResponse`] an unstreamed call parses, so
//! the result is identical. `[DONE]` completes the stream, or, from servers
//! that omit it, the end of the body after a finish reason.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::OpenAi;
use super::response::{
    ChatResponse, Choice, ResponseFunction, ResponseMessage, ResponseToolCall, WireUsage,
    response_of,
};
use crate::domain::canonical_json;
use crate::llm::sse::SseEvent;
use crate::llm::stream::{
    OnStream, StreamDecoder, StreamEvent, bad_event, cut_short, in_stream_error,
};
use crate::llm::wire::WireFormat;
use crate::llm::{LlmError, ModelResponse};

/// One `chat.completion.chunk` (or an error object sent in its place).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Chunk {
    id: Option<String>,
    model: Option<String>,
    choices: Vec<ChunkChoice>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkChoice {
    index: u32,
    delta: Option<ChunkDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkDelta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<ChunkToolCall>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkToolCall {
    index: Option<u32>,
    id: Option<String>,
    function: Option<ChunkFunction>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkFunction {
    name: Option<String>,
    // Pieces of a string per the spec; an object from some servers.
    arguments: Option<Value>,
}

/// A tool call being assembled from its deltas.
#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a streamed Chat Completion.
pub(crate) struct ChunkDecoder<'a> {
    key: &'a str,
    id: Option<String>,
    model: Option<String>,
    content: String,
    reasoning_content: String,
    reasoning: String,
    calls: BTreeMap<u32, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
    chunks: usize,
    done: bool,
}

impl<'a> ChunkDecoder<'a> {
    pub(super) fn new(key: &'a str) -> Self {
        Self {
            key,
            id: None,
            model: None,
            content: String::new(),
            reasoning_content: String::new(),
            reasoning: String::new(),
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: None,
            chunks: 0,
            done: false,
        }
    }

    /// Joins a tool-call delta into its call: by its `index`, or, from
    /// servers that send none, by its position in the chunk.
    fn tool_call_delta(&mut self, position: usize, delta: ChunkToolCall) {
        let index = delta
            .index
            .unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX));
        let call = self.calls.entry(index).or_default();
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            call.id = Some(id);
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name {
                call.name.push_str(&name);
            }
            match function.arguments {
                None | Some(Value::Null) => {}
                Some(Value::String(piece)) => call.arguments.push_str(&piece),
                Some(other) => call.arguments.push_str(&canonical_json(&other)),
            }
        }
    }
}

impl StreamDecoder for ChunkDecoder<'_> {
    fn event(&mut self, event: &SseEvent, on: OnStream<'_>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|error| bad_event(&error))?;
        if let Some(error) = chunk.error {
            return Err(in_stream_error(&error, OpenAi::BUSY, self.key));
        }
        self.chunks += 1;
        if chunk.id.is_some() {
            self.id = chunk.id;
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                on(StreamEvent::Text(&text));
                self.content.push_str(&text);
            }
            if let Some(text) = delta.reasoning_content {
                self.reasoning_content.push_str(&text);
            }
            if let Some(text) = delta.reasoning {
                self.reasoning.push_str(&text);
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                self.tool_call_delta(position, call);
            }
            if let Some(reason) = choice.finish_reason.filter(|reason| !reason.is_empty()) {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(self) -> Result<ModelResponse, LlmError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(cut_short());
        }
        if self.chunks == 0 {
            return Err(LlmError::InvalidResponse(
                "the response stream carried no chunks".to_owned(),
            ));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for call in self.calls.into_values() {
            if call.name.is_empty() {
                return Err(LlmError::InvalidResponse(
                    "a streamed tool call has no name".to_owned(),
                ));
            }
            tool_calls.push(ResponseToolCall {
                id: call.id,
                function: ResponseFunction {
                    name: call.name,
                    arguments: Some(Value::String(call.arguments)),
                },
            });
        }
        let choice = Choice {
            message: ResponseMessage {
                content: Some(self.content),
                reasoning_content: Some(self.reasoning_content),
                reasoning: Some(self.reasoning),
                tool_calls: Some(tool_calls),
            },
            finish_reason: self.finish_reason,
        };
        let response = ChatResponse {
            id: self.id,
            model: self.model,
            choices: Vec::new(),
            usage: self.usage,
        };
        Ok(response_of(response, choice))
    }
}
