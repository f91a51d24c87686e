//! The per-session runner: one turn at a time per session, never a message
//! lost or interleaved; different sessions in parallel.

use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;

use switchboard_test_support::eventually;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text};

/// Roles after the system prompt must alternate user/assistant: two user
/// messages in a row would mean a message was interleaved into a turn.
fn assert_alternating(body: &Value) {
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .skip(1)
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    for (index, role) in roles.iter().enumerate() {
        let expected = if index % 2 == 0 { "user" } else { "assistant" };
        assert_eq!(*role, expected, "roles {roles:?}");
    }
}

#[tokio::test]
async fn twenty_messages_at_once_to_one_session_are_all_answered_one_turn_at_a_time() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        Duration::from_millis(15),
    )
    .await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "start").await;

    let sends = (0..20).map(|i| {
        let app = &app;
        let session = session.clone();
        async move { (i, app.say(Some(&session), &format!("message {i}")).await) }
    });
    let results = join_all(sends).await;

    for (i, (same, reply)) in &results {
        assert_eq!(same, &session);
        assert_eq!(
            reply,
            &format!("echo: message {i}"),
            "each reply answers its own message"
        );
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), 21);
    for request in &requests {
        assert_alternating(&request.json());
    }
    assert_eq!(llm.peak_concurrency_per_session(), 1, "one turn at a time");
    let last = requests.last().expect("request").json();
    assert_eq!(last["messages"].as_array().map(Vec::len), Some(1 + 41));
    assert_eq!(app.count("outbox").await, 21);
    app.stop().await;
}

#[tokio::test]
async fn fifty_sessions_at_once_run_concurrently_and_all_get_their_answer() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        Duration::from_millis(50),
    )
    .await;
    let app = TestApp::spawn(&llm).await;

    let sends = (0..50).map(|i| {
        let app = &app;
        async move { (i, app.say(None, &format!("hello from {i}")).await) }
    });
    let results = join_all(sends).await;

    let mut sessions: Vec<&String> = results.iter().map(|(_, (s, _))| s).collect();
    sessions.sort();
    sessions.dedup();
    assert_eq!(sessions.len(), 50);
    for (i, (_, reply)) in &results {
        assert_eq!(reply, &format!("echo: hello from {i}"));
    }
    assert!(llm.peak_concurrency() > 1, "sessions ran one after another");
    assert_eq!(llm.peak_concurrency_per_session(), 1);
    app.stop().await;
}

#[tokio::test]
async fn the_global_turn_limit_caps_concurrent_model_calls() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        Duration::from_millis(20),
    )
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.runner.max_concurrent_turns = std::num::NonZero::new(3).unwrap()
    })
    .await;

    let sends = (0..12).map(|i| {
        let app = &app;
        async move { app.say(None, &format!("m{i}")).await }
    });
    join_all(sends).await;

    assert!(llm.peak_concurrency() <= 3);
    assert_eq!(llm.requests().len(), 12);
    app.stop().await;
}

#[tokio::test]
async fn a_session_leased_by_another_process_waits_for_the_lease() {
    let llm = FakeLlm::start(|body| Reply::Text(format!("echo: {}", last_user_text(body)))).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.runner.lease_ttl = std::time::Duration::from_secs(1)
    })
    .await;
    let (session, _) = app.say(None, "start").await;
    // Another gateway process takes the session for the next 1.5 s (our
    // runner may not have given its lease up yet: the reply goes out first).
    // Its grant carries the next fencing token, as a real grant does, so
    // our runner's late release (of its own token) cannot end it.
    let expires = switchboard::domain::now_ms() + 1500;
    sqlx::query(
        "INSERT INTO session_leases (session_id, owner, expires_at) VALUES ($1, $2, $3) \
         ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, \
         expires_at = excluded.expires_at, token = session_leases.token + 1",
    )
    .bind(&session)
    .bind("another-process")
    .bind(expires)
    .execute(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("lease taken");

    let (_, reply) = app.say(Some(&session), "second").await;

    assert_eq!(reply, "echo: second");
    assert!(
        switchboard::domain::now_ms() >= expires,
        "no turn ran while the other process held the lease"
    );
    assert_eq!(llm.requests().len(), 2);
    eventually("the lease released once the queue is empty", || async {
        let live: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM session_leases WHERE session_id = $1 AND expires_at > 0",
        )
        .bind(&session)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
        live == 0
    })
    .await;
    app.stop().await;
}
