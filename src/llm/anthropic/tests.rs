//! The Messages format's own tests: the request bytes field by field (the
//! cache breakpoints, roles merged, tool results first), response
//! fallbacks, stop reasons, malformed streams and the errors sent inside
//! one; and its [`Fixture`], for the scenarios every format shares
//! (`conformance`).

use serde_json::{Value, json};
use switchboard_test_support::model::{Canned, sse};

use super::Anthropic;
use super::response::stop_reason;
use crate::domain::{ChatMessage, StopReason, ToolCall, ToolSpec, Usage};
use crate::llm::stream::cut_short;
use crate::llm::test_support::{Failures, Fixture, KEY, ask, decode, request, start};
use crate::llm::{LlmError, ModelResponse};

impl Fixture for Anthropic {
    const WIRE: Self = Anthropic {
        cache_ttl: crate::llm::settings::CacheTtl::FiveMinutes,
    };
    const BASE_PATH: &'static str = "/";
    const MODEL: &'static str = "claude-test";
    const MAX_TOKENS: u32 = 512;
    const ANSWER_ID: (&'static str, &'static str) = ("request-id", "req_011");
    const STREAM_FIELDS: &'static str = r#","stream":true"#;

    fn ok_body() -> String {
        json!({
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test-1",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2}
        })
        .to_string()
    }

    fn history() -> Vec<ChatMessage> {
        vec![
            user("what is 2+2 and the time?"),
            ChatMessage::Assistant {
                content: Some("Checking.".to_owned()),
                tool_calls: vec![
                    call("toolu_1", "calc", r#"{"expr":"2+2"}"#),
                    call("toolu_2", "now", "{broken"),
                ],
            },
            result("toolu_1", "4", false),
            result("toolu_2", "invalid arguments", true),
            ChatMessage::Assistant {
                content: Some("4, and I could not read the clock.".to_owned()),
                tool_calls: vec![],
            },
            user("thanks"),
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "calc".to_owned(),
                description: "Evaluates arithmetic".to_owned(),
                parameters: json!({"type": "object", "properties": {"expr": {"type": "string"}}}),
            },
            ToolSpec {
                name: "now".to_owned(),
                description: "Current time".to_owned(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    /// Its text in two blocks, cut after "Let me ".
    fn tool_body(text: &str) -> String {
        let (head, tail) = text.split_at("Let me ".len());
        json!({
            "id": "msg_9",
            "type": "message",
            "role": "assistant",
            "model": "claude-test-2025",
            "content": [
                {"type": "thinking", "thinking": "Need the calculator.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "text", "text": head},
                {"type": "text", "text": tail},
                {"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {"b": 1, "a": 2}},
                {"type": "tool_use", "id": "toolu_10", "name": "now", "input": {}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 30,
                      "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000}
        })
        .to_string()
    }

    /// The stream of the response in `response_is_parsed_field_by_field`,
    /// with pings, a signature, and tool input cut across deltas.
    fn tool_stream() -> String {
        let delta = |index: u32, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
        let start = |index: u32, block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
        let stop = |index: u32| json!({"type": "content_block_stop", "index": index});
        sse::anthropic_body(&[
            json!({"type": "message_start", "message": {"id": "msg_9", "type": "message", "role": "assistant",
                   "model": "claude-test-2025", "content": [], "stop_reason": null,
                   "usage": {"input_tokens": 50, "output_tokens": 1,
                             "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000}}}),
            start(0, json!({"type": "thinking", "thinking": ""})),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "Need the "}),
            ),
            json!({"type": "ping"}),
            delta(
                0,
                json!({"type": "thinking_delta", "thinking": "calculator."}),
            ),
            delta(0, json!({"type": "signature_delta", "signature": "sig"})),
            stop(0),
            start(1, json!({"type": "redacted_thinking", "data": "xyz"})),
            stop(1),
            start(2, json!({"type": "text", "text": ""})),
            delta(2, json!({"type": "text_delta", "text": "Let "})),
            delta(2, json!({"type": "text_delta", "text": "me "})),
            stop(2),
            start(3, json!({"type": "text", "text": ""})),
            delta(3, json!({"type": "text_delta", "text": "chéck."})),
            stop(3),
            start(
                4,
                json!({"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {}}),
            ),
            delta(4, json!({"type": "input_json_delta", "partial_json": ""})),
            delta(
                4,
                json!({"type": "input_json_delta", "partial_json": "{\"b\": 1, "}),
            ),
            delta(
                4,
                json!({"type": "input_json_delta", "partial_json": "\"a\": 2}"}),
            ),
            stop(4),
            start(
                5,
                json!({"type": "tool_use", "id": "toolu_10", "name": "now", "input": {}}),
            ),
            stop(5),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"output_tokens": 30}}),
            json!({"type": "message_stop"}),
        ])
    }

    fn tool_response() -> ModelResponse {
        ModelResponse {
            content: Some("Let me chéck.".to_owned()),
            reasoning: Some("Need the calculator.".to_owned()),
            tool_calls: vec![
                call("toolu_9", "calc", r#"{"a":2,"b":1}"#),
                call("toolu_10", "now", "{}"),
            ],
            stop_reason: StopReason::ToolUse,
            finish_reason: "tool_use".to_owned(),
            usage: Usage {
                input_tokens: 1250,
                output_tokens: 30,
                cache_read_tokens: 1000,
                cache_write_tokens: 200,
                cache_write_1h_tokens: 0,
            },
            model: "claude-test-2025".to_owned(),
            request_id: Some("req_011".to_owned()),
        }
    }

    fn failures() -> Failures {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let cut_by_overload = sse::anthropic_body(&[
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let"}}),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        Failures {
            rate_limited: r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
            transient: [
                Canned::json(
                    500,
                    r#"{"type":"error","error":{"type":"api_error","message":"x"}}"#,
                ),
                Canned::json(529, overloaded),
            ],
            bad_request: (
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#,
                "messages: roles must alternate",
            ),
            exhausted: (
                vec![Canned::json(529, overloaded); 4],
                LlmError::RateLimited {
                    status: 529,
                    retry_after: None,
                },
            ),
            invalid: vec![("{\"content\": 5}", None)],
            leaking: (
                vec![
                    Canned::json(
                        401,
                        format!(
                            r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
                        ),
                    ),
                    Canned::json(403, format!("forbidden: {KEY}")),
                ],
                vec![
                    LlmError::Rejected {
                        status: 401,
                        message: String::new(),
                    },
                    LlmError::Rejected {
                        status: 403,
                        message: String::new(),
                    },
                ],
            ),
            midway: (
                vec![Canned::sse(cut_by_overload)],
                "Let<restart>Let me chéck.",
            ),
        }
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: text.to_owned(),
        media: Vec::new(),
    }
}

fn result(id: &str, content: &str, is_error: bool) -> ChatMessage {
    ChatMessage::tool_result(id, content, is_error)
}

fn count_breakpoints(body: &str) -> usize {
    body.matches(r#""cache_control":{"type":"ephemeral"}"#)
        .count()
}

#[tokio::test]
async fn request_body_is_built_field_by_field() {
    let (server, provider) =
        start::<Anthropic>(vec![Canned::json(200, Anthropic::ok_body())]).await;
    let messages = Anthropic::history();
    let tools = Anthropic::tools();
    provider
        .complete(&request::<Anthropic>(&messages, &tools))
        .await
        .expect("success");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key").as_deref(), Some(KEY));
    assert_eq!(
        sent.header("anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(
        sent.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(sent.header("authorization"), None);

    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(
        sent.json(),
        json!({
            "model": "claude-test",
            "max_tokens": 512,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": ephemeral}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "what is 2+2 and the time?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"expr": "2+2"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "invalid arguments",
                     "is_error": true, "cache_control": ephemeral}
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "4, and I could not read the clock."}]},
                {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": ephemeral}]}
            ],
            "tools": [
                {"name": "calc", "description": "Evaluates arithmetic",
                 "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}}},
                {"name": "now", "description": "Current time",
                 "input_schema": {"type": "object", "properties": {}}, "cache_control": ephemeral}
            ]
        })
    );
    let text = &sent.body;
    assert_eq!(count_breakpoints(text), 4, "{text}");
    assert!(
        text.starts_with(r#"{"model":"claude-test","max_tokens":512,"system":[{"type":"text","#)
    );
    assert!(!text.contains("session-42"));
}

#[tokio::test]
async fn tools_omitted_and_breakpoints_on_a_first_turn() {
    let (server, provider) =
        start::<Anthropic>(vec![Canned::json(200, Anthropic::ok_body())]).await;
    let messages = vec![user("hello")];
    provider
        .complete(&request::<Anthropic>(&messages, &[]))
        .await
        .expect("success");
    let sent = &server.requests()[0];
    let body = sent.json();
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}])
    );
    assert_eq!(count_breakpoints(&sent.body), 2);
}

#[tokio::test]
async fn user_items_merge_into_one_message_tool_results_first() {
    let (server, provider) =
        start::<Anthropic>(vec![Canned::json(200, Anthropic::ok_body())]).await;
    let messages = vec![
        user("run it"),
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![call("toolu_a", "calc", r#"{"expr":"1"}"#)],
        },
        // The user spoke before the result was recorded.
        user("also, hurry"),
        result("toolu_a", "1", false),
        // A blank assistant turn is skipped and its neighbours merge.
        ChatMessage::Assistant {
            content: Some(String::new()),
            tool_calls: vec![],
        },
        user("well?"),
    ];
    provider
        .complete(&request::<Anthropic>(&messages, &[]))
        .await
        .expect("success");
    let body = server.requests()[0].json();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "run it", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "calc", "input": {"expr": "1"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "1"},
                {"type": "text", "text": "also, hurry"},
                {"type": "text", "text": "well?", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

#[tokio::test]
async fn response_fallbacks() {
    let body = json!({"id": "msg_2", "content": [], "stop_reason": "max_tokens"});
    let (_server, provider) = start::<Anthropic>(vec![Canned::json(200, body.to_string())]).await;
    let response = ask::<Anthropic>(provider.as_ref()).await.expect("success");
    assert_eq!(response.content, None);
    assert_eq!(response.reasoning, None);
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.usage, Usage::default());
    assert_eq!(response.model, "claude-test");
    assert_eq!(response.request_id.as_deref(), Some("msg_2"));
}

#[test]
fn stop_reasons_map() {
    assert_eq!(stop_reason("end_turn", false), StopReason::EndTurn);
    assert_eq!(stop_reason("stop_sequence", false), StopReason::EndTurn);
    assert_eq!(stop_reason("tool_use", true), StopReason::ToolUse);
    assert_eq!(stop_reason("max_tokens", false), StopReason::MaxTokens);
    assert_eq!(stop_reason("refusal", false), StopReason::Refused);
    assert_eq!(
        stop_reason("pause_turn", false),
        StopReason::Other("pause_turn".to_owned())
    );
    assert_eq!(stop_reason("", true), StopReason::ToolUse);
    assert_eq!(stop_reason("", false), StopReason::EndTurn);
}

// Streamed calls.

#[test]
fn malformed_streams_are_clear_errors() {
    let start = json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}});
    let text = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
    let hi = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}});
    let stop = json!({"type": "message_stop"});
    let invalid = |body: String| {
        let (response, _) = decode::<Anthropic>(&body, 3);
        let error = response.expect_err("fails");
        assert!(
            matches!(error, LlmError::InvalidResponse(_)),
            "{body}: {error:?}"
        );
    };
    invalid("event: message_start\ndata: {not json\n\n".to_owned());
    invalid(sse::anthropic_body(&[
        start.clone(),
        hi.clone(),
        stop.clone(),
    ]));
    invalid(sse::anthropic_body(std::slice::from_ref(&stop)));
    invalid(sse::anthropic_body(&[
        start.clone(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "calc", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}}),
        stop.clone(),
    ]));
    invalid(sse::anthropic_body(&[
        start.clone(),
        text.clone(),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
    ]));
    // Cut short: like a dropped connection, retried.
    let (response, heard) = decode::<Anthropic>(
        &sse::anthropic_body(&[start.clone(), text.clone(), hi.clone()]),
        5,
    );
    assert_eq!(response, Err(cut_short()));
    assert_eq!(heard, "hi");
    // An error event: overloaded is retried like a 529, key scrubbed.
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("Overloaded {KEY}")}});
    let (response, _) = decode::<Anthropic>(
        &sse::anthropic_body(&[start.clone(), text.clone(), overloaded]),
        7,
    );
    assert_eq!(
        response,
        Err(LlmError::RateLimited {
            status: 529,
            retry_after: None
        })
    );
    let invalid_request = json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("bad {KEY}")}});
    let (response, _) = decode::<Anthropic>(&sse::anthropic_body(&[invalid_request]), 7);
    assert_eq!(
        response,
        Err(LlmError::Rejected {
            status: 400,
            message: "bad [redacted]".to_owned()
        })
    );
}

#[tokio::test]
async fn a_clients_settings_are_sent_the_anthropic_way() {
    let (server, provider) = start::<Anthropic>(vec![
        Canned::json(200, Anthropic::ok_body()),
        Canned::json(200, Anthropic::ok_body()),
    ])
    .await;
    let messages = vec![user("hello")];
    let options = crate::domain::CallOptions {
        response_format: Some(crate::domain::ResponseFormat::JsonSchema {
            name: "answer".to_owned(),
            description: Some("the answer".to_owned()),
            schema: json!({"type": "object", "additionalProperties": false}),
            strict: Some(true),
        }),
        temperature: Some(0.5),
        top_p: Some(0.9),
        stop: vec!["END".to_owned()],
        ..crate::domain::CallOptions::default()
    };
    let plain = request::<Anthropic>(&messages, &[]);
    provider.complete(&plain).await.expect("success");
    let with = crate::llm::ModelRequest {
        options: &options,
        ..plain
    };
    provider.complete(&with).await.expect("success");

    let requests = server.requests();
    let (plain, with) = (&requests[0].body, &requests[1].body);
    let settings = r#","temperature":0.5,"top_p":0.9,"stop_sequences":["END"],"output_config":{"format":{"type":"json_schema","schema":{"additionalProperties":false,"type":"object"}}}"#;
    assert!(!plain.contains("output_config") && !plain.contains("temperature"));
    assert_eq!(with.replacen(settings, "", 1), *plain, "{with}");
}

#[test]
fn a_tool_results_images_go_inside_its_tool_result() {
    let bytes: &[u8] = b"\x89PNG\r\n\x1a\nfake";
    let image = |shown: bool| crate::domain::MediaRef {
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
    };
    let history = |media| {
        vec![
            user("look"),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![call("t1", "snap", "{}")],
            },
            ChatMessage::Tool {
                tool_call_id: "t1".to_owned(),
                content: r#"{"success":true}"#.to_owned(),
                is_error: false,
                media,
            },
        ]
    };
    let content_of = |messages: &[ChatMessage]| {
        let body = super::request::body(
            &request::<Anthropic>(messages, &[]),
            crate::llm::settings::CacheTtl::FiveMinutes,
            false,
        )
        .expect("body");
        let body: Value = serde_json::from_slice(&body).expect("json");
        body["messages"][2]["content"][0]["content"].clone()
    };
    assert_eq!(
        content_of(&history(vec![image(true)])),
        json!([
            {"type": "text", "text": r#"{"success":true}"#},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgpmYWtl"}},
        ])
    );
    assert_eq!(
        content_of(&history(vec![image(false)])),
        json!("{\"success\":true}\n[image: 1×1, not shown: this model has no vision]")
    );
    assert_eq!(
        content_of(&history(Vec::new())),
        json!(r#"{"success":true}"#),
        "a result without files is its text, as ever"
    );
}
