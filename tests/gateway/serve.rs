//! `switchboard serve` configured by environment variables only: an LLM base
//! URL and a key are enough to answer on the API; SIGTERM stops it cleanly:
//! at once when idle, after the turns in flight (bounded by the grace)
//! otherwise.

use std::time::{Duration, Instant};

use crate::helpers::{FakeLlm, ServeProcess};

#[tokio::test]
async fn serve_with_only_a_base_url_and_key_answers_on_the_api() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let base_url = llm.openai_base();
    let server = ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("OPENAI_API_KEY", "sk-serve-test-secret"),
            ("RUST_LOG", "debug"),
        ],
        true,
    )
    .await;

    assert_eq!(server.say("ping").await, "echo: ping");
    assert_eq!(
        llm.requests()[0].headers["authorization"],
        "Bearer sk-serve-test-secret"
    );
    assert!(
        dir.path().join("data/switchboard.db").exists(),
        "SQLite file created"
    );

    let logs = server.stop().await;
    assert!(logs.contains("listening"));
    assert!(
        !logs.contains("sk-serve-test-secret"),
        "the key never reaches the logs"
    );
    assert!(
        !logs.contains("ping"),
        "message bodies stay out of the logs"
    );
}

/// Starts `switchboard serve` against `llm` with `server.shutdown_grace_secs`
/// set to `grace_secs`.
async fn serve_with_grace(dir: &std::path::Path, llm: &FakeLlm, grace_secs: &str) -> ServeProcess {
    let base_url = llm.openai_base();
    ServeProcess::start(
        dir,
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__SERVER__SHUTDOWN_GRACE_SECS", grace_secs),
            ("OPENAI_API_KEY", "sk-serve-test-secret"),
            ("RUST_LOG", "info"),
        ],
        true,
    )
    .await
}

/// Sends `text` to the API in the background; yields the HTTP status.
fn send_in_background(server: &ServeProcess, text: &str) -> tokio::task::JoinHandle<Option<u16>> {
    let url = format!("{}/v1/chat/completions", server.base_url());
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}]});
    tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    })
}

/// Waits until the fake model has received `count` requests.
async fn model_called(llm: &FakeLlm, count: usize) {
    switchboard_test_support::eventually("the model to be called", || {
        std::future::ready(llm.requests().len() >= count)
    })
    .await;
}

#[tokio::test]
async fn sigterm_on_an_idle_instance_exits_at_once_not_after_the_grace() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = serve_with_grace(dir.path(), &llm, "10").await;
    // A turn answered first: idle is "nothing in flight", not "never used".
    assert_eq!(server.say("ping").await, "echo: ping");

    let asked = Instant::now();
    server.terminate();
    let (status, logs) = server.exited(Duration::from_secs(20)).await;
    let took = asked.elapsed();
    assert!(status.success(), "clean exit: {status}\n{logs}");
    assert!(logs.contains("stopped"), "{logs}");
    // The aim is ~100 ms; the bound leaves room for a loaded test machine
    // while staying far below the 10 s grace the instance used to sit out.
    assert!(
        took < Duration::from_millis(1500),
        "an idle instance stops at once, took {took:?}"
    );
}

#[tokio::test]
async fn sigterm_with_a_turn_in_flight_answers_it_then_exits() {
    let llm = FakeLlm::builder(|body| {
        switchboard_test_support::model::Reply::Text(format!(
            "echo: {}",
            switchboard_test_support::model::last_user_text(body)
        ))
    })
    .delay(Duration::from_millis(1500))
    .start()
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = serve_with_grace(dir.path(), &llm, "10").await;
    let request = send_in_background(&server, "slow");
    model_called(&llm, 1).await;

    let asked = Instant::now();
    server.terminate();
    let (status, logs) = server.exited(Duration::from_secs(20)).await;
    let took = asked.elapsed();
    assert!(status.success(), "clean exit: {status}\n{logs}");
    assert_eq!(
        request.await.expect("joined"),
        Some(200),
        "the turn in flight is answered while draining"
    );
    assert!(
        took >= Duration::from_millis(500),
        "it waited for the turn, took {took:?}"
    );
    assert!(
        took < Duration::from_secs(8),
        "and no longer than the turn needed, took {took:?}"
    );
}

#[tokio::test]
async fn sigterm_with_a_turn_that_outlasts_the_grace_exits_after_the_grace() {
    let llm = FakeLlm::builder(|_| switchboard_test_support::model::Reply::Text("late".into()))
        .delay(Duration::from_secs(30))
        .start()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = serve_with_grace(dir.path(), &llm, "1").await;
    let request = send_in_background(&server, "endless");
    model_called(&llm, 1).await;

    let asked = Instant::now();
    server.terminate();
    let (status, logs) = server.exited(Duration::from_secs(20)).await;
    let took = asked.elapsed();
    assert!(status.success(), "clean exit: {status}\n{logs}");
    assert!(
        took >= Duration::from_millis(900),
        "the grace was given, took {took:?}"
    );
    assert!(
        took < Duration::from_secs(6),
        "bounded by the 1 s grace, took {took:?}"
    );
    assert_ne!(request.await.expect("joined"), Some(200));
}
