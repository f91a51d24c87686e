//! OpenAI Chat Completions provider.
//!
//! Owns the Chat Completions wire format: building the request body (in a
//! fixed field order, so that each turn's `messages` bytes extend the previous
//! turn's and the provider's prompt cache keeps hitting), parsing the response
//! into a [`ModelResponse`], and classifying HTTP failures. Streamed calls
//! (`stream: true` with `stream_options.include_usage`) read the
//! `chat.completion.chunk` events: text deltas are passed on as they come,
//! tool-call deltas are joined by their index into whole calls, and the
//! pieces become the same [`ChatResponse`] an unstreamed call parses, so the
//! result is identical. Also serves every server that speaks the same
//! protocol (OpenRouter, DeepSeek, vLLM, Ollama).

use std::borrow::Cow;
use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{
    answering_model, error_message, log_failure, post_json, post_stream, request_id,
};
use super::retry::with_retry;
use super::sse::SseEvent;
use super::stream::{
    OnStream, Restarts, StreamDecoder, StreamEvent, bad_event, cut_short, in_stream_error,
};
use super::{Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind};
use crate::domain::{ChatMessage, Part, StopReason, ToolCall, Usage, canonical_json};

/// A provider speaking OpenAI Chat Completions.
pub struct OpenAiProvider {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl OpenAiProvider {
    pub fn new(endpoint: Endpoint, http: reqwest::Client) -> Self {
        Self { endpoint, http }
    }

    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.endpoint.base_url.trim_end_matches('/')
        )
    }

    async fn attempt(&self, body: &[u8], request_model: &str) -> Result<ModelResponse, LlmError> {
        let key = self.endpoint.api_key.expose_secret();
        let request = self
            .http
            .post(self.url())
            .header(AUTHORIZATION, format!("Bearer {key}"));
        post_json(request, &self.endpoint, body, &[], |bytes, headers| {
            parse_response(bytes, headers, request_model, key)
        })
        .await
    }

    async fn attempt_stream(
        &self,
        body: &[u8],
        request_model: &str,
        restarts: &Restarts<'_>,
    ) -> Result<ModelResponse, LlmError> {
        restarts.begin_attempt();
        let key = self.endpoint.api_key.expose_secret();
        let request = self
            .http
            .post(self.url())
            .header(AUTHORIZATION, format!("Bearer {key}"));
        let decoder = ChunkDecoder::new(request_model, key);
        post_stream(
            request,
            &self.endpoint,
            body,
            &[],
            decoder,
            restarts,
            |bytes, headers| parse_response(bytes, headers, request_model, key),
        )
        .await
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Openai
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError> {
        let body = request_body(request, false)?;
        with_retry(&self.endpoint.retry, || self.attempt(&body, request.model))
            .await
            .inspect_err(|error| log_failure(&self.url(), error))
    }

    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on: OnStream<'_>,
    ) -> Result<ModelResponse, LlmError> {
        let body = request_body(request, true)?;
        let restarts = Restarts::new(on);
        with_retry(&self.endpoint.retry, || {
            self.attempt_stream(&body, request.model, &restarts)
        })
        .await
        .inspect_err(|error| log_failure(&self.url(), error))
    }
}

/// The request body. Field order is the serialisation order: `messages`
/// comes right after the model so nothing that varies precedes it.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    max_tokens: u32,
    prompt_cache_key: &'a str,
    // Last, so a streamed request's `messages` bytes are those of an
    // unstreamed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireMessage<'a> {
    Text {
        role: &'static str,
        content: Cow<'a, str>,
    },
    /// A user message with images: content parts.
    Parts {
        role: &'static str,
        content: Vec<WirePart<'a>>,
    },
    Assistant {
        role: &'static str,
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        role: &'static str,
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Serialize)]
struct WireImageUrl {
    url: String,
}

/// A user message: its text, or content parts when it shows images.
fn user_message<'a>(content: &'a str, media: &'a [crate::domain::MediaRef]) -> WireMessage<'a> {
    let mut parts = crate::domain::user_parts(content, media);
    if let [Part::Text(_)] = parts.as_slice()
        && let Some(Part::Text(text)) = parts.pop()
    {
        return WireMessage::Text {
            role: "user",
            content: text,
        };
    }
    WireMessage::Parts {
        role: "user",
        content: parts
            .into_iter()
            .map(|part| match part {
                Part::Text(text) => WirePart::Text { text },
                Part::Image { media_type, base64 } => WirePart::ImageUrl {
                    image_url: WireImageUrl {
                        url: format!("data:{media_type};base64,{base64}"),
                    },
                },
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    // A `Value` serialises the same bytes every time (its map is ordered),
    // which is all the cache needs.
    parameters: &'a Value,
}

fn wire_message(message: &ChatMessage) -> WireMessage<'_> {
    match message {
        ChatMessage::User { content, media } => user_message(content, media),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let tool_calls: Vec<_> = tool_calls
                .iter()
                .map(|call| WireToolCall {
                    id: &call.id,
                    kind: "function",
                    function: WireFunctionCall {
                        name: &call.name,
                        arguments: &call.arguments,
                    },
                })
                .collect();
            // OpenAI rejects an assistant message with neither content nor
            // tool calls, so such a (degenerate) turn is sent as "".
            let content = match content.as_deref() {
                None if tool_calls.is_empty() => Some(""),
                other => other,
            };
            WireMessage::Assistant {
                role: "assistant",
                content,
                tool_calls,
            }
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
            // The wire format has no error flag; the content says what failed.
            is_error: _,
        } => WireMessage::Tool {
            role: "tool",
            tool_call_id,
            content,
        },
    }
}

/// Serialises the request body once, so every retry sends the same bytes;
/// `stream` asks for the event stream, with usage in its last chunk.
fn request_body(request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    // An empty system prompt is left out rather than sent as an empty message;
    // it is the same on every turn of a session, so the prefix stays stable.
    if !request.system.is_empty() {
        messages.push(WireMessage::Text {
            role: "system",
            content: Cow::Borrowed(request.system),
        });
    }
    messages.extend(request.messages.iter().map(wire_message));
    let body = ChatRequest {
        model: request.model,
        messages,
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            })
            .collect(),
        max_tokens: request.max_tokens,
        prompt_cache_key: request.cache_key,
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    serde_json::to_vec(&body)
        .map_err(|error| LlmError::InvalidResponse(format!("could not encode request: {error}")))
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    name: String,
    // A string per the spec; some compatible servers send an object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize, Default)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Canonical arguments when they parse, verbatim when they don't (so the
/// agent loop can show the model its own broken JSON), `{}` when empty.
fn normalise_arguments(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(text)) if text.trim().is_empty() => "{}".to_owned(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(parsed) => canonical_json(&parsed),
            Err(_) => text,
        },
        Some(other) => canonical_json(&other),
    }
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.is_empty())
}

fn parse_response(
    bytes: &[u8],
    headers: &HeaderMap,
    request_model: &str,
    key: &str,
) -> Result<ModelResponse, LlmError> {
    let mut response: ChatResponse = serde_json::from_slice(bytes)
        .map_err(|error| LlmError::InvalidResponse(format!("unexpected response body: {error}")))?;
    if response.choices.is_empty() {
        // Some compatible servers report upstream failures as a 200 with an
        // `error` object instead of choices.
        return Err(LlmError::InvalidResponse(format!(
            "no choices in the response: {}",
            error_message(bytes, key)
        )));
    }
    let choice = response.choices.swap_remove(0);
    Ok(response_of(response, choice, headers, request_model))
}

/// The [`ModelResponse`] of a parsed response and its first choice, however
/// the response arrived (one body, or assembled from a stream).
fn response_of(
    response: ChatResponse,
    choice: Choice,
    headers: &HeaderMap,
    request_model: &str,
) -> ModelResponse {
    let message = choice.message;
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(index, call)| ToolCall {
            // Results are matched by id, so a missing one still needs a value.
            id: call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{index}")),
            name: call.function.name,
            arguments: normalise_arguments(call.function.arguments),
        })
        .collect();
    let finish_reason = choice.finish_reason.unwrap_or_default();
    let stop_reason = stop_reason(&finish_reason, !tool_calls.is_empty());
    let usage = response.usage.unwrap_or_default();
    let usage = Usage {
        input_tokens: usage.prompt_tokens.unwrap_or(0),
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: usage
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0),
        cache_write_tokens: 0,
    };
    ModelResponse {
        content: non_empty(message.content),
        reasoning: non_empty(message.reasoning_content).or_else(|| non_empty(message.reasoning)),
        tool_calls,
        stop_reason,
        finish_reason,
        usage,
        model: answering_model(response.model, request_model),
        request_id: request_id(headers, "x-request-id", response.id),
    }
}

/// One `chat.completion.chunk` (or an error object sent in its place).
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChunkToolCall>>,
}

#[derive(Deserialize)]
struct ChunkToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<ChunkFunction>,
}

#[derive(Deserialize)]
struct ChunkFunction {
    #[serde(default)]
    name: Option<String>,
    // Pieces of a string per the spec; an object from some servers.
    #[serde(default)]
    arguments: Option<Value>,
}

/// A tool call being assembled from its deltas.
#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a streamed Chat Completion: `[DONE]` (or, from servers that
/// omit it, the end of the body after a finish reason) completes it.
struct ChunkDecoder<'a> {
    request_model: &'a str,
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
    fn new(request_model: &'a str, key: &'a str) -> Self {
        Self {
            request_model,
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
            return Err(in_stream_error(&error, &[], self.key));
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

    fn finish(self, headers: &HeaderMap) -> Result<ModelResponse, LlmError> {
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
        Ok(response_of(response, choice, headers, self.request_model))
    }
}

fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
    // The tool calls are what the loop must act on, whatever the server
    // called the stop (some say "stop" alongside tool calls).
    if has_tool_calls {
        return StopReason::ToolUse;
    }
    match finish_reason {
        "stop" | "" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refused,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::ToolSpec;
    use super::super::test_support::{self, Fixture, KEY, Reply};
    use super::*;

    const FIXTURE: Fixture = Fixture {
        kind: ProviderKind::Openai,
        path: "/v1/",
        model: "gpt-test",
        max_tokens: 256,
        ok_body,
        history,
    };

    fn ok_body() -> String {
        json!({
            "id": "chatcmpl-1",
            "model": "gpt-test-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}
        })
        .to_string()
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "calc".to_owned(),
            description: "Evaluates arithmetic".to_owned(),
            parameters: json!({"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}),
        }]
    }

    fn history() -> Vec<ChatMessage> {
        vec![
            ChatMessage::User {
                content: "what is 2+2?".to_owned(),
                media: Vec::new(),
            },
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_1".to_owned(),
                    name: "calc".to_owned(),
                    arguments: r#"{"expr":"2+2"}"#.to_owned(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".to_owned(),
                content: "4".to_owned(),
                is_error: false,
            },
            ChatMessage::Assistant {
                content: Some("It is 4.".to_owned()),
                tool_calls: vec![],
            },
            ChatMessage::User {
                content: "thanks".to_owned(),
                media: Vec::new(),
            },
        ]
    }

    fn request<'a>(messages: &'a [ChatMessage], tools: &'a [ToolSpec]) -> ModelRequest<'a> {
        FIXTURE.request(messages, tools)
    }

    /// The raw bytes of the JSON array following `"key":` in `text`.
    fn raw_array<'t>(text: &'t str, key: &str) -> &'t str {
        let start = text.find(&format!("\"{key}\":[")).expect("key present") + key.len() + 3;
        let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
        for (offset, ch) in text[start..].char_indices() {
            if in_string {
                match ch {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match ch {
                '"' => in_string = true,
                '[' | '{' => depth += 1,
                ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return &text[start..=start + offset];
                    }
                }
                _ => {}
            }
        }
        panic!("unterminated array");
    }

    #[tokio::test]
    async fn request_body_is_built_field_by_field() {
        let (server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        let messages = history();
        let tools = tools();
        provider
            .complete(&request(&messages, &tools))
            .await
            .expect("success");

        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let sent = &requests[0];
        assert_eq!(sent.path, "/v1/chat/completions");
        assert_eq!(
            sent.header("authorization").as_deref(),
            Some("Bearer sk-secret-123")
        );
        assert_eq!(
            sent.header("content-type").as_deref(),
            Some("application/json")
        );

        let body = sent.json();
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "what is 2+2?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"expr\":\"2+2\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
                    {"role": "assistant", "content": "It is 4."},
                    {"role": "user", "content": "thanks"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "calc",
                    "description": "Evaluates arithmetic",
                    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}
                }}],
                "max_tokens": 256,
                "prompt_cache_key": "session-42"
            })
        );
        // The field order on the wire is fixed, messages before what varies.
        let text = sent.text();
        let positions: Vec<_> = [
            "\"model\"",
            "\"messages\"",
            "\"tools\"",
            "\"max_tokens\"",
            "\"prompt_cache_key\"",
        ]
        .iter()
        .map(|key| text.find(key).expect("field present"))
        .collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
        assert!(text.starts_with(r#"{"model":"gpt-test","messages":[{"role":"system","#));
        // The assistant's tool-only turn has no content and keeps tool_calls,
        // the text-only one has no tool_calls key at all.
        assert!(text.contains(r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"expr\":\"2+2\"}"}}]}"#));
        assert!(text.contains(r#"{"role":"assistant","content":"It is 4."}"#));
        assert!(!text.contains("is_error"));
    }

    #[tokio::test]
    async fn tools_key_is_omitted_without_tools() {
        let (server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        FIXTURE.ask(provider.as_ref()).await.expect("success");
        let body = server.requests()[0].json();
        assert!(body.get("tools").is_none(), "{body}");
        assert_eq!(body["prompt_cache_key"], "session-42");
    }

    #[tokio::test]
    async fn messages_bytes_extend_the_previous_request() {
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, ok_body()),
                Reply::json(200, ok_body()),
            ])
            .await;
        let tools = tools();
        let full = history();
        provider
            .complete(&request(&full[..3], &tools))
            .await
            .expect("first");
        provider
            .complete(&request(&full, &[]))
            .await
            .expect("second");

        let requests = server.requests();
        let first = requests[0].text();
        let second = requests[1].text();
        let first = raw_array(&first, "messages");
        let second = raw_array(&second, "messages");
        let prefix = first.strip_suffix(']').expect("array");
        assert!(second.starts_with(prefix), "{first}\n{second}");
        assert!(second.len() > first.len());
    }

    #[tokio::test]
    async fn response_is_parsed_field_by_field() {
        let body = json!({
            "id": "chatcmpl-9",
            "model": "gpt-test-2024-06",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "reasoning_content": "The user wants numbers.",
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": "{\"b\":1, \"a\":2}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{not json"}},
                        {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": ""}}
                    ]
                },
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        });
        let (_server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, body.to_string()).header("x-request-id", "req_abc"),
            ])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(
            response,
            // The streamed fixture's answer, with an unaccented text.
            ModelResponse {
                content: Some("Let me check.".to_owned()),
                ..tool_response()
            }
        );
    }

    #[tokio::test]
    async fn response_fallbacks_and_reasoning_alias() {
        // No request-id header, no model, no usage, `reasoning` instead of
        // `reasoning_content`, null content.
        let body = json!({
            "id": "chatcmpl-7",
            "choices": [{"message": {"role": "assistant", "content": null, "reasoning": "hmm"}, "finish_reason": "length"}]
        });
        let (_server, provider) = FIXTURE
            .start(vec![Reply::json(200, body.to_string())])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.content, None);
        assert_eq!(response.reasoning.as_deref(), Some("hmm"));
        assert_eq!(response.stop_reason, StopReason::MaxTokens);
        assert_eq!(response.finish_reason, "length");
        assert_eq!(response.usage, Usage::default());
        assert_eq!(response.model, "gpt-test");
        assert_eq!(response.request_id.as_deref(), Some("chatcmpl-7"));
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("stop", false), StopReason::EndTurn);
        assert_eq!(stop_reason("", false), StopReason::EndTurn);
        assert_eq!(stop_reason("tool_calls", false), StopReason::ToolUse);
        assert_eq!(stop_reason("stop", true), StopReason::ToolUse);
        assert_eq!(stop_reason("length", false), StopReason::MaxTokens);
        assert_eq!(stop_reason("content_filter", false), StopReason::Refused);
        assert_eq!(
            stop_reason("weird", false),
            StopReason::Other("weird".to_owned())
        );
    }

    #[tokio::test]
    async fn missing_finish_reason_and_object_arguments() {
        let body = json!({
            "choices": [{"message": {"content": "done", "tool_calls": [
                {"id": "x", "function": {"name": "calc", "arguments": {"z": 1, "y": [2]}}}
            ]}}]
        });
        let (_server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, body.to_string()),
                Reply::json(
                    200,
                    json!({"choices": [{"message": {"content": "ok"}}]}).to_string(),
                ),
            ])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.tool_calls[0].arguments, r#"{"y":[2],"z":1}"#);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(response.finish_reason, "");
    }

    #[tokio::test]
    async fn rate_limit_with_retry_after_zero_then_success() {
        test_support::a_rate_limit_with_retry_after_zero_is_retried(
            &FIXTURE,
            r#"{"error":{"message":"slow down"}}"#,
        )
        .await;
    }

    #[tokio::test]
    async fn server_errors_are_retried() {
        test_support::transient_failures_are_retried(
            &FIXTURE,
            Reply::json(500, "oops"),
            Reply::json(502, "<html>bad gateway</html>"),
        )
        .await;
    }

    #[tokio::test]
    async fn bad_request_is_not_retried() {
        test_support::a_bad_request_is_not_retried(
            &FIXTURE,
            r#"{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}"#,
            "max_tokens is too large",
        )
        .await;
    }

    #[tokio::test]
    async fn exhausted_retries_return_the_last_error() {
        let overloaded = r#"{"error":{"message":"overloaded"}}"#;
        test_support::exhausted_retries_return_the_last_error(
            &FIXTURE,
            vec![
                Reply::json(503, overloaded),
                Reply::json(503, overloaded),
                Reply::json(503, overloaded),
                Reply::json(429, "{}").header("retry-after-ms", "3"),
            ],
            LlmError::RateLimited {
                status: 429,
                retry_after: Some(Duration::from_millis(3)),
            },
        )
        .await;
    }

    #[tokio::test]
    async fn slow_server_times_out() {
        test_support::a_slow_server_times_out(&FIXTURE).await;
    }

    #[tokio::test]
    async fn invalid_json_is_an_invalid_response() {
        let errors = test_support::bodies_that_are_invalid_responses(
            &FIXTURE,
            &["not json", r#"{"error":{"message":"upstream failed"}}"#],
        )
        .await;
        assert!(
            matches!(errors[1], LlmError::InvalidResponse(ref m) if m.contains("upstream failed")),
            "{:?}",
            errors[1]
        );
    }

    #[tokio::test]
    async fn api_key_never_leaks_into_errors() {
        let server_error = || Reply::json(500, format!("internal error for key {KEY}"));
        let errors = test_support::errors_never_show_the_key(
            &FIXTURE,
            vec![
                Reply::json(
                    401,
                    format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
                ),
                server_error(),
                server_error(),
                server_error(),
                server_error(),
                Reply::json(200, format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#)),
            ],
            3,
        )
        .await;
        assert!(matches!(errors[0], LlmError::Rejected { status: 401, .. }));
        assert!(matches!(errors[1], LlmError::Server { status: 500, .. }));
        assert!(matches!(errors[2], LlmError::InvalidResponse(_)));
        assert!(matches!(errors[3], LlmError::Network(_)));
    }

    // Streamed calls.

    fn data(events: &[Value]) -> String {
        let mut events: Vec<(Option<&str>, String)> = events
            .iter()
            .map(|event| (None, event.to_string()))
            .collect();
        events.push((None, "[DONE]".to_owned()));
        test_support::sse_body(&events)
    }

    /// The stream of the response in `response_is_parsed_field_by_field`,
    /// text and tool calls cut across chunks, calls interleaved.
    fn tool_stream() -> String {
        let delta = |delta: Value| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        let call = |call: Value| delta(json!({"tool_calls": [call]}));
        data(&[
            json!({"id": "chatcmpl-9", "model": "gpt-test-2024-06", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let "}, "finish_reason": null}]}),
            delta(json!({"content": "me ché", "reasoning_content": "The user "})),
            delta(json!({"content": "ck.", "reasoning_content": "wants numbers."})),
            call(
                json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "calc", "arguments": ""}}),
            ),
            call(json!({"index": 0, "function": {"arguments": "{\"b\":1, "}})),
            call(
                json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{not json"}}),
            ),
            call(json!({"index": 0, "function": {"arguments": "\"a\":2}"}})),
            call(
                json!({"index": 2, "id": "call_c", "type": "function", "function": {"name": "now"}}),
            ),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                   "prompt_tokens_details": {"cached_tokens": 1024}}}),
        ])
    }

    fn tool_response() -> ModelResponse {
        ModelResponse {
            content: Some("Let me chéck.".to_owned()),
            reasoning: Some("The user wants numbers.".to_owned()),
            tool_calls: vec![
                ToolCall {
                    id: "call_a".to_owned(),
                    name: "calc".to_owned(),
                    arguments: r#"{"a":2,"b":1}"#.to_owned(),
                },
                ToolCall {
                    id: "call_b".to_owned(),
                    name: "calc".to_owned(),
                    arguments: "{not json".to_owned(),
                },
                ToolCall {
                    id: "call_c".to_owned(),
                    name: "now".to_owned(),
                    arguments: "{}".to_owned(),
                },
            ],
            stop_reason: StopReason::ToolUse,
            finish_reason: "tool_calls".to_owned(),
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 40,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
            },
            model: "gpt-test-2024-06".to_owned(),
            request_id: Some("req_abc".to_owned()),
        }
    }

    fn decode(body: &str, step: usize) -> (Result<ModelResponse, LlmError>, String) {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", "req_abc".parse().expect("value"));
        test_support::decode_in_pieces(ChunkDecoder::new("gpt-test", KEY), body, step, &headers)
    }

    #[test]
    fn a_stream_cut_anywhere_gives_the_unstreamed_response() {
        test_support::a_stream_cut_anywhere_decodes_alike(
            decode,
            &tool_stream(),
            &tool_response(),
            "Let me chéck.",
        );
    }

    #[test]
    fn the_same_answer_parses_alike_streamed_or_not() {
        let unstreamed = json!({
            "id": "chatcmpl-9",
            "model": "gpt-test-2024-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Let me chéck.",
                "reasoning_content": "The user wants numbers.", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": "{\"b\":1, \"a\":2}"}},
                {"id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{not json"}},
                {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": ""}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 40,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        });
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", "req_abc".parse().expect("value"));
        let parsed = parse_response(unstreamed.to_string().as_bytes(), &headers, "gpt-test", KEY)
            .expect("parses");
        assert_eq!(parsed, decode(&tool_stream(), 7).0.expect("decodes"));
    }

    #[test]
    fn a_text_stream_without_usage_or_done_after_its_finish_reason() {
        let body = test_support::sse_body(&[
            (
                None,
                json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).to_string(),
            ),
            (
                None,
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    .to_string(),
            ),
        ]);
        let (response, heard) = decode(&body, 5);
        let response = response.expect("a finish reason completes it");
        assert_eq!(response.content.as_deref(), Some("hi"));
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(response.usage, Usage::default());
        assert_eq!(response.model, "gpt-test");
        assert_eq!(heard, "hi");
    }

    #[test]
    fn malformed_streams_are_clear_errors() {
        let text = json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).to_string();
        let invalid = |body: &str| {
            let (response, _) = decode(body, 3);
            let error = response.expect_err("fails");
            assert!(
                matches!(error, LlmError::InvalidResponse(_)),
                "{body}: {error:?}"
            );
        };
        invalid("data: {not json\n\n");
        invalid("data: [DONE]\n\n");
        invalid("data: \"just a string\"\n\n");
        invalid(&data(&[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
        ]));
        // Cut short: like a dropped connection, retried.
        let (response, heard) = decode(&format!("data: {text}\n\n"), 4);
        assert_eq!(response, Err(cut_short()));
        assert_eq!(heard, "hi");
        assert!(cut_short().is_retryable());
        // An error sent in the stream, key scrubbed.
        let error =
            json!({"error": {"message": format!("upstream failed for {KEY}"), "code": 502}});
        let (response, _) = decode(&format!("data: {text}\n\ndata: {error}\n\n"), 9);
        assert_eq!(
            response,
            Err(LlmError::Server {
                status: 502,
                message: "upstream failed for [redacted]".to_owned()
            })
        );
    }

    #[tokio::test]
    async fn a_streamed_call_asks_for_a_stream_with_usage_after_the_same_messages() {
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, ok_body()),
                Reply::sse(tool_stream()).header("x-request-id", "req_abc"),
            ])
            .await;
        let messages = history();
        let tools = tools();
        provider
            .complete(&request(&messages, &tools))
            .await
            .expect("plain");
        let heard = test_support::Heard::default();
        let response = provider
            .stream(&request(&messages, &tools), &|event: StreamEvent<'_>| {
                heard.on(event)
            })
            .await
            .expect("streamed");
        assert_eq!(response, tool_response());
        assert_eq!(heard.text(), "Let me chéck.");

        let requests = server.requests();
        let (plain, streamed) = (requests[0].text(), requests[1].text());
        assert_eq!(
            streamed,
            format!(
                "{},\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}",
                plain.strip_suffix('}').expect("object")
            ),
            "the streamed request is the plain one plus the stream fields"
        );
        assert_eq!(
            requests[1].header("accept").as_deref(),
            Some("text/event-stream")
        );
    }

    #[tokio::test]
    async fn a_stream_that_fails_midway_is_retried_and_its_text_restarted() {
        let partial = test_support::sse_body(&[(
            None,
            json!({"choices": [{"index": 0, "delta": {"content": "Let me"}}]}).to_string(),
        )]);
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::json(503, r#"{"error":{"message":"busy"}}"#),
                Reply::sse(partial),
                Reply::sse(tool_stream()).header("x-request-id", "req_abc"),
            ])
            .await;
        let messages = history();
        let heard = test_support::Heard::default();
        let response = provider
            .stream(&request(&messages, &[]), &|event: StreamEvent<'_>| {
                heard.on(event)
            })
            .await
            .expect("streamed");
        assert_eq!(response, tool_response());
        // The failure before any text is invisible; the one after is not.
        assert_eq!(heard.text(), "Let me<restart>Let me chéck.");
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0].body, requests[2].body);
    }

    #[tokio::test]
    async fn a_server_that_ignores_stream_is_read_whole() {
        let (_server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        let messages = history();
        let heard = test_support::Heard::default();
        let response = provider
            .stream(&request(&messages, &[]), &|event: StreamEvent<'_>| {
                heard.on(event)
            })
            .await
            .expect("read whole");
        assert_eq!(response.content.as_deref(), Some("hi"));
        assert_eq!(heard.text(), "hi");
    }

    #[tokio::test]
    async fn stream_errors_never_show_the_key() {
        let (_server, provider) = FIXTURE
            .start(vec![Reply::json(
                401,
                format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
            )])
            .await;
        let messages = history();
        let error = provider
            .stream(&request(&messages, &[]), &|_: StreamEvent<'_>| {})
            .await
            .expect_err("rejected");
        assert!(matches!(error, LlmError::Rejected { status: 401, .. }));
        assert!(!format!("{error} {error:?}").contains(KEY));
    }
}
