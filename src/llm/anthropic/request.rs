//! The Messages request body: the system prompt as a cached block (its
//! changing tail, if any, in a block after the breakpoint), roles strictly
//! alternating (consecutive items of one role merged, tool results inside
//! user messages ahead of any text), images as inline base64 blocks (a
//! tool result's images inside its `tool_result`, after its text), and
//! prompt-cache breakpoints on the stable system text, the last tool, the
//! last block (unless the request's end is asked once:
//! [`CacheTail::Skip`]) and the last block of the user message before it.
//! The breakpoints live an hour when the TTL policy says so. A call that
//! must not use tools keeps them and sends `tool_choice: none`. Field order
//! is the serialisation order, and each turn's `messages` bytes extend the
//! previous turn's (but for the moved breakpoints).
//!
//! A turn's client settings (`CallOptions`) go as `temperature`, `top_p`,
//! `stop_sequences` and, for a response format, Anthropic's structured
//! outputs: `output_config: {"format": {"type": "json_schema", "schema":
//! …}}` (the generally available form, no beta header; it constrains the
//! answer's text while tools stay usable before it). Anthropic has no
//! seed: the HTTP API refuses one for an Anthropic gateway. A call without
//! settings sends none of these fields.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::domain::{AskedToolChoice, ChatMessage, MediaRef, Part, ResponseFormat, user_parts};
use crate::llm::settings::CacheTtl;
use crate::llm::wire::to_json;
use crate::llm::{CacheTail, LlmError, ModelRequest, ToolChoice};

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
    tool_choice: Option<WireToolChoice<'a>>,
    // The client's settings of a turn's call (`CallOptions`): each left
    // out when unset, so a call without them is sent as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<OutputConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

/// `output_config`: the answer's format, a JSON schema.
#[derive(Serialize)]
struct OutputConfig<'a> {
    format: OutputFormat<'a>,
}

#[derive(Serialize)]
struct OutputFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: Cow<'a, Value>,
}

/// A response format as Anthropic's structured outputs take it: its schema
/// (the name, description and `strict` have no place there: the format is
/// always enforced). `json_object` becomes the schema of any object; the
/// HTTP API refuses it for Anthropic before it gets here, as Anthropic's
/// structured outputs want objects closed (`additionalProperties: false`).
fn output_config(format: &ResponseFormat) -> OutputConfig<'_> {
    let schema = match format {
        ResponseFormat::JsonObject => Cow::Owned(serde_json::json!({"type": "object"})),
        ResponseFormat::JsonSchema { schema, .. } => Cow::Borrowed(schema),
    };
    OutputConfig {
        format: OutputFormat {
            kind: "json_schema",
            schema,
        },
    }
}

#[derive(Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

/// The `tool_choice` of a request with tools: `none` for a call that may
/// not use them, else what the client asked (`any` for a required call,
/// `tool` for a named one, and at most one call per response when it said
/// so); nothing when nothing is asked.
fn tool_choice<'a>(request: &ModelRequest<'a>) -> Option<WireToolChoice<'a>> {
    let options = request.options;
    let one_call = (options.parallel_tool_calls == Some(false)).then_some(true);
    let (kind, name) = match (&request.tool_choice, &options.tool_choice) {
        (ToolChoice::None, _) | (_, Some(AskedToolChoice::None)) => {
            return Some(WireToolChoice {
                kind: "none",
                name: None,
                disable_parallel_tool_use: None,
            });
        }
        (_, Some(AskedToolChoice::Required)) => ("any", None),
        (_, Some(AskedToolChoice::Function { name })) => ("tool", Some(name.as_str())),
        (_, None) if one_call.is_some() => ("auto", None),
        (_, None) => return None,
    };
    Some(WireToolChoice {
        kind,
        name,
        disable_parallel_tool_use: one_call,
    })
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
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

/// A breakpoint: the default 5 minutes, or an hour.
fn breakpoint(hour: bool) -> Option<CacheControl> {
    Some(CacheControl {
        kind: "ephemeral",
        ttl: hour.then_some("1h"),
    })
}

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
        content: ToolResultContent<'a>,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    fn mark_cache_breakpoint(&mut self, hour: bool) {
        match self {
            Self::Text { cache_control, .. }
            | Self::Image { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => *cache_control = breakpoint(hour),
        }
    }
}

/// A tool result's content: its text (a result without files, or whose
/// files are all notes: the bytes of a result without files are as they
/// always were), or text and image blocks when it shows images.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
}

/// The content of a tool result with text `content` and files `media`:
/// the text with the notes of the files when none is shown as an image,
/// else the blocks [`user_blocks`] gives.
fn tool_result_content<'a>(content: &'a str, media: &'a [MediaRef]) -> ToolResultContent<'a> {
    let mut blocks = user_blocks(content, media);
    if let [Block::Text { .. }] = blocks.as_slice()
        && let Some(Block::Text { text, .. }) = blocks.pop()
    {
        return ToolResultContent::Text(text);
    }
    ToolResultContent::Blocks(blocks)
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
            media,
        } => (
            Role::User,
            vec![Block::ToolResult {
                tool_use_id: tool_call_id,
                content: tool_result_content(content, media),
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
fn wire_messages(messages: &[ChatMessage], tail: CacheTail, hour: bool) -> Vec<WireMessage<'_>> {
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
    mark_message_breakpoints(&mut out, tail, hour);
    out
}

/// Puts a cache breakpoint on the last block of the last message (this
/// request's whole prefix gets written; not for [`CacheTail::Skip`]), and
/// on the last block of the user message before it: that is where the
/// previous request ended, so its cached prefix is found even if this turn
/// added more than the ~20 blocks Anthropic looks back from a breakpoint.
/// With the system and tools breakpoints that makes at most 4, Anthropic's
/// limit.
fn mark_message_breakpoints(messages: &mut [WireMessage<'_>], tail: CacheTail, hour: bool) {
    let Some((last, earlier)) = messages.split_last_mut() else {
        return;
    };
    if tail == CacheTail::Write
        && let Some(block) = last.content.last_mut()
    {
        block.mark_cache_breakpoint(hour);
    }
    if let Some(block) = earlier
        .iter_mut()
        .rev()
        .find(|message| message.role == Role::User)
        .and_then(|message| message.content.last_mut())
    {
        block.mark_cache_breakpoint(hour);
    }
}

/// The system blocks: the stable text with a breakpoint, then the tail
/// that may change (none for an empty part: Anthropic rejects empty text
/// blocks, and no system block at all is fine).
fn system_blocks<'a>(request: &ModelRequest<'a>, hour: bool) -> Vec<Block<'a>> {
    let mut blocks: Vec<Block<'a>> = [request.system, request.system_tail]
        .into_iter()
        .filter(|text| !text.is_empty())
        .map(|text| Block::Text {
            text: Cow::Borrowed(text),
            cache_control: None,
        })
        .collect();
    if let Some(first) = blocks.first_mut() {
        first.mark_cache_breakpoint(hour);
    }
    blocks
}

/// Serialises the request body once, so every retry sends the same bytes;
/// `stream` asks for the event stream. `ttl` says how long its breakpoints
/// keep the prefix.
pub(super) fn body(
    request: &ModelRequest<'_>,
    ttl: CacheTtl,
    stream: bool,
) -> Result<Vec<u8>, LlmError> {
    let hour = ttl.hour_for(request.idle);
    let system = system_blocks(request, hour);
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
        last.cache_control = breakpoint(hour);
    }
    let tool_choice = if tools.is_empty() {
        None
    } else {
        tool_choice(request)
    };
    let body = MessagesRequest {
        model: request.model,
        max_tokens: request.max_tokens,
        system,
        messages: wire_messages(request.messages, request.cache_tail, hour),
        tools,
        tool_choice,
        temperature: request.options.temperature,
        top_p: request.options.top_p,
        stop_sequences: &request.options.stop,
        output_config: request.options.response_format.as_ref().map(output_config),
        stream: stream.then_some(true),
    };
    to_json(&body)
}

#[cfg(test)]
mod tool_choice_tests {
    use serde_json::{Value, json};

    use super::body;
    use crate::domain::{AskedToolChoice, CallOptions, ChatMessage, ToolSpec};
    use crate::llm::settings::CacheTtl;
    use crate::llm::test_support::request;

    fn sent(options: &CallOptions) -> Value {
        let messages = [ChatMessage::user("hi")];
        let tools = [ToolSpec {
            name: "get_weather".to_owned(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }];
        let mut call = request::<super::super::Anthropic>(&messages, &tools);
        call.options = options;
        let bytes = body(&call, CacheTtl::default(), false).expect("body");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    #[test]
    fn the_clients_tool_choice_is_sent_in_anthropics_form() {
        let asked = |choice, parallel| CallOptions {
            tool_choice: choice,
            parallel_tool_calls: parallel,
            ..CallOptions::default()
        };
        assert!(sent(&CallOptions::default()).get("tool_choice").is_none());
        assert_eq!(
            sent(&asked(Some(AskedToolChoice::Required), None))["tool_choice"],
            json!({"type": "any"})
        );
        let named = AskedToolChoice::Function {
            name: "get_weather".to_owned(),
        };
        assert_eq!(
            sent(&asked(Some(named), Some(false)))["tool_choice"],
            json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})
        );
        assert_eq!(
            sent(&asked(None, Some(false)))["tool_choice"],
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        assert_eq!(
            sent(&asked(Some(AskedToolChoice::None), Some(false)))["tool_choice"],
            json!({"type": "none"})
        );
    }
}
