//! The real binary killed with SIGKILL at many points of a turn, restarted,
//! and checked: every accepted message answered exactly once, no
//! non-idempotent tool run twice, and a valid stored history.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use switchboard::domain::ChatMessage;
use switchboard::store::{Store, StoreOptions};

use switchboard_test_support::wait::within;

use crate::helpers::{FakeLlm, ServeProcess, delegate_and_calculate, last_user_text, session_id};

async fn start(dir: &std::path::Path, database: &str, llm: &FakeLlm) -> ServeProcess {
    let base_url = llm.openai_base();
    ServeProcess::start(
        dir,
        &[
            ("SWITCHBOARD__DATABASE__URL", database),
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__LLM__RETRY_BASE_MS", "1"),
            ("SWITCHBOARD__RUNNER__LEASE_TTL_SECS", "1"),
            ("SWITCHBOARD__AGENT__TOOLS", "calculator,delegate"),
            // A delegation cut off by a kill is skipped (calls in doubt are
            // put to a person in tests/gateway/recovery.rs).
            ("SWITCHBOARD__TOOLS__APPROVAL__IN_DOUBT", "skip"),
            // A delegation cut off by the kill is skipped, as before calls
            // in doubt were put to a person (tests/gateway/recovery.rs).
            ("SWITCHBOARD__TOOLS__APPROVAL__IN_DOUBT", "skip"),
            ("RUST_LOG", "warn"),
        ],
        false,
    )
    .await
}

/// Sends a message (retried with the same idempotency key after a restart:
/// 200 if it was new, 409 if the crashed process had already recorded it).
fn send(base: &str, session: &str, job: usize) -> tokio::task::JoinHandle<Option<u16>> {
    let url = format!("{base}/v1/chat/completions");
    let session = session.to_owned();
    tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .header("X-Session-Id", session)
            .header("Idempotency-Key", format!("job-{job}"))
            .json(&json!({"messages": [{"role": "user", "content": format!("job-{job}")}]}))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .ok()
            .map(|r| r.status().as_u16())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_many_points_loses_nothing_and_repeats_nothing() {
    let llm = FakeLlm::start_with_delay(delegate_and_calculate, Duration::from_millis(40)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = crate::helpers::fresh_database(dir.path()).await;

    let mut server = start(dir.path(), &database, &llm).await;
    let (status, session) = {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", server.base))
            .json(&json!({"messages": [{"role": "user", "content": "/help"}]}))
            .send()
            .await
            .expect("sent");
        let session = response.headers()["x-session-id"]
            .to_str()
            .expect("ascii")
            .to_owned();
        (response.status().as_u16(), session)
    };
    assert_eq!(status, 200);

    // Kill points spread over a turn: during the first model call, during
    // the tool round (the sub-agent's model call), between the tool results
    // and the next call, and around the reply.
    let kill_after_ms = [5, 25, 45, 60, 75, 90, 110, 130, 150, 175, 200, 240];
    for (job, delay) in kill_after_ms.iter().enumerate() {
        let request = send(&server.base, &session, job);
        tokio::time::sleep(Duration::from_millis(*delay)).await;
        server.kill().await;
        let _ = request.await;
        server = start(dir.path(), &database, &llm).await;
        // Make sure the message was recorded (the kill may have come first).
        let _ = send(&server.base, &session, job).await;
    }

    // Let the last process finish everything it resumed.
    let store = Store::connect_without_migrating(&StoreOptions::new(&*database))
        .await
        .expect("store");
    // Generous: under a loaded CI machine a restart and a lease expiry take
    // seconds each.
    let settled = within(Duration::from_secs(90), || async {
        let unfinished: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running')",
        )
        .fetch_one(&mut *store.conn().await.expect("conn"))
        .await
        .expect("count");
        let unsent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status <> 'sent'")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("count");
        (unfinished == 0 && unsent == 0).then_some(())
    })
    .await;
    if settled.is_none() {
        let inbound: Vec<(i64, String, String)> =
            sqlx::query_as("SELECT id, text, status FROM inbound ORDER BY id")
                .fetch_all(&mut *store.conn().await.expect("conn"))
                .await
                .expect("rows");
        let outbox: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT inbound_id, status, attempts FROM outbox ORDER BY id")
                .fetch_all(&mut *store.conn().await.expect("conn"))
                .await
                .expect("rows");
        panic!("not settled: inbound {inbound:?} outbox {outbox:?}");
    }
    server.kill().await;

    // Every message answered exactly once.
    let answered: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT i.text, i.status, (SELECT COUNT(*) FROM outbox o WHERE o.inbound_id = i.id) \
         FROM inbound i WHERE i.status <> 'command' ORDER BY i.id",
    )
    .fetch_all(&mut *store.conn().await.expect("conn"))
    .await
    .expect("rows");
    assert_eq!(answered.len(), kill_after_ms.len());
    for (text, status, replies) in &answered {
        assert_eq!(status, "done", "{text}");
        assert_eq!(*replies, 1, "{text} answered once");
    }

    // Every step is settled: no model call or tool call is left `running`
    // (a call a kill cut short is recorded as failed when its task resumes).
    for table in ["usage", "tool_calls"] {
        let running: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {table} WHERE status = 'running'"
        ))
        .fetch_one(&mut *store.conn().await.expect("conn"))
        .await
        .expect("count");
        assert_eq!(running, 0, "{table} rows left running");
    }

    // No non-idempotent tool ran twice: each sub-task started at most once.
    let mut starts: HashMap<String, usize> = HashMap::new();
    for request in llm.requests() {
        let body = request.json();
        let messages = body["messages"].as_array().expect("messages");
        let sub_agent = messages[0]["content"]
            .as_str()
            .is_some_and(|s| s.starts_with("You are a sub-agent"));
        if sub_agent && messages.len() == 2 {
            *starts.entry(last_user_text(&body)).or_default() += 1;
        }
    }
    for (task, count) in &starts {
        assert_eq!(*count, 1, "{task} started {count} times");
    }

    // The stored history is valid: every tool call has exactly one result.
    let history = store
        .transcript()
        .wire_history(&session_id(&session), &switchboard::domain::Scope::top())
        .await
        .expect("history");
    let mut open: Vec<String> = Vec::new();
    for entry in &history {
        match &entry.message {
            ChatMessage::Assistant { tool_calls, .. } => {
                assert!(open.is_empty(), "calls left without results: {open:?}");
                open = tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            ChatMessage::Tool { tool_call_id, .. } => {
                let index = open
                    .iter()
                    .position(|id| id == tool_call_id)
                    .expect("a result answers an open call");
                open.remove(index);
            }
            ChatMessage::User { .. } => assert!(open.is_empty(), "calls left without results"),
        }
    }
    assert!(open.is_empty());
}
