//! What a user reads when a turn fails, and what the operator finds in the
//! log: each kind of model failure (unreachable, wrong endpoint, bad key,
//! rate limited, refused request, provider failure) and a database that
//! refuses the turn's writes get replies of their own, pinned here byte for
//! byte.

use reqwest::StatusCode;
use serde_json::Value;
use switchboard::llm::ModelFailure;
use switchboard::session::texts;

use crate::helpers::{FakeLlm, Reply, ServeProcess, TestApp, last_user_text};

/// The reply text (an API client's error message) and error code of a
/// failed completion.
fn reply_of(body: &Value) -> (String, String) {
    (
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn each_failing_status_gets_the_reply_for_its_kind() {
    // The message names the status the fake model answers with.
    let llm = FakeLlm::start(|body| {
        let status: u16 = last_user_text(body).parse().unwrap_or(200);
        Reply::Status(status, r#"{"error":{"message":"no"}}"#.to_owned())
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 1).await;
    // The model's status, its kind, and what an API client is answered.
    let cases = [
        (401, ModelFailure::Credentials, 502, "model_misconfigured"),
        (403, ModelFailure::Credentials, 502, "model_misconfigured"),
        (404, ModelFailure::Endpoint, 502, "model_misconfigured"),
        (429, ModelFailure::Busy, 503, "model_busy"),
        (503, ModelFailure::Busy, 503, "model_busy"),
        (400, ModelFailure::BadRequest, 400, "model_refused"),
        (500, ModelFailure::ProviderFailed, 502, "model_failed"),
    ];
    for (status, failure, answered, error_code) in cases {
        let (code, _, body) = app.chat(None, &status.to_string()).await;
        assert_eq!(code.as_u16(), answered, "HTTP {status}: {body}");
        let (text, code) = reply_of(&body);
        assert_eq!(text, texts::model_failure(failure), "HTTP {status}");
        assert_eq!(code, error_code);
        assert_eq!(app.outcome_of_last_turn().await, "model_error");
    }
    // Every kind reads differently.
    let distinct: std::collections::BTreeSet<&str> = cases
        .iter()
        .map(|(_, failure, _, _)| texts::model_failure(*failure))
        .collect();
    assert_eq!(distinct.len(), 5);
    app.stop().await;
}

#[tokio::test]
async fn a_wrong_base_url_is_reported_as_a_misconfigured_endpoint() {
    let llm = FakeLlm::echo().await;
    let wrong = format!("http://{}/wrong/v1", llm.addr);
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.base_url = switchboard::domain::BaseUrl::parse(&wrong).expect("a test URL");
        s.llm.max_retries = 0;
    })
    .await;

    let (_, _, body) = app.chat(None, "hello").await;

    assert_eq!(
        reply_of(&body).0,
        texts::model_failure(ModelFailure::Endpoint)
    );
    assert!(llm.requests().is_empty(), "nothing reached the real route");
    app.stop().await;
}

#[tokio::test]
async fn a_closed_port_is_reported_as_unreachable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.base_url =
            switchboard::domain::BaseUrl::parse(&format!("http://127.0.0.1:{port}/v1"))
                .expect("a test URL");
        s.llm.max_retries = 1;
    })
    .await;

    let (_, _, body) = app.chat(None, "hello").await;

    let (text, code) = reply_of(&body);
    assert_eq!(text, texts::model_failure(ModelFailure::Unreachable));
    assert_eq!(code, "model_unreachable");
    app.stop().await;
}

#[tokio::test]
async fn the_log_names_the_endpoint_and_status_but_no_secret() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let base_url = format!("http://sb:sk-userinfo-secret@{}/wrong/v1", llm.addr);
    let server = ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__LLM__MAX_RETRIES", "0"),
            ("OPENAI_API_KEY", "sk-failure-log-secret"),
        ],
        true,
    )
    .await;

    let reply = server.say("hello").await;

    assert_eq!(reply, texts::model_failure(ModelFailure::Endpoint));
    let logs = server.stop().await;
    let line = logs
        .lines()
        .find(|line| line.contains("check the model endpoint"))
        .unwrap_or_else(|| panic!("an endpoint error is logged: {logs}"));
    assert!(line.contains("ERROR"), "{line}");
    let endpoint = format!("http://{}/wrong/v1/chat/completions", llm.addr);
    assert!(line.contains(&endpoint), "{line}");
    assert!(line.contains("404"), "{line}");
    assert!(line.contains("wrong_endpoint"), "{line}");
    assert!(!logs.contains("sk-failure-log-secret"), "the key stays out");
    assert!(!logs.contains("sk-userinfo-secret"), "so does the URL's");
}

/// Makes the database refuse every new message of `role` (a trigger), as a
/// full disk or a broken replica would refuse a turn's writes.
async fn refuse_messages(app: &TestApp, role: &str) {
    let mut conn = app.gateway.store.conn().await.expect("conn");
    let statements = if app.gateway.store.is_shared() {
        vec![
            format!(
                "CREATE OR REPLACE FUNCTION refuse_{role}() RETURNS trigger AS $$ BEGIN \
                 IF NEW.role = '{role}' THEN RAISE EXCEPTION 'refused by the test'; END IF; \
                 RETURN NEW; END $$ LANGUAGE plpgsql"
            ),
            format!(
                "CREATE TRIGGER refuse_{role} BEFORE INSERT ON messages FOR EACH ROW \
                 EXECUTE FUNCTION refuse_{role}()"
            ),
        ]
    } else {
        vec![format!(
            "CREATE TRIGGER refuse_{role} BEFORE INSERT ON messages WHEN NEW.role = '{role}' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )]
    };
    for statement in statements {
        sqlx::raw_sql(&statement)
            .execute(&mut *conn)
            .await
            .expect("trigger created");
    }
}

async fn allow_messages(app: &TestApp, role: &str) {
    let mut conn = app.gateway.store.conn().await.expect("conn");
    let statement = if app.gateway.store.is_shared() {
        format!("DROP TRIGGER refuse_{role} ON messages")
    } else {
        format!("DROP TRIGGER refuse_{role}")
    };
    sqlx::raw_sql(&statement)
        .execute(&mut *conn)
        .await
        .expect("trigger dropped");
}

#[tokio::test]
async fn a_database_refusing_the_answer_ends_the_turn_with_its_own_reply() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "first").await;
    refuse_messages(&app, "assistant").await;

    let (code, _, body) = app.chat(Some(&session), "second").await;

    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    let (text, code) = reply_of(&body);
    assert_eq!(text, texts::STORE_FAILED);
    assert_eq!(code, "store_error");
    assert_eq!(app.outcome_of_last_turn().await, "store_error");
    assert_eq!(llm.requests().len(), 2, "the failed turn was not run again");
    let calls: Vec<String> = sqlx::query_scalar("SELECT status FROM usage ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("usage");
    assert_eq!(calls, ["done", "done"], "the model call is still accounted");

    allow_messages(&app, "assistant").await;
    let (_, reply) = app.say(Some(&session), "third").await;
    assert_eq!(reply, "echo: third", "the conversation goes on");
    app.stop().await;
}

#[tokio::test]
async fn a_database_refusing_the_message_ends_the_turn_before_any_model_call() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    refuse_messages(&app, "user").await;

    let (code, session, body) = app.chat(None, "hello").await;

    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply_of(&body).0, texts::STORE_FAILED);
    assert_eq!(app.outcome_of_last_turn().await, "store_error");
    assert!(
        llm.requests().is_empty(),
        "no model call without the message"
    );
    assert!(
        !texts::STORE_FAILED.contains("step budget"),
        "the old misleading text"
    );
    allow_messages(&app, "user").await;
    let session = session.expect("session header");
    let (_, reply) = app.say(Some(&session), "again").await;
    assert_eq!(reply, "echo: again");
    app.stop().await;
}
