//! `switchboard chat`: the real binary, over stdin and stdout, and through
//! a pseudo-terminal (`rexpect`) for the line editor and Ctrl-C.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::helpers::{FakeLlm, FreshDatabase, Reply, fresh_database, last_is_tool_result};

async fn run_chat(config: &std::path::Path, session: Option<&str>, input: &str) -> String {
    run_chat_as("tester", config, session, input).await
}

pub(crate) async fn run_chat_as(
    user: &str,
    config: &std::path::Path,
    session: Option<&str>,
    input: &str,
) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command.arg("--config").arg(config).arg("chat");
    if let Some(session) = session {
        command.arg("--session").arg(session);
    }
    let data = config.parent().expect("config folder");
    let mut child = command
        .env("USER", user)
        .env("XDG_DATA_HOME", data)
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

    // An unknown id is answered, and the chat goes on.
    let unknown = run_chat(&config, Some("nope"), "still here\n").await;
    assert!(
        unknown.contains("No session nope that tester may reach"),
        "{unknown}"
    );
    assert!(unknown.contains("echo: still here"), "{unknown}");
}

/// A config for `llm` with a fresh database in `dir`.
async fn chat_config(llm: &FakeLlm, dir: &std::path::Path) -> (std::path::PathBuf, FreshDatabase) {
    let database = fresh_database(dir).await;
    let config = dir.join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{database}\"\n[llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n\
             api_key_env = \"SB_TEST_NO_KEY\"\n",
            llm.openai_base()
        ),
    )
    .expect("config");
    (config, database)
}

/// `switchboard chat` in a pseudo-terminal, as `user`.
fn pty_chat(user: &str, config: &std::path::Path) -> rexpect::session::PtySession {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .arg("--config")
        .arg(config)
        .arg("chat")
        .env("USER", user)
        .env("TERM", "xterm")
        .env("XDG_DATA_HOME", config.parent().expect("config folder"));
    // A bound on a hung test, not a timing assertion.
    let mut chat = rexpect::session::spawn_command(command, Some(60_000)).expect("chat starts");
    chat.exp_string("Ctrl-D quits.").expect("greeting");
    // Input sent before the editor reads would be dropped with the switch
    // to raw mode: the prompt shows that it reads.
    chat.exp_string("> ").expect("prompt");
    chat
}

/// Types `keys` at the chat (sent at once: the session buffers them).
fn type_keys(chat: &mut rexpect::session::PtySession, keys: &str) {
    chat.send(keys).expect("keys sent");
    chat.flush().expect("keys flushed");
    chat.flush().expect("keys flushed");
}

const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

#[tokio::test]
async fn a_pasted_message_is_one_turn_and_history_is_kept() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    let config_path = config.clone();
    tokio::task::spawn_blocking(move || {
        let mut chat = pty_chat("paster", &config_path);
        type_keys(
            &mut chat,
            &format!("{PASTE_START}first line\rsecond line\rthird line{PASTE_END}"),
        );
        type_keys(&mut chat, "\r");
        chat.exp_string("third line").expect("echoed paste");
        chat.exp_string("> ").expect("prompt again");
        chat.send_control('d').expect("Ctrl-D");
        chat.exp_eof().expect("chat ends");
    })
    .await
    .expect("pty script");

    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "one turn for the paste");
    let body = requests[0].json();
    let messages = body["messages"].as_array().expect("messages");
    let last = messages.last().expect("a message");
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "first line\nsecond line\nthird line");
    // Next to a SQLite database; in the data folder with PostgreSQL.
    let history = ["", "switchboard"]
        .iter()
        .filter_map(|folder| {
            std::fs::read_to_string(dir.path().join(folder).join("switchboard-chat.history")).ok()
        })
        .collect::<String>();
    assert!(history.contains("third line"), "history kept: {history:?}");
}

#[tokio::test]
async fn ctrl_c_stops_the_running_turn_and_the_chat_goes_on() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    let held = llm.clone();
    tokio::task::spawn_blocking(move || {
        let mut chat = pty_chat("stopper", &config);
        held.hold_streams();
        type_keys(&mut chat, "tell me a long story\r");
        // The first piece of the streamed reply is shown before the end.
        chat.exp_string("echo:").expect("streamed text");
        chat.send_control('c').expect("Ctrl-C");
        chat.exp_string("Stopped, as you asked.")
            .expect("the stopped turn's reply");
        held.release_streams();
        chat.exp_string("> ").expect("prompt again");
        type_keys(&mut chat, "are you there\r");
        chat.exp_string("echo: are you there").expect("next answer");
        chat.send_control('c').expect("Ctrl-C at the prompt");
        chat.exp_string("Ctrl-C again").expect("quit hint");
        chat.send_control('c').expect("second Ctrl-C");
        chat.exp_eof().expect("chat ends");
    })
    .await
    .expect("pty script");
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn a_reply_written_while_the_chat_was_away_is_shown_on_the_next_start() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    let held = llm.clone();
    let config_path = config.clone();
    tokio::task::spawn_blocking(move || {
        let mut chat = pty_chat("crasher", &config_path);
        held.hold_streams();
        type_keys(&mut chat, "remember this\r");
        chat.exp_string("echo:").expect("streamed text");
        chat.process_mut()
            .kill(nix::sys::signal::Signal::SIGKILL)
            .expect("killed");
    })
    .await
    .expect("pty script");
    llm.release_streams();

    let next = run_chat_as("crasher", &config, None, "").await;
    // The turn resumes when this chat starts, or (the lease of the killed
    // chat having lapsed first, as it can on a loaded machine) was finished
    // by the sweep just before: either way its reply is shown.
    assert!(
        next.contains("Finishing “remember this”")
            || next.contains("Reply to “remember this” (written while this chat was away)"),
        "{next}"
    );
    assert!(next.contains("echo: remember this"), "{next}");
    // Shown once: the next start has nothing left to show.
    let after = run_chat_as("crasher", &config, None, "").await;
    assert!(!after.contains("remember this"), "{after}");
}

#[tokio::test]
async fn list_shows_this_users_sessions_and_another_users_session_is_refused_without_ending_the_chat()
 {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    let first = run_chat_as("alice", &config, None, "alice's plan\n/status\n").await;
    let session = first
        .lines()
        .find_map(|line| line.trim_start_matches("> ").strip_prefix("Conversation "))
        .expect("status shows the session")
        .trim()
        .to_owned();

    let list = |user: &'static str| {
        let config = config.clone();
        async move {
            let output = Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .arg("--config")
                .arg(&config)
                .args(["chat", "--list"])
                .env("USER", user)
                .env("XDG_DATA_HOME", config.parent().expect("folder"))
                .output()
                .await
                .expect("runs");
            assert!(output.status.success());
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
    };
    let alice = list("alice").await;
    assert!(alice.contains(&session), "{alice}");
    assert!(alice.contains("alice's plan"), "{alice}");
    let bob = list("bob").await;
    assert!(!bob.contains(&session), "{bob}");
    assert!(bob.contains("No sessions yet for bob"), "{bob}");

    let refused = run_chat_as("bob", &config, Some(&session), "bob here\n/status\n").await;
    assert!(
        refused.contains(&format!("No session {session} that bob may reach")),
        "{refused}"
    );
    assert!(refused.contains("echo: bob here"), "{refused}");
    assert!(
        !refused.contains(&format!("Conversation {session}")),
        "{refused}"
    );
    let last = llm.requests().last().expect("request").json();
    let messages = last["messages"].as_array().expect("messages");
    assert!(
        !messages.iter().any(|m| m["content"] == "alice's plan"),
        "bob's turn does not see alice's session"
    );
}

#[tokio::test]
async fn a_running_tool_is_shown_then_the_streamed_answer() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Text("It is 42.".to_owned())
        } else {
            Reply::Tools(vec![(
                "call_1".to_owned(),
                "calculator".to_owned(),
                r#"{"expression":"6*7"}"#.to_owned(),
            )])
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    tokio::task::spawn_blocking(move || {
        let mut chat = pty_chat("reckoner", &config);
        type_keys(&mut chat, "what is 6 times 7\r");
        // The session reads each byte as a character: ASCII needles only.
        chat.exp_string("running calculator").expect("tool spinner");
        chat.exp_string(" calculator\r\n").expect("tool done line");
        chat.exp_string("It is 42.").expect("answer");
        chat.exp_string("> ").expect("prompt again");
        type_keys(&mut chat, "\x04");
        chat.exp_eof().expect("chat ends");
    })
    .await
    .expect("pty script");
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn a_question_with_buttons_is_answered_at_the_prompt_by_number_or_label() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            let result = body["messages"]
                .as_array()
                .and_then(|messages| messages.last())
                .and_then(|message| message["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            Reply::Text(format!("tool said: {result}"))
        } else {
            Reply::Tools(vec![(
                "call_1".to_owned(),
                "calculator".to_owned(),
                r#"{"expression":"6*7"}"#.to_owned(),
            )])
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _database) = chat_config(&llm, dir.path()).await;
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("[tools.approval]\nask = [\"calculator\"]\n");
    std::fs::write(&config, text).expect("config");

    // `1`: allowed once, through the press path (decided by this
    // terminal's user); the resumed turn's answer follows.
    let allowed = run_chat(&config, None, "what is 6*7?\n1\n").await;
    assert!(allowed.contains("Approval needed"), "{allowed}");
    assert!(
        allowed.contains("[1] Allow once  [2] Allow for this conversation  [3] Deny"),
        "{allowed}"
    );
    assert!(
        allowed.contains("allowed once by terminal:tester"),
        "{allowed}"
    );
    assert!(
        allowed.contains("tool said: ") && allowed.contains(r#""result":42"#),
        "{allowed}"
    );

    // A label: denied, the call not run.
    let calls_before = llm.requests().len();
    let denied = run_chat(&config, None, "and again?\ndeny\n").await;
    assert!(denied.contains("[3] Deny"), "{denied}");
    assert!(denied.contains("denied by terminal:tester"), "{denied}");
    assert!(denied.contains("tool said: "), "{denied}");
    assert!(!denied.contains(r#""result":42"#), "{denied}");
    assert_eq!(
        llm.requests().len(),
        calls_before + 2,
        "the call, then the answer to its refusal"
    );
}
