//! The conversation model every floor shares: messages as the model sees
//! them ([`ChatMessage`]), the tools offered ([`ToolSpec`]) and called
//! ([`ToolCall`]), why a model stopped ([`StopReason`]) and what a call
//! cost ([`Usage`]).

use serde::{Deserialize, Serialize};

use super::media::MediaRef;

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; results are matched to it.
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, re-serialised canonically (sorted keys, no
    /// whitespace) when they parse; kept verbatim when they don't, so the loop
    /// can report the error to the model.
    pub arguments: String,
}

/// One message as the model sees it: internal fields stripped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        content: String,
        /// Files sent with the message (images), by blob hash; shown as
        /// image parts to a vision model, as notes to others.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        media: Vec<MediaRef>,
    },
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
        is_error: bool,
        /// Files the tool returned (an MCP server's images), by blob hash;
        /// shown like a user message's files. The `content` holds a short
        /// note per file in their place.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        media: Vec<MediaRef>,
    },
}

impl ChatMessage {
    /// A user message of text alone.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
            media: Vec::new(),
        }
    }

    /// A tool's result without files.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            is_error,
            media: Vec::new(),
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model is done (`stop`, `end_turn`, `stop_sequence`).
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The output hit the token limit.
    MaxTokens,
    /// The provider refused or filtered the output.
    Refused,
    /// Anything else, verbatim.
    Other(String),
}

/// Token counts of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// All input tokens, including those read from or written to the cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of the written tokens, those written to live an hour (Anthropic's
    /// `"ttl": "1h"`, priced higher).
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

/// A tool as a session stores it: a built-in by name, an MCP tool with the
/// spec it was offered with (kept until `/new`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum StoredTool {
    Name(String),
    Spec(ToolSpec),
}

impl StoredTool {
    /// The tool's name as the model calls it.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(name) => name,
            Self::Spec(spec) => &spec.name,
        }
    }
}

impl AsRef<str> for StoredTool {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

impl From<&str> for StoredTool {
    fn from(name: &str) -> Self {
        Self::Name(name.to_owned())
    }
}
