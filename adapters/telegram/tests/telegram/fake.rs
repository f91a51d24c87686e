//! A fake Telegram Bot API on 127.0.0.1:0: serves `/bot<token>/<Method>`,
//! answers `{"ok":…}` envelopes, records every request, and plays scripted
//! answers (errors, rate limits) before its defaults.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use url::Url;

pub const BOT_ID: u64 = 999;
pub const BOT_USERNAME: &str = "SwitchboardBot";

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
}

struct FakeState {
    token: String,
    calls: Mutex<Vec<Call>>,
    scripted: Mutex<HashMap<String, VecDeque<(StatusCode, Value)>>>,
    updates: Mutex<VecDeque<Value>>,
    next_message_id: AtomicI64,
}

pub struct FakeBotApi {
    pub url: Url,
    state: Arc<FakeState>,
    server: JoinHandle<()>,
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeBotApi {
    pub async fn start(token: &str) -> Self {
        let state = Arc::new(FakeState {
            token: token.to_owned(),
            calls: Mutex::new(Vec::new()),
            scripted: Mutex::new(HashMap::new()),
            updates: Mutex::new(VecDeque::new()),
            next_message_id: AtomicI64::new(5000),
        });
        let app = Router::new()
            .route("/{bot}/{method}", post(handle))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake serves");
        });
        Self {
            url: Url::parse(&format!("http://127.0.0.1:{port}/")).expect("url"),
            state,
            server,
        }
    }

    /// The next call of `method` gets this answer instead of the default.
    pub fn script(&self, method: &str, status: u16, body: Value) {
        self.state
            .scripted
            .lock()
            .unwrap()
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back((StatusCode::from_u16(status).expect("status"), body));
    }

    /// Queues updates for the next `getUpdates`.
    pub fn push_updates(&self, updates: impl IntoIterator<Item = Value>) {
        self.state.updates.lock().unwrap().extend(updates);
    }

    /// The bodies of every call of `method`, in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|call| call.method.eq_ignore_ascii_case(method))
            .map(|call| call.body.clone())
            .collect()
    }

    /// The texts Telegram accepted through `sendMessage` (scripted failures
    /// excluded).
    pub fn delivered_texts(&self) -> Vec<String> {
        self.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|call| call.method == "sendmessage" && call.body["__delivered"] == true)
            .map(|call| call.body["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

async fn handle(
    State(state): State<Arc<FakeState>>,
    Path((bot, method)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    // teloxide writes `GetMe`, the docs `getMe`: Telegram ignores the case.
    let method = method.to_ascii_lowercase();
    if bot != format!("bot{}", state.token) {
        return envelope_error(StatusCode::UNAUTHORIZED, "Unauthorized", None);
    }
    // JSON for most methods; multipart (`setWebhook`) is kept raw.
    let mut body: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| json!({"__raw": String::from_utf8_lossy(&body)}));
    let scripted = state
        .scripted
        .lock()
        .unwrap()
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    let response = match scripted {
        Some((status, value)) => (status, axum::Json(value)).into_response(),
        None => {
            let result = default_result(&state, &method, &body).await;
            if method == "sendmessage" {
                body["__delivered"] = json!(true);
            }
            axum::Json(json!({"ok": true, "result": result})).into_response()
        }
    };
    state.calls.lock().unwrap().push(Call { method, body });
    response
}

async fn default_result(state: &FakeState, method: &str, body: &Value) -> Value {
    match method {
        "getme" => me(),
        "getwebhookinfo" => {
            json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0})
        }
        "getupdates" => {
            let updates: Vec<Value> = state.updates.lock().unwrap().drain(..).collect();
            if updates.is_empty() && body["timeout"].as_u64().unwrap_or(0) > 0 {
                // A real long poll waits; a short pause keeps the loop calm.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            json!(updates)
        }
        "sendmessage" => {
            let id = state.next_message_id.fetch_add(1, Ordering::SeqCst);
            json!({
                "message_id": id,
                "date": 1_700_000_000,
                "chat": {"id": body["chat_id"], "type": "private", "first_name": "Chat"},
                "from": me(),
                "text": body["text"],
            })
        }
        _ => json!(true),
    }
}

fn envelope_error(status: StatusCode, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": status.as_u16(), "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    (status, axum::Json(body)).into_response()
}

pub fn me() -> Value {
    json!({
        "id": BOT_ID,
        "is_bot": true,
        "first_name": "Switchboard",
        "username": BOT_USERNAME,
        "can_join_groups": true,
        "can_read_all_group_messages": false,
        "supports_inline_queries": false,
        "can_connect_to_business": false,
        "has_main_web_app": false,
    })
}

/// A `429 Too Many Requests` body with `retry_after`.
pub fn too_many_requests(retry_after: u64) -> Value {
    json!({
        "ok": false,
        "error_code": 429,
        "description": format!("Too Many Requests: retry after {retry_after}"),
        "parameters": {"retry_after": retry_after},
    })
}

/// A `400 can't parse entities` body.
pub fn cant_parse_entities() -> Value {
    json!({
        "ok": false,
        "error_code": 400,
        "description": "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0",
    })
}
