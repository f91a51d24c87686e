//! Every tool call is a checkpoint: a task cut short by a crash resumes from
//! its last step, re-running a `running` call only if its tool is idempotent,
//! and reusing a finished one's result with its files (an MCP image).

use std::time::Duration;

use serde_json::Value;
use switchboard::config::Settings;
use switchboard::gateway::Gateway;
use switchboard::session::service::SubmitOptions;
use switchboard::store::Store;
use switchboard_contract::{AccountId, ChatKind, EventId, InboundMessage, PlatformName};
use switchboard_test_support::{eventually, eventually_some, inbound};

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, test_settings};

/// `text` from `u1` in a direct chat on the API, always the same event.
fn message(text: &str) -> InboundMessage {
    InboundMessage {
        platform: PlatformName::parse("api").expect("id"),
        account: AccountId::parse("default").expect("id"),
        event_id: EventId::parse("crash-1").expect("id"),
        ..inbound::message("u1", "crash-chat", ChatKind::Direct, text)
    }
}

async fn running_checkpoints(store: &Store) -> i64 {
    checkpoints(store, "status = 'running'").await
}

/// How many checkpoints match `condition`.
async fn checkpoints(store: &Store, condition: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(&format!(
        "SELECT COUNT(*) FROM tool_calls WHERE {condition}"
    ))
    .fetch_one(&mut *store.conn().await.expect("conn"))
    .await
    .unwrap_or(0)
}

/// Runs the gateway on its own runtime until a tool call is checkpointed as
/// running, then closes its database and drops the runtime with everything
/// on it: as far as the database can tell, the process died mid-call.
fn crash_while_a_tool_runs(settings: Settings, ready: impl Fn() -> bool + Send + 'static) {
    crash_when(settings, "status = 'running'", ready);
}

/// As [`crash_while_a_tool_runs`], once a call is running and a checkpoint
/// matches `also` (an SQL condition on `tool_calls`).
fn crash_when(
    mut settings: Settings,
    also: &'static str,
    ready: impl Fn() -> bool + Send + 'static,
) {
    // The crashed process's lease must expire before another takes over (a
    // TTL this short only there: a loaded machine could miss renewing it).
    settings.runner.lease_ttl = std::time::Duration::from_secs(1);
    // The crashed instance runs on a thread of its own; waiting for it
    // hands this runtime's queued work (the fake model's server among it)
    // to another worker first, or a task left in this worker's slot would
    // wait for the join, and the join for it.
    let crashed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let gateway = Gateway::build(settings).await.expect("gateway");
            if let Some(mcp) = gateway.tools.mcp() {
                mcp.wait_started(Duration::from_secs(10)).await;
            }
            gateway
                .service
                .submit(message("do the thing"), SubmitOptions::default())
                .await
                .expect("submitted");
            eventually("the tool to start", || async {
                running_checkpoints(&gateway.store).await > 0
                    && checkpoints(&gateway.store, also).await > 0
                    && ready()
            })
            .await;
            // Nothing reaches the database after this point, as if the
            // process had died here (tasks still running while the runtime
            // shuts down cannot write any more).
            gateway.store.close().await;
        });
        runtime.shutdown_background();
    });
    tokio::task::block_in_place(|| crashed.join()).expect("crashed cleanly");
}

async fn wait_until_answered(app: &TestApp) -> String {
    eventually_some("the resumed task to be answered", || async {
        sqlx::query_scalar("SELECT text FROM outbox ORDER BY id LIMIT 1")
            .fetch_optional(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("query")
    })
    .await
}

/// A model that delegates long work whose sub-agent never answers in
/// time, and answers `answer` once given the delegation's result.
fn delegate_forever(body: &Value, answer: &str) -> Reply {
    let sub_agent = body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You are a sub-agent"));
    if sub_agent {
        Reply::Status(500, "never reached in time".to_owned())
    } else if last_is_tool_result(body) {
        Reply::Text(answer.to_owned())
    } else {
        Reply::Tools(vec![(
            "call_d".to_owned(),
            "delegate".to_owned(),
            r#"{"task":"long work"}"#.to_owned(),
        )])
    }
}

fn last_tool_result(body: &Value) -> Value {
    let messages = body["messages"].as_array().expect("messages");
    let last = messages.last().expect("message");
    serde_json::from_str(last["content"].as_str().expect("content")).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_call_caught_running_gets_an_outcome_unknown_result() {
    // The top agent delegates; the sub-agent's model call never returns
    // before the crash.
    let llm = FakeLlm::start_with_delay(
        |body| delegate_forever(body, "resumed and answered"),
        Duration::from_millis(300),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings_for(&llm, &dir).await;
    settings.llm.max_retries = 0;
    settings.tools.approval.in_doubt = switchboard::tools::approval::InDoubt::Skip;
    crash_while_a_tool_runs(settings.clone(), || true);

    let app = TestApp::start(settings, dir).await;
    let reply = wait_until_answered(&app).await;

    assert_eq!(reply, "resumed and answered");
    let last = llm.requests().last().expect("request").json();
    let result = last_tool_result(&last);
    assert_eq!(result["success"], false);
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("outcome is unknown"))
    );
    assert_eq!(app.count("outbox").await, 1);
    assert_eq!(running_checkpoints(&app.gateway.store).await, 0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_caught_running_is_rerun_with_the_same_request_id() {
    // http_get is idempotent; its target hangs during the first run only.
    let slow_first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let target = {
        let slow_first = std::sync::Arc::clone(&slow_first);
        let app = axum::Router::new().route(
            "/data",
            axum::routing::get(move || {
                let slow = slow_first.swap(false, std::sync::atomic::Ordering::SeqCst);
                async move {
                    if slow {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    "the data"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    };
    let url = format!("http://{target}/data");
    let llm = FakeLlm::start(move |body| {
        if last_is_tool_result(body) {
            Reply::Text("fetched".to_owned())
        } else {
            Reply::Tools(vec![(
                "call_h".to_owned(),
                "http_get".to_owned(),
                serde_json::json!({"url": url}).to_string(),
            )])
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings_for(&llm, &dir).await;
    settings.agent.tools.push("http_get".to_owned());
    settings.tools.http_get.allow_private = true;
    // Crash only once the first fetch has reached the target (and hangs).
    let fetched = std::sync::Arc::clone(&slow_first);
    crash_while_a_tool_runs(settings.clone(), move || {
        !fetched.load(std::sync::atomic::Ordering::SeqCst)
    });

    let app = TestApp::start(settings, dir).await;
    let reply = wait_until_answered(&app).await;

    assert_eq!(reply, "fetched");
    let last = llm.requests().last().expect("request").json();
    let result = last_tool_result(&last);
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(result["body"], "the data");
    assert_eq!(
        app.count("tool_calls").await,
        1,
        "the same checkpoint, re-run"
    );
    assert_eq!(
        llm.requests().len(),
        2,
        "the first model call is not repeated"
    );
    app.stop().await;
}

async fn settings_for(llm: &FakeLlm, dir: &tempfile::TempDir) -> Settings {
    let mut settings = test_settings(llm, dir).await;
    settings.agent.tools = vec!["calculator".to_owned(), "delegate".to_owned()];
    settings
}

/// With `tools.approval.in_doubt = "ask"` (the default), a non-idempotent
/// call a crash cut off is put to the person instead of being re-run or
/// silently dropped; "skip" tells the model, and the call never runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_doubt_after_a_crash_is_put_to_the_person_not_rerun() {
    use switchboard::session::approvals::{Decider, Verdict};
    use switchboard::session::notices::Answer;
    let llm = FakeLlm::start_with_delay(
        |body| delegate_forever(body, "went on without it"),
        Duration::from_millis(300),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings_for(&llm, &dir).await;
    settings.llm.max_retries = 0;
    crash_while_a_tool_runs(settings.clone(), || true);
    let sub_agent_calls = |llm: &FakeLlm| {
        llm.requests()
            .iter()
            .filter(|r| r.body.contains("You are a sub-agent"))
            .count()
    };
    let before = sub_agent_calls(&llm);

    let app = TestApp::start(settings, dir).await;
    let approval = eventually_some("the call in doubt to be asked about", || async {
        let rows: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM approvals WHERE kind = 'in_doubt' AND status = 'pending'",
        )
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("query");
        rows.first().copied()
    })
    .await;
    let row = app
        .gateway
        .store
        .approvals()
        .get(approval)
        .await
        .expect("read")
        .expect("row");
    assert_eq!(row.tool, "delegate");
    assert_eq!(sub_agent_calls(&llm), before, "not re-run while in doubt");
    let who = Decider {
        principal: row.principal_id,
        admin: false,
        label: "test".to_owned(),
        chat: None,
        pressed: None,
    };
    app.gateway
        .service
        .approvals()
        .decide(approval, None, &Verdict::Answer(Answer::Deny), &who, "test")
        .await
        .expect("decided")
        .expect("taken");
    let reply = eventually_some("the resumed task to be answered", || async {
        sqlx::query_scalar::<_, String>(
            "SELECT text FROM outbox WHERE approval_id IS NULL AND text NOT LIKE '%(#%' \
             ORDER BY id LIMIT 1",
        )
        .fetch_optional(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("query")
    })
    .await;
    assert_eq!(reply, "went on without it");
    let last = llm.requests().last().expect("request").json();
    let result = last_tool_result(&last);
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("chose not to run it again")),
        "{result}"
    );
    assert_eq!(sub_agent_calls(&llm), before, "skipped, never re-run");
    app.stop().await;
}

/// A round of an MCP image and a slow call, cut by a crash while the slow
/// one runs: after the restart the image's finished result is reused from
/// its checkpoint, and still shows the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_result_reused_after_a_crash_keeps_its_image() {
    let llm = FakeLlm::start(|body| {
        let answered = body["messages"]
            .as_array()
            .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool"));
        if answered {
            Reply::Text("resumed with the image".to_owned())
        } else {
            Reply::Tools(vec![
                (
                    "c_img".to_owned(),
                    "fake__image".to_owned(),
                    "{}".to_owned(),
                ),
                (
                    "c_slow".to_owned(),
                    "fake__slow".to_owned(),
                    r#"{"secs": 600}"#.to_owned(),
                ),
            ])
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let mut settings = settings_for(&llm, &dir).await;
    crate::mcp::with_server(&mut settings, crate::mcp::stdio_server(&log, None));
    settings.media.vision_models = vec!["fake-model".to_owned()];
    settings.tools.approval.in_doubt = switchboard::tools::approval::InDoubt::Skip;
    crash_when(
        settings.clone(),
        "status = 'done' AND media IS NOT NULL",
        || true,
    );

    let app = TestApp::start(settings, dir).await;
    let reply = wait_until_answered(&app).await;

    assert_eq!(reply, "resumed with the image");
    let image = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|line| *line == "call image")
        .count();
    assert_eq!(image, 1, "the image call is not run again");
    let last = llm.requests().last().expect("request").json();
    let messages = last["messages"].as_array().expect("messages");
    let images = messages.last().expect("a message");
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD
        .encode(switchboard_test_support::mcp::image_png());
    assert_eq!(
        *images,
        serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "Images returned by tool call c_img:"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}},
        ]})
    );
    let media: Option<String> = sqlx::query_scalar(
        "SELECT media FROM messages WHERE role = 'tool' AND tool_call_id = 'c_img'",
    )
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("the image's entry");
    assert!(media.is_some_and(|m| m.contains("image/png")));
    app.stop().await;
}
