//! The Messages request body: the system prompt as a cached block, roles
//! strictly alternating (consecutive items of one role merged, tool results
//! inside user messages ahead of any text), images as inline base64
//! blocks, and prompt-cache breakpoints on the system prompt, the last
//! tool, the last block and the last block of the user message before it.
//! Field order is the serialisation order, and each turn's `messages`
//! bytes extend the previous turn's (but for the moved breakpoints).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::domain::{ChatMessage, MediaRef, Part, user_parts};
use crate::llm::wire::to_json;
use crate::llm::{LlmError, ModelRequest};

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
fn user_blocks<'a>(content: &'a str, media: &'a [MediaRef]) -> Vec<Block<'a>> {
    user_parts(content, media)
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
pub(super) fn body(request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
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
    to_json(&body)
}
