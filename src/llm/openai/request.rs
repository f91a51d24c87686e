//! The Chat Completions request body: in a fixed field order, `messages`
//! right after the model so that nothing that varies precedes them, and
//! each turn's `messages` bytes extend the previous turn's (the provider's
//! prompt cache keeps hitting); a streamed request adds its stream fields
//! last. Images go as `image_url` content parts with `data:` URLs; a tool
//! result's images (a `tool` message takes none) go in one user message
//! after the round's results, each result's under a line naming its call. A call
//! that must not use tools keeps them (`tool_choice: "none"`), so the
//! cached prefix holds.
//!
//! A turn's client settings (`CallOptions`) go as Chat Completions names
//! them, after `max_tokens`: `temperature`, `top_p`, `stop`, `seed` and
//! `response_format` (`json_object`, or `json_schema` with its name,
//! schema and `strict`); a call without them sends none of these fields.
//!
//! `prompt_cache_key` names the prefix, not the conversation: a hash of the
//! model, the tools and the stable system text, so every conversation
//! built from the same settings is routed to the machines that already
//! hold that prefix (OpenAI's cache is per key and machine; a key per
//! session made each new conversation miss the ~3k tokens of system and
//! tools cached under another). OpenAI's guidance is to keep one prefix
//! and key under about 15 requests a minute; past that, requests overflow
//! to other machines and some miss, which costs a gateway far less than a
//! fresh miss per conversation would.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::domain::{
    AskedToolChoice, ChatMessage, MediaRef, Part, ResponseFormat, shown_images, text_with_notes,
    user_parts,
};
use crate::llm::wire::to_json;
use crate::llm::{LlmError, ModelRequest, ToolChoice};

/// The request body. Field order is the serialisation order: `messages`
/// comes right after the model so nothing that varies precedes it.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    max_tokens: u32,
    // The client's settings of a turn's call (`CallOptions`): each left
    // out when unset, so a call without them is sent as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    prompt_cache_key: String,
    // Last, so a streamed request's `messages` bytes are those of an
    // unstreamed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

/// `tool_choice`: a mode (`none`, `required`), or the function to call.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireChosen<'a>,
    },
}

#[derive(Serialize)]
struct WireChosen<'a> {
    name: &'a str,
}

/// The `tool_choice` of a request with tools: `none` for a call that may
/// not use them, else what the client asked; nothing when nothing is.
fn tool_choice<'a>(request: &ModelRequest<'a>) -> Option<WireToolChoice<'a>> {
    match (&request.tool_choice, &request.options.tool_choice) {
        (ToolChoice::None, _) | (_, Some(AskedToolChoice::None)) => {
            Some(WireToolChoice::Mode("none"))
        }
        (_, Some(AskedToolChoice::Required)) => Some(WireToolChoice::Mode("required")),
        (_, Some(AskedToolChoice::Function { name })) => Some(WireToolChoice::Function {
            kind: "function",
            function: WireChosen { name },
        }),
        (_, None) => None,
    }
}

/// `response_format` as Chat Completions takes it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

fn wire_format(format: &ResponseFormat) -> WireResponseFormat<'_> {
    match format {
        ResponseFormat::JsonObject => WireResponseFormat::JsonObject,
        ResponseFormat::JsonSchema {
            name,
            description,
            schema,
            strict,
        } => WireResponseFormat::JsonSchema {
            json_schema: WireJsonSchema {
                name,
                description: description.as_deref(),
                schema,
                strict: *strict,
            },
        },
    }
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
        content: Cow<'a, str>,
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
fn user_message<'a>(content: &'a str, media: &'a [MediaRef]) -> WireMessage<'a> {
    let mut parts = user_parts(content, media);
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
        content: parts.into_iter().map(wire_part).collect(),
    }
}

/// A part as Chat Completions takes it: images as `data:` URLs.
fn wire_part(part: Part<'_>) -> WirePart<'_> {
    match part {
        Part::Text(text) => WirePart::Text { text },
        Part::Image { media_type, base64 } => WirePart::ImageUrl {
            image_url: WireImageUrl {
                url: format!("data:{media_type};base64,{base64}"),
            },
        },
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
            media,
        } => WireMessage::Tool {
            role: "tool",
            tool_call_id,
            // A file not shown as an image is a note after the text; images
            // follow the round's results ([`round_images`]).
            content: text_with_notes(content, media),
        },
    }
}

/// The wire messages of `messages`: each in turn, and after each run of
/// tool results (a round's), the user message of their images, if any.
fn wire_messages(messages: &[ChatMessage]) -> Vec<WireMessage<'_>> {
    let mut out = Vec::with_capacity(messages.len());
    let mut round_start = 0;
    for (index, message) in messages.iter().enumerate() {
        if !matches!(message, ChatMessage::Tool { .. }) {
            round_start = index + 1;
        }
        out.push(wire_message(message));
        let round_ends = !matches!(messages.get(index + 1), Some(ChatMessage::Tool { .. }));
        if round_ends && let Some(images) = round_images(&messages[round_start..=index]) {
            out.push(images);
        }
    }
    out
}

/// The images tool results show, as one user message (Chat Completions
/// takes no images in a `tool` message): for each result with shown
/// images, `Images returned by tool call ID:` and its images. `None` when
/// no result of `round` shows one.
fn round_images<'a>(round: &'a [ChatMessage]) -> Option<WireMessage<'a>> {
    let mut parts = Vec::new();
    for message in round {
        let ChatMessage::Tool {
            tool_call_id,
            media,
            ..
        } = message
        else {
            continue;
        };
        let images = shown_images(media);
        if images.is_empty() {
            continue;
        }
        parts.push(WirePart::Text {
            text: Cow::Owned(format!("Images returned by tool call {tool_call_id}:")),
        });
        parts.extend(images.into_iter().map(wire_part));
    }
    (!parts.is_empty()).then_some(WireMessage::Parts {
        role: "user",
        content: parts,
    })
}

/// Serialises the request body once, so every retry sends the same bytes;
/// `stream` asks for the event stream, with usage in its last chunk.
pub(super) fn body(request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    // An empty system prompt is left out rather than sent as an empty message;
    // it is the same on every turn of a session, so the prefix stays stable.
    let system = if request.system_tail.is_empty() {
        Cow::Borrowed(request.system)
    } else {
        Cow::Owned(format!("{}{}", request.system, request.system_tail))
    };
    if !system.is_empty() {
        messages.push(WireMessage::Text {
            role: "system",
            content: system,
        });
    }
    messages.extend(wire_messages(request.messages));
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
        tool_choice: if request.tools.is_empty() {
            None
        } else {
            tool_choice(request)
        },
        parallel_tool_calls: request
            .options
            .parallel_tool_calls
            .filter(|_| !request.tools.is_empty()),
        max_tokens: request.max_tokens,
        temperature: request.options.temperature,
        top_p: request.options.top_p,
        stop: &request.options.stop,
        seed: request.options.seed,
        response_format: request.options.response_format.as_ref().map(wire_format),
        prompt_cache_key: prefix_key(request)?,
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    to_json(&body)
}

/// The `prompt_cache_key` of a request: `sb-` and 16 hex digits of the
/// SHA-256 of its model, tools and stable system text (never the changing
/// tail, the messages or anything secret).
fn prefix_key(request: &ModelRequest<'_>) -> Result<String, LlmError> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(request.model.as_bytes());
    hasher.update([0]);
    hasher.update(request.system.as_bytes());
    hasher.update([0]);
    for tool in request.tools {
        hasher.update(tool.name.as_bytes());
        hasher.update([0]);
        hasher.update(tool.description.as_bytes());
        hasher.update([0]);
        hasher.update(to_json(&tool.parameters)?);
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    Ok(format!("sb-{}", hex::encode(&digest[..8])))
}

#[cfg(test)]
mod tool_choice_tests {
    use serde_json::{Value, json};

    use super::body;
    use crate::domain::{AskedToolChoice, CallOptions, ChatMessage, ToolSpec};
    use crate::llm::test_support::request;

    fn sent(options: &CallOptions, tools: &[ToolSpec]) -> Value {
        let messages = [ChatMessage::user("hi")];
        let mut call = request::<super::super::OpenAi>(&messages, tools);
        call.options = options;
        serde_json::from_slice(&body(&call, false).expect("body")).expect("JSON")
    }

    #[test]
    fn the_clients_tool_choice_is_sent_in_openais_form_only_with_tools() {
        let tools = [ToolSpec {
            name: "get_weather".to_owned(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }];
        let asked = |choice, parallel| CallOptions {
            tool_choice: choice,
            parallel_tool_calls: parallel,
            ..CallOptions::default()
        };
        let plain = sent(&CallOptions::default(), &tools);
        assert!(plain.get("tool_choice").is_none() && plain.get("parallel_tool_calls").is_none());
        let required = sent(&asked(Some(AskedToolChoice::Required), Some(false)), &tools);
        assert_eq!(required["tool_choice"], "required");
        assert_eq!(required["parallel_tool_calls"], false);
        let named = AskedToolChoice::Function {
            name: "get_weather".to_owned(),
        };
        assert_eq!(
            sent(&asked(Some(named), None), &tools)["tool_choice"],
            json!({"type": "function", "function": {"name": "get_weather"}})
        );
        assert_eq!(
            sent(&asked(Some(AskedToolChoice::None), None), &tools)["tool_choice"],
            "none"
        );
        let without_tools = sent(&asked(Some(AskedToolChoice::Required), Some(false)), &[]);
        assert!(without_tools.get("tool_choice").is_none());
        assert!(without_tools.get("parallel_tool_calls").is_none());
    }
}
