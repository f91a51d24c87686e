//! OpenAI Chat Completions provider.
//!
//! Owns the Chat Completions wire format: building the request body (in a
//! fixed field order, so that each turn's `messages` bytes extend the previous
//! turn's and the provider's prompt cache keeps hitting), parsing the response
//! into a [`ModelResponse`], and classifying HTTP failures. Also serves every
//! server that speaks the same protocol (OpenRouter, DeepSeek, vLLM, Ollama).

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::{answering_model, error_message, log_failure, post_json, request_id};
use super::retry::with_retry;
use super::{
    ChatMessage, Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind,
    StopReason, ToolCall, Usage, canonical_json,
};

/// A provider speaking OpenAI Chat Completions.
pub struct OpenAiProvider {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl OpenAiProvider {
    pub fn new(endpoint: Endpoint, http: reqwest::Client) -> Self {
        Self { endpoint, http }
    }

    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.endpoint.base_url.trim_end_matches('/')
        )
    }

    async fn attempt(&self, body: &[u8], request_model: &str) -> Result<ModelResponse, LlmError> {
        let key = self.endpoint.api_key.expose_secret();
        let request = self
            .http
            .post(self.url())
            .header(AUTHORIZATION, format!("Bearer {key}"));
        post_json(request, &self.endpoint, body, &[], |bytes, headers| {
            parse_response(bytes, headers, request_model, key)
        })
        .await
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Openai
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError> {
        let body = request_body(request)?;
        with_retry(&self.endpoint.retry, || self.attempt(&body, request.model))
            .await
            .inspect_err(|error| log_failure(&self.url(), error))
    }
}

/// The request body. Field order is the serialisation order: `messages`
/// comes right after the model so nothing that varies precedes it.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    max_tokens: u32,
    prompt_cache_key: &'a str,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireMessage<'a> {
    Text {
        role: &'static str,
        content: &'a str,
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
        content: &'a str,
    },
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
        ChatMessage::User { content } => WireMessage::Text {
            role: "user",
            content,
        },
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
        } => WireMessage::Tool {
            role: "tool",
            tool_call_id,
            content,
        },
    }
}

/// Serialises the request body once, so every retry sends the same bytes.
fn request_body(request: &ModelRequest<'_>) -> Result<Vec<u8>, LlmError> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    // An empty system prompt is left out rather than sent as an empty message;
    // it is the same on every turn of a session, so the prefix stays stable.
    if !request.system.is_empty() {
        messages.push(WireMessage::Text {
            role: "system",
            content: request.system,
        });
    }
    messages.extend(request.messages.iter().map(wire_message));
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
        max_tokens: request.max_tokens,
        prompt_cache_key: request.cache_key,
    };
    serde_json::to_vec(&body)
        .map_err(|error| LlmError::InvalidResponse(format!("could not encode request: {error}")))
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    name: String,
    // A string per the spec; some compatible servers send an object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize, Default)]
struct PromptTokensDetails {
    #[serde(default)]
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

fn parse_response(
    bytes: &[u8],
    headers: &HeaderMap,
    request_model: &str,
    key: &str,
) -> Result<ModelResponse, LlmError> {
    let response: ChatResponse = serde_json::from_slice(bytes)
        .map_err(|error| LlmError::InvalidResponse(format!("unexpected response body: {error}")))?;
    let Some(choice) = response.choices.into_iter().next() else {
        // Some compatible servers report upstream failures as a 200 with an
        // `error` object instead of choices.
        return Err(LlmError::InvalidResponse(format!(
            "no choices in the response: {}",
            error_message(bytes, key)
        )));
    };
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
    let usage = response.usage.unwrap_or_default();
    let usage = Usage {
        input_tokens: usage.prompt_tokens.unwrap_or(0),
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: usage
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0),
        cache_write_tokens: 0,
    };
    Ok(ModelResponse {
        content: non_empty(message.content),
        reasoning: non_empty(message.reasoning_content).or_else(|| non_empty(message.reasoning)),
        tool_calls,
        stop_reason,
        finish_reason,
        usage,
        model: answering_model(response.model, request_model),
        request_id: request_id(headers, "x-request-id", response.id),
    })
}

fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::ToolSpec;
    use super::super::test_support::{self, Fixture, KEY, Reply};
    use super::*;

    const FIXTURE: Fixture = Fixture {
        kind: ProviderKind::Openai,
        path: "/v1/",
        model: "gpt-test",
        max_tokens: 256,
        ok_body,
        history,
    };

    fn ok_body() -> String {
        json!({
            "id": "chatcmpl-1",
            "model": "gpt-test-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}
        })
        .to_string()
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "calc".to_owned(),
            description: "Evaluates arithmetic".to_owned(),
            parameters: json!({"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}),
        }]
    }

    fn history() -> Vec<ChatMessage> {
        vec![
            ChatMessage::User {
                content: "what is 2+2?".to_owned(),
            },
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_1".to_owned(),
                    name: "calc".to_owned(),
                    arguments: r#"{"expr":"2+2"}"#.to_owned(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".to_owned(),
                content: "4".to_owned(),
                is_error: false,
            },
            ChatMessage::Assistant {
                content: Some("It is 4.".to_owned()),
                tool_calls: vec![],
            },
            ChatMessage::User {
                content: "thanks".to_owned(),
            },
        ]
    }

    fn request<'a>(messages: &'a [ChatMessage], tools: &'a [ToolSpec]) -> ModelRequest<'a> {
        FIXTURE.request(messages, tools)
    }

    /// The raw bytes of the JSON array following `"key":` in `text`.
    fn raw_array<'t>(text: &'t str, key: &str) -> &'t str {
        let start = text.find(&format!("\"{key}\":[")).expect("key present") + key.len() + 3;
        let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
        for (offset, ch) in text[start..].char_indices() {
            if in_string {
                match ch {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match ch {
                '"' => in_string = true,
                '[' | '{' => depth += 1,
                ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return &text[start..=start + offset];
                    }
                }
                _ => {}
            }
        }
        panic!("unterminated array");
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
        assert_eq!(sent.path, "/v1/chat/completions");
        assert_eq!(
            sent.header("authorization").as_deref(),
            Some("Bearer sk-secret-123")
        );
        assert_eq!(
            sent.header("content-type").as_deref(),
            Some("application/json")
        );

        let body = sent.json();
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "what is 2+2?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"expr\":\"2+2\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
                    {"role": "assistant", "content": "It is 4."},
                    {"role": "user", "content": "thanks"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "calc",
                    "description": "Evaluates arithmetic",
                    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}
                }}],
                "max_tokens": 256,
                "prompt_cache_key": "session-42"
            })
        );
        // The field order on the wire is fixed, messages before what varies.
        let text = sent.text();
        let positions: Vec<_> = [
            "\"model\"",
            "\"messages\"",
            "\"tools\"",
            "\"max_tokens\"",
            "\"prompt_cache_key\"",
        ]
        .iter()
        .map(|key| text.find(key).expect("field present"))
        .collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
        assert!(text.starts_with(r#"{"model":"gpt-test","messages":[{"role":"system","#));
        // The assistant's tool-only turn has no content and keeps tool_calls,
        // the text-only one has no tool_calls key at all.
        assert!(text.contains(r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"expr\":\"2+2\"}"}}]}"#));
        assert!(text.contains(r#"{"role":"assistant","content":"It is 4."}"#));
        assert!(!text.contains("is_error"));
    }

    #[tokio::test]
    async fn tools_key_is_omitted_without_tools() {
        let (server, provider) = FIXTURE.start(vec![Reply::json(200, ok_body())]).await;
        FIXTURE.ask(provider.as_ref()).await.expect("success");
        let body = server.requests()[0].json();
        assert!(body.get("tools").is_none(), "{body}");
        assert_eq!(body["prompt_cache_key"], "session-42");
    }

    #[tokio::test]
    async fn messages_bytes_extend_the_previous_request() {
        let (server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, ok_body()),
                Reply::json(200, ok_body()),
            ])
            .await;
        let tools = tools();
        let full = history();
        provider
            .complete(&request(&full[..3], &tools))
            .await
            .expect("first");
        provider
            .complete(&request(&full, &[]))
            .await
            .expect("second");

        let requests = server.requests();
        let first = requests[0].text();
        let second = requests[1].text();
        let first = raw_array(&first, "messages");
        let second = raw_array(&second, "messages");
        let prefix = first.strip_suffix(']').expect("array");
        assert!(second.starts_with(prefix), "{first}\n{second}");
        assert!(second.len() > first.len());
    }

    #[tokio::test]
    async fn response_is_parsed_field_by_field() {
        let body = json!({
            "id": "chatcmpl-9",
            "model": "gpt-test-2024-06",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "reasoning_content": "The user wants numbers.",
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": "{\"b\":1, \"a\":2}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{not json"}},
                        {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": ""}}
                    ]
                },
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        });
        let (_server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, body.to_string()).header("x-request-id", "req_abc"),
            ])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(
            response,
            ModelResponse {
                content: Some("Let me check.".to_owned()),
                reasoning: Some("The user wants numbers.".to_owned()),
                tool_calls: vec![
                    ToolCall {
                        id: "call_a".to_owned(),
                        name: "calc".to_owned(),
                        arguments: r#"{"a":2,"b":1}"#.to_owned(),
                    },
                    ToolCall {
                        id: "call_b".to_owned(),
                        name: "calc".to_owned(),
                        arguments: "{not json".to_owned(),
                    },
                    ToolCall {
                        id: "call_c".to_owned(),
                        name: "now".to_owned(),
                        arguments: "{}".to_owned(),
                    },
                ],
                stop_reason: StopReason::ToolUse,
                finish_reason: "tool_calls".to_owned(),
                usage: Usage {
                    input_tokens: 1200,
                    output_tokens: 40,
                    cache_read_tokens: 1024,
                    cache_write_tokens: 0,
                },
                model: "gpt-test-2024-06".to_owned(),
                request_id: Some("req_abc".to_owned()),
            }
        );
    }

    #[tokio::test]
    async fn response_fallbacks_and_reasoning_alias() {
        // No request-id header, no model, no usage, `reasoning` instead of
        // `reasoning_content`, null content.
        let body = json!({
            "id": "chatcmpl-7",
            "choices": [{"message": {"role": "assistant", "content": null, "reasoning": "hmm"}, "finish_reason": "length"}]
        });
        let (_server, provider) = FIXTURE
            .start(vec![Reply::json(200, body.to_string())])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.content, None);
        assert_eq!(response.reasoning.as_deref(), Some("hmm"));
        assert_eq!(response.stop_reason, StopReason::MaxTokens);
        assert_eq!(response.finish_reason, "length");
        assert_eq!(response.usage, Usage::default());
        assert_eq!(response.model, "gpt-test");
        assert_eq!(response.request_id.as_deref(), Some("chatcmpl-7"));
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("stop", false), StopReason::EndTurn);
        assert_eq!(stop_reason("", false), StopReason::EndTurn);
        assert_eq!(stop_reason("tool_calls", false), StopReason::ToolUse);
        assert_eq!(stop_reason("stop", true), StopReason::ToolUse);
        assert_eq!(stop_reason("length", false), StopReason::MaxTokens);
        assert_eq!(stop_reason("content_filter", false), StopReason::Refused);
        assert_eq!(
            stop_reason("weird", false),
            StopReason::Other("weird".to_owned())
        );
    }

    #[tokio::test]
    async fn missing_finish_reason_and_object_arguments() {
        let body = json!({
            "choices": [{"message": {"content": "done", "tool_calls": [
                {"id": "x", "function": {"name": "calc", "arguments": {"z": 1, "y": [2]}}}
            ]}}]
        });
        let (_server, provider) = FIXTURE
            .start(vec![
                Reply::json(200, body.to_string()),
                Reply::json(
                    200,
                    json!({"choices": [{"message": {"content": "ok"}}]}).to_string(),
                ),
            ])
            .await;
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.tool_calls[0].arguments, r#"{"y":[2],"z":1}"#);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        let response = FIXTURE.ask(provider.as_ref()).await.expect("success");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(response.finish_reason, "");
    }

    #[tokio::test]
    async fn rate_limit_with_retry_after_zero_then_success() {
        test_support::a_rate_limit_with_retry_after_zero_is_retried(
            &FIXTURE,
            r#"{"error":{"message":"slow down"}}"#,
        )
        .await;
    }

    #[tokio::test]
    async fn server_errors_are_retried() {
        test_support::transient_failures_are_retried(
            &FIXTURE,
            Reply::json(500, "oops"),
            Reply::json(502, "<html>bad gateway</html>"),
        )
        .await;
    }

    #[tokio::test]
    async fn bad_request_is_not_retried() {
        test_support::a_bad_request_is_not_retried(
            &FIXTURE,
            r#"{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}"#,
            "max_tokens is too large",
        )
        .await;
    }

    #[tokio::test]
    async fn exhausted_retries_return_the_last_error() {
        let overloaded = r#"{"error":{"message":"overloaded"}}"#;
        test_support::exhausted_retries_return_the_last_error(
            &FIXTURE,
            vec![
                Reply::json(503, overloaded),
                Reply::json(503, overloaded),
                Reply::json(503, overloaded),
                Reply::json(429, "{}").header("retry-after-ms", "3"),
            ],
            LlmError::RateLimited {
                status: 429,
                retry_after: Some(Duration::from_millis(3)),
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
        let errors = test_support::bodies_that_are_invalid_responses(
            &FIXTURE,
            &["not json", r#"{"error":{"message":"upstream failed"}}"#],
        )
        .await;
        assert!(
            matches!(errors[1], LlmError::InvalidResponse(ref m) if m.contains("upstream failed")),
            "{:?}",
            errors[1]
        );
    }

    #[tokio::test]
    async fn api_key_never_leaks_into_errors() {
        let server_error = || Reply::json(500, format!("internal error for key {KEY}"));
        let errors = test_support::errors_never_show_the_key(
            &FIXTURE,
            vec![
                Reply::json(
                    401,
                    format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
                ),
                server_error(),
                server_error(),
                server_error(),
                server_error(),
                Reply::json(200, format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#)),
            ],
            3,
        )
        .await;
        assert!(matches!(errors[0], LlmError::Rejected { status: 401, .. }));
        assert!(matches!(errors[1], LlmError::Server { status: 500, .. }));
        assert!(matches!(errors[2], LlmError::InvalidResponse(_)));
        assert!(matches!(errors[3], LlmError::Network(_)));
    }
}
