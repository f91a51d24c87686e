//! Limits stop runaway work gracefully: every stop ends the turn with a clear
//! message and a recorded reason, and leaves the history valid.

use std::time::Duration;

use serde_json::Value;

use switchboard_test_support::eventually;

use crate::helpers::{
    FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text, same_calculation,
};

/// Waits until the model has been asked at least once.
async fn model_called(llm: &FakeLlm) {
    eventually("a model call", || {
        std::future::ready(!llm.requests().is_empty())
    })
    .await;
}

fn slow_echo(body: &Value) -> Reply {
    Reply::Text(format!("echo: {}", last_user_text(body)))
}

#[tokio::test]
async fn stop_cancels_a_running_turn_and_confirms() {
    let llm = FakeLlm::start_with_delay(slow_echo, Duration::from_secs(5)).await;
    let app = TestApp::spawn(&llm).await;
    // A command opens the session without a model call.
    let (session, _) = app.say(None, "/help").await;

    let long = {
        let app = &app;
        let session = session.clone();
        async move { app.say(Some(&session), "take your time").await }
    };
    let stop = async {
        model_called(&llm).await;
        let (_, status) = app.say(Some(&session), "/status").await;
        (status, app.say(Some(&session), "/stop").await)
    };
    let started = std::time::Instant::now();
    let ((_, stopped), (status, (_, confirmation))) = tokio::join!(long, stop);

    assert!(
        status.contains("Budget: a task is running; 89 model calls left"),
        "/status answers during the turn: {status}"
    );
    assert_eq!(confirmation, "Stopping the running task.");
    assert_eq!(stopped, "Stopped, as you asked.");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "did not wait for the model"
    );
    assert_eq!(app.outcome_of_last_turn().await, "cancelled");
    let (_, idle) = app.say(Some(&session), "/stop").await;
    assert_eq!(idle, "Nothing is running.");
    app.stop().await;
}

#[tokio::test]
async fn a_task_past_its_time_limit_stops_with_a_message() {
    let llm = FakeLlm::start_with_delay(slow_echo, Duration::from_secs(5)).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.limits.task_timeout = std::time::Duration::from_secs(1)
    })
    .await;

    let (_, reply) = app.say(None, "slow please").await;

    assert_eq!(
        reply,
        "Stopped: this task ran longer than its 1-second limit."
    );
    assert_eq!(app.outcome_of_last_turn().await, "time_limit");
    app.stop().await;
}

#[tokio::test]
async fn a_task_over_its_token_limit_stops_and_the_history_stays_valid() {
    let llm = FakeLlm::start(|body| {
        let n = body["messages"].as_array().map_or(0, Vec::len);
        Reply::Tools(vec![(
            format!("c{n}"),
            "calculator".to_owned(),
            format!("{{\"expression\":\"{n}+1\"}}"),
        )])
    })
    .await;
    // Each fake call reports 127 tokens.
    let app = TestApp::spawn_with(&llm, |s| s.limits.task_max_tokens = 300).await;

    let (session, reply) = app.say(None, "count forever").await;

    assert!(
        reply.starts_with("Stopped: the task used more than its 300 tokens"),
        "{reply}"
    );
    assert_eq!(llm.requests().len(), 3);
    assert_eq!(app.outcome_of_last_turn().await, "token_limit");
    // Every stored tool call has its result.
    let history = app.wire_history(&session).await;
    let calls: usize = history
        .iter()
        .map(|e| match &e.message {
            switchboard::domain::ChatMessage::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum();
    let results = history
        .iter()
        .filter(|e| matches!(e.message, switchboard::domain::ChatMessage::Tool { .. }))
        .count();
    assert_eq!(calls, results);
    app.stop().await;
}

#[tokio::test]
async fn the_same_call_with_the_same_result_again_and_again_stops_the_loop() {
    let llm = FakeLlm::start(same_calculation).await;
    let app = TestApp::spawn(&llm).await;

    let (_, reply) = app.say(None, "are we there yet").await;

    assert!(
        reply.contains("no progress: `calculator` returned the same result 3 times"),
        "{reply}"
    );
    assert_eq!(llm.requests().len(), 3);
    assert_eq!(app.outcome_of_last_turn().await, "no_progress");
    app.stop().await;
}

#[tokio::test]
async fn a_failing_model_falls_back_to_the_fallback_model() {
    let llm = FakeLlm::start(|body| {
        if body["model"] == "backup-model" {
            Reply::Text("from the backup".to_owned())
        } else {
            Reply::Status(503, "overloaded".to_owned())
        }
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.max_retries = 1;
        s.limits.fallback_model = Some("backup-model".to_owned());
    })
    .await;

    let (_, reply) = app.say(None, "hello").await;

    assert_eq!(reply, "from the backup");
    let models: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models, ["fake-model", "fake-model", "backup-model"]);
    app.stop().await;
}

#[tokio::test]
async fn in_interrupt_mode_a_new_message_stops_the_running_turn() {
    let llm = FakeLlm::start_with_delay(
        |body| {
            if last_is_tool_result(body) {
                Reply::Text("unused".to_owned())
            } else {
                Reply::Text(format!("echo: {}", last_user_text(body)))
            }
        },
        Duration::from_millis(800),
    )
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.sessions.busy = switchboard::session::settings::BusyMode::Interrupt;
    })
    .await;
    let (session, _) = app.say(None, "/help").await;

    let first = {
        let app = &app;
        let session = session.clone();
        async move { app.say(Some(&session), "first").await }
    };
    let second = async {
        model_called(&llm).await;
        app.say(Some(&session), "second").await
    };
    let ((_, first), (_, second)) = tokio::join!(first, second);

    assert_eq!(first, "Stopped to handle your newer message.");
    assert_eq!(second, "echo: second");
    app.stop().await;
}
