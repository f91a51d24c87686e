//! The request fields that would change what the model is asked and that
//! the gateway does not pass on: a request setting one is refused with 400,
//! naming it, and nothing is stored, rather than answered as if the field
//! had not been sent (a client's function tools that never run, a
//! `response_format` the answer ignores, a `temperature` with no effect).
//!
//! A field left out, `null`, or set to the value that asks for nothing
//! (`tools: []`, `tool_choice: "auto"` or `"none"` without tools,
//! `response_format: {"type": "text"}`, `n: 1`, `logprobs: false`,
//! `parallel_tool_calls` without tools) is accepted.

use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;

/// The fields of a request that change the model call.
#[derive(Debug, Default, Deserialize)]
pub struct ModelOptions {
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    functions: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    function_call: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<Value>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    temperature: Option<Value>,
    #[serde(default)]
    top_p: Option<Value>,
    #[serde(default)]
    max_tokens: Option<Value>,
    #[serde(default)]
    max_completion_tokens: Option<Value>,
    #[serde(default)]
    stop: Option<Value>,
    #[serde(default)]
    seed: Option<Value>,
    #[serde(default)]
    n: Option<Value>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    presence_penalty: Option<Value>,
    #[serde(default)]
    frequency_penalty: Option<Value>,
    #[serde(default)]
    logit_bias: Option<Value>,
}

impl ModelOptions {
    /// Refuses the request when it sets a field the gateway does not pass
    /// on.
    ///
    /// # Errors
    /// A 400 naming the first such field.
    pub fn check(&self) -> Result<(), ApiError> {
        let tools = self
            .tools
            .as_ref()
            .is_some_and(|tools| !is_empty_list(tools));
        let set = [
            ("tools", tools),
            (
                "functions",
                self.functions.as_ref().is_some_and(|f| !is_empty_list(f)),
            ),
            (
                "tool_choice",
                self.tool_choice.as_ref().is_some_and(|choice| {
                    tools || !(choice == "auto" || choice == "none" || choice.is_null())
                }),
            ),
            ("function_call", is_set(self.function_call.as_ref())),
            (
                "parallel_tool_calls",
                tools && is_set(self.parallel_tool_calls.as_ref()),
            ),
            (
                "response_format",
                self.response_format
                    .as_ref()
                    .is_some_and(|format| !format.is_null() && *format != json!({"type": "text"})),
            ),
            ("temperature", is_set(self.temperature.as_ref())),
            ("top_p", is_set(self.top_p.as_ref())),
            ("max_tokens", is_set(self.max_tokens.as_ref())),
            (
                "max_completion_tokens",
                is_set(self.max_completion_tokens.as_ref()),
            ),
            ("stop", is_set(self.stop.as_ref())),
            ("seed", is_set(self.seed.as_ref())),
            ("n", self.n.as_ref().is_some_and(|n| !n.is_null() && n != 1)),
            (
                "logprobs",
                self.logprobs
                    .as_ref()
                    .is_some_and(|l| !l.is_null() && l != false),
            ),
            ("presence_penalty", is_set(self.presence_penalty.as_ref())),
            ("frequency_penalty", is_set(self.frequency_penalty.as_ref())),
            ("logit_bias", is_set(self.logit_bias.as_ref())),
        ];
        match set.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(ApiError::BadRequest(format!(
                "`{field}` is not supported by this gateway: the server keeps the agent's own \
                 tools and model settings; send the request without it"
            ))),
            None => Ok(()),
        }
    }
}

fn is_set(value: Option<&Value>) -> bool {
    value.is_some_and(|value| !value.is_null())
}

fn is_empty_list(value: &Value) -> bool {
    value.is_null() || value.as_array().is_some_and(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(request: Value) -> Result<(), String> {
        serde_json::from_value::<ModelOptions>(request)
            .expect("options")
            .check()
            .map_err(|err| err.to_string())
    }

    #[test]
    fn fields_that_ask_for_nothing_pass() {
        assert_eq!(check(json!({})), Ok(()));
        assert_eq!(
            check(
                json!({"tools": [], "tool_choice": "auto", "parallel_tool_calls": true,
                         "response_format": {"type": "text"}, "n": 1, "logprobs": false,
                         "temperature": null})
            ),
            Ok(())
        );
    }

    #[test]
    fn fields_that_would_change_the_call_are_refused_by_name() {
        let refused = |request: Value, field: &str| {
            let err = check(request).expect_err("refused");
            assert!(err.contains(&format!("`{field}`")), "{err}");
        };
        refused(
            json!({"tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tools",
        );
        refused(
            json!({"response_format": {"type": "json_object"}}),
            "response_format",
        );
        refused(json!({"temperature": 0.2}), "temperature");
        refused(json!({"max_tokens": 5}), "max_tokens");
        refused(json!({"tool_choice": "required"}), "tool_choice");
        refused(json!({"n": 2}), "n");
    }
}
