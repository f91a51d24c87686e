//! A turn that ends without an answer is an HTTP error to an API client
//! (status by cause, OpenAI's error body naming the session and the turn,
//! `Retry-After` for a busy model), never a completion with an apology;
//! and a client's automatic retry of an identical request, with no
//! `Idempotency-Key`, joins the first request's turn (or gets the reply it
//! missed) instead of starting another, while the same words sent again
//! after their reply, or after a failure, are a new turn.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api_sessions::{GatedLlm, gated_app, post_chat};
use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text};
use switchboard_test_support::eventually;

/// Echoes, except that a message starting with `fail` gets a 500 and one
/// starting with `busy` a 429.
async fn failing_on_request() -> FakeLlm {
    FakeLlm::start(|body| {
        let text = last_user_text(body);
        if text.starts_with("fail") {
            Reply::Status(500, r#"{"error":{"message":"boom"}}"#.to_owned())
        } else if text.starts_with("busy") {
            Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.to_owned())
        } else {
            Reply::Text(format!("echo: {text}"))
        }
    })
    .await
}

fn user_message(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn a_failed_model_call_is_a_502_naming_the_session_and_the_session_stays_usable() {
    let llm = failing_on_request().await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 1).await;

    let failed = post_chat(&app, None, None, user_message("fail please")).await;

    assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.body);
    let session = failed.session.expect("X-Session-Id on the error");
    let error = &failed.body["error"];
    assert_eq!(error["type"], "server_error");
    assert_eq!(error["code"], "model_failed");
    assert_eq!(error["session_id"], session.as_str());
    assert!(error["turn"].is_i64(), "{error}");
    assert!(failed.body.get("choices").is_none(), "no completion");
    // No apology became the assistant's reply in the conversation.
    assert!(
        app.stored_history(&session)
            .await
            .iter()
            .all(|row| row.message.content.as_deref() != error["message"].as_str()),
        "the apology is not stored as a reply"
    );
    // The session goes on.
    let (again, reply) = app.say(Some(&session), "hello").await;
    assert_eq!(again, session);
    assert_eq!(reply, "echo: hello");
    app.stop().await;
}

#[tokio::test]
async fn a_busy_model_is_a_503_with_retry_after() {
    let llm = failing_on_request().await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 0).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&user_message("busy now?"))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response.headers()["retry-after"].to_str().expect("text"),
        "5"
    );
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "model_busy");
    app.stop().await;
}

#[tokio::test]
async fn an_identical_request_after_its_answer_was_handed_out_is_a_new_message() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "hello").await;

    let first = post_chat(&app, None, Some(&session), user_message("yes")).await;
    let second = post_chat(&app, None, Some(&session), user_message("yes")).await;

    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_ne!(first.body["id"], second.body["id"], "two turns");
    assert_eq!(llm.requests().len(), 3, "the second yes reached the model");
    app.stop().await;
}

#[tokio::test]
async fn an_identical_request_after_a_failure_runs_a_new_turn() {
    let llm = failing_on_request().await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 0).await;

    let first = post_chat(&app, None, None, user_message("fail once")).await;
    let second = post_chat(&app, None, None, user_message("fail once")).await;

    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(second.status, StatusCode::BAD_GATEWAY);
    assert_ne!(
        first.body["error"]["turn"], second.body["error"]["turn"],
        "a retry after a failure tries again"
    );
    assert_eq!(llm.requests().len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_reply_timeout_joins_the_running_turn() {
    let mut llm = GatedLlm::start().await;
    let app = gated_app(&llm).await;
    let body = user_message("take your time");

    let first = post_chat(&app, None, None, body.clone()).await;
    assert_eq!(first.status, StatusCode::GATEWAY_TIMEOUT);
    llm.asked().await;
    let second = post_chat(&app, None, None, body.clone()).await;
    assert_eq!(second.status, StatusCode::GATEWAY_TIMEOUT, "still running");
    llm.release();
    let reply_url = first.body["error"]["reply_url"]
        .as_str()
        .expect("reply_url")
        .to_owned();
    eventually("the turn to finish", || async {
        let turn: Value = app
            .http
            .get(app.url(&reply_url))
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("JSON");
        turn["status"] == "done"
    })
    .await;
    let last = post_chat(&app, None, None, body).await;

    assert_eq!(last.status, StatusCode::OK, "{}", last.body);
    assert_eq!(
        last.body["choices"][0]["message"]["content"],
        "echo: take your time"
    );
    assert_eq!(first.session, second.session);
    assert_eq!(first.session, last.session);
    assert_eq!(app.count("inbound").await, 1, "one turn for three requests");
    app.stop().await;
}
