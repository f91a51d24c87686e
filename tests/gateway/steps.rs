//! Model calls are recorded steps (status, request id, timings, tokens and a
//! cost estimate), and a principal's daily spend cap stops its work with a
//! message while other people go on.

use std::collections::BTreeMap;

use switchboard::usage::Price;

use crate::helpers::{FakeLlm, Reply, TestApp, endless_calculator, last_is_tool_result};

/// Each fake call reports 120 input tokens (100 of them cache reads) and 7
/// output tokens: 20 × $1000/M + 100 × $100/M + 7 × $2000/M = $0.044.
const CALL_NANOUSD: i64 = 44_000_000;

fn prices() -> BTreeMap<String, Price> {
    BTreeMap::from([(
        "fake-model".to_owned(),
        Price {
            input: 1000.0,
            output: 2000.0,
            cache_read: 100.0,
            cache_write: 1250.0,
            cache_write_1h: None,
        },
    )])
}

type StepRow = (
    String,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

async fn steps(app: &TestApp) -> Vec<StepRow> {
    sqlx::query_as(
        "SELECT status, request_id, started_at, finished_at, cost_nanousd, principal_id \
         FROM usage ORDER BY id",
    )
    .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("rows")
}

#[tokio::test]
async fn every_model_call_is_a_recorded_step_with_timings_tokens_and_cost() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Text("done".to_owned())
        } else {
            Reply::Tools(vec![(
                "c1".to_owned(),
                "calculator".to_owned(),
                "{\"expression\":\"2+2\"}".to_owned(),
            )])
        }
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| s.prices = prices()).await;

    let (session, reply) = app.say(None, "add").await;

    assert_eq!(reply, "done");
    let rows = steps(&app).await;
    assert_eq!(rows.len(), 2, "two model calls: {rows:?}");
    let mut ids = Vec::new();
    for (status, request_id, started, finished, cost, principal) in &rows {
        assert_eq!(status, "done");
        let request_id = request_id.clone().expect("request id");
        assert!(request_id.starts_with("mc-"), "{request_id}");
        ids.push(request_id);
        assert!(started.expect("started") <= finished.expect("finished"));
        assert_eq!(*cost, Some(CALL_NANOUSD));
        assert!(principal.is_some(), "charged to the sender");
    }
    ids.dedup();
    assert_eq!(ids.len(), 2, "request ids are unique");
    let (tokens, cost_micros): (i64, i64) =
        sqlx::query_as("SELECT input_tokens, cost_micros FROM sessions WHERE id = $1")
            .bind(&session)
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("session");
    assert_eq!(tokens, 240);
    assert_eq!(
        cost_micros,
        2 * CALL_NANOUSD / 1000,
        "the session's cost total"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_failed_model_call_is_recorded_as_failed_with_its_reason() {
    let llm =
        FakeLlm::start(|_| Reply::Status(400, "{\"error\":{\"message\":\"bad\"}}".to_owned()))
            .await;
    let app = TestApp::spawn(&llm).await;

    let (_, reply) = app.say(None, "hello").await;

    assert_eq!(
        reply,
        switchboard::session::texts::model_failure(switchboard::llm::ModelFailure::BadRequest)
    );
    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT status, error FROM usage ORDER BY id")
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
    assert_eq!(rows.len(), 1, "one call, not retried on a 400: {rows:?}");
    assert_eq!(rows[0].0, "failed");
    let error = rows[0].1.clone().expect("the reason is recorded");
    assert!(error.contains("400"), "{error}");
    app.stop().await;
}

#[tokio::test]
async fn a_principal_over_its_daily_spend_is_stopped_and_others_go_on() {
    let llm = FakeLlm::start(endless_calculator).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.prices = prices();
        // Room for two calls at $0.044; the third crosses the cap.
        s.limits.principal_daily_usd = 0.1;
    })
    .await;

    let (session, reply) = app.say_as("ada", "count forever").await;

    assert_eq!(
        reply,
        "Stopped: today's spending limit of $0.10 is reached (it resets at 00:00 UTC)."
    );
    assert_eq!(llm.requests().len(), 3, "stopped before the fourth call");
    assert_eq!(app.outcome_of_last_turn().await, "spend_limit");
    let history = app.wire_history(&session).await;
    let last = history.last().expect("entries");
    assert!(
        matches!(last.message, switchboard::domain::ChatMessage::Tool { .. }),
        "the last call has its result"
    );

    // The same person is refused without another model call, today.
    let (_, again) = app.say_as("ada", "one more").await;
    assert!(
        again.starts_with("Stopped: today's spending limit"),
        "{again}"
    );
    assert_eq!(llm.requests().len(), 3);

    // Compacting needs a model call too.
    let (_, compact) = app.say_as("ada", "/compact").await;
    assert!(
        compact.starts_with("Compacting needs a model call"),
        "{compact}"
    );
    assert_eq!(llm.requests().len(), 3);

    // Someone else still gets answers.
    let (_, other) = app.say_as("grace", "count forever").await;
    assert!(
        other.starts_with("Stopped: today's spending limit"),
        "{other}"
    );
    assert_eq!(llm.requests().len(), 6, "grace has her own allowance");
    app.stop().await;
}
