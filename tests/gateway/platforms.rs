//! A platform adapter wired into the gateway end to end: a Feishu event
//! posted to the gateway's webhook route is answered through the agent and
//! the outbox into a fake Feishu open API, once however often it is
//! redelivered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use serde_json::{Value, json};
use switchboard_feishu::{Domain, FeishuSettings};

use crate::helpers::{FakeLlm, TestApp};

type Replies = Arc<Mutex<Vec<(String, Value)>>>;

async fn fake_feishu() -> (String, Replies) {
    let replies: Replies = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/open-apis/auth/v3/tenant_access_token/internal",
            post(|| async {
                Json(json!({"code": 0, "tenant_access_token": "t-123", "expire": 7200}))
            }),
        )
        .route(
            "/open-apis/bot/v3/info",
            get(|| async {
                Json(json!({"code": 0, "bot": {"open_id": "ou_bot", "app_name": "sb"}}))
            }),
        )
        .route(
            "/open-apis/im/v1/messages/{id}/reply",
            post(
                |State(replies): State<Replies>,
                 Path(id): Path<String>,
                 Json(body): Json<Value>| async move {
                    replies.lock().expect("lock").push((id, body));
                    Json(json!({"code": 0, "data": {"message_id": "om_reply"}}))
                },
            ),
        )
        .with_state(Arc::clone(&replies));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), replies)
}

fn event(event_id: &str, text: &str) -> Value {
    json!({
        "schema": "2.0",
        "header": {"event_id": event_id, "event_type": "im.message.receive_v1",
                   "create_time": "1700000000000", "token": "verify-me", "app_id": "cli_test",
                   "tenant_key": "t"},
        "event": {
            "sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
            "message": {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "p2p",
                        "message_type": "text", "content": json!({"text": text}).to_string()}
        }
    })
}

#[tokio::test]
async fn a_feishu_event_is_answered_once_through_the_agent_and_the_outbox() {
    // SAFETY (test): variable names unique to this test.
    unsafe {
        std::env::set_var("SB_TEST_FS_SECRET", "app-secret");
        std::env::set_var("SB_TEST_FS_TOKEN", "verify-me");
    }
    let (feishu_url, replies) = fake_feishu().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut feishu = FeishuSettings::new("cli_test");
        feishu.app_secret_env = "SB_TEST_FS_SECRET".to_owned();
        feishu.verification_token_env = "SB_TEST_FS_TOKEN".to_owned();
        feishu.domain = Domain::Custom(feishu_url);
        s.feishu = Some(feishu);
    })
    .await;

    for _ in 0..4 {
        let response = app
            .http
            .post(app.url("/feishu/events"))
            .json(&event("ev-1", "hello feishu"))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200);
    }
    for _ in 0..300 {
        if !replies.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    let replies = replies.lock().expect("lock").clone();
    assert_eq!(replies.len(), 1, "four deliveries, one reply");
    let (target, body) = &replies[0];
    assert_eq!(target, "om_1");
    assert!(body.to_string().contains("echo: hello feishu"), "{body}");
    assert!(body["uuid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(llm.requests().len(), 1);
    let wrong = app
        .http
        .post(app.url("/feishu/events"))
        .json(&json!({"header": {"event_id": "x", "token": "nope", "event_type": "im.message.receive_v1"}, "schema": "2.0", "event": {}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(wrong.status(), 401);
    app.stop().await;
}
