//! Two transcripts: the stored one keeps every internal field; the wire one
//! strips them and prepends the stored system prompt, for both providers.

use serde_json::Value;
use switchboard::domain::Role;
use switchboard::llm::ProviderKind;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result};

fn tool_then_answer(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        Reply::Text("the answer is 42".to_owned())
    } else {
        Reply::Tools(vec![(
            "toolu_1".to_owned(),
            "calculator".to_owned(),
            r#"{"expression":"6*7"}"#.to_owned(),
        )])
    }
}

#[tokio::test]
async fn openai_stored_entries_keep_internal_fields_and_the_wire_strips_them() {
    let llm = FakeLlm::start(tool_then_answer).await;
    let app = TestApp::spawn(&llm).await;

    let (session, reply) = app.say(None, "what is 6*7").await;

    assert_eq!(reply, "the answer is 42");
    let stored = app.stored_history(&session).await;
    let roles: Vec<Role> = stored.iter().map(|m| m.message.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    let call = &stored[1].message;
    assert_eq!(call.meta.reasoning.as_deref(), Some("thinking about tools"));
    assert_eq!(call.meta.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(call.meta.model.as_deref(), Some("fake-model"));
    assert_eq!(call.meta.request_id.as_deref(), Some("req-1"));
    let usage = call.meta.usage.expect("usage stored");
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens
        ),
        (120, 7, 100)
    );
    assert!(call.meta.latency_ms.is_some());
    let answer = &stored[3].message;
    assert_eq!(answer.meta.finish_reason.as_deref(), Some("stop"));
    assert_eq!(answer.meta.request_id.as_deref(), Some("req-2"));
    assert_eq!(stored[2].message.tool_call_id.as_deref(), Some("toolu_1"));

    let session_row = app.session_row(&session).await;
    let wire = llm.requests()[1].json();
    let messages = wire["messages"].as_array().expect("messages");
    assert_eq!(
        messages[0],
        serde_json::json!({"role": "system", "content": session_row.system_prompt})
    );
    assert!(
        stored
            .iter()
            .all(|m| m.message.content.as_deref() != Some(&session_row.system_prompt))
    );
    let allowed = ["role", "content", "tool_calls", "tool_call_id"];
    for message in messages {
        for key in message.as_object().expect("object").keys() {
            assert!(
                allowed.contains(&key.as_str()),
                "internal field `{key}` on the wire"
            );
        }
    }
    assert!(!llm.requests()[1].body.contains("thinking about tools"));
    assert_eq!(
        app.gateway
            .store
            .usage()
            .task_usage(stored[0].message.task_id.expect("task"))
            .await
            .expect("usage")
            .calls,
        2
    );
    app.stop().await;
}

#[tokio::test]
async fn anthropic_requests_carry_cache_breakpoints_and_tool_results_in_user_messages() {
    let llm = FakeLlm::start(tool_then_answer).await;
    let base = llm.anthropic_base();
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.provider = ProviderKind::Anthropic;
        s.llm.base_url = switchboard::domain::BaseUrl::parse(&base).expect("a test URL");
    })
    .await;

    let (session, reply) = app.say(None, "what is 6*7").await;

    assert_eq!(reply, "the answer is 42");
    let requests = llm.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/messages"));
    let second = requests[1].json();
    let session_row = app.session_row(&session).await;
    assert_eq!(
        second["system"][0]["text"],
        session_row.system_prompt.as_str()
    );
    assert_eq!(second["system"][0]["cache_control"]["type"], "ephemeral");
    let tools = second["tools"].as_array().expect("tools");
    assert_eq!(
        tools.last().expect("tool")["cache_control"]["type"],
        "ephemeral"
    );
    let messages = second["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    assert_eq!(messages[1]["content"][0]["id"], "toolu_1");
    assert_eq!(messages[1]["content"][0]["input"]["expression"], "6*7");
    assert_eq!(messages[2]["role"], "user");
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(
        !requests[1].body.contains("pondering"),
        "reasoning never goes back"
    );
    assert!(messages.iter().all(|m| m["role"] != "system"));

    let stored = app.stored_history(&session).await;
    let answer = &stored.last().expect("answer").message;
    assert_eq!(answer.meta.reasoning.as_deref(), Some("pondering"));
    assert_eq!(answer.meta.finish_reason.as_deref(), Some("end_turn"));
    let usage = answer.meta.usage.expect("usage");
    assert_eq!(usage.cache_read_tokens, 100);
    assert_eq!(usage.cache_write_tokens, 5);
    assert_eq!(usage.input_tokens, 125, "all input, cached included");
    app.stop().await;
}
