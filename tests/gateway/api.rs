//! The OpenAI-compatible API: sessions by header, streaming, auth, bad input.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{FakeLlm, TestApp, last_user_text};

#[tokio::test]
async fn a_new_conversation_returns_its_session_id_and_the_reply() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (status, session, body) = app.chat(None, "hello there").await;

    assert_eq!(status, StatusCode::OK);
    assert!(session.is_some_and(|s| !s.is_empty()));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "echo: hello there"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["model"], "fake-model");
    assert_eq!(body["usage"]["prompt_tokens"], 120);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 100);
    app.stop().await;
}

#[tokio::test]
async fn the_server_keeps_the_history_so_clients_send_only_the_new_message() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (session, _) = app.say(None, "first").await;
    let (same, reply) = app.say(Some(&session), "second").await;

    assert_eq!(same, session);
    assert_eq!(reply, "echo: second");
    let second = llm.requests()[1].json();
    let messages = second["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(messages[1]["content"], "first");
    assert_eq!(messages[2]["content"], "echo: first");
    assert_eq!(
        second["prompt_cache_key"],
        llm.requests()[0].json()["prompt_cache_key"]
    );
    app.stop().await;
}

#[tokio::test]
async fn conversations_without_the_header_are_separate() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (a, _) = app.say(None, "one").await;
    let (b, _) = app.say(None, "two").await;

    assert_ne!(a, b);
    let second = llm.requests()[1].json();
    assert_eq!(second["messages"].as_array().map(Vec::len), Some(2));
    app.stop().await;
}

#[tokio::test]
async fn streaming_sends_chunks_then_done() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"model": "fake-model", "stream": true,
                      "messages": [{"role": "user", "content": "stream me"}]}))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("x-session-id"));
    assert!(
        response.headers()["content-type"]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/event-stream"))
    );
    let text = response.text().await.expect("body");
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk json"))
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "echo: stream me");
    assert_eq!(
        chunks.last().expect("chunk")["choices"][0]["finish_reason"],
        "stop"
    );
    app.stop().await;
}

#[tokio::test]
async fn content_parts_are_read_as_text() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"model": "fake-model", "messages": [
            {"role": "system", "content": "the client's instructions"},
            {"role": "user", "content": [{"type": "text", "text": "parts work"}]}
        ]}))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(last_user_text(&llm.requests()[0].json()), "parts work");
    app.stop().await;
}

#[tokio::test]
async fn bearer_keys_are_required_when_configured() {
    // SAFETY (test): the variable name is unique to this test.
    unsafe { std::env::set_var("SB_TEST_KEYS_AUTH", "key-one, key-two") };
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.api.keys_env = "SB_TEST_KEYS_AUTH".to_owned()).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});

    let missing = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("sent");
    let wrong = app
        .http
        .post(app.url("/v1/chat/completions"))
        .bearer_auth("key-three")
        .json(&body)
        .send()
        .await
        .expect("sent");
    let right = app
        .http
        .post(app.url("/v1/chat/completions"))
        .bearer_auth("key-two")
        .json(&body)
        .send()
        .await
        .expect("sent");
    let health = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");

    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let wrong_body: Value = wrong.json().await.expect("json");
    assert_eq!(wrong_body["error"]["type"], "authentication_error");
    assert_eq!(right.status(), StatusCode::OK);
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(
        llm.requests().len(),
        1,
        "rejected requests never reach the model"
    );
    app.stop().await;
}

#[tokio::test]
async fn models_are_listed() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.extra_models = vec!["other".to_owned()]).await;

    let body: Value = app
        .http
        .get(app.url("/v1/models"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");

    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["fake-model", "other"]);
    app.stop().await;
}

#[tokio::test]
async fn malformed_json_is_a_clear_400_and_stores_nothing() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_request_without_a_user_message_is_rejected() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "system", "content": "x"}]}))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.count("sessions").await, 0);
    app.stop().await;
}

#[tokio::test]
async fn an_oversized_body_is_rejected_with_413() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.api.max_body_bytes = 1024).await;

    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x".repeat(4096)}]}))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(app.count("inbound").await, 0);
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_session_id_names_a_new_session_of_the_callers() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (status, session, body) = app.chat(Some("my-chat.2024_01:a"), "hi").await;
    let (_, again, _) = app.chat(Some("my-chat.2024_01:a"), "again").await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(session.as_deref(), Some("my-chat.2024_01:a"));
    assert_eq!(again.as_deref(), Some("my-chat.2024_01:a"));
    let texts: Vec<String> = app
        .wire_history("my-chat.2024_01:a")
        .await
        .into_iter()
        .filter_map(|entry| match entry.message {
            switchboard::domain::ChatMessage::User { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        ["hi", "again"],
        "one conversation under the chosen id"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_session_header_that_cannot_name_a_session_is_refused_and_stores_nothing() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (status, _, body) = app.chat(Some("no such/session"), "hi").await;
    let long = "a".repeat(129);
    let (too_long, _, _) = app.chat(Some(&long), "hi").await;

    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no session with id no such/session")),
        "{body}"
    );
    assert_eq!(too_long, StatusCode::BAD_REQUEST);
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_reused_idempotency_key_starts_no_second_turn_and_gets_the_stored_reply() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "first").await;
    let send = || {
        app.http
            .post(app.url("/v1/chat/completions"))
            .header("X-Session-Id", &session)
            .header("Idempotency-Key", "evt-1")
            .json(&json!({"messages": [{"role": "user", "content": "again"}]}))
            .send()
    };

    let first = send().await.expect("sent");
    let second = send().await.expect("sent");

    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let first: Value = first.json().await.expect("json");
    let second: Value = second.json().await.expect("json");
    assert_eq!(second["id"], first["id"], "the same turn's answer");
    assert_eq!(second["choices"], first["choices"]);
    assert_eq!(first["choices"][0]["message"]["content"], "echo: again");
    assert_eq!(second["usage"], first["usage"]);
    assert_eq!(
        llm.requests().len(),
        2,
        "one model call per distinct message"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_idempotency_key_of_another_conversation_is_a_conflict() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (first, _) = app.say(None, "first").await;
    let (second, _) = app.say(None, "second").await;
    let send = |session: &str| {
        app.http
            .post(app.url("/v1/chat/completions"))
            .header("X-Session-Id", session)
            .header("Idempotency-Key", "evt-shared")
            .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
            .send()
    };

    let taken = send(&first).await.expect("sent");
    let reused = send(&second).await.expect("sent");

    assert_eq!(taken.status(), StatusCode::OK);
    assert_eq!(reused.status(), StatusCode::CONFLICT);
    app.stop().await;
}

/// Texts of every recorded API message, oldest first.
async fn recorded_texts(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT text FROM inbound WHERE platform = 'api' ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("texts")
}

#[tokio::test]
async fn the_same_idempotency_key_with_another_body_is_422_and_stores_nothing() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let send = |text: &str| {
        app.http
            .post(app.url("/v1/chat/completions"))
            .header("Idempotency-Key", "order-7")
            .json(&json!({"messages": [{"role": "user", "content": text}]}))
            .send()
    };

    let first = send("buy one").await.expect("sent");
    assert_eq!(first.status(), StatusCode::OK);
    let first: Value = first.json().await.expect("json");
    let changed = send("buy two").await.expect("sent");
    let status = changed.status();
    let changed: Value = changed.json().await.expect("json");
    let retried = send("buy one").await.expect("sent");

    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{changed}");
    assert_eq!(changed["error"]["type"], "invalid_request_error");
    assert_eq!(changed["error"]["code"], "idempotency_key_reused");
    assert!(
        changed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Idempotency-Key") && m.contains("different request")),
        "{changed}"
    );
    assert_eq!(
        recorded_texts(&app).await,
        ["buy one"],
        "the refused request stored nothing"
    );
    assert_eq!(llm.requests().len(), 1, "and started no turn");
    assert_eq!(
        retried.status(),
        StatusCode::OK,
        "the first body still retries"
    );
    let retried: Value = retried.json().await.expect("json");
    assert_eq!(retried["id"], first["id"]);
    assert_eq!(retried["choices"][0]["message"]["content"], "echo: buy one");
    app.stop().await;
}

#[tokio::test]
async fn another_callers_idempotency_key_is_409_naming_nothing_of_theirs() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let send = |user: &str| {
        app.http
            .post(app.url("/v1/chat/completions"))
            .header("Idempotency-Key", "shared-key")
            .json(&json!({"user": user, "messages": [{"role": "user", "content": "hello"}]}))
            .send()
    };

    let alice = send("alice").await.expect("sent");
    assert_eq!(alice.status(), StatusCode::OK);
    let alice_session = alice.headers()["x-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let bob = send("bob").await.expect("sent");
    let status = bob.status();
    let bob_header = bob.headers().get("x-session-id").cloned();
    let bob_body = bob.text().await.expect("body");

    assert_eq!(status, StatusCode::CONFLICT, "{bob_body}");
    assert!(
        !bob_body.contains(&alice_session),
        "nothing of alice's is named: {bob_body}"
    );
    assert!(bob_header.is_none(), "no session header either");
    let body: Value = serde_json::from_str(&bob_body).expect("json");
    assert_eq!(body["error"]["code"], "idempotency_key_in_use");
    assert_eq!(
        recorded_texts(&app).await,
        ["hello"],
        "bob's request stored nothing"
    );
    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn commands_are_answered_without_the_model() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "hello").await;

    let (_, help) = app.say(Some(&session), "/help").await;
    let (_, unknown) = app.say(Some(&session), "/frobnicate").await;
    let (_, status) = app.say(Some(&session), "/status").await;

    assert!(help.contains("/new"));
    assert!(unknown.starts_with("Unknown command /frobnicate"));
    assert!(status.contains(&session));
    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn new_starts_a_fresh_session_for_the_chat() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "remember me").await;

    let (fresh, reply) = app.say(Some(&session), "/new").await;

    assert_ne!(fresh, session);
    assert!(reply.contains(&fresh));
    let (_, _) = app.say(Some(&fresh), "who am i").await;
    let last = llm.requests().last().expect("request").json();
    assert_eq!(
        last["messages"].as_array().map(Vec::len),
        Some(2),
        "fresh history"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_health_check_answers() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let response = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.json::<Value>().await.expect("json")["status"],
        "ok"
    );
    app.stop().await;
}
