//! Anthropic Messages provider.
//!
//! Owns the Messages wire format: building the request body (system prompt as
//! a cached block, strictly alternating roles, tool results inside user
//! messages, prompt-cache breakpoints), parsing the response into a
//! [`ModelResponse`], and classifying HTTP failures (529 "overloaded" is
//! treated like a rate limit). Streamed calls read the Messages events
//! (`message_start`, `content_block_start`/`_delta`/`_stop`,
//! `message_delta`, `message_stop`, `ping`, `error`): text deltas are passed
//! on as they come, and the blocks become the same [`MessagesResponse`] an
//! unstreamed call parses, so the result is identical.

use std::borrow::Cow;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{answering_model, log_failure, post_json, post_stream, request_id};
use super::retry::with_retry;
use super::sse::SseEvent;
use super::stream::{
    OnStream, Restarts, StreamDecoder, StreamEvent, bad_event, cut_short, in_stream_error,
};
use super::{Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind};
use crate::domain::{ChatMessage, Part, StopReason, ToolCall, Usage, canonical_json};

/// The API version this module's wire format follows.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Anthropic's "overloaded" status: transient, like a rate limit.
const OVERLOADED: u16 = 529;

/// A provider speaking Anthropic Messages.
pub struct AnthropicProvider {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(endpoint: Endpoint, http: reqwest::Client) -> Self {
        Self { endpoint, http }
    }

    fn url(&self) -> String {
        format!(
            "{}/v1/messages",
            self.endpoint.base_url.trim_end_matches('/')
        )
    }

    async fn attempt(&self, body: &[u8], request_model: &str) -> Result<ModelResponse, LlmError> {
        let request = self
            .http
            .post(self.url())
            .header("x-api-key", self.endpoint.api_key.expose_secret())
            .header("anthropic-version", ANTHROPIC_VERSION);
        post_json(
            request,
            &self.endpoint,
            body,
            &[OVERLOADED],
            |bytes, headers| parse_response(bytes, headers, request_model),
        )
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
            .header("x-api-key", key)
            .header("anthropic-version", ANTHROPIC_VERSION);
        post_stream(
            request,
            &self.endpoint,
            body,
            &[OVERLOADED],
            EventDecoder::new(request_model, key),
            restarts,
            |bytes, headers| parse_response(bytes, headers, request_model),
        )
        .await
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Anthropic
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

/// The request body; field order is the serialisation order.
#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    content: Vec<Block<'a>>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Option<CacheControl> = Some(CacheControl { kind: "ephemeral" });

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    fn mark_cache_breakpoint(&mut self) {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => *cache_control = EPHEMERAL,
        }
    }
}

/// An image block's bytes, inline.
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: String,
}

/// A user message's blocks: its text, then its files (images, or their
/// notes), as [`crate::domain::user_parts`] orders them (which leaves out
/// the empty text of a message with images).
fn user_blocks<'a>(content: &'a str, media: &'a [crate::domain::MediaRef]) -> Vec<Block<'a>> {
    crate::domain::user_parts(content, media)
        .into_iter()
        .map(|part| match part {
            Part::Text(text) => Block::Text {
                text,
                cache_control: None,
            },
            Part::Image { media_type, base64 } => Block::Image {
                source: ImageSource {
                    kind: "base64",
                    media_type,
                    data: base64,
                },
                cache_control: None,
            },
        })
        .collect()
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    // A `Value` serialises the same bytes every time, which the cache needs.
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// The stored arguments as the object Anthropic requires for `input`; `{}`
/// when they are not a JSON object (the model already saw its error).
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// Maps one history item to its role and blocks.
fn blocks_of(message: &ChatMessage) -> (Role, Vec<Block<'_>>) {
    match message {
        ChatMessage::User { content, media } => (Role::User, user_blocks(content, media)),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
            // Anthropic rejects empty text blocks, so empty text is dropped; a
            // turn left with no blocks at all is skipped by the caller.
            if let Some(text) = content.as_deref().filter(|text| !text.is_empty()) {
                blocks.push(Block::Text {
                    text: Cow::Borrowed(text),
                    cache_control: None,
                });
            }
            blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: tool_input(&call.arguments),
                cache_control: None,
            }));
            (Role::Assistant, blocks)
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
            is_error,
        } => (
            Role::User,
            vec![Block::ToolResult {
                tool_use_id: tool_call_id,
                content,
                is_error: *is_error,
                cache_control: None,
            }],
        ),
    }
}

/// Builds strictly alternating messages: consecutive items of the same role
/// are merged into one message, with tool results ahead of any text in a
/// user message (Anthropic requires both). An assistant turn with neither
/// text nor tool calls is skipped rather than sent as a blank text block,
/// which the API rejects; its neighbours then merge.
fn wire_messages(messages: &[ChatMessage]) -> Vec<WireMessage<'_>> {
    let mut out: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, blocks) = blocks_of(message);
        if blocks.is_empty() {
            continue;
        }
        if out.last().is_none_or(|last| last.role != role) {
            out.push(WireMessage {
                role,
                content: Vec::with_capacity(blocks.len()),
            });
        }
        let Some(target) = out.last_mut() else {
            continue;
        };
        for block in blocks {
            if matches!(block, Block::ToolResult { .. }) {
                let results = target
                    .content
                    .iter()
                    .take_while(|block| matches!(block, Block::ToolResult { .. }))
                    .count();
                target.content.insert(results, block);
            } else {
                target.content.push(block);
            }
        }
    }
    mark_message_breakpoints(&mut out);
    out
}

/// Puts a cache breakpoint on the last block of the last message (this
/// request's whole prefix gets written), and on the last block of the user
/// message before it: that is where the previous request ended, so its
/// cached prefix is found even if this turn added more than the ~20 blocks
/// Anthropic looks back from a breakpoint. With the system and tools
/// breakpoints that makes at most 4, Anthropic's limit.
fn mark_message_breakpoints(messages: &mut [WireMessage<'_>]) {
    let Some((last, earlier)) = messages.split_last_mut() else {
        return;
    };
    if let Some(block) = last.content.last_mut() {
        block.mark_cache_breakpoint();
    }
    if let Some(block) = earlier
        .iter_mut()
        .rev()
        .find(|message| message.role == Role::User)
        .and_then(|message| message.content.last_mut())
    {
        block.mark_cache_breakpoint();
    }
}

/// Serialises the request body once, so every retry sends the same bytes;
/// `stream` asks for the event stream.
fn request_body(request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
    let system = if request.system.is_empty() {
        // An empty text block is rejected; no system block at all is fine.
        Vec::new()
    } else {
        vec![Block::Text {
            text: Cow::Borrowed(request.system),
            cache_control: EPHEMERAL,
        }]
    };
    let mut tools: Vec<WireTool<'_>> = request
        .tools
        .iter()
        .map(|tool| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
            cache_control: None,
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = EPHEMERAL;
    }
    let body = MessagesRequest {
        model: request.model,
        max_tokens: request.max_tokens,
        system,
        messages: wire_messages(request.messages),
        tools,
        stream: stream.then_some(true),
    };
    serde_json::to_vec(&body)
        .map_err(|error| LlmError::InvalidResponse(format!("could not encode request: {error}")))
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<ResponseBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Redacted thinking, server tool blocks and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

fn parse_response(
    bytes: &[u8],
    headers: &HeaderMap,
    request_model: &str,
) -> Result<ModelResponse, LlmError> {
    let response: MessagesResponse = serde_json::from_slice(bytes)
        .map_err(|error| LlmError::InvalidResponse(format!("unexpected response body: {error}")))?;
    Ok(response_of(response, headers, request_model))
}

/// The [`ModelResponse`] of a parsed response, however it arrived (one body,
/// or assembled from a stream).
fn response_of(
    response: MessagesResponse,
    headers: &HeaderMap,
    request_model: &str,
) -> ModelResponse {
    let mut texts = Vec::new();
    let mut thoughts = Vec::new();
    let mut tool_calls = Vec::new();
    for block in response.content {
        match block {
            ResponseBlock::Text { text } => texts.push(text),
            ResponseBlock::Thinking { thinking } => thoughts.push(thinking),
            ResponseBlock::ToolUse { id, name, input } => {
                let input = if input.is_null() {
                    Value::Object(serde_json::Map::new())
                } else {
                    input
                };
                tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments: canonical_json(&input),
                });
            }
            ResponseBlock::Other => {}
        }
    }
    // Text is split into several blocks around citations, so the pieces join
    // seamlessly; separate thinking blocks are separate thoughts.
    let content = Some(texts.concat()).filter(|text| !text.is_empty());
    let reasoning = Some(thoughts.join("\n")).filter(|text| !text.is_empty());
    let finish_reason = response.stop_reason.unwrap_or_default();
    let stop_reason = stop_reason(&finish_reason, !tool_calls.is_empty());
    let usage = response.usage.unwrap_or_default();
    let cache_read = usage.cache_read_input_tokens.unwrap_or(0);
    let cache_write = usage.cache_creation_input_tokens.unwrap_or(0);
    let usage = Usage {
        // Anthropic's `input_tokens` excludes cached tokens; ours counts all.
        input_tokens: usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(cache_read)
            .saturating_add(cache_write),
        output_tokens: usage.output_tokens.unwrap_or(0),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
    };
    ModelResponse {
        content,
        reasoning,
        tool_calls,
        stop_reason,
        finish_reason,
        usage,
        model: answering_model(response.model, request_model),
        request_id: request_id(headers, "request-id", response.id),
    }
}

/// One event of a streamed Messages response, by its `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: Option<MessageDeltaBody>,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: Value,
    },
    /// `ping`, `content_block_stop`, and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// Signatures, citations, and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A content block being assembled from its deltas.
enum PartialBlock {
    Text(String),
    Thinking(String),
    ToolUse {
        id: String,
        name: String,
        /// The `input` of `content_block_start`, used when no JSON follows.
        start: Value,
        json: String,
    },
    Other,
}

/// Assembles a streamed Messages response; `message_stop` completes it.
struct EventDecoder<'a> {
    request_model: &'a str,
    key: &'a str,
    id: Option<String>,
    model: Option<String>,
    blocks: Vec<Option<PartialBlock>>,
    stop_reason: Option<String>,
    usage: WireUsage,
    started: bool,
    done: bool,
}

impl<'a> EventDecoder<'a> {
    fn new(request_model: &'a str, key: &'a str) -> Self {
        Self {
            request_model,
            key,
            id: None,
            model: None,
            blocks: Vec::new(),
            stop_reason: None,
            usage: WireUsage::default(),
            started: false,
            done: false,
        }
    }

    /// Later usage fields replace earlier ones (`message_delta` carries the
    /// final output count, and may repeat the input counts).
    fn merge_usage(&mut self, usage: WireUsage) {
        let WireUsage {
            input_tokens,
            output_tokens,
            cache_creation_input_tokens,
            cache_read_input_tokens,
        } = usage;
        let target = &mut self.usage;
        target.input_tokens = input_tokens.or(target.input_tokens);
        target.output_tokens = output_tokens.or(target.output_tokens);
        target.cache_creation_input_tokens =
            cache_creation_input_tokens.or(target.cache_creation_input_tokens);
        target.cache_read_input_tokens = cache_read_input_tokens.or(target.cache_read_input_tokens);
    }
}

impl StreamDecoder for EventDecoder<'_> {
    fn event(&mut self, event: &SseEvent, on: OnStream<'_>) -> Result<(), LlmError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let wire: WireEvent =
            serde_json::from_str(&event.data).map_err(|error| bad_event(&error))?;
        match wire {
            WireEvent::MessageStart { message } => {
                self.started = true;
                self.id = message.id;
                self.model = message.model;
                if let Some(usage) = message.usage {
                    self.merge_usage(usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    StartBlock::Text { text } => {
                        if !text.is_empty() {
                            on(StreamEvent::Text(&text));
                        }
                        PartialBlock::Text(text)
                    }
                    StartBlock::Thinking { thinking } => PartialBlock::Thinking(thinking),
                    StartBlock::ToolUse { id, name, input } => PartialBlock::ToolUse {
                        id,
                        name,
                        start: input,
                        json: String::new(),
                    },
                    StartBlock::Other => PartialBlock::Other,
                };
                if self.blocks.len() <= index {
                    self.blocks.resize_with(index + 1, || None);
                }
                self.blocks[index] = Some(block);
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                let Some(Some(block)) = self.blocks.get_mut(index) else {
                    return Err(LlmError::InvalidResponse(format!(
                        "the response stream sent a delta for block {index}, which never started"
                    )));
                };
                match (block, delta) {
                    (PartialBlock::Text(text), BlockDelta::TextDelta { text: piece }) => {
                        on(StreamEvent::Text(&piece));
                        text.push_str(&piece);
                    }
                    (PartialBlock::Thinking(text), BlockDelta::ThinkingDelta { thinking }) => {
                        text.push_str(&thinking);
                    }
                    (
                        PartialBlock::ToolUse { json, .. },
                        BlockDelta::InputJsonDelta { partial_json },
                    ) => json.push_str(&partial_json),
                    (_, BlockDelta::Other) | (PartialBlock::Other, _) => {}
                    _ => {
                        return Err(LlmError::InvalidResponse(format!(
                            "the response stream sent a delta that does not fit block {index}"
                        )));
                    }
                }
            }
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.and_then(|delta| delta.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.merge_usage(usage);
                }
            }
            WireEvent::MessageStop => self.done = true,
            WireEvent::Error { error } => {
                return Err(in_stream_error(&error, &[OVERLOADED], self.key));
            }
            WireEvent::Other => {}
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(self, headers: &HeaderMap) -> Result<ModelResponse, LlmError> {
        if !self.done {
            return Err(cut_short());
        }
        if !self.started {
            return Err(LlmError::InvalidResponse(
                "the response stream never started a message".to_owned(),
            ));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.into_iter().flatten() {
            content.push(match block {
                PartialBlock::Text(text) => ResponseBlock::Text { text },
                PartialBlock::Thinking(thinking) => ResponseBlock::Thinking { thinking },
                PartialBlock::ToolUse {
                    id,
                    name,
                    start,
                    json,
                } => {
                    let input = if json.trim().is_empty() {
                        start
                    } else {
                        serde_json::from_str(&json).map_err(|error| {
                            LlmError::InvalidResponse(format!(
                                "the streamed input of tool call {id} is not JSON: {error}"
                            ))
                        })?
                    };
                    ResponseBlock::ToolUse { id, name, input }
                }
                PartialBlock::Other => ResponseBlock::Other,
            });
        }
        let response = MessagesResponse {
            id: self.id,
            model: self.model,
            content,
            stop_reason: self.stop_reason,
            usage: Some(self.usage),
        };
        Ok(response_of(response, headers, self.request_model))
    }
}

fn stop_reason(stop_reason: &str, has_tool_calls: bool) -> StopReason {
    match stop_reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "refusal" => StopReason::Refused,
        "" if has_tool_calls => StopReason::ToolUse,
        "" => StopReason::EndTurn,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::super::ToolSpec;
    use super::super::test_support::{self, Fixture, KEY, Reply};
    use super::*;

    const FIXTURE: Fixture = Fixture {
        kind: ProviderKind::Anthropic,
        path: "/",
        model: "claude-test",
        max_tokens: 512,
        ok_body,
        history,
    };

    fn ok_body() -> String {
        json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test-1",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2}
        })
        .to_string()
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "calc".to_owned(),
                description: "Evaluates arithmetic".to_owned(),
                parameters: json!({"type": "object", "properties": {"expr": {"type": "string"}}}),
            },
            ToolSpec {
                name: "now".to_owned(),
                description: "Current time".to_owned(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    fn user(text: &str) -> ChatMessage {
        ChatMessage::User {
            content: text.to_owned(),
            media: Vec::new(),
        }
    }

    fn result(id: &str, content: &str, is_error: bool) -> ChatMessage {
        ChatMessage::Tool {
            tool_call_id: id.to_owned(),
            content: content.to_owned(),
            is_error,
        }
    }

    fn history() -> Vec<ChatMessage> {
        vec![
            user("what is 2+2 and the time?"),
            ChatMessage::Assistant {
                content: Some("Checking.".to_owned()),
                tool_calls: vec![
                    call("toolu_1", "calc", r#"{"expr":"2+2"}"#),
                    call("toolu_2", "now", "{broken"),
                ],
            },
            result("toolu_1", "4", false),
            result("toolu_2", "invalid arguments", true),
            ChatMessage::Assistant {
                content: Some("4, and I could not read the clock.".to_owned()),
                tool_calls: vec![],
            },
            user("thanks"),
        ]
    }

    fn request<'a>(messages: &'a [ChatMessage], tools: &'a [ToolSpec]) -> ModelRequest<'a> {
        FIXTURE.request(messages, tools)
    }

    fn count_breakpoints(body: &str) -> usize {
        body.matches(r#""cache_control":{"type":"ephemeral"}"#)
            .count()
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
        assert_eq!(sent.path, "/v1/messages");
        assert_eq!(sent.header("x-api-key").as_deref(), Some(KEY));
        assert_eq!(
            sent.header("anthropic-version").as_deref(),
            Some("2023-06-01")
        );
        assert_eq!(
            sent.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(sent.header("authorization"), None);

        let ephemeral = json!({"type": "ephemeral"});
        assert_eq!(
            sent.json(),
            json!({
                "model": "claude-test",
                "max_tokens": 512,
                "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "what is 2+2 and the time?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"expr": "2+2"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "invalid arguments",
                         "is_error": true, "cache_control": ephemeral}
                    ]},
                    {"role": "assistant", "content": [{"type": "text", "text": "4, and I could not read the clock."}]},
                    {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": ephemeral}]}
                ],
                "tools": [
                    {"name": "calc", "description": "Evaluates arithmetic",
                     "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}}},
                    {"name": "now", "description": "Current time",
                     "input_schema": {"type": "object", "properties": {}}, "cache_control": ephemeral}
                ]
            })
        );
        let text = sent.text();
        assert_eq!(count_breakpoints(&text), 4, "{text}");
        assert!(
            text.starts_with(
                r#"{"model":"claude-test","max_tokens":512,"system":[{"type":"text","#
            )
        );
        assert!(!text.contains("session-42"));
    }

    #[tokio::test]
    async fn tools_omitted_and_breakpoints_on_a_first_turn() {
        let (server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        let messages = vec![user("hello")];
        provider
            .complete(&request(&messages, &[]))
            .await
            .expect("success");
        let sent = &server.requests()[0];
        let body = sent.json();
        assert!(body.get("tools").is_none(), "{body}");
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}])
        );
        assert_eq!(count_breakpoints(&sent.text()), 2);
    }

    #[tokio::test]
    async fn user_items_merge_into_one_message_tool_results_first() {
        let (server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        let messages = vec![
            user("run it"),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![call("toolu_a", "calc", r#"{"expr":"1"}"#)],
            },
            // The user spoke before the result was recorded.
            user("also, hurry"),
            result("toolu_a", "1", false),
            // A blank assistant turn is skipped and its neighbours merge.
            ChatMessage::Assistant {
                content: Some(String::new()),
                tool_calls: vec![],
            },
            user("well?"),
        ];
        provider
            .complete(&request(&messages, &[]))
            .await
            .expect("success");
        let body = server.requests()[0].json();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "run it", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_a", "name": "calc", "input": {"expr": "1"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "1"},
                    {"type": "text", "text": "also, hurry"},
                    {"type": "text", "text": "well?", "cache_control": {"type": "ephemeral"}}
                ]}
            ])
        );
    }

    #[tokio::test]
    async fn response_is_parsed_field_by_field() {
        let body = json!({
            "id": "msg_9",
            "type": "message",
            "role": "assistant",
            "model": "claude-test-2025",
            "content": [
                {"type": "thinking", "thinking": "Need the calculator.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "text", "text": "Let me "},
                {"type": "text", "text": "check."},
                {"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {"b": 1, "a": 2}},
                {"type": "tool_use", "id": "toolu_10", "name": "now", "input": {}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 30,
                      "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000}
        });
        let (_server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, body.to_string()).header("request-id", "req_011"),
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
    async fn response_fallbacks() {
        let body = json!({"id": "msg_2", "content": [], "stop_reason": "max_tokens"});
        let (_server, provider) = FIXTURE
            .start(vec![Reply::json(200, body.to_string())])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.content, None);
        assert_eq!(response.reasoning, None);
        assert_eq!(response.stop_reason, StopReason::MaxTokens);
        assert_eq!(response.usage, Usage::default());
        assert_eq!(response.model, "claude-test");
        assert_eq!(response.request_id.as_deref(), Some("msg_2"));
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("end_turn", false), StopReason::EndTurn);
        assert_eq!(stop_reason("stop_sequence", false), StopReason::EndTurn);
        assert_eq!(stop_reason("tool_use", true), StopReason::ToolUse);
        assert_eq!(stop_reason("max_tokens", false), StopReason::MaxTokens);
        assert_eq!(stop_reason("refusal", false), StopReason::Refused);
        assert_eq!(
            stop_reason("pause_turn", false),
            StopReason::Other("pause_turn".to_owned())
        );
        assert_eq!(stop_reason("", true), StopReason::ToolUse);
        assert_eq!(stop_reason("", false), StopReason::EndTurn);
    }

    #[tokio::test]
    async fn rate_limit_with_retry_after_zero_then_success() {
        test_support::a_rate_limit_with_retry_after_zero_is_retried(
            &FIXTURE,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
        )
        .await;
    }

    #[tokio::test]
    async fn server_errors_and_overload_are_retried() {
        test_support::transient_failures_are_retried(
            &FIXTURE,
            Reply::json(
                500,
                r#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
            ),
            Reply::json(
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
        )
        .await;
    }

    #[tokio::test]
    async fn bad_request_is_not_retried() {
        test_support::a_bad_request_is_not_retried(
            &FIXTURE,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#,
            "messages: roles must alternate",
        )
        .await;
    }

    #[tokio::test]
    async fn exhausted_retries_return_the_last_error() {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        test_support::exhausted_retries_return_the_last_error(
            &FIXTURE,
            vec![Reply::json(529, overloaded); 4],
            LlmError::RateLimited {
                status: 529,
                retry_after: None,
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
        test_support::bodies_that_are_invalid_responses(&FIXTURE, &["{\"content\": 5}"]).await;
    }

    #[tokio::test]
    async fn api_key_never_leaks_into_errors() {
        let errors = test_support::errors_never_show_the_key(
            &FIXTURE,
            vec![
                Reply::json(
                    401,
                    format!(r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#),
                ),
                Reply::json(403, format!("forbidden: {KEY}")),
            ],
            2,
        )
        .await;
        assert!(matches!(errors[0], LlmError::Rejected { status: 401, .. }));
        assert!(matches!(errors[1], LlmError::Rejected { status: 403, .. }));
        assert!(matches!(errors[2], LlmError::Network(_)));
    }

    // Streamed calls.

    fn events(events: &[Value]) -> String {
        let named: Vec<(Option<&str>, String)> = events
            .iter()
            .map(|event| (event["type"].as_str(), event.to_string()))
            .collect();
        test_support::sse_body(&named)
    }

    /// The stream of the response in `response_is_parsed_field_by_field`,
    /// with pings, a signature, and tool input cut across deltas.
    fn tool_stream() -> String {
        let delta = |index: u32, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        let start = |index: u32, block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
        let stop = |index: u32| json!({"type": "content_block_stop", "index": index});
        events(&[
            json!({"type": "message_start", "message": {"id": "msg_9", "type": "message", "role": "assistant",
                   "model": "claude-test-2025", "content": [], "stop_reason": null,
                   "usage": {"input_tokens": 50, "output_tokens": 1,
                             "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000}}}),
            start(0, json!({"type": "thinking", "thinking": ""})),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "Need the "}),
            ),
            json!({"type": "ping"}),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "calculator."}),
            ),
            delta(0, json!({"type": "signature_delta", "signature": "sig"})),
            stop(0),
            start(1, json!({"type": "redacted_thinking", "data": "xyz"})),
            stop(1),
            start(2, json!({"type": "text", "text": ""})),
            delta(2, json!({"type": "text_delta", "text": "Let "})),
            delta(2, json!({"type": "text_delta", "text": "me "})),
            stop(2),
            start(3, json!({"type": "text", "text": ""})),
            delta(3, json!({"type": "text_delta", "text": "chéck."})),
            stop(3),
            start(
                4,
                json!({"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {}}),
            ),
            delta(4, json!({"type": "input_json_delta", "partial_json": ""})),
            delta(
                4,
                json!({"type": "input_json_delta", "partial_json": "{\"b\": 1, "}),
            ),
            delta(
                4,
                json!({"type": "input_json_delta", "partial_json": "\"a\": 2}"}),
            ),
            stop(4),
            start(
                5,
                json!({"type": "tool_use", "id": "toolu_10", "name": "now", "input": {}}),
            ),
            stop(5),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"output_tokens": 30}}),
            json!({"type": "message_stop"}),
        ])
    }

    fn tool_response() -> ModelResponse {
        ModelResponse {
            content: Some("Let me chéck.".to_owned()),
            reasoning: Some("Need the calculator.".to_owned()),
            tool_calls: vec![
                call("toolu_9", "calc", r#"{"a":2,"b":1}"#),
                call("toolu_10", "now", "{}"),
            ],
            stop_reason: StopReason::ToolUse,
            finish_reason: "tool_use".to_owned(),
            usage: Usage {
                input_tokens: 1250,
                output_tokens: 30,
                cache_read_tokens: 1000,
                cache_write_tokens: 200,
            },
            model: "claude-test-2025".to_owned(),
            request_id: Some("req_011".to_owned()),
        }
    }

    fn decode(body: &str, step: usize) -> (Result<ModelResponse, LlmError>, String) {
        let mut headers = HeaderMap::new();
        headers.insert("request-id", "req_011".parse().expect("value"));
        test_support::decode_in_pieces(EventDecoder::new("claude-test", KEY), body, step, &headers)
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
    fn malformed_streams_are_clear_errors() {
        let start =
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}});
        let text = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
        let hi = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}});
        let stop = json!({"type": "message_stop"});
        let invalid = |body: String| {
            let (response, _) = decode(&body, 3);
            let error = response.expect_err("fails");
            assert!(
                matches!(error, LlmError::InvalidResponse(_)),
                "{body}: {error:?}"
            );
        };
        invalid("event: message_start\ndata: {not json\n\n".to_owned());
        invalid(events(&[start.clone(), hi.clone(), stop.clone()]));
        invalid(events(std::slice::from_ref(&stop)));
        invalid(events(&[
            start.clone(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "calc", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}}),
            stop.clone(),
        ]));
        invalid(events(&[
            start.clone(),
            text.clone(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        ]));
        // Cut short: like a dropped connection, retried.
        let (response, heard) = decode(&events(&[start.clone(), text.clone(), hi.clone()]), 5);
        assert_eq!(response, Err(cut_short()));
        assert_eq!(heard, "hi");
        // An error event: overloaded is retried like a 529, key scrubbed.
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("Overloaded {KEY}")}});
        let (response, _) = decode(&events(&[start.clone(), text.clone(), overloaded]), 7);
        assert_eq!(
            response,
            Err(LlmError::RateLimited {
                status: 529,
                retry_after: None
            })
        );
        let invalid_request = json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("bad {KEY}")}});
        let (response, _) = decode(&events(&[invalid_request]), 7);
        assert_eq!(
            response,
            Err(LlmError::Rejected {
                status: 400,
                message: "bad [redacted]".to_owned()
            })
        );
    }

    #[tokio::test]
    async fn a_streamed_call_asks_for_a_stream_after_the_same_messages() {
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, ok_body()),
                Reply::sse(tool_stream()).header("request-id", "req_011"),
            ])
            .await;
        let messages = history();
        let tools = tools();
        let request = FIXTURE.request(&messages, &tools);
        provider.complete(&request).await.expect("plain");
        let heard = test_support::Heard::default();
        let response = provider
            .stream(&request, &|event: StreamEvent<'_>| heard.on(event))
            .await
            .expect("streamed");
        assert_eq!(response, tool_response());
        assert_eq!(heard.text(), "Let me chéck.");
        let requests = server.requests();
        let (plain, streamed) = (requests[0].text(), requests[1].text());
        assert_eq!(
            streamed,
            format!(
                "{},\"stream\":true}}",
                plain.strip_suffix('}').expect("object")
            )
        );
    }

    #[tokio::test]
    async fn an_overloaded_stream_is_retried_and_its_text_restarted() {
        let overloaded = events(&[
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let"}}),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::sse(overloaded),
                Reply::sse(tool_stream()).header("request-id", "req_011"),
            ])
            .await;
        let messages = history();
        let heard = test_support::Heard::default();
        let response = provider
            .stream(&FIXTURE.request(&messages, &[]), &|event: StreamEvent<
                '_,
            >| {
                heard.on(event);
            })
            .await
            .expect("streamed");
        assert_eq!(response, tool_response());
        assert_eq!(heard.text(), "Let<restart>Let me chéck.");
        assert_eq!(server.requests().len(), 2);
    }
}
