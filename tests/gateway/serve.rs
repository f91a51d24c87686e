//! `switchboard serve` configured by environment variables only: an LLM base
//! URL and a key are enough to answer on the API; SIGTERM stops it cleanly.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::helpers::FakeLlm;

#[tokio::test]
async fn serve_with_only_a_base_url_and_key_answers_on_the_api() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("serve")
        .current_dir(dir.path())
        .env("SWITCHBOARD__SERVER__BIND", format!("127.0.0.1:{port}"))
        .env("SWITCHBOARD__LLM__BASE_URL", llm.openai_base())
        .env("OPENAI_API_KEY", "sk-serve-test-secret")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("binary starts");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..300 {
        if http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(up, "the server came up");

    let response = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "ping"}]}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: ping");
    assert_eq!(
        llm.requests()[0].headers["authorization"],
        "Bearer sk-serve-test-secret"
    );
    assert!(
        dir.path().join("data/switchboard.db").exists(),
        "SQLite file created"
    );

    let pid = child.id().expect("pid");
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(i32::try_from(pid).expect("pid fits"), libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("stops after SIGTERM")
        .expect("wait");
    assert!(status.success());
    let mut logs = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut logs)
        .await
        .expect("logs");
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
