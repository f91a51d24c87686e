//! `switchboard chat`: the real binary, over stdin and stdout.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::helpers::{FakeLlm, fresh_database};

async fn run_chat(config: &std::path::Path, session: Option<&str>, input: &str) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command.arg("--config").arg(config).arg("chat");
    if let Some(session) = session {
        command.arg("--session").arg(session);
    }
    let mut child = command
        .env("USER", "tester")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("binary starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).await.expect("write");
    drop(stdin);
    let output = child.wait_with_output().await.expect("binary ends");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "chat failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_terminal_chat_talks_to_the_model_and_continues_a_session_by_id() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = fresh_database(dir.path()).await;
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{database}\"\n[llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n\
             api_key_env = \"SB_TEST_NO_KEY\"\n\
             [prices]\n\"fake-model\" = {{ input = 1.0, cache_read = 0.5 }}\n",
            llm.openai_base()
        ),
    )
    .expect("config");

    let first = run_chat(&config, None, "hello terminal\n/status\n").await;
    assert!(first.contains("echo: hello terminal"), "{first}");
    let session = first
        .lines()
        .find_map(|line| line.trim_start_matches("> ").strip_prefix("Conversation "))
        .expect("status shows the session")
        .trim()
        .to_owned();

    let second = run_chat(&config, Some(&session), "second line\n").await;
    assert!(second.contains(&format!("Continuing session {session}")));
    assert!(second.contains("echo: second line"));
    let last = llm.requests().last().expect("request").json();
    let messages = last["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "system, first exchange, new message");
    assert_eq!(messages[1]["content"], "hello terminal");

    let usage = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&config)
        .arg("usage")
        .output()
        .await
        .expect("usage runs");
    let report = String::from_utf8_lossy(&usage.stdout);
    assert!(usage.status.success());
    let line = report
        .lines()
        .find(|line| line.contains(&session))
        .expect("the session has a usage line");
    // Two model calls of 120 input tokens (100 read from the cache) priced
    // at $1 per million input, cache reads at $0.5: 2*20*1 + 2*100*0.5.
    assert!(line.contains("fake-model"), "{line}");
    assert!(line.contains("$0.0001"), "{line}");

    let unknown = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&config)
        .args(["chat", "--session", "nope"])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("runs");
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no session with id nope"));
}
