//! The agent loop: tools run by id, every failure contained, model errors
//! reported, retries honoured.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use sqlx::Row;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result};

fn tool_results(body: &Value) -> Vec<(String, Value)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                serde_json::from_str(m["content"].as_str().unwrap_or("null")).expect("result json"),
            )
        })
        .collect()
}

#[tokio::test]
async fn tool_calls_of_one_round_are_answered_in_call_order_matched_by_id() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Text("done".to_owned())
        } else {
            Reply::Tools(vec![
                (
                    "call_b".to_owned(),
                    "calculator".to_owned(),
                    r#"{"expression":"6*7"}"#.to_owned(),
                ),
                (
                    "call_a".to_owned(),
                    "current_time".to_owned(),
                    "{}".to_owned(),
                ),
            ])
        }
    })
    .await;
    let app = TestApp::spawn(&llm).await;

    let (_, reply) = app.say(None, "compute").await;

    assert_eq!(reply, "done");
    let second = llm.requests()[1].json();
    let results = tool_results(&second);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].0, "call_b");
    assert_eq!(results[0].1["success"], true);
    assert_eq!(results[0].1["result"], 42);
    assert_eq!(results[1].0, "call_a");
    assert_eq!(results[1].1["success"], true);
    assert!(results[1].1["unix"].is_i64());
    let assistant = &second["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_b");
    // Each call's checkpoint is named by the round's assistant entry and
    // index, and ends `done`.
    let mut conn = app.gateway.store.conn().await.expect("conn");
    let assistant_id: i64 = sqlx::query_scalar(
        "SELECT id FROM messages WHERE role = 'assistant' AND tool_calls IS NOT NULL",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("assistant entry");
    let checkpoints: Vec<(String, String, String)> =
        sqlx::query_as("SELECT call_id, request_id, status FROM tool_calls ORDER BY request_id")
            .fetch_all(&mut *conn)
            .await
            .expect("checkpoints");
    drop(conn);
    assert_eq!(
        checkpoints,
        vec![
            (
                "call_b".to_owned(),
                format!("{assistant_id}-0"),
                "done".to_owned()
            ),
            (
                "call_a".to_owned(),
                format!("{assistant_id}-1"),
                "done".to_owned()
            ),
        ]
    );
    app.stop().await;
}

#[tokio::test]
async fn unknown_tools_and_broken_arguments_become_error_results() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Text("recovered".to_owned())
        } else {
            Reply::Tools(vec![
                ("c1".to_owned(), "rm_rf".to_owned(), "{}".to_owned()),
                (
                    "c2".to_owned(),
                    "calculator".to_owned(),
                    "{not json".to_owned(),
                ),
                ("c3".to_owned(), "calculator".to_owned(), "[1,2]".to_owned()),
                (
                    "c4".to_owned(),
                    "calculator".to_owned(),
                    r#"{"expression":"1/0"}"#.to_owned(),
                ),
            ])
        }
    })
    .await;
    let app = TestApp::spawn(&llm).await;

    let (_, reply) = app.say(None, "break things").await;

    assert_eq!(reply, "recovered");
    let results = tool_results(&llm.requests()[1].json());
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
    for (id, result) in &results {
        assert_eq!(result["success"], false, "{id}: {result}");
        assert!(
            result["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{id}"
        );
    }
    assert!(
        results[0].1["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown tool"))
    );
    assert!(
        results[1].1["error"]
            .as_str()
            .is_some_and(|e| e.contains("not valid JSON"))
    );
    app.stop().await;
}

#[tokio::test]
async fn tool_arguments_are_stored_and_resent_canonically() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Text("ok".to_owned())
        } else {
            Reply::Tools(vec![(
                "c1".to_owned(),
                "current_time".to_owned(),
                r#"{ "timezone" : "UTC" }"#.to_owned(),
            )])
        }
    })
    .await;
    let app = TestApp::spawn(&llm).await;

    app.say(None, "time?").await;

    let second = llm.requests()[1].json();
    assert_eq!(
        second["messages"][2]["tool_calls"][0]["function"]["arguments"],
        r#"{"timezone":"UTC"}"#
    );
    app.stop().await;
}

#[tokio::test]
async fn a_failing_model_ends_the_turn_with_a_clear_message() {
    let llm =
        FakeLlm::start(|_| Reply::Status(500, "{\"error\":{\"message\":\"boom\"}}".to_owned()))
            .await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 2).await;

    let (status, _, body) = app.chat(None, "anyone there?").await;

    assert_eq!(status, reqwest::StatusCode::BAD_GATEWAY, "{body}");
    let text = body["error"]["message"].as_str().expect("text");
    assert_eq!(
        text,
        switchboard::session::texts::model_failure(switchboard::llm::ModelFailure::ProviderFailed)
    );
    assert_eq!(body["error"]["code"], "model_failed");
    assert_eq!(llm.requests().len(), 3, "one call and two retries");
    app.stop().await;
}

#[tokio::test]
async fn a_rejected_request_is_not_retried() {
    let llm =
        FakeLlm::start(|_| Reply::Status(400, "{\"error\":{\"message\":\"bad\"}}".to_owned()))
            .await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 3).await;

    app.chat(None, "hello").await;

    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn a_rate_limit_is_retried_then_answered_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let llm = FakeLlm::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::Status(429, "{\"error\":{\"message\":\"slow down\"}}".to_owned())
        } else {
            Reply::Text("finally".to_owned())
        }
    })
    .await;
    let app = TestApp::spawn(&llm).await;

    let (_, reply) = app.say(None, "hi").await;

    assert_eq!(reply, "finally");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(app.count("outbox").await, 1);
    app.stop().await;
}

#[tokio::test]
async fn the_api_key_never_reaches_the_database_or_replies() {
    // SAFETY (test): the variable name is unique to this test.
    unsafe { std::env::set_var("SB_TEST_SECRET_KEY", "sk-very-secret-value") };
    let llm = FakeLlm::start(|_| {
        Reply::Status(
            401,
            "{\"error\":{\"message\":\"Incorrect API key sk-very-secret-value\"}}".to_owned(),
        )
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.api_key_env = "SB_TEST_SECRET_KEY".to_owned()
    })
    .await;

    let (_, _, body) = app.chat(None, "hi").await;

    assert!(!body.to_string().contains("sk-very-secret-value"));
    let auth = llm.requests()[0].headers["authorization"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(auth, "Bearer sk-very-secret-value");
    let mut scanned = 0;
    for table in [
        "sessions",
        "messages",
        "inbound",
        "outbox",
        "usage",
        "tool_calls",
        "routes",
    ] {
        let rows = sqlx::query(&format!("SELECT * FROM {table}"))
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
        for row in rows {
            for index in 0..row.len() {
                if let Ok(Some(text)) = row.try_get::<Option<String>, _>(index) {
                    scanned += 1;
                    assert!(!text.contains("sk-very-secret"), "{table} holds the key");
                }
            }
        }
    }
    assert!(scanned > 10, "the scan read the stored text");
    app.stop().await;
}
