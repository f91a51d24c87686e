//! The Telegram adapter wired into the gateway end to end: an update from a
//! fake Bot API (long polling) is answered through the agent and the outbox
//! with `sendMessage`, once even when the update is delivered again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use serde_json::{Value, json};
use switchboard_telegram::TelegramSettings;

use crate::helpers::{FakeLlm, TestApp};

const TOKEN: &str = "4242:TEST-token";

#[derive(Default)]
struct BotApi {
    updates: Mutex<VecDeque<Value>>,
    calls: Mutex<Vec<(String, Value)>>,
}

fn me() -> Value {
    json!({"id": 4242, "is_bot": true, "first_name": "Switchboard", "username": "sb_test_bot",
           "can_join_groups": true, "can_read_all_group_messages": false,
           "supports_inline_queries": false, "can_connect_to_business": false,
           "has_main_web_app": false})
}

async fn handle(
    State(api): State<Arc<BotApi>>,
    Path((_bot, method)): Path<(String, String)>,
    body: Bytes,
) -> Json<Value> {
    let method = method.to_ascii_lowercase();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    api.calls
        .lock()
        .expect("lock")
        .push((method.clone(), body.clone()));
    let result = match method.as_str() {
        "getme" => me(),
        "getwebhookinfo" => {
            json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0})
        }
        "getupdates" => {
            let next: Vec<Value> = api.updates.lock().expect("lock").drain(..).collect();
            if next.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            json!(next)
        }
        "sendmessage" => json!({
            "message_id": 900, "date": 1_700_000_000,
            "chat": {"id": body["chat_id"], "type": "private", "first_name": "Ada"},
            "from": me(), "text": body["text"],
        }),
        _ => json!(true),
    };
    Json(json!({"ok": true, "result": result}))
}

fn dm_update(update_id: u32) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": 10, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": "hello telegram"
    }})
}

#[tokio::test]
async fn a_telegram_update_is_answered_once_through_the_gateway() {
    // SAFETY (test): the variable name is unique to this test.
    unsafe { std::env::set_var("SB_TEST_TG_TOKEN", TOKEN) };
    let api = Arc::new(BotApi::default());
    let app = axum::Router::new()
        .route("/{bot}/{method}", post(handle))
        .with_state(Arc::clone(&api));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(TelegramSettings {
            token_env: "SB_TEST_TG_TOKEN".to_owned(),
            api_url: Some(url::Url::parse(&format!("http://{addr}/")).expect("url")),
            poll_timeout_secs: 1,
            ..TelegramSettings::default()
        });
    })
    .await;

    api.updates.lock().expect("lock").push_back(dm_update(1));
    let sent = |api: &BotApi| -> Vec<Value> {
        api.calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|(method, _)| method == "sendmessage")
            .map(|(_, body)| body.clone())
            .collect()
    };
    for _ in 0..300 {
        if !sent(&api).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The same update again (as after a restart of the poller).
    api.updates.lock().expect("lock").push_back(dm_update(1));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let sent = sent(&api);
    assert_eq!(sent.len(), 1, "one reply: {sent:?}");
    assert_eq!(sent[0]["chat_id"], 777);
    assert!(
        sent[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("echo: hello telegram"))
    );
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert_eq!(llm.requests().len(), 1);
    let replied: Vec<String> = sqlx::query_scalar("SELECT status FROM outbox")
        .fetch_all(&mut *gateway.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows");
    assert_eq!(replied, ["sent"]);
    gateway.stop().await;
}
