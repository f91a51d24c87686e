//! Reading conversations back through the API (`GET /v1/sessions`, a
//! session's messages, one turn with `?wait`), and what each key may reach:
//! its own users' sessions only, never a group chat's; the request's model
//! and the content parts that are refused.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::config::NamedKeySettings;
use switchboard_contract::ChatKind;
use tokio::sync::{Semaphore, mpsc};

use crate::helpers::{FakeLlm, TestApp, last_user_text};
use crate::identity::Fake;

/// A model that answers `echo: <last user text>` only once the test lets
/// it: each request is reported on `asked`, then waits for a permit.
pub(crate) struct GatedLlm {
    base: String,
    gate: Arc<Semaphore>,
    asked: mpsc::UnboundedReceiver<Value>,
}

#[derive(Clone)]
struct Gate {
    gate: Arc<Semaphore>,
    asked: mpsc::UnboundedSender<Value>,
}

impl GatedLlm {
    pub(crate) async fn start() -> Self {
        let gate = Arc::new(Semaphore::new(0));
        let (tx, asked) = mpsc::unbounded_channel();
        let state = Gate {
            gate: Arc::clone(&gate),
            asked: tx,
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(gated))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base: format!("http://{addr}/v1"),
            gate,
            asked,
        }
    }

    /// Waits until the model is asked; returns the request.
    pub(crate) async fn asked(&mut self) -> Value {
        self.asked.recv().await.expect("the model is asked")
    }

    /// Lets one waiting (or future) request be answered.
    pub(crate) fn release(&self) {
        self.gate.add_permits(1);
    }
}

async fn gated(
    State(state): State<Gate>,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    let _ = state.asked.send(body.clone());
    state.gate.acquire().await.expect("gate open").forget();
    axum::Json(json!({
        "id": "chatcmpl-gated",
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant",
                                 "content": format!("echo: {}", last_user_text(&body))}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    }))
}

/// A gateway on the gated model, with a one-second reply timeout.
pub(crate) async fn gated_app(llm: &GatedLlm) -> TestApp {
    let unused = FakeLlm::echo().await;
    let base = llm.base.clone();
    TestApp::spawn_with(&unused, move |s| {
        s.llm.base_url = switchboard::domain::BaseUrl::parse(&base).expect("a test URL");
        s.llm.timeout = std::time::Duration::from_secs(300);
        s.api.reply_timeout = std::time::Duration::from_secs(1);
    })
    .await
}

/// An API response: status, `X-Session-Id`, JSON body.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) session: Option<String>,
    pub(crate) body: Value,
}

/// Reads `response` into an [`Answer`] (a body that is not JSON is `null`).
pub(crate) async fn answer_of(response: reqwest::Response) -> Answer {
    let status = StatusCode::from_u16(response.status().as_u16()).expect("status");
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        session,
        body,
    }
}

/// `GET path` with `key` (when given).
async fn get(app: &TestApp, key: Option<&str>, path: &str) -> Answer {
    let mut request = app.http.get(app.url(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    answer_of(request.send().await.expect("sent")).await
}

/// `POST /v1/chat/completions` with `body`, `key` and `session` (when given).
pub(crate) async fn post_chat(
    app: &TestApp,
    key: Option<&str>,
    session: Option<&str>,
    body: Value,
) -> Answer {
    let mut request = app.http.post(app.url("/v1/chat/completions")).json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    answer_of(request.send().await.expect("sent")).await
}

fn user_message(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

fn as_user(user: &str, text: &str) -> Value {
    json!({"user": user, "messages": [{"role": "user", "content": text}]})
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test]
async fn sessions_are_listed_most_recent_first_in_pages() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (first, _) = app.say(None, "first conversation").await;
    let (second, _) = app.say(None, "second conversation").await;
    let (third, _) = app.say(None, "third conversation").await;

    let page = get(&app, None, "/v1/sessions?limit=2").await;
    let cursor = page.body["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let rest = get(&app, None, &format!("/v1/sessions?limit=2&cursor={cursor}")).await;

    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(page.body["object"], "list");
    assert_eq!(page.body["has_more"], true);
    assert_eq!(rest.body["has_more"], false);
    let mut seen = ids(&page.body);
    seen.extend(ids(&rest.body));
    let mut expected = vec![first.clone(), second, third.clone()];
    assert_eq!(seen.len(), 3, "{seen:?}");
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "every session once");
    let newest = &page.body["data"][0];
    let oldest = &rest.body["data"][0];
    assert!(newest["last_activity_at"].as_i64() >= oldest["last_activity_at"].as_i64());
    let first_item = [&page.body["data"], &rest.body["data"]]
        .iter()
        .flat_map(|data| data.as_array().expect("data").iter())
        .find(|item| item["id"] == first.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(first_item["object"], "session");
    assert_eq!(first_item["platform"], "api");
    assert_eq!(first_item["model"], "fake-model");
    assert_eq!(first_item["preview"], "first conversation");
    app.stop().await;
}

#[tokio::test]
async fn messages_are_read_in_pages_with_their_turns_status() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "one").await;
    app.say(Some(&session), "two").await;

    let page = get(
        &app,
        None,
        &format!("/v1/sessions/{session}/messages?limit=3"),
    )
    .await;
    let last = page.body["last_id"].as_i64().expect("last id");
    let rest = get(
        &app,
        None,
        &format!("/v1/sessions/{session}/messages?limit=3&after={last}"),
    )
    .await;

    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(page.session.as_deref(), Some(session.as_str()));
    assert_eq!(page.body["has_more"], true);
    assert_eq!(rest.body["has_more"], false);
    let entries: Vec<Value> = [&page.body["data"], &rest.body["data"]]
        .iter()
        .flat_map(|data| data.as_array().expect("data").clone())
        .collect();
    let shown: Vec<(String, String, String)> = entries
        .iter()
        .map(|entry| {
            (
                entry["role"].as_str().unwrap_or_default().to_owned(),
                entry["content"].as_str().unwrap_or_default().to_owned(),
                entry["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
        ("assistant", "echo: two"),
    ];
    assert_eq!(
        shown,
        expected.map(|(role, text)| (role.to_owned(), text.to_owned(), "done".to_owned()))
    );
    assert_eq!(
        entries[0]["turn"], entries[1]["turn"],
        "one turn, two entries"
    );
    assert_ne!(entries[1]["turn"], entries[2]["turn"]);
    assert!(entries.iter().all(|e| e["object"] == "session.message"));
    app.stop().await;
}

#[tokio::test]
async fn a_reply_that_timed_out_is_waited_for_and_read_from_its_turn() {
    let mut llm = GatedLlm::start().await;
    let app = gated_app(&llm).await;

    let timed_out = post_chat(&app, None, None, user_message("slow question")).await;
    llm.asked().await;
    let session = timed_out.session.clone().expect("a 504 names its session");
    let turn = timed_out.body["error"]["turn"].as_i64().expect("turn");
    let reply_url = timed_out.body["error"]["reply_url"]
        .as_str()
        .expect("reply url")
        .to_owned();
    let running = get(&app, None, &reply_url).await;
    let listed = get(&app, None, &format!("/v1/sessions/{session}/messages")).await;
    // Two readers wait for the same turn: each gets it.
    let wait = || {
        let http = app.http.clone();
        let url = app.url(&format!("{reply_url}?wait=60"));
        tokio::spawn(async move { answer_of(http.get(url).send().await.expect("sent")).await })
    };
    let (waiting, also_waiting) = (wait(), wait());
    // (Given time to register, so that the wait is what answers them.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    llm.release();
    let finished = waiting.await.expect("waited");
    let also_finished = also_waiting.await.expect("waited");
    assert_eq!(
        also_finished.body["status"], "done",
        "{}",
        also_finished.body
    );
    let after = get(&app, None, &format!("/v1/sessions/{session}/messages")).await;

    assert_eq!(timed_out.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(reply_url, format!("/v1/sessions/{session}/turns/{turn}"));
    assert!(
        timed_out.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&reply_url)),
        "{}",
        timed_out.body
    );
    assert_eq!(running.status, StatusCode::OK, "{}", running.body);
    assert_eq!(running.body["status"], "running");
    assert_eq!(running.body["reply"], Value::Null);
    let entries = listed.body["data"].as_array().expect("data");
    let last = entries.last().expect("the question is listed");
    assert_eq!(last["content"], "slow question");
    assert_eq!(last["status"], "running");
    assert_eq!(finished.status, StatusCode::OK);
    assert_eq!(finished.session.as_deref(), Some(session.as_str()));
    assert_eq!(finished.body["object"], "session.turn");
    assert_eq!(finished.body["status"], "done");
    assert_eq!(finished.body["input"]["content"], "slow question");
    assert_eq!(finished.body["reply"]["content"], "echo: slow question");
    let statuses: Vec<&str> = after.body["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|e| e["status"].as_str())
        .collect();
    assert_eq!(statuses, ["done", "done"]);
    app.stop().await;
}

#[tokio::test]
async fn a_stopped_turn_reads_as_stopped() {
    let mut llm = GatedLlm::start().await;
    let app = gated_app(&llm).await;

    let timed_out = post_chat(&app, None, None, user_message("long job")).await;
    llm.asked().await;
    let session = timed_out.session.expect("session");
    let turn = timed_out.body["error"]["turn"].as_i64().expect("turn");
    let stop = post_chat(&app, None, Some(&session), user_message("/stop")).await;
    llm.release();
    let ended = get(
        &app,
        None,
        &format!("/v1/sessions/{session}/turns/{turn}?wait=60"),
    )
    .await;

    assert_eq!(stop.status, StatusCode::OK, "{}", stop.body);
    assert_eq!(ended.body["status"], "stopped", "{}", ended.body);
    assert_eq!(ended.body["outcome"], "cancelled");
    app.stop().await;
}

#[tokio::test]
async fn a_key_reaches_only_its_own_users_and_sessions() {
    // SAFETY (test): the variable name is unique to this test.
    unsafe { std::env::set_var("SB_TEST_KEYS_TENANTS", "key-a, key-b") };
    let llm = FakeLlm::echo().await;
    let app =
        TestApp::spawn_with(&llm, |s| s.api.keys_env = "SB_TEST_KEYS_TENANTS".to_owned()).await;
    let a = Some("key-a");
    let b = Some("key-b");

    let alice_a = post_chat(&app, a, None, as_user("alice", "secret plan")).await;
    let session = alice_a.session.expect("session");
    let turn = alice_a.body["id"]
        .as_str()
        .and_then(|id| id.strip_prefix("chatcmpl-"))
        .expect("turn in the completion id")
        .to_owned();
    let inbound_before = app.count("inbound").await;
    let listed_by_b = get(&app, b, "/v1/sessions").await;
    let read_by_b = get(&app, b, &format!("/v1/sessions/{session}/messages")).await;
    let turn_by_b = get(&app, b, &format!("/v1/sessions/{session}/turns/{turn}")).await;
    let continued_by_b = post_chat(&app, b, Some(&session), user_message("tell me")).await;
    let inbound_after_refusals = app.count("inbound").await;
    let alice_b = post_chat(&app, b, None, as_user("alice", "who am i")).await;
    let listed_by_a = get(&app, a, "/v1/sessions").await;
    let read_by_a = get(&app, a, &format!("/v1/sessions/{session}/messages")).await;

    assert_eq!(listed_by_b.status, StatusCode::OK);
    assert_eq!(ids(&listed_by_b.body), Vec::<String>::new());
    for refused in [&read_by_b, &turn_by_b, &continued_by_b] {
        assert_eq!(refused.status, StatusCode::NOT_FOUND, "{}", refused.body);
        assert_eq!(refused.session.as_deref(), Some(session.as_str()));
    }
    assert_eq!(inbound_after_refusals, inbound_before, "nothing stored");
    assert_eq!(alice_b.status, StatusCode::OK);
    assert_ne!(alice_b.session.as_deref(), Some(session.as_str()));
    let asked = llm.requests().last().expect("request").json();
    assert_eq!(
        asked["messages"].as_array().map(Vec::len),
        Some(2),
        "key B's alice is not key A's: no history of hers"
    );
    assert_eq!(ids(&listed_by_a.body), std::slice::from_ref(&session));
    assert_eq!(read_by_a.status, StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn a_named_key_acts_only_for_its_listed_users() {
    // SAFETY (test): the variable names are unique to this test.
    unsafe {
        std::env::set_var("SB_TEST_KEY_WEB", "web-secret");
        std::env::set_var("SB_TEST_KEY_SOLO", "solo-secret");
    }
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.api.keys.insert(
            "web".to_owned(),
            NamedKeySettings {
                env: "SB_TEST_KEY_WEB".to_owned(),
                users: Some(vec!["alice".to_owned(), "bob".to_owned()]),
            },
        );
        s.api.keys.insert(
            "solo".to_owned(),
            NamedKeySettings {
                env: "SB_TEST_KEY_SOLO".to_owned(),
                users: Some(vec!["carol".to_owned()]),
            },
        );
    })
    .await;
    let web = Some("web-secret");
    let solo = Some("solo-secret");

    let alice = post_chat(&app, web, None, as_user("alice", "hello")).await;
    let alice_session = alice.session.expect("session");
    let stranger = post_chat(&app, web, None, as_user("mallory", "hello")).await;
    let nobody = post_chat(&app, web, None, user_message("hello")).await;
    let carol = post_chat(&app, solo, None, user_message("hello")).await;
    let read_by_solo = get(
        &app,
        solo,
        &format!("/v1/sessions/{alice_session}/messages"),
    )
    .await;
    let as_bob = post_chat(
        &app,
        web,
        Some(&alice_session),
        as_user("bob", "reading alice's chat"),
    )
    .await;
    let alice_listed = get(&app, web, "/v1/sessions?user=alice").await;
    let carol_listed_by_web = get(&app, web, "/v1/sessions?user=carol").await;
    let solo_listed = get(&app, solo, "/v1/sessions").await;

    assert_eq!(alice.status, StatusCode::OK);
    assert_eq!(stranger.status, StatusCode::FORBIDDEN, "{}", stranger.body);
    assert_eq!(nobody.status, StatusCode::BAD_REQUEST, "{}", nobody.body);
    assert!(
        nobody.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("alice, bob")),
        "{}",
        nobody.body
    );
    assert_eq!(
        carol.status,
        StatusCode::OK,
        "a one-user key acts as that user"
    );
    assert_eq!(read_by_solo.status, StatusCode::NOT_FOUND);
    assert_eq!(
        as_bob.status,
        StatusCode::NOT_FOUND,
        "a key's users do not reach each other's sessions"
    );
    assert_eq!(ids(&alice_listed.body), [alice_session]);
    assert_eq!(carol_listed_by_web.status, StatusCode::FORBIDDEN);
    assert_eq!(ids(&solo_listed.body), [carol.session.expect("session")]);
    app.stop().await;
}

#[tokio::test]
async fn group_sessions_are_never_reachable_through_the_api() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    fake.say(&app, "alice", "group-1", ChatKind::Group, "hi all")
        .await;
    let group: String = sqlx::query_scalar("SELECT id FROM sessions WHERE principal_id IS NULL")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("the group's session");
    let inbound_before = app.count("inbound").await;

    let read = get(&app, None, &format!("/v1/sessions/{group}/messages")).await;
    let written = post_chat(&app, None, Some(&group), user_message("let me in")).await;
    let listed = get(&app, None, "/v1/sessions").await;

    assert_eq!(read.status, StatusCode::NOT_FOUND);
    assert_eq!(read.session.as_deref(), Some(group.as_str()));
    assert_eq!(written.status, StatusCode::NOT_FOUND, "{}", written.body);
    assert_eq!(app.count("inbound").await, inbound_before, "nothing stored");
    assert!(!ids(&listed.body).contains(&group));
    app.stop().await;
}

#[tokio::test]
async fn the_requested_model_is_used_and_an_unknown_one_is_refused() {
    let llm = FakeLlm::echo().await;
    let app =
        TestApp::spawn_with(&llm, |s| s.llm.extra_models = vec!["big-model".to_owned()]).await;

    let chosen = post_chat(
        &app,
        None,
        None,
        json!({"model": "big-model", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let session = chosen.session.clone().expect("session");
    let used = llm.requests().last().expect("request").json()["model"].clone();
    let kept = post_chat(&app, None, Some(&session), user_message("again")).await;
    let kept_used = llm.requests().last().expect("request").json()["model"].clone();
    let calls_before = llm.requests().len();
    let inbound_before = app.count("inbound").await;
    let unknown = post_chat(
        &app,
        None,
        Some(&session),
        json!({"model": "gpt-9000", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;

    assert_eq!(chosen.status, StatusCode::OK, "{}", chosen.body);
    assert_eq!(used, "big-model");
    assert_eq!(chosen.body["model"], "big-model");
    assert_eq!(kept.status, StatusCode::OK);
    assert_eq!(
        kept_used, "big-model",
        "without `model` the session's stands"
    );
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(unknown.session.as_deref(), Some(session.as_str()));
    let message = unknown.body["error"]["message"].as_str().expect("message");
    assert!(message.contains("fake-model, big-model"), "{message}");
    assert_eq!(llm.requests().len(), calls_before);
    assert_eq!(app.count("inbound").await, inbound_before, "nothing stored");
    app.stop().await;
}

#[tokio::test]
async fn an_image_part_is_refused_and_nothing_is_stored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let refused = post_chat(
        &app,
        None,
        None,
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
        ]}]}),
    )
    .await;

    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("image_url")),
        "{}",
        refused.body
    );
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn bad_reads_get_clear_errors() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "hello").await;

    let bad_limit = get(&app, None, "/v1/sessions?limit=0").await;
    let bad_cursor = get(&app, None, "/v1/sessions?cursor=nonsense").await;
    let bad_after = get(
        &app,
        None,
        &format!("/v1/sessions/{session}/messages?after=x"),
    )
    .await;
    let bad_turn = get(&app, None, &format!("/v1/sessions/{session}/turns/abc")).await;
    let missing = get(&app, None, "/v1/sessions/no-such-session/messages").await;

    assert_eq!(bad_limit.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_cursor.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_after.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_after.session.as_deref(), Some(session.as_str()));
    assert_eq!(bad_turn.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body["error"]["type"], "invalid_request_error");
    app.stop().await;
}
