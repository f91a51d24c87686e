//! Scheduled and background tasks through the real gateway: the model
//! calls `schedule_task`, the gateway's clock is moved (never waited for),
//! and each due run is one turn whose answer reaches the chat the task was
//! made in, once; `/tasks` and `/timezone` change them; bad arguments are
//! tool errors that store nothing.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard_test_support::eventually;
use switchboard_test_support::telegram::FakeTelegram;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text};

/// The model: `schedule {json}` calls `schedule_task` with those
/// arguments and then answers with the tool's result; a task's run
/// (`[scheduled task N] …`) is answered `done: …`; anything else echoed.
fn planner(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if last_is_tool_result(body) {
        let result = messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        return Reply::Text(format!("tool said: {result}"));
    }
    let text = last_user_text(body);
    if let Some(arguments) = text.strip_prefix("schedule ") {
        let id = format!("call_{}", messages.len());
        return Reply::Tools(vec![(id, "schedule_task".to_owned(), arguments.to_owned())]);
    }
    if text.starts_with("[scheduled task") || text.starts_with("[background task") {
        return Reply::Text(format!("done: {text}"));
    }
    Reply::Text(format!("echo: {text}"))
}

fn with_tasks(settings: &mut Settings) {
    settings.agent.tools.extend(
        ["schedule_task", "list_tasks", "cancel_task"]
            .iter()
            .map(|tool| (*tool).to_owned()),
    );
    settings.tasks.min_interval = Duration::from_secs(1);
}

/// The assistant texts of the API session `session`.
async fn assistant_texts(app: &TestApp, session: &str) -> Vec<String> {
    app.stored_history(session)
        .await
        .into_iter()
        .filter(|entry| entry.message.role == switchboard::domain::Role::Assistant)
        .filter_map(|entry| entry.message.content)
        .collect()
}

/// How many model requests answered a run of a task.
fn runs_seen(llm: &FakeLlm) -> usize {
    llm.requests()
        .iter()
        .filter(|r| last_user_text(&r.json()).starts_with("[scheduled task"))
        .count()
}

async fn task_count(app: &TestApp) -> i64 {
    app.count("tasks").await
}

#[tokio::test]
async fn a_reminder_made_by_the_model_is_delivered_once_when_the_clock_reaches_it() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, with_tasks).await;
    let args = json!({"prompt": "Remind the person to stretch", "in": "90s"});
    let (session, reply) = app.say(None, &format!("schedule {args}")).await;
    assert!(reply.contains("\"task_id\":1"), "{reply}");
    assert!(reply.contains("next_run"), "{reply}");

    // Not yet due: nothing runs.
    app.gateway.clock.advance(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runs_seen(&llm), 0);

    app.gateway.clock.advance(Duration::from_secs(31));
    eventually("the reminder in the conversation", || async {
        assistant_texts(&app, &session)
            .await
            .iter()
            .any(|text| text.starts_with("done: [scheduled task 1] Remind the person to stretch"))
    })
    .await;
    // Later, the conversation goes on with the reminder in its context.
    app.gateway.clock.advance(Duration::from_secs(3600));
    let (_, reply) = app.say(Some(&session), "tell me more").await;
    assert_eq!(reply, "echo: tell me more");
    let last = llm.requests().last().cloned().expect("a request");
    let context = last.body.clone();
    assert!(context.contains("[scheduled task 1]"), "{context}");
    assert_eq!(runs_seen(&llm), 1, "one run, once");
    let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = 1")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row");
    assert_eq!(status, "done");
    app.stop().await;
}

#[tokio::test]
async fn a_recurring_task_runs_once_per_due_time_and_stops_at_its_count() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, with_tasks).await;
    let args = json!({"prompt": "Check the weather", "every": "10m", "count": 2});
    let (session, _) = app.say(None, &format!("schedule {args}")).await;

    for run in 1..=2 {
        app.gateway.clock.advance(Duration::from_secs(600));
        eventually("the run's answer", || async {
            assistant_texts(&app, &session)
                .await
                .iter()
                .filter(|text| text.starts_with("done: [scheduled task 1]"))
                .count()
                == run
        })
        .await;
    }
    // Its count reached: no third run, however far the clock moves.
    app.gateway.clock.advance(Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs_seen(&llm), 2);
    let runs: Vec<(String, String)> =
        sqlx::query_as("SELECT trigger, status FROM task_runs ORDER BY id")
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
    assert_eq!(
        runs,
        [
            ("schedule".into(), "done".into()),
            ("schedule".into(), "done".into())
        ]
    );
    app.stop().await;
}

#[tokio::test]
async fn a_cron_task_fires_at_its_local_time() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, with_tasks).await;
    // Every minute, so that a moved clock reaches it whatever the time now.
    let args = json!({"prompt": "Tick", "cron": "* * * * *", "timezone": "Europe/Paris"});
    let (session, reply) = app.say(None, &format!("schedule {args}")).await;
    assert!(reply.contains("Europe/Paris"), "{reply}");
    app.gateway.clock.advance(Duration::from_secs(61));
    eventually("the cron run", || async {
        assistant_texts(&app, &session)
            .await
            .iter()
            .any(|text| text.starts_with("done: [scheduled task 1] Tick"))
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn background_work_answers_at_once_then_delivers_to_the_conversation() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, with_tasks).await;
    let args = json!({"prompt": "Research the history of tea", "background": true});
    let (session, reply) = app.say(None, &format!("schedule {args}")).await;
    assert!(reply.contains("\"background\":true"), "{reply}");

    eventually(
        "the background answer relayed to the conversation",
        || async {
            assistant_texts(&app, &session).await.iter().any(|text| {
                text.starts_with("done: [background task 1] Research the history of tea")
            })
        },
    )
    .await;
    let texts = assistant_texts(&app, &session).await;
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.starts_with("done: [background task 1]"))
            .count(),
        1,
        "{texts:?}"
    );
    // The work ran in a session of its own.
    let sessions: i64 = app.count("sessions").await;
    assert_eq!(sessions, 2);
    app.stop().await;
}

#[tokio::test]
async fn bad_schedules_are_tool_errors_the_model_can_correct_and_store_nothing() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_tasks(s);
        s.tasks.min_interval = Duration::from_secs(300);
    })
    .await;
    let cases = [
        (json!({"prompt": "x", "at": "next tuesday-ish"}), "at"),
        (json!({"prompt": "x", "every": "1m"}), "300"),
        (
            json!({"prompt": "x", "in": "1h", "timezone": "Mars/Olympus_Mons"}),
            "Mars/Olympus_Mons",
        ),
        (json!({"prompt": "x", "cron": "0 0 9 * * 1"}), "five"),
        (json!({"prompt": "x", "in": "1h", "every": "1h"}), "one of"),
    ];
    for (args, hint) in cases {
        let (_, reply) = app.say(None, &format!("schedule {args}")).await;
        assert!(reply.starts_with("tool said: "), "{reply}");
        assert!(
            reply.to_lowercase().contains(&hint.to_lowercase()),
            "{args}: {reply}"
        );
    }
    assert_eq!(task_count(&app).await, 0);
    app.stop().await;
}

#[tokio::test]
async fn a_run_late_within_the_catch_up_window_fires_once_and_one_later_is_missed() {
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_tasks(s);
        s.tasks.catch_up = Duration::from_secs(600);
    })
    .await;
    let soon = json!({"prompt": "Soon", "in": "60s"});
    let (session, _) = app.say(None, &format!("schedule {soon}")).await;
    // Hold the scheduler off while the clock jumps past the first task's
    // time by less than the window: it fires once, late.
    app.gateway.clock.advance(Duration::from_secs(300));
    eventually("the late run", || async {
        assistant_texts(&app, &session)
            .await
            .iter()
            .any(|t| t.starts_with("done: [scheduled task 1] Soon"))
    })
    .await;

    let every = json!({"prompt": "Hourly", "every": "1h"});
    app.say(Some(&session), &format!("schedule {every}")).await;
    // Five hours pass at once: the run due an hour in is far too late, so
    // it is recorded as missed and the next one after now is scheduled;
    // no burst of old runs.
    app.gateway.clock.advance(Duration::from_secs(5 * 3600));
    eventually("the missed run recorded", || async {
        let missed: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM task_runs WHERE task_id = 2 AND status = 'missed'",
        )
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
        missed == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let texts = assistant_texts(&app, &session).await;
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with("done: [scheduled task 2]")),
        "{texts:?}"
    );
    let next: i64 = sqlx::query_scalar("SELECT next_run_at FROM tasks WHERE id = 2")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("next");
    assert!(next > app.gateway.clock.now_ms(), "the next run is ahead");
    app.stop().await;
}

fn dm(update_id: u32, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": text
    }})
}

#[tokio::test]
async fn a_telegram_reminder_arrives_once_and_tasks_are_managed_from_the_chat() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_tasks(s);
        s.telegram = Some(crate::helpers::telegram_settings(&telegram));
    })
    .await;
    let sent_with = |needle: &str| {
        telegram
            .sent()
            .iter()
            .filter(|m| m.text.contains(needle))
            .count()
    };
    telegram.push(dm(1, "/timezone Europe/Paris"));
    telegram
        .wait_for("the zone set", || sent_with("Europe/Paris") == 1)
        .await;
    let args = json!({"prompt": "Call mum", "in": "2m"});
    telegram.push(dm(2, &format!("schedule {args}")));
    telegram
        .wait_for("the task made", || sent_with("tool said") == 1)
        .await;
    assert!(
        telegram.sent()[1].text.contains("Europe/Paris"),
        "{:?}",
        telegram.sent()
    );
    telegram.push(dm(3, "/tasks"));
    telegram
        .wait_for("the list", || sent_with("Call mum") == 1)
        .await;

    app.gateway.clock.advance(Duration::from_secs(121));
    telegram
        .wait_for("the reminder", || {
            sent_with("done: [scheduled task 1]") == 1
        })
        .await;
    app.gateway.clock.advance(Duration::from_secs(3600));
    telegram.settled().await;
    assert_eq!(sent_with("done: [scheduled task 1]"), 1);

    // A recurring one, paused, run by hand, resumed, cancelled.
    let args = json!({"prompt": "Water the plants", "every": "1h"});
    telegram.push(dm(4, &format!("schedule {args}")));
    telegram
        .wait_for("the second task", || sent_with("tool said") == 2)
        .await;
    for (n, command, expected) in [
        (5, "/tasks pause 2", "Task 2 is paused."),
        (6, "/tasks run 2", "Task 2 runs now"),
        (7, "/tasks resume 2", "Task 2 is resumed."),
        (8, "/tasks cancel 2", "Task 2 is cancelled."),
        (9, "/tasks cancel 2", "Task 2 cannot be cancelled now"),
        (10, "/tasks pause 99", "You have no task 99 here"),
    ] {
        telegram.push(dm(n, command));
        telegram
            .wait_for(command, || sent_with(expected) == 1)
            .await;
    }
    telegram
        .wait_for("the run by hand", || {
            sent_with("done: [scheduled task 2]") == 1
        })
        .await;
    app.gateway.clock.advance(Duration::from_secs(7200));
    telegram.settled().await;
    assert_eq!(
        sent_with("done: [scheduled task 2]"),
        1,
        "cancelled: no more runs"
    );
    app.stop().await;
}

const HOOK_KEY_ENV: &str = "SB_TEST_TASK_HOOK_KEY";

fn sign(secret: &str, body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn the_api_makes_lists_fires_and_cancels_tasks_and_hooks_are_signed() {
    static KEY_SET: std::sync::Once = std::sync::Once::new();
    // SAFETY (test): set once per process, before any gateway reads it.
    KEY_SET.call_once(|| unsafe { std::env::set_var(HOOK_KEY_ENV, "hook-master-key") });
    let llm = FakeLlm::start(planner).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_tasks(s);
        s.tasks.hooks_key_env = HOOK_KEY_ENV.to_owned();
    })
    .await;
    let (session, _) = app.say(None, "hello").await;
    let http = &app.http;

    // Refused: no session, a bad schedule, another session.
    for body in [
        json!({"prompt": "x", "in": "1h"}),
        json!({"session_id": session, "prompt": "x", "every": "soon"}),
    ] {
        let response = http
            .post(app.url("/v1/tasks"))
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 400, "{body}");
    }
    let response = http
        .post(app.url("/v1/tasks"))
        .json(&json!({"session_id": "0190d5f0-0000-7000-8000-000000000000", "prompt": "x", "in": "1h"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 404);
    assert_eq!(task_count(&app).await, 0);

    let made: Value = http
        .post(app.url("/v1/tasks"))
        .json(&json!({"session_id": session, "prompt": "Summarise the alert", "every": "1d", "hook": true}))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    let id = made["id"].as_i64().expect("id");
    let secret = made["hook_secret"].as_str().expect("secret").to_owned();
    assert_eq!(made["status"], "active");
    let listed: Value = http
        .get(app.url("/v1/tasks"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["object"], "list");
    assert_eq!(listed["data"][0]["id"], id);
    assert!(
        listed["data"][0].get("hook_secret").is_none(),
        "the secret is shown once"
    );
    let stored: Option<String> = sqlx::query_scalar("SELECT hook_nonce FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row");
    assert_ne!(
        stored.as_deref(),
        Some(secret.as_str()),
        "the secret itself is not stored"
    );

    // A hook: unsigned and wrongly signed requests change nothing.
    let body = br#"{"alert":"disk full on db-1"}"#;
    let hook = app.url(&format!("/hooks/tasks/{id}"));
    for signature in [None, Some(sign("wrong", body))] {
        let mut request = http.post(&hook).body(body.to_vec());
        if let Some(signature) = signature {
            request = request.header("X-Switchboard-Signature", signature);
        }
        assert_eq!(request.send().await.expect("sent").status(), 401);
    }
    assert_eq!(app.count("task_runs").await, 0);
    for expected in ["queued", "duplicate"] {
        let response = http
            .post(&hook)
            .header("X-Switchboard-Signature", sign(&secret, body))
            .body(body.to_vec())
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 202);
        let answer: Value = response.json().await.expect("json");
        assert_eq!(answer["run"], expected);
    }
    eventually("the hook's run answered in the session", || async {
        assistant_texts(&app, &session).await.iter().any(|t| {
            t.starts_with("done: [scheduled task 1] Summarise the alert")
                && t.contains("disk full on db-1")
        })
    })
    .await;
    let runs: Value = http
        .get(app.url(&format!("/v1/tasks/{id}/runs")))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(runs["data"].as_array().map(Vec::len), Some(1), "{runs}");
    assert_eq!(runs["data"][0]["trigger"], "hook");

    let cancelled: Value = http
        .delete(app.url(&format!("/v1/tasks/{id}")))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(cancelled["status"], "cancelled");
    let listed: Value = http
        .get(app.url("/v1/tasks"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(0));
    let all: Value = http
        .get(app.url("/v1/tasks?status=cancelled"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(all["data"][0]["id"], id);
    let gone = http
        .get(app.url("/v1/tasks/999"))
        .send()
        .await
        .expect("sent");
    assert_eq!(gone.status(), 404);
    app.stop().await;
}
