//! The request fields that change what the model is asked: those passed on
//! become the turn's [`CallOptions`], checked here; the others are refused
//! with 400, naming them, and nothing is stored, rather than answered as if
//! the field had not been sent.
//!
//! **Passed on** (issue 28, point 5), to the turn's own model calls only
//! (not compaction's or memory's, not a sub-agent's), and stored with the
//! message so the turn applies them wherever and whenever it runs:
//!
//! - `response_format`: `{"type": "json_object"}` or `{"type":
//!   "json_schema", "json_schema": {"name", "schema", "strict",
//!   "description"}}` — to OpenAI as it is, to Anthropic as its structured
//!   outputs' `output_config.format` (a schema only: `json_object` is
//!   refused there, Anthropic wants a schema). The gateway's tools stay
//!   usable before the answer.
//! - `temperature` (a number, 0 to 2; to 1 for Anthropic), `top_p` (0 to
//!   1), `stop` (a string or up to 4 non-empty strings; Anthropic's
//!   `stop_sequences`), `seed` (an integer; OpenAI only: refused for an
//!   Anthropic gateway, which has none).
//! - `max_tokens` / `max_completion_tokens` (a positive integer; both:
//!   the lower): caps each model call of the turn, never above the
//!   configured `llm.max_tokens` (the lower of the two is sent).
//!
//! - `tools` (function tools; see [`ModelOptions::client_tools`]): the
//!   client's own tools, offered to the model after the gateway's
//!   (`agent::client_tools`); `tool_choice` (`auto`, `none`: no tool in
//!   any call of the turn, `required` or a named function: a tool call in
//!   the turn's first model call) and `parallel_tool_calls: false` (at
//!   most one call per response) are passed on to the provider.
//!
//! **Refused**: the legacy `functions` and `function_call`, `n` other than
//! 1, `logprobs`, `presence_penalty`, `frequency_penalty`, `logit_bias`.
//!
//! A field left out, `null`, or set to the value that asks for nothing
//! (`tools: []`, `tool_choice: "auto"`, `response_format: {"type":
//! "text"}`, `n: 1`, `logprobs: false`, `parallel_tool_calls: true`,
//! `stop: []`) is accepted.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ApiError;
use crate::domain::{AskedToolChoice, CallOptions, ResponseFormat, ToolSpec};
use crate::llm::ProviderKind;

/// The fields of a request that change the model call.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct ModelOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tools: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    functions: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    function_call: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    top_p: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tokens: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    logprobs: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    logit_bias: Option<Value>,
}

/// A 400 about `field`.
fn invalid(field: &str, what: &str) -> ApiError {
    ApiError::BadRequest(format!("`{field}` {what}"))
}

impl ModelOptions {
    /// The request's call settings for a gateway whose provider is
    /// `provider`.
    ///
    /// # Errors
    /// A 400 naming the first field that is refused, or set to a value
    /// that is not valid.
    pub fn check(&self, provider: ProviderKind) -> Result<CallOptions, ApiError> {
        self.refuse_unsupported()?;
        let anthropic = provider == ProviderKind::Anthropic;
        let temperature_max = if anthropic { 1.0 } else { 2.0 };
        let seed = integer("seed", self.seed.as_ref(), i64::MIN, i64::MAX)?;
        if anthropic && seed.is_some() {
            return Err(invalid(
                "seed",
                "is not supported by this gateway's model provider (Anthropic has no seed); \
                 send the request without it",
            ));
        }
        let max_tokens = [
            ("max_tokens", self.max_tokens.as_ref()),
            ("max_completion_tokens", self.max_completion_tokens.as_ref()),
        ]
        .into_iter()
        .map(|(field, value)| integer(field, value, 1, i64::from(u32::MAX)))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .min()
        .and_then(|max| u32::try_from(max).ok());
        let tools = self.client_tools()?;
        Ok(CallOptions {
            tool_choice: tool_choice(self.tool_choice.as_ref(), &tools)?,
            parallel_tool_calls: match self.parallel_tool_calls.as_ref() {
                None | Some(Value::Null | Value::Bool(true)) => None,
                Some(Value::Bool(false)) => Some(false),
                Some(_) => return Err(invalid("parallel_tool_calls", "must be true or false")),
            },
            response_format: response_format(self.response_format.as_ref(), anthropic)?,
            temperature: number("temperature", self.temperature.as_ref(), temperature_max)?,
            top_p: number("top_p", self.top_p.as_ref(), 1.0)?,
            max_tokens,
            stop: stop(self.stop.as_ref())?,
            seed,
        })
    }

    /// The client's function tools (`tools`): each `{"type": "function",
    /// "function": {"name", "description", "parameters", "strict"}}`, a
    /// name of 1 to 64 letters, digits, `_` or `-` used once, parameters a
    /// JSON Schema object (an empty object's when left out); at most
    /// [`MAX_CLIENT_TOOLS`]. `strict` is accepted and not passed on.
    ///
    /// # Errors
    /// A 400 saying what is wrong.
    pub fn client_tools(&self) -> Result<Vec<ToolSpec>, ApiError> {
        let field = "tools";
        let Some(tools) = self.tools.as_ref().filter(|tools| !tools.is_null()) else {
            return Ok(Vec::new());
        };
        let tools = tools
            .as_array()
            .ok_or_else(|| invalid(field, "must be a list of function tools"))?;
        if tools.len() > MAX_CLIENT_TOOLS {
            return Err(invalid(
                field,
                &format!("may hold at most {MAX_CLIENT_TOOLS} tools"),
            ));
        }
        let mut specs: Vec<ToolSpec> = Vec::with_capacity(tools.len());
        for (index, tool) in tools.iter().enumerate() {
            let spec =
                function_tool(tool).map_err(|what| invalid(&format!("tools[{index}]"), what))?;
            if specs.iter().any(|earlier| earlier.name == spec.name) {
                return Err(invalid(
                    &format!("tools[{index}]"),
                    &format!("repeats the name `{}`", spec.name),
                ));
            }
            specs.push(spec);
        }
        Ok(specs)
    }

    /// Whether the request defines tools of its own (in either API's form).
    pub fn has_tools(&self) -> bool {
        self.tools
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty())
    }

    /// Refuses the fields the gateway does not pass on.
    fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let set = [
            (
                "functions",
                self.functions.as_ref().is_some_and(|f| !is_empty_list(f)),
            ),
            ("function_call", is_set(self.function_call.as_ref())),
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

/// Most function tools one request may define (OpenAI's limit).
pub const MAX_CLIENT_TOOLS: usize = 128;

/// One function tool of `tools`; `Err` says what is wrong with it.
fn function_tool(tool: &Value) -> Result<ToolSpec, &'static str> {
    if tool.get("type").and_then(Value::as_str) != Some("function") {
        return Err(
            "is not supported: only `function` tools are (the gateway runs its own \
                    tools itself)",
        );
    }
    let function = tool
        .get("function")
        .and_then(Value::as_object)
        .ok_or("needs a `function` object")?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| valid_name(name))
        .ok_or("needs a function `name` of 1 to 64 letters, digits, `_` or `-`")?;
    let description = match function.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err("has a `description` that is not text"),
    };
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => return Err("has `parameters` that are not a JSON Schema object"),
    };
    Ok(ToolSpec {
        name: name.to_owned(),
        description,
        parameters,
    })
}

/// 1 to 64 letters, digits, `_` or `-`: a name every provider takes.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
}

/// `tool_choice`: `auto` (nothing asked), `none`, `required`, or
/// `{"type": "function", "function": {"name"}}` naming one of `tools`.
fn tool_choice(
    value: Option<&Value>,
    tools: &[ToolSpec],
) -> Result<Option<AskedToolChoice>, ApiError> {
    let field = "tool_choice";
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => Ok(None),
            "none" => Ok(Some(AskedToolChoice::None)),
            "required" => Ok(Some(AskedToolChoice::Required)),
            _ => Err(invalid(
                field,
                "must be `auto`, `none`, `required` or a function to call",
            )),
        },
        Some(choice) => {
            let name = (choice.get("type").and_then(Value::as_str) == Some("function"))
                .then(|| choice.pointer("/function/name").and_then(Value::as_str))
                .flatten()
                .ok_or_else(|| {
                    invalid(
                        field,
                        "must be `auto`, `none`, `required` or {\"type\": \"function\", \
                         \"function\": {\"name\": …}}",
                    )
                })?;
            if !tools.iter().any(|tool| tool.name == name) {
                return Err(invalid(
                    field,
                    &format!("names `{name}`, which is not one of the request's `tools`"),
                ));
            }
            Ok(Some(AskedToolChoice::Function {
                name: name.to_owned(),
            }))
        }
    }
}

fn is_set(value: Option<&Value>) -> bool {
    value.is_some_and(|value| !value.is_null())
}

fn is_empty_list(value: &Value) -> bool {
    value.is_null() || value.as_array().is_some_and(Vec::is_empty)
}

/// A number from 0 to `max`.
fn number(field: &str, value: Option<&Value>, max: f64) -> Result<Option<f64>, ApiError> {
    let Some(value) = value.filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(number) if (0.0..=max).contains(&number) => Ok(Some(number)),
        _ => Err(invalid(field, &format!("must be a number from 0 to {max}"))),
    }
}

/// An integer from `min` to `max`.
fn integer(
    field: &str,
    value: Option<&Value>,
    min: i64,
    max: i64,
) -> Result<Option<i64>, ApiError> {
    let Some(value) = value.filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    match value.as_i64() {
        Some(number) if (min..=max).contains(&number) => Ok(Some(number)),
        _ if min > 0 => Err(invalid(field, "must be a positive integer")),
        _ => Err(invalid(field, "must be an integer")),
    }
}

/// Most stop sequences a request may set (OpenAI's limit).
const MAX_STOP: usize = 4;

/// `stop`: a string or a list of up to four non-empty strings.
fn stop(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        invalid(
            "stop",
            &format!("must be a non-empty string or a list of up to {MAX_STOP} of them"),
        )
    };
    let stops: Vec<String> = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if stops.len() > MAX_STOP || stops.iter().any(String::is_empty) {
        return Err(bad());
    }
    Ok(stops)
}

/// `response_format`: nothing for `text`, else `json_object` or
/// `json_schema` (not `json_object` for Anthropic).
fn response_format(
    value: Option<&Value>,
    anthropic: bool,
) -> Result<Option<ResponseFormat>, ApiError> {
    let field = "response_format";
    let Some(value) = value.filter(|value| !value.is_null() && **value != json!({"type": "text"}))
    else {
        return Ok(None);
    };
    match value.get("type").and_then(Value::as_str) {
        Some("json_object") if anthropic => Err(invalid(
            field,
            "`json_object` is not supported by this gateway's model provider (Anthropic takes \
             a schema); send `json_schema` with one",
        )),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => json_schema(value.get("json_schema")).map(Some),
        _ => Err(invalid(
            field,
            "must be of type `text`, `json_object` or `json_schema`",
        )),
    }
}

/// The `json_schema` of a response format: a name (1 to 64 letters,
/// digits, `_` or `-`), a JSON-object schema, optionally `strict` and a
/// description.
pub(super) fn json_schema(value: Option<&Value>) -> Result<ResponseFormat, ApiError> {
    let field = "response_format.json_schema";
    let value = value
        .and_then(Value::as_object)
        .ok_or_else(|| invalid(field, "must be an object with `name` and `schema`"))?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| {
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
        })
        .ok_or_else(|| {
            invalid(
                field,
                "needs a `name` of 1 to 64 letters, digits, `_` or `-`",
            )
        })?;
    let schema = value
        .get("schema")
        .filter(|schema| schema.is_object())
        .ok_or_else(|| invalid(field, "needs a `schema`, a JSON Schema object"))?;
    let strict = match value.get("strict") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(strict)) => Some(*strict),
        Some(_) => return Err(invalid(field, "has a `strict` that is not true or false")),
    };
    let description = match value.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err(invalid(field, "has a `description` that is not text")),
    };
    Ok(ResponseFormat::JsonSchema {
        name: name.to_owned(),
        description,
        schema: schema.clone(),
        strict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_for(request: Value, provider: ProviderKind) -> Result<CallOptions, String> {
        serde_json::from_value::<ModelOptions>(request)
            .expect("options")
            .check(provider)
            .map_err(|err| err.to_string())
    }

    fn check(request: Value) -> Result<CallOptions, String> {
        check_for(request, ProviderKind::Openai)
    }

    fn refused(request: Value, field: &str) -> String {
        let err = check(request).expect_err("refused");
        assert!(err.contains(&format!("`{field}`")), "{err}");
        err
    }

    #[test]
    fn fields_that_ask_for_nothing_pass() {
        assert_eq!(check(json!({})), Ok(CallOptions::default()));
        assert_eq!(
            check(
                json!({"tools": [], "tool_choice": "auto", "parallel_tool_calls": true,
                         "response_format": {"type": "text"}, "n": 1, "logprobs": false,
                         "temperature": null, "stop": [], "seed": null})
            ),
            Ok(CallOptions::default())
        );
    }

    #[test]
    fn settings_that_are_passed_on_are_read() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let options = check(json!({
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": true}},
            "temperature": 0.25, "top_p": 1, "max_tokens": 50, "max_completion_tokens": 40,
            "stop": "END", "seed": 7
        }))
        .expect("valid");
        assert_eq!(
            options,
            CallOptions {
                response_format: Some(ResponseFormat::JsonSchema {
                    name: "answer".to_owned(),
                    description: None,
                    schema,
                    strict: Some(true),
                }),
                temperature: Some(0.25),
                top_p: Some(1.0),
                max_tokens: Some(40),
                stop: vec!["END".to_owned()],
                seed: Some(7),
                ..CallOptions::default()
            }
        );
        assert_eq!(
            check(json!({"response_format": {"type": "json_object"}, "stop": ["a", "b"]})),
            Ok(CallOptions {
                response_format: Some(ResponseFormat::JsonObject),
                stop: vec!["a".to_owned(), "b".to_owned()],
                ..CallOptions::default()
            })
        );
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        refused(json!({"temperature": 2.5}), "temperature");
        refused(json!({"temperature": "hot"}), "temperature");
        refused(json!({"top_p": -0.1}), "top_p");
        refused(json!({"max_tokens": 0}), "max_tokens");
        refused(
            json!({"max_completion_tokens": 1.5}),
            "max_completion_tokens",
        );
        refused(json!({"stop": ["a", "b", "c", "d", "e"]}), "stop");
        refused(json!({"stop": [""]}), "stop");
        refused(json!({"stop": 3}), "stop");
        refused(json!({"seed": "x"}), "seed");
        refused(
            json!({"response_format": {"type": "xml"}}),
            "response_format",
        );
        refused(
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a b",
                     "schema": {}}}}),
            "response_format.json_schema",
        );
        refused(
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}),
            "response_format.json_schema",
        );
    }

    #[test]
    fn anthropic_has_no_seed_no_json_object_and_a_lower_temperature_ceiling() {
        let anthropic = |request| check_for(request, ProviderKind::Anthropic);
        assert!(
            anthropic(json!({"seed": 1}))
                .expect_err("no seed")
                .contains("`seed`")
        );
        assert!(
            anthropic(json!({"response_format": {"type": "json_object"}}))
                .expect_err("no json_object")
                .contains("`response_format`")
        );
        assert!(
            anthropic(json!({"temperature": 1.5}))
                .expect_err("0 to 1")
                .contains("`temperature`")
        );
        assert!(anthropic(json!({"temperature": 1.0, "stop": "x"})).is_ok());
    }

    #[test]
    fn function_tools_and_the_tool_choice_are_read_and_checked() {
        let weather = json!({"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": true}});
        let request = json!({"tools": [weather.clone(), {"type": "function",
            "function": {"name": "now"}}], "tool_choice": "required",
            "parallel_tool_calls": false});
        let options: ModelOptions = serde_json::from_value(request.clone()).expect("options");
        let tools = options.client_tools().expect("tools");
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].name, "get_weather");
        assert_eq!(tools[0].description, "The weather in a city");
        assert_eq!(
            tools[1].parameters,
            json!({"type": "object", "properties": {}})
        );
        let call = check(request).expect("checked");
        assert_eq!(call.tool_choice, Some(AskedToolChoice::Required));
        assert_eq!(call.parallel_tool_calls, Some(false));
        let named = check(json!({"tools": [weather.clone()],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}))
        .expect("named");
        assert_eq!(
            named.tool_choice,
            Some(AskedToolChoice::Function {
                name: "get_weather".to_owned()
            })
        );
        assert_eq!(
            check(json!({"tool_choice": "none"}))
                .expect("none")
                .tool_choice,
            Some(AskedToolChoice::None)
        );

        refused(
            json!({"tools": [weather.clone()],
                   "tool_choice": {"type": "function", "function": {"name": "other"}}}),
            "tool_choice",
        );
        refused(json!({"tool_choice": "sometimes"}), "tool_choice");
        refused(
            json!({"tools": [weather.clone()], "parallel_tool_calls": "no"}),
            "parallel_tool_calls",
        );
        refused(json!({"tools": [{"type": "web_search"}]}), "tools[0]");
        refused(
            json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "tools[0]",
        );
        refused(json!({"tools": [weather.clone(), weather]}), "tools[1]");
        refused(json!({"tools": {"type": "function"}}), "tools");
    }

    #[test]
    fn fields_that_stay_unsupported_are_refused_by_name() {
        refused(json!({"functions": [{"name": "f"}]}), "functions");
        refused(json!({"function_call": "auto"}), "function_call");
        refused(json!({"n": 2}), "n");
        refused(json!({"logprobs": true}), "logprobs");
        refused(json!({"presence_penalty": 0.5}), "presence_penalty");
        refused(json!({"frequency_penalty": 0.5}), "frequency_penalty");
        refused(json!({"logit_bias": {"1": 2}}), "logit_bias");
    }
}
