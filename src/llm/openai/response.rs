//! Reading a Chat Completions response: the first choice's message (text,
//! reasoning under either of its names, tool calls with their arguments
//! made canonical JSON), its finish reason as a [`StopReason`], and the
//! usage (`cached_tokens` read from the cache). A stream's pieces are
//! assembled into the same [`ChatResponse`], so both parse alike.

use serde::Deserialize;
use serde_json::Value;

use crate::domain::{StopReason, ToolCall, Usage, canonical_json};
use crate::llm::failure::error_message;
use crate::llm::wire::from_json;
use crate::llm::{LlmError, ModelResponse};

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ChatResponse {
    pub(super) id: Option<String>,
    pub(super) model: Option<String>,
    pub(super) choices: Vec<Choice>,
    pub(super) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub(super) struct Choice {
    pub(super) message: ResponseMessage,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ResponseMessage {
    pub(super) content: Option<String>,
    pub(super) reasoning_content: Option<String>,
    pub(super) reasoning: Option<String>,
    pub(super) tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
pub(super) struct ResponseToolCall {
    #[serde(default)]
    pub(super) id: Option<String>,
    pub(super) function: ResponseFunction,
}

#[derive(Deserialize)]
pub(super) struct ResponseFunction {
    pub(super) name: String,
    // A string per the spec; some compatible servers send an object.
    #[serde(default)]
    pub(super) arguments: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PromptTokensDetails {
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

/// The response in a successful body.
pub(super) fn parse(bytes: &[u8], key: &str) -> Result<ModelResponse, LlmError> {
    let mut response: ChatResponse = from_json(bytes)?;
    if response.choices.is_empty() {
        // Some compatible servers report upstream failures as a 200 with an
        // `error` object instead of choices.
        return Err(LlmError::InvalidResponse(format!(
            "no choices in the response: {}",
            error_message(bytes, key)
        )));
    }
    let choice = response.choices.swap_remove(0);
    Ok(response_of(response, choice))
}

/// The [`ModelResponse`] of a parsed response and its first choice, however
/// the response arrived (one body, or assembled from a stream); its model
/// and request id as the body gives them.
pub(super) fn response_of(response: ChatResponse, choice: Choice) -> ModelResponse {
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
    ModelResponse {
        content: non_empty(message.content),
        reasoning: non_empty(message.reasoning_content).or_else(|| non_empty(message.reasoning)),
        tool_calls,
        stop_reason,
        finish_reason,
        usage: usage_of(response.usage.unwrap_or_default()),
        model: response.model.unwrap_or_default(),
        request_id: response.id,
    }
}

/// The usage: `prompt_tokens` counts every input token, cached ones too.
fn usage_of(usage: WireUsage) -> Usage {
    Usage {
        input_tokens: usage.prompt_tokens.unwrap_or(0),
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: usage
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0),
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
    }
}

pub(super) fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
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
