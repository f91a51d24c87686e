//! Reading a Messages response: its blocks (text pieces joined, thinking
//! blocks as the reasoning, tool uses with their input as canonical JSON,
//! anything else passed over), the stop reason as a [`StopReason`], and the
//! usage (Anthropic's `input_tokens` leaves out the cached ones, ours
//! counts them all). A stream's events are assembled into the same
//! [`MessagesResponse`], so both parse alike.

use serde::Deserialize;
use serde_json::Value;

use crate::domain::{StopReason, ToolCall, Usage, canonical_json};
use crate::llm::wire::from_json;
use crate::llm::{LlmError, ModelResponse};

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MessagesResponse {
    pub(super) id: Option<String>,
    pub(super) model: Option<String>,
    pub(super) content: Vec<ResponseBlock>,
    pub(super) stop_reason: Option<String>,
    pub(super) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ResponseBlock {
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
#[serde(default)]
pub(super) struct WireUsage {
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    pub(super) cache_creation_input_tokens: Option<u64>,
    pub(super) cache_read_input_tokens: Option<u64>,
    /// The written tokens by TTL.
    pub(super) cache_creation: Option<CacheCreation>,
}

/// `usage.cache_creation`: the written tokens by how long they live.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(default)]
pub(super) struct CacheCreation {
    pub(super) ephemeral_1h_input_tokens: u64,
}

/// The response in a successful body.
pub(super) fn parse(bytes: &[u8]) -> Result<ModelResponse, LlmError> {
    Ok(response_of(from_json(bytes)?))
}

/// The [`ModelResponse`] of a parsed response, however it arrived (one body,
/// or assembled from a stream); its model and request id as the body gives
/// them.
pub(super) fn response_of(response: MessagesResponse) -> ModelResponse {
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
    ModelResponse {
        content,
        reasoning,
        tool_calls,
        stop_reason,
        finish_reason,
        usage: usage_of(response.usage.unwrap_or_default()),
        model: response.model.unwrap_or_default(),
        request_id: response.id,
    }
}

/// The usage: Anthropic's `input_tokens` excludes cached tokens; ours
/// counts all.
fn usage_of(usage: WireUsage) -> Usage {
    let cache_read = usage.cache_read_input_tokens.unwrap_or(0);
    let cache_write = usage.cache_creation_input_tokens.unwrap_or(0);
    Usage {
        input_tokens: usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(cache_read)
            .saturating_add(cache_write),
        output_tokens: usage.output_tokens.unwrap_or(0),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        cache_write_1h_tokens: usage.cache_creation.map_or(0, |written| {
            written.ephemeral_1h_input_tokens.min(cache_write)
        }),
    }
}

pub(super) fn stop_reason(stop_reason: &str, has_tool_calls: bool) -> StopReason {
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
