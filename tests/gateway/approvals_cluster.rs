//! A person in the loop across real `switchboard serve` processes, killed
//! for real with SIGKILL: a parked turn outlives the instance that parked
//! it (decided on another instance of one PostgreSQL database, or on the
//! process restarted on the same database, or expired there unanswered);
//! two decisions sent at once to two instances are settled once (the first
//! wins, the other is a 409, and the turn follows the winner); two
//! approvals of one turn decided at once on two instances put it back in
//! its queue at once, not at the scheduler's next look up to 30 s later; a
//! decided turn whose instance dies while it resumes is finished by another
//! without running its tool again; and a non-idempotent call a kill cut off
//! is put to the person as a call in doubt instead of being run again
//! (skipped, or run once more when the person says so).
//!
//! Every case checks that the tool ran exactly as often as decided, that
//! the model was given its result once (twice only where the kill cut off
//! that very model call), that every message is answered exactly once with
//! nothing left running, and reads the reply back through `GET
//! /v1/sessions/{id}/messages`.
//!
//! The two-instance cases need PostgreSQL: they run only when
//! `TEST_DATABASE_URL` is set, and print a note and pass without it. The
//! restart cases run on a SQLite file, or on PostgreSQL when it is set.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::store::{Store, StoreOptions};
use switchboard_test_support::model::Canned;
use switchboard_test_support::wait::within;

use crate::approvals::calculate_then_report;
use crate::cluster::{SERIAL, start_node};
use crate::helpers::{
    FakeLlm, FreshDatabase, Reply, ServeProcess, fresh_database, is_sub_agent, last_is_tool_result,
};

/// Calls of the calculator wait for a decision.
const ASK_CALCULATOR: (&str, &str) = ("SWITCHBOARD__TOOLS__APPROVAL__ASK", "calculator");

/// A call in doubt is put to the person (the default, which the cluster
/// suite's instances set to "skip").
const IN_DOUBT_ASK: (&str, &str) = ("SWITCHBOARD__TOOLS__APPROVAL__IN_DOUBT", "ask");

/// A sanity bound, not a speed requirement: a restart, a lease expiry (2 s)
/// and a sweep (1 s), the resumed turn's model call, and wide margin for a
/// loaded machine.
const BOUND: Duration = Duration::from_secs(60);

/// The longest any HTTP request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Rounds of the race in
/// [`two_approvals_of_one_turn_decided_at_once_on_two_instances_resume_it`]
/// (it failed within two before the fix).
const ROUNDS: i64 = 20;

/// Whether PostgreSQL is configured; a note when it is not.
fn postgres_configured() -> bool {
    let configured = std::env::var("TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty());
    if !configured {
        eprintln!(
            "note: approval cluster tests need PostgreSQL; set TEST_DATABASE_URL to run them"
        );
    }
    configured
}

/// A fresh database and a connection to it, for the test's own reads.
struct Database {
    store: Store,
    /// Dropped last: drops a PostgreSQL database.
    url: FreshDatabase,
}

impl Database {
    async fn fresh(dir: &std::path::Path) -> Self {
        let url = fresh_database(dir).await;
        // Migrated here, before any instance starts; the test only reads
        // through it.
        let store = Store::connect(&StoreOptions::new(&*url))
            .await
            .expect("store");
        Self { store, url }
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&mut *self.store.conn().await.expect("conn"))
            .await
            .unwrap_or_else(|err| panic!("{sql}: {err}"))
    }

    /// Calls of the calculator that ran to the end.
    async fn calculator_runs(&self) -> i64 {
        self.count("SELECT COUNT(*) FROM tool_calls WHERE name = 'calculator' AND status = 'done'")
            .await
    }

    /// Every message finished and answered once, no call left running.
    async fn assert_settled(&self) {
        let settled = within(BOUND, || async {
            let open = self
                .count(
                    "SELECT COUNT(*) FROM inbound \
                     WHERE status IN ('pending', 'running', 'waiting')",
                )
                .await;
            let unsent = self
                .count("SELECT COUNT(*) FROM outbox WHERE status <> 'sent'")
                .await;
            (open == 0 && unsent == 0).then_some(())
        })
        .await;
        assert!(settled.is_some(), "every message finished and handed out");
        let unanswered = self
            .count(
                "SELECT COUNT(*) FROM inbound i WHERE i.status <> 'command' AND \
                 (SELECT COUNT(*) FROM outbox o WHERE o.inbound_id = i.id \
                  AND o.approval_id IS NULL) <> 1",
            )
            .await;
        assert_eq!(unanswered, 0, "every message answered exactly once");
        for table in ["usage", "tool_calls"] {
            let running = self
                .count(&format!(
                    "SELECT COUNT(*) FROM {table} WHERE status = 'running'"
                ))
                .await;
            assert_eq!(running, 0, "{table} rows left running");
        }
    }
}

/// An instance of the suite: the calculator asks first, calls in doubt are
/// asked about.
async fn start(db: &Database, dir: &std::path::Path, llm: &FakeLlm, index: usize) -> ServeProcess {
    start_node(dir, &db.url, llm, index, &[ASK_CALCULATOR, IN_DOUBT_ASK]).await
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client")
}

/// Sends `text` in a new conversation on `base`; its turn parks. Returns
/// the session and the approval it waits for.
async fn parked(base: &str, text: &str) -> (String, Value) {
    let response = client()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{body}");
    let approval = body
        .get("approval")
        .cloned()
        .unwrap_or_else(|| panic!("the turn parks: {body}"));
    (session.expect("session header"), approval)
}

/// `GET /v1/approvals` on `base`: the caller's pending approvals.
async fn pending(base: &str) -> Vec<Value> {
    let listed: Value = client()
        .get(format!("{base}/v1/approvals"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    listed["data"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {listed}"))
        .clone()
}

/// `POST /v1/approvals/{id}` on `base`: the status and the body.
async fn decide(base: &str, id: &str, decision: &str) -> (u16, Value) {
    let response = client()
        .post(format!("{base}/v1/approvals/{id}"))
        .json(&json!({"decision": decision}))
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The session's stored conversation, read from `base`.
async fn messages(base: &str, session: &str) -> Vec<Value> {
    let listed: Value = client()
        .get(format!("{base}/v1/sessions/{session}/messages"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    listed["data"].as_array().cloned().unwrap_or_default()
}

/// Waits for an assistant message containing `needle` in the session, read
/// through the API of `base`, and returns its text.
async fn reply(base: &str, session: &str, needle: &str) -> String {
    let found = within(BOUND, || async {
        messages(base, session)
            .await
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_str())
            .find(|text| text.contains(needle))
            .map(str::to_owned)
    })
    .await;
    match found {
        Some(text) => text,
        None => panic!(
            "no reply containing {needle:?} within {BOUND:?}: {:?}",
            messages(base, session).await
        ),
    }
}

/// How many model requests ended with a tool result (the results the
/// model was given).
fn results_seen(llm: &FakeLlm) -> usize {
    llm.requests()
        .iter()
        .filter(|r| last_is_tool_result(&r.json()))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_parked_on_a_killed_instance_is_decided_and_resumed_on_another() {
    if !postgres_configured() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(calculate_then_report).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    // One after the other: the first applies the migrations.
    let a = start(&db, dir.path(), &llm, 0).await;
    let b = start(&db, dir.path(), &llm, 1).await;

    let (session, approval) = parked(&a.base, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    assert_eq!(approval["tool"], "calculator");
    assert_eq!(db.calculator_runs().await, 0, "not run before the decision");
    a.kill().await;

    let listed = pending(&b.base).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["session"], session.as_str());
    let (status, decided) = decide(&b.base, &id, "allow").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "allowed");

    let text = reply(&b.base, &session, "tool said:").await;
    assert!(
        text.contains("42"),
        "the tool's result reached the model: {text}"
    );
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 1, "run exactly once");
    assert_eq!(results_seen(&llm), 1, "the model saw one result");
    assert!(pending(&b.base).await.is_empty());
    let (again, _) = decide(&b.base, &id, "allow").await;
    assert_eq!(again, 409, "decided once");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_parked_before_a_kill_is_listed_and_decided_after_the_restart() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(calculate_then_report).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let first = start(&db, dir.path(), &llm, 0).await;

    let (session, approval) = parked(&first.base, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    first.kill().await;

    let restarted = start(&db, dir.path(), &llm, 0).await;
    let listed = pending(&restarted.base).await;
    assert_eq!(listed.len(), 1, "still pending after the kill: {listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["arguments"], json!({"expression": "6*7"}));
    assert_eq!(db.calculator_runs().await, 0, "not run before the decision");
    let (status, decided) = decide(&restarted.base, &id, "allow").await;
    assert_eq!(status, 200, "{decided}");

    let text = reply(&restarted.base, &session, "tool said:").await;
    assert!(text.contains("42"), "{text}");
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 1, "run exactly once");
    assert_eq!(results_seen(&llm), 1, "the model saw one result");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_decisions_at_once_on_two_instances_settle_once() {
    if !postgres_configured() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(calculate_then_report).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let a = start(&db, dir.path(), &llm, 0).await;
    let b = start(&db, dir.path(), &llm, 1).await;

    let (session, approval) = parked(&a.base, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    let (on_a, on_b) = tokio::join!(decide(&a.base, &id, "allow"), decide(&b.base, &id, "allow"));
    let mut statuses = [on_a.0, on_b.0];
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 409],
        "one decision wins, the other is refused: {on_a:?} {on_b:?}"
    );

    let text = reply(&b.base, &session, "tool said:").await;
    assert!(text.contains("42"), "{text}");
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 1, "run exactly once");
    assert_eq!(results_seen(&llm), 1, "the model saw one result");
    let decisions = db
        .count("SELECT COUNT(*) FROM approvals WHERE status = 'allowed' AND decided_at IS NOT NULL")
        .await;
    assert_eq!(decisions, 1);

    // Opposite decisions at once: the turn follows the one that won.
    let (session, approval) = parked(&b.base, "and 6*7 again?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    let (allow, deny) = tokio::join!(decide(&a.base, &id, "allow"), decide(&b.base, &id, "deny"));
    let mut statuses = [allow.0, deny.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{allow:?} {deny:?}");
    let allowed = allow.0 == 200;
    let winner = if allowed { &allow.1 } else { &deny.1 };
    assert_eq!(
        winner["status"],
        if allowed { "allowed" } else { "denied" },
        "{winner}"
    );
    let text = reply(&a.base, &session, "tool said:").await;
    db.assert_settled().await;
    if allowed {
        assert!(text.contains("42"), "allowed, so run: {text}");
        assert_eq!(db.calculator_runs().await, 2, "run once more");
    } else {
        assert!(text.contains("denied"), "denied, so not run: {text}");
        assert_eq!(db.calculator_runs().await, 1, "not run");
    }
    assert_eq!(results_seen(&llm), 2, "the model saw one result per turn");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_turn_whose_instance_dies_mid_resume_is_finished_by_another() {
    if !postgres_configured() {
        return;
    }
    let _serial = SERIAL.lock().await;
    // The resumed turn's first model call (after the tool ran) answers only
    // long after the test is over: the kill always lands while it is in
    // flight.
    let llm = {
        let first = std::sync::atomic::AtomicBool::new(true);
        FakeLlm::start(move |body| {
            if last_is_tool_result(body) && first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                Reply::Canned(
                    Canned::json(500, r#"{"error":{"message":"too late"}}"#)
                        .delayed(Duration::from_secs(600)),
                )
            } else {
                calculate_then_report(body)
            }
        })
        .await
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let a = start(&db, dir.path(), &llm, 0).await;
    let b = start(&db, dir.path(), &llm, 1).await;

    let (session, approval) = parked(&a.base, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    let (status, decided) = decide(&a.base, &id, "allow").await;
    assert_eq!(status, 200, "{decided}");
    // The turn resumes (on A, told at once, or on B, by its sweep): the
    // tool runs, and the model is asked again.
    let resumed = within(BOUND, || async { (results_seen(&llm) > 0).then_some(()) }).await;
    assert!(resumed.is_some(), "the decided turn resumes");
    let owner: String =
        sqlx::query_scalar("SELECT owner FROM session_leases WHERE session_id = $1")
            .bind(&session)
            .fetch_one(&mut *db.store.conn().await.expect("conn"))
            .await
            .expect("the running turn's lease");
    let (holder, other) = match owner.as_str() {
        "node-0" => (a, b),
        "node-1" => (b, a),
        _ => panic!("an instance of this test: {owner}"),
    };
    holder.kill().await;

    let text = reply(&other.base, &session, "tool said:").await;
    assert!(text.contains("42"), "{text}");
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 1, "run exactly once");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM tool_calls WHERE name = 'calculator'")
            .await,
        1,
        "one checkpoint, reused by the instance that took over"
    );
    // The model call cut off by the kill is made again (a model call is
    // repeatable); the tool is not.
    assert_eq!(
        results_seen(&llm),
        2,
        "the cut-off model call, then its repeat"
    );
    other.stop().await;
}

/// A model that delegates long work and answers `went on without it`
/// once given the delegation's result. The sub-agent's first model call
/// answers only long after the test is over; later ones (a call run again)
/// at once.
fn delegate_slowly() -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let sub_agent_calls = std::sync::atomic::AtomicUsize::new(0);
    move |body| {
        if is_sub_agent(body) {
            if sub_agent_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Reply::Canned(
                    Canned::json(500, r#"{"error":{"message":"too late"}}"#)
                        .delayed(Duration::from_secs(600)),
                )
            } else {
                Reply::Text("sub-task done".to_owned())
            }
        } else if last_is_tool_result(body) {
            Reply::Text("went on without it".to_owned())
        } else {
            Reply::Tools(vec![(
                "call_d".to_owned(),
                "delegate".to_owned(),
                r#"{"task":"long work"}"#.to_owned(),
            )])
        }
    }
}

/// How many model requests came from a sub-agent.
fn sub_agent_calls(llm: &FakeLlm) -> usize {
    llm.requests()
        .iter()
        .filter(|r| is_sub_agent(&r.json()))
        .count()
}

/// Starts an instance, sends a message whose turn delegates, and SIGKILLs
/// the process while the delegation (not idempotent) runs; then restarts
/// it on the same database and returns it with the call in doubt it asks
/// about.
async fn killed_mid_delegation(
    db: &Database,
    dir: &std::path::Path,
    llm: &FakeLlm,
) -> (ServeProcess, Value) {
    let first = start(db, dir, llm, 0).await;
    // The request waits for the turn, which hangs in the delegation.
    let request = {
        let url = format!("{}/v1/chat/completions", first.base);
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"messages": [{"role": "user", "content": "do the long work"}]}))
                .send()
                .await
        })
    };
    let running = within(BOUND, || async {
        let running = db
            .count("SELECT COUNT(*) FROM tool_calls WHERE name = 'delegate' AND status = 'running'")
            .await;
        (running == 1 && sub_agent_calls(llm) == 1).then_some(())
    })
    .await;
    assert!(running.is_some(), "the delegation starts");
    first.kill().await;
    assert!(
        request.await.expect("joined").is_err(),
        "the killed process never answered"
    );

    let restarted = start(db, dir, llm, 0).await;
    let in_doubt = within(BOUND, || async {
        pending(&restarted.base)
            .await
            .into_iter()
            .find(|approval| approval["kind"] == "in_doubt")
    })
    .await
    .expect("the call in doubt is asked about");
    assert_eq!(in_doubt["tool"], "delegate");
    assert_eq!(sub_agent_calls(llm), 1, "not re-run while in doubt");
    (restarted, in_doubt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_sigkill_is_asked_about_and_skipped_not_rerun() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(delegate_slowly()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let (restarted, in_doubt) = killed_mid_delegation(&db, dir.path(), &llm).await;
    let session = in_doubt["session"].as_str().expect("session").to_owned();
    let id = in_doubt["id"].as_str().expect("id").to_owned();
    let (status, decided) = decide(&restarted.base, &id, "deny").await;
    assert_eq!(status, 200, "{decided}");

    let text = reply(&restarted.base, &session, "went on without it").await;
    assert_eq!(text, "went on without it");
    db.assert_settled().await;
    assert_eq!(sub_agent_calls(&llm), 1, "skipped, never re-run");
    let last = llm.requests().last().expect("request").json();
    let result = last["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        result.contains("chose not to run it again"),
        "the model is told: {result}"
    );
    assert_eq!(results_seen(&llm), 1, "the model saw one result");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM tool_calls WHERE name = 'delegate'")
            .await,
        1,
        "one checkpoint for the call"
    );
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_sigkill_and_allowed_again_runs_once_more() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(delegate_slowly()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let (restarted, in_doubt) = killed_mid_delegation(&db, dir.path(), &llm).await;
    let session = in_doubt["session"].as_str().expect("session").to_owned();
    let id = in_doubt["id"].as_str().expect("id").to_owned();
    let (status, decided) = decide(&restarted.base, &id, "allow").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "allowed");

    let text = reply(&restarted.base, &session, "went on without it").await;
    assert_eq!(text, "went on without it");
    db.assert_settled().await;
    assert_eq!(
        sub_agent_calls(&llm),
        2,
        "run again once, as the person chose"
    );
    assert_eq!(results_seen(&llm), 1, "the model saw one result");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM tool_calls WHERE name = 'delegate' AND status = 'done'")
            .await,
        1,
        "the call's one checkpoint, finished by the second run"
    );
    let (again, _) = decide(&restarted.base, &id, "allow").await;
    assert_eq!(again, 409, "decided once");
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_parked_before_a_kill_expires_after_the_restart() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(calculate_then_report).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let env = [
        ASK_CALCULATOR,
        IN_DOUBT_ASK,
        ("SWITCHBOARD__TOOLS__APPROVAL__TIMEOUT_SECS", "2"),
    ];
    let first = start_node(dir.path(), &db.url, &llm, 0, &env).await;
    let (session, _approval) = parked(&first.base, "what is 6*7?").await;
    first.kill().await;

    // Nobody decides: the restarted process expires it from the database.
    let restarted = start_node(dir.path(), &db.url, &llm, 0, &env).await;
    let text = reply(&restarted.base, &session, "tool said:").await;
    assert!(text.contains("nobody approved"), "{text}");
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 0, "never run");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM approvals WHERE status = 'expired'")
            .await,
        1
    );
    assert!(pending(&restarted.base).await.is_empty());
    restarted.stop().await;
}

/// A model that asks for two calculations in one round and, given both
/// results, answers with them.
fn two_calculations(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        let results: Vec<&str> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect();
        Reply::Text(format!("tools said: {}", results.join(" | ")))
    } else {
        Reply::Tools(vec![
            (
                "c1".to_owned(),
                "calculator".to_owned(),
                r#"{"expression":"6*7"}"#.to_owned(),
            ),
            (
                "c2".to_owned(),
                "calculator".to_owned(),
                r#"{"expression":"7*7"}"#.to_owned(),
            ),
        ])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvals_of_one_turn_decided_at_once_on_two_instances_resume_it() {
    if !postgres_configured() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(two_calculations).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::fresh(dir.path()).await;
    let a = start(&db, dir.path(), &llm, 0).await;
    let b = start(&db, dir.path(), &llm, 1).await;

    // A race, so several rounds of it.
    for round in 0..ROUNDS {
        let (session, _) = parked(&a.base, &format!("round {round}: 6*7 and 7*7?")).await;
        let ids: Vec<String> = pending(&a.base)
            .await
            .iter()
            .filter(|approval| approval["session"] == session.as_str())
            .map(|approval| approval["id"].as_str().expect("id").to_owned())
            .collect();
        assert_eq!(ids.len(), 2, "both calls wait: {ids:?}");
        let (first, second) = tokio::join!(
            decide(&a.base, &ids[0], "allow"),
            decide(&b.base, &ids[1], "allow")
        );
        assert_eq!((first.0, second.0), (200, 200), "{first:?} {second:?}");
        // Both decisions are in: nothing is left to wait for, so the turn
        // is back in its queue (or already resumed), not still parked.
        let status: String = sqlx::query_scalar(
            "SELECT i.status FROM inbound i JOIN approvals a ON a.inbound_id = i.id \
             WHERE a.id = $1",
        )
        .bind(ids[0].parse::<i64>().expect("numeric id"))
        .fetch_one(&mut *db.store.conn().await.expect("conn"))
        .await
        .expect("status");
        assert_ne!(
            status, "waiting",
            "round {round}: both approvals decided, yet the turn is still parked"
        );
        let text = reply(&b.base, &session, "tools said:").await;
        assert!(text.contains("42") && text.contains("49"), "{text}");
    }
    db.assert_settled().await;
    assert_eq!(db.calculator_runs().await, 2 * ROUNDS, "each call run once");
    a.stop().await;
    b.stop().await;
}
