//! `switchboard serve` configured by environment variables only: an LLM base
//! URL and a key are enough to answer on the API; SIGTERM stops it cleanly.

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
