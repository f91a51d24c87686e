//! The Chat Completions format's own tests: the request bytes field by
//! field and turn after turn, response fallbacks, stop reasons, streams
//! that end without `[DONE]` or are malformed; and its [`Fixture`], for the
//! scenarios every format shares (`conformance`).

use serde_json::{Value, json};
use switchboard_test_support::model::{Canned, sse};

use super::OpenAi;
use super::response::stop_reason;
use crate::domain::{ChatMessage, StopReason, ToolCall, ToolSpec, Usage};
use crate::llm::stream::cut_short;
use crate::llm::test_support::{Failures, Fixture, KEY, ask, decode, request, start};
use crate::llm::{LlmError, ModelResponse};

impl Fixture for OpenAi {
    const WIRE: Self = OpenAi;
    const BASE_PATH: &'static str = "/v1/";
    const MODEL: &'static str = "gpt-test";
    const MAX_TOKENS: u32 = 256;
    const ANSWER_ID: (&'static str, &'static str) = ("x-request-id", "req_abc");
    const STREAM_FIELDS: &'static str = r#","stream":true,"stream_options":{"include_usage":true}"#;

    fn ok_body() -> String {
        json!({
            "id": "chatcmpl-1",
            "model": "gpt-test-2024",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}
        })
        .to_string()
    }

    fn history() -> Vec<ChatMessage> {
        vec![
            ChatMessage::User {
                content: "what is 2+2?".to_owned(),
                media: Vec::new(),
            },
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "call_1".to_owned(),
                    name: "calc".to_owned(),
                    arguments: r#"{"expr":"2+2"}"#.to_owned(),
                }],
            },
            ChatMessage::tool_result("call_1", "4", false),
            ChatMessage::Assistant {
                content: Some("It is 4.".to_owned()),
                tool_calls: vec![],
            },
            ChatMessage::User {
                content: "thanks".to_owned(),
                media: Vec::new(),
            },
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "calc".to_owned(),
            description: "Evaluates arithmetic".to_owned(),
            parameters: json!({"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}),
        }]
    }

    fn tool_body(text: &str) -> String {
        json!({
            "id": "chatcmpl-9",
            "model": "gpt-test-2024-06",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
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
        })
        .to_string()
    }

    /// The tool answer's stream: text and tool calls cut across chunks, calls
    /// interleaved.
    fn tool_stream() -> String {
        let delta = |delta: Value| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        let call = |call: Value| delta(json!({"tool_calls": [call]}));
        sse::openai_body(&[
            json!({"id": "chatcmpl-9", "model": "gpt-test-2024-06", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let "}, "finish_reason": null}]}),
            delta(json!({"content": "me ché", "reasoning_content": "The user "})),
            delta(json!({"content": "ck.", "reasoning_content": "wants numbers."})),
            call(
                json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "calc", "arguments": ""}}),
            ),
            call(json!({"index": 0, "function": {"arguments": "{\"b\":1, "}})),
            call(
                json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{not json"}}),
            ),
            call(json!({"index": 0, "function": {"arguments": "\"a\":2}"}})),
            call(
                json!({"index": 2, "id": "call_c", "type": "function", "function": {"name": "now"}}),
            ),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                   "prompt_tokens_details": {"cached_tokens": 1024}}}),
        ])
    }

    fn tool_response() -> ModelResponse {
        ModelResponse {
            content: Some("Let me chéck.".to_owned()),
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
                cache_write_1h_tokens: 0,
            },
            model: "gpt-test-2024-06".to_owned(),
            request_id: Some("req_abc".to_owned()),
        }
    }

    fn failures() -> Failures {
        let overloaded = r#"{"error":{"message":"overloaded"}}"#;
        let server_error = || Canned::json(500, format!("internal error for key {KEY}"));
        let partial =
            sse::openai_event(&json!({"choices": [{"index": 0, "delta": {"content": "Let me"}}]}));
        Failures {
            rate_limited: r#"{"error":{"message":"slow down"}}"#,
            transient: [
                Canned::json(500, "oops"),
                Canned::json(502, "<html>bad gateway</html>"),
            ],
            bad_request: (
                r#"{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}"#,
                "max_tokens is too large",
            ),
            exhausted: (
                vec![
                    Canned::json(503, overloaded),
                    Canned::json(503, overloaded),
                    Canned::json(503, overloaded),
                    Canned::json(429, "{}").header("retry-after-ms", "3"),
                ],
                LlmError::RateLimited {
                    status: 429,
                    retry_after: Some(std::time::Duration::from_millis(3)),
                },
            ),
            invalid: vec![
                ("not json", None),
                (
                    r#"{"error":{"message":"upstream failed"}}"#,
                    Some("upstream failed"),
                ),
            ],
            leaking: (
                vec![
                    Canned::json(
                        401,
                        format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
                    ),
                    server_error(),
                    server_error(),
                    server_error(),
                    server_error(),
                    Canned::json(200, format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#)),
                ],
                vec![
                    LlmError::Rejected {
                        status: 401,
                        message: String::new(),
                    },
                    LlmError::Server {
                        status: 500,
                        message: String::new(),
                    },
                    LlmError::InvalidResponse(String::new()),
                ],
            ),
            midway: (
                vec![
                    Canned::json(503, r#"{"error":{"message":"busy"}}"#),
                    Canned::sse(partial),
                ],
                "Let me<restart>Let me chéck.",
            ),
        }
    }
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
    let (server, provider) = start::<OpenAi>(vec![Canned::json(200, OpenAi::ok_body())]).await;
    let messages = OpenAi::history();
    let tools = OpenAi::tools();
    provider
        .complete(&request::<OpenAi>(&messages, &tools))
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
            "prompt_cache_key": body["prompt_cache_key"]
        })
    );
    let key = body["prompt_cache_key"].as_str().expect("a key");
    assert!(key.starts_with("sb-") && key.len() == 19, "{key}");
    // The field order on the wire is fixed, messages before what varies.
    let text = &sent.body;
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
    let (server, provider) = start::<OpenAi>(vec![Canned::json(200, OpenAi::ok_body())]).await;
    ask::<OpenAi>(provider.as_ref()).await.expect("success");
    let body = server.requests()[0].json();
    assert!(body.get("tools").is_none(), "{body}");
    assert!(
        body["prompt_cache_key"]
            .as_str()
            .is_some_and(|key| key.starts_with("sb-"))
    );
}

#[tokio::test]
async fn messages_bytes_extend_the_previous_request() {
    let (server, provider) = start::<OpenAi>(vec![
        Canned::json(200, OpenAi::ok_body()),
        Canned::json(200, OpenAi::ok_body()),
    ])
    .await;
    let tools = OpenAi::tools();
    let full = OpenAi::history();
    provider
        .complete(&request::<OpenAi>(&full[..3], &tools))
        .await
        .expect("first");
    provider
        .complete(&request::<OpenAi>(&full, &[]))
        .await
        .expect("second");

    let requests = server.requests();
    let first = &requests[0].body;
    let second = &requests[1].body;
    let first = raw_array(first, "messages");
    let second = raw_array(second, "messages");
    let prefix = first.strip_suffix(']').expect("array");
    assert!(second.starts_with(prefix), "{first}\n{second}");
    assert!(second.len() > first.len());
}

#[tokio::test]
async fn response_fallbacks_and_reasoning_alias() {
    // No request-id header, no model, no usage, `reasoning` instead of
    // `reasoning_content`, null content.
    let body = json!({
        "id": "chatcmpl-7",
        "choices": [{"message": {"role": "assistant", "content": null, "reasoning": "hmm"}, "finish_reason": "length"}]
    });
    let (_server, provider) = start::<OpenAi>(vec![Canned::json(200, body.to_string())]).await;
    let response = ask::<OpenAi>(provider.as_ref()).await.expect("success");
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
    let (_server, provider) = start::<OpenAi>(vec![
        Canned::json(200, body.to_string()),
        Canned::json(
            200,
            json!({"choices": [{"message": {"content": "ok"}}]}).to_string(),
        ),
    ])
    .await;
    let response = ask::<OpenAi>(provider.as_ref()).await.expect("success");
    assert_eq!(response.tool_calls[0].arguments, r#"{"y":[2],"z":1}"#);
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let response = ask::<OpenAi>(provider.as_ref()).await.expect("success");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.finish_reason, "");
}

// Streamed calls.

#[test]
fn a_text_stream_without_usage_or_done_after_its_finish_reason() {
    let body = sse::body(&[
        (
            None,
            json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).to_string(),
        ),
        (
            None,
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        ),
    ]);
    let (response, heard) = decode::<OpenAi>(&body, 5);
    let response = response.expect("a finish reason completes it");
    assert_eq!(response.content.as_deref(), Some("hi"));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.usage, Usage::default());
    assert_eq!(response.model, "gpt-test");
    assert_eq!(heard, "hi");
}

#[test]
fn malformed_streams_are_clear_errors() {
    let text = json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}).to_string();
    let invalid = |body: &str| {
        let (response, _) = decode::<OpenAi>(body, 3);
        let error = response.expect_err("fails");
        assert!(
            matches!(error, LlmError::InvalidResponse(_)),
            "{body}: {error:?}"
        );
    };
    invalid("data: {not json\n\n");
    invalid("data: [DONE]\n\n");
    invalid("data: \"just a string\"\n\n");
    invalid(&sse::openai_body(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
    ]));
    // Cut short: like a dropped connection, retried.
    let (response, heard) = decode::<OpenAi>(&format!("data: {text}\n\n"), 4);
    assert_eq!(response, Err(cut_short()));
    assert_eq!(heard, "hi");
    assert!(cut_short().is_retryable());
    // An error sent in the stream, key scrubbed.
    let error = json!({"error": {"message": format!("upstream failed for {KEY}"), "code": 502}});
    let (response, _) = decode::<OpenAi>(&format!("data: {text}\n\ndata: {error}\n\n"), 9);
    assert_eq!(
        response,
        Err(LlmError::Server {
            status: 502,
            message: "upstream failed for [redacted]".to_owned()
        })
    );
}

/// The settings of a client's turn, as the HTTP API passes them on.
fn client_settings() -> crate::domain::CallOptions {
    crate::domain::CallOptions {
        response_format: Some(crate::domain::ResponseFormat::JsonSchema {
            name: "answer".to_owned(),
            description: None,
            schema: json!({"type": "object"}),
            strict: Some(true),
        }),
        temperature: Some(0.5),
        top_p: Some(0.9),
        max_tokens: Some(10),
        stop: vec!["END".to_owned()],
        seed: Some(3),
        ..crate::domain::CallOptions::default()
    }
}

#[tokio::test]
async fn a_clients_settings_go_after_max_tokens_and_leave_the_messages_alone() {
    let (server, provider) = start::<OpenAi>(vec![
        Canned::json(200, OpenAi::ok_body()),
        Canned::json(200, OpenAi::ok_body()),
    ])
    .await;
    let messages = OpenAi::history();
    let options = client_settings();
    let plain = request::<OpenAi>(&messages, &[]);
    provider.complete(&plain).await.expect("success");
    let with = crate::llm::ModelRequest {
        options: &options,
        ..plain
    };
    provider.complete(&with).await.expect("success");

    let requests = server.requests();
    let (plain, with) = (&requests[0].body, &requests[1].body);
    assert!(!plain.contains("temperature") && !plain.contains("response_format"));
    let settings = r#","temperature":0.5,"top_p":0.9,"stop":["END"],"seed":3,"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"},"strict":true}}"#;
    let max_tokens = format!(r#""max_tokens":{}"#, OpenAi::MAX_TOKENS);
    assert_eq!(
        with.replacen(settings, "", 1),
        *plain,
        "the settings are the only difference"
    );
    assert!(with.contains(&format!("{max_tokens}{settings}")), "{with}");
}

/// A 1×1 PNG's file, shown as an image (`shown`) or not.
fn tool_image(shown: bool) -> crate::domain::MediaRef {
    let bytes: &[u8] = b"\x89PNG\r\n\x1a\nfake";
    crate::domain::MediaRef {
        hash: "ab".repeat(32),
        media_type: "image/png".to_owned(),
        name: None,
        size: bytes.len() as u64,
        width: Some(1),
        height: Some(1),
        derived: None,
        transcript: None,
        shown: if shown {
            crate::domain::Shown::Image(std::sync::Arc::from(bytes))
        } else {
            crate::domain::Shown::NoVision
        },
    }
}

/// A round of two calls whose first result carries `media`.
fn round_with(media: Vec<crate::domain::MediaRef>) -> Vec<ChatMessage> {
    let call = |id: &str| ToolCall {
        id: id.to_owned(),
        name: "snap".to_owned(),
        arguments: "{}".to_owned(),
    };
    vec![
        ChatMessage::user("look"),
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![call("call_1"), call("call_2")],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".to_owned(),
            content: r#"{"files":["[file 1: image/png, 1×1, 12 bytes]"],"success":true}"#
                .to_owned(),
            is_error: false,
            media,
        },
        ChatMessage::tool_result("call_2", r#"{"success":true}"#, false),
    ]
}

fn messages_of(messages: &[ChatMessage]) -> Value {
    let body = super::request::body(&request::<OpenAi>(messages, &[]), false).expect("body");
    serde_json::from_slice::<Value>(&body).expect("json")["messages"].clone()
}

#[test]
fn a_tool_results_images_follow_the_round_in_a_user_message() {
    let messages = messages_of(&round_with(vec![tool_image(true)]));
    let messages = messages.as_array().expect("messages");
    // system, user, assistant, two tool results, then the images.
    assert_eq!(messages.len(), 6, "{messages:?}");
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(
        messages[3]["content"],
        r#"{"files":["[file 1: image/png, 1×1, 12 bytes]"],"success":true}"#,
        "the text alone: no base64 in a tool message"
    );
    assert_eq!(messages[4]["tool_call_id"], "call_2");
    let data = "iVBORw0KGgpmYWtl";
    assert_eq!(
        messages[5],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Images returned by tool call call_1:"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}},
        ]})
    );
}

#[test]
fn a_tool_results_files_not_shown_are_notes_and_no_files_read_as_before() {
    let messages = messages_of(&round_with(vec![tool_image(false)]));
    assert_eq!(
        messages.as_array().map(Vec::len),
        Some(5),
        "no image message"
    );
    assert_eq!(
        messages[3]["content"],
        "{\"files\":[\"[file 1: image/png, 1×1, 12 bytes]\"],\"success\":true}\n\
         [image: 1×1, not shown: this model has no vision]"
    );
    // A result without files: the same bytes as ever.
    let plain = round_with(Vec::new());
    let body = super::request::body(&request::<OpenAi>(&plain, &[]), false).expect("body");
    let text = String::from_utf8(body).expect("utf-8");
    assert!(
        text.contains(
            r#"{"role":"tool","tool_call_id":"call_1","content":"{\"files\":[\"[file 1: image/png, 1×1, 12 bytes]\"],\"success\":true}"}"#
        ),
        "{text}"
    );
    let again = super::request::body(&request::<OpenAi>(&plain, &[]), false).expect("body");
    assert_eq!(text.as_bytes(), again, "the same history, the same bytes");
}
