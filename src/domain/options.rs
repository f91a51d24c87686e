//! What one request asks of its turn beyond its text (issue 28, points 5
//! and 6): the model-call settings a client set ([`CallOptions`]: a
//! structured-output format, sampling settings, an answer cap, stop
//! sequences, a seed) and the client's own instructions (its system or
//! developer message). Both are stored with the inbound message as
//! [`TurnOptions`] JSON (migration 0063), so the turn applies them however
//! and wherever it runs (another instance, after a restart).
//!
//! They are request parameters, never prompt text: a turn without them
//! builds byte for byte the provider request it built before.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ToolSpec;

/// The model-call settings a client asked for, checked where they entered
/// (`api::options`). Each provider's wire format sends them its own way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallOptions {
    /// The answer's shape: JSON, or JSON following a schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Caps each model call of the turn: the lower of this and the
    /// configured `llm.max_tokens` is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Up to four sequences that end the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// OpenAI-style providers only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// What the client's `tool_choice` asks beyond letting the model
    /// choose: no tool at all (every call of the turn), or a tool call
    /// (the turn's first call only, see [`CallOptions::after_first_call`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<AskedToolChoice>,
    /// `Some(false)`: at most one tool call per response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// A client's `tool_choice` other than `auto`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AskedToolChoice {
    /// No tool: the model answers in text.
    None,
    /// Some tool, whichever the model picks.
    Required,
    /// This tool.
    Function { name: String },
}

/// The settings of a call that sets none: what every call but a turn's
/// (compaction, memory extraction, a sub-agent) and a turn without
/// options use.
pub static NO_CALL_OPTIONS: CallOptions = CallOptions {
    response_format: None,
    temperature: None,
    top_p: None,
    max_tokens: None,
    stop: Vec::new(),
    seed: None,
    tool_choice: None,
    parallel_tool_calls: None,
};

impl CallOptions {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self == &NO_CALL_OPTIONS
    }

    /// The settings of the turn's later calls: a tool call the client
    /// required is asked of the first call only (as a request to OpenAI
    /// asks it of one response), so the model can answer once it has the
    /// result.
    #[must_use]
    pub fn after_first_call(&self) -> Self {
        let mut later = self.clone();
        if matches!(
            later.tool_choice,
            Some(AskedToolChoice::Required | AskedToolChoice::Function { .. })
        ) {
            later.tool_choice = None;
        }
        later
    }

    /// The output cap of a call: the client's, never above `configured`.
    pub fn max_tokens(&self, configured: u32) -> u32 {
        self.max_tokens
            .map_or(configured, |asked| asked.min(configured))
    }
}

/// A structured-output format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON following `schema`.
    JsonSchema {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        schema: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// What an inbound message's turn applies: its call settings, the
/// client's instructions as the request carried them (`None`: it carried
/// none, and those in effect stay), the client's own function tools, and
/// the results of those the previous turn handed to the client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnOptions {
    #[serde(default, skip_serializing_if = "CallOptions::is_empty")]
    pub call: CallOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<ClientResult>,
}

/// The result a client sent for a call of one of its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientResult {
    pub call_id: String,
    pub content: String,
}

impl TurnOptions {
    /// Whether the turn is asked nothing beyond its text.
    pub fn is_empty(&self) -> bool {
        self.call.is_empty()
            && self.instructions.is_none()
            && self.client_tools.is_empty()
            && self.tool_results.is_empty()
    }

    /// The stored form: JSON, or `None` for nothing asked.
    pub fn stored(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        // Plain data: serialising it cannot fail.
        serde_json::to_string(self).ok()
    }

    /// Reads what [`TurnOptions::stored`] wrote; unreadable JSON (written
    /// by a newer version) is logged and read as nothing asked.
    pub fn read(stored: Option<&str>) -> Self {
        let Some(stored) = stored else {
            return Self::default();
        };
        serde_json::from_str(stored).unwrap_or_else(|err| {
            tracing::warn!(error = %err, "a message's stored options are unreadable; ignored");
            Self::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_nothing_is_stored_as_null() {
        assert_eq!(TurnOptions::default().stored(), None);
        let options = TurnOptions {
            call: CallOptions {
                response_format: Some(ResponseFormat::JsonSchema {
                    name: "answer".to_owned(),
                    description: None,
                    schema: serde_json::json!({"type": "object"}),
                    strict: Some(true),
                }),
                temperature: Some(0.5),
                stop: vec!["END".to_owned()],
                ..CallOptions::default()
            },
            instructions: Some("be brief".to_owned()),
            ..TurnOptions::default()
        };
        let stored = options.stored();
        assert_eq!(TurnOptions::read(stored.as_deref()), options);
        assert_eq!(TurnOptions::read(Some("{not json")), TurnOptions::default());
        assert_eq!(options.call.max_tokens(100), 100);
        let capped = CallOptions {
            max_tokens: Some(10),
            ..CallOptions::default()
        };
        assert_eq!(capped.max_tokens(100), 10);
        assert_eq!(capped.max_tokens(5), 5);
    }
}
