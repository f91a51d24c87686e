//! A fake Feishu open API on 127.0.0.1:0, for the adapter's own tests and
//! for the gateway end to end: it issues tenant tokens (counting them),
//! answers the bot info, records every message sent or replied, and plays
//! scripted answers before succeeding. Like Feishu it refuses tokens it was
//! told to revoke (with the token error code given) and posts a message
//! whose `uuid` it has seen before only once, answering the repeat with the
//! first message's id. Resources added with [`FakeFeishu::add_resource`]
//! are served from `im/v1/messages/{id}/resources/{key}` to a bearer of a
//! live tenant token. Also builders for the events Feishu posts to the
//! webhook, a button press on a card among them ([`card_action`]), and
//! [`card_buttons`], which reads the buttons a card shows.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};

/// The app id the fake issues tokens for.
pub const APP_ID: &str = "cli_test_app";
/// The app secret the fake expects with it.
pub const APP_SECRET: &str = "app-secret";
/// The bot's open id (`bot/v3/info`).
pub const BOT_OPEN_ID: &str = "ou_bot";
/// The verification token events carry.
pub const VERIFICATION_TOKEN: &str = "verify-token";

/// How long an issued tenant token lives, in seconds.
const TOKEN_LIFETIME_SECS: u64 = 7200;

/// One message request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub query: Option<String>,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Recorded {
    fn new(path: String, query: Option<String>, headers: &HeaderMap, body: Value) -> Self {
        Self {
            path,
            query,
            authorization: headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body,
        }
    }

    /// The `content` field, parsed (it is a JSON string).
    ///
    /// # Panics
    ///
    /// When the request has no JSON `content`.
    pub fn content(&self) -> Value {
        let raw = self.body["content"].as_str().expect("a content string");
        serde_json::from_str(raw).expect("the content is JSON")
    }

    /// The message replied to, for a reply (`…/messages/{id}/reply`).
    pub fn reply_target(&self) -> Option<&str> {
        self.path
            .strip_prefix("/open-apis/im/v1/messages/")?
            .strip_suffix("/reply")
    }
}

/// A scripted answer to a message request.
pub struct Scripted {
    pub status: u16,
    pub body: Value,
    pub headers: Vec<(&'static str, &'static str)>,
}

/// The fake Feishu open API.
pub struct FakeFeishu {
    address: SocketAddr,
    state: Arc<FakeState>,
}

impl FakeFeishu {
    /// Starts the server on a free port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let app = Router::new()
            .route(
                "/open-apis/auth/v3/tenant_access_token/internal",
                post(fake_token),
            )
            .route("/open-apis/bot/v3/info", get(fake_bot_info))
            .route("/open-apis/im/v1/messages", post(fake_send))
            .route("/open-apis/im/v1/messages/{id}/reply", post(fake_reply))
            .route("/open-apis/im/v1/messages/{id}", patch(fake_update))
            .route(
                "/open-apis/im/v1/messages/{id}/resources/{key}",
                get(fake_resource),
            )
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { address, state }
    }

    /// The base URL to configure as the adapter's custom domain.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Tenant tokens issued so far.
    pub fn token_fetches(&self) -> usize {
        self.state.token_fetches.load(Ordering::SeqCst)
    }

    /// Every message request so far (scripted ones included), oldest first.
    pub fn messages(&self) -> Vec<Recorded> {
        self.state.messages.lock().expect("lock").clone()
    }

    /// The card updates (`PATCH …/messages/{id}`) accepted, oldest first:
    /// (message id, request).
    pub fn updates(&self) -> Vec<(String, Recorded)> {
        self.state.updates.lock().expect("lock").clone()
    }

    /// Answers the next message requests with these, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.state.script.lock().expect("lock").extend(answers);
    }

    /// The messages actually posted, oldest first: requests answered with a
    /// scripted error, a token error or as a repeated `uuid` are left out.
    pub fn delivered(&self) -> Vec<Recorded> {
        self.state.delivered.lock().expect("lock").clone()
    }

    /// Requests whose `uuid` had been seen before, so nothing was posted.
    pub fn deduplicated(&self) -> usize {
        self.state.deduplicated.load(Ordering::SeqCst)
    }

    /// Serves `bytes` as the resource `key` of message `message_id`.
    pub fn add_resource(&self, message_id: &str, key: &str, bytes: &[u8]) {
        self.state
            .resources
            .lock()
            .expect("lock")
            .insert((message_id.to_owned(), key.to_owned()), bytes.to_vec());
    }

    /// The resource downloads so far: (message id, key, `type` query).
    pub fn resource_downloads(&self) -> Vec<(String, String, Option<String>)> {
        self.state.downloads.lock().expect("lock").clone()
    }

    /// Revokes every tenant token issued so far: requests bearing one are
    /// refused with `code` (as Feishu does with an expired or invalid token)
    /// until the adapter fetches a new one.
    pub fn revoke_tokens(&self, code: i64) {
        let issued = self.state.token_fetches.load(Ordering::SeqCst);
        let mut revoked = self.state.revoked.lock().expect("lock");
        for n in 1..=issued {
            revoked.insert(format!("Bearer t-{n}"), code);
        }
    }
}

/// An `im.message.receive_v1` event for message `om_msg1` in chat `oc_chat`.
pub fn message_event(event_id: &str, chat_type: &str, text: &str, mentions: Value) -> Value {
    json!({
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000000",
            "token": VERIFICATION_TOKEN,
            "app_id": APP_ID,
            "tenant_key": "tenant",
            "some_future_field": {"x": 1}
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": "ou_alice", "union_id": "on_alice", "user_id": null},
                "sender_type": "user",
                "tenant_key": "tenant"
            },
            "message": {
                "message_id": "om_msg1",
                "root_id": "",
                "parent_id": "",
                "create_time": 1_700_000_000_000_i64,
                "chat_id": "oc_chat",
                "chat_type": chat_type,
                "message_type": "text",
                "content": json!({"text": text}).to_string(),
                "mentions": mentions,
                "user_agent": "Mozilla"
            }
        }
    })
}

/// A `card.action.trigger` callback: `open_id` pressed the button whose
/// value is `value` on the card message `message_id` in `chat_id`.
pub fn card_action(
    event_id: &str,
    open_id: &str,
    chat_id: &str,
    message_id: &str,
    value: Value,
) -> Value {
    json!({
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "card.action.trigger",
            "create_time": "1700000000000000",
            "token": VERIFICATION_TOKEN,
            "app_id": APP_ID,
            "tenant_key": "tenant"
        },
        "event": {
            "operator": {"tenant_key": "tenant", "user_id": "u_alice", "open_id": open_id,
                         "union_id": "on_alice"},
            "token": "c-card-update-token",
            "action": {"value": value, "tag": "button", "timezone": "Asia/Shanghai"},
            "host": "im_message",
            "delivery_type": "url_page",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id}
        }
    })
}

/// The buttons on `card` (card JSON 2.0), as (label, the `action` of their
/// callback value) in reading order.
pub fn card_buttons(card: &Value) -> Vec<(String, String)> {
    card["body"]["elements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|element| element["tag"] == "button")
        .map(|button| {
            let label = button["text"]["content"].as_str().unwrap_or_default();
            let action = button["behaviors"][0]["value"]["action"]
                .as_str()
                .unwrap_or_default();
            (label.to_owned(), action.to_owned())
        })
        .collect()
}

/// A mention of `open_id` under `key`.
pub fn mention(key: &str, open_id: &str, name: &str) -> Value {
    json!({"key": key, "id": {"open_id": open_id, "union_id": "on_x", "user_id": "u"}, "name": name, "tenant_key": "t"})
}

#[derive(Default)]
struct FakeState {
    token_fetches: AtomicUsize,
    messages: Mutex<Vec<Recorded>>,
    script: Mutex<VecDeque<Scripted>>,
    sent: AtomicUsize,
    delivered: Mutex<Vec<Recorded>>,
    /// `uuid` → the message id first posted with it.
    uuids: Mutex<HashMap<String, String>>,
    deduplicated: AtomicUsize,
    /// `Authorization` header → the token error code it is refused with.
    revoked: Mutex<HashMap<String, i64>>,
    /// Accepted card updates: (message id, request).
    updates: Mutex<Vec<(String, Recorded)>>,
    /// Message resources by (message id, key).
    resources: Mutex<HashMap<(String, String), Vec<u8>>>,
    /// Resources served: (message id, key, query).
    downloads: Mutex<Vec<(String, String, Option<String>)>>,
}

/// Serves a resource added with [`FakeFeishu::add_resource`] to a bearer
/// of a token the fake issued and did not revoke.
async fn fake_resource(
    State(state): State<Arc<FakeState>>,
    Path((id, key)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !authorization.starts_with("Bearer t-")
        || state
            .revoked
            .lock()
            .expect("lock")
            .contains_key(&authorization)
    {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"code": 99_991_663, "msg": "invalid access token"})),
        )
            .into_response();
    }
    let bytes = state
        .resources
        .lock()
        .expect("lock")
        .get(&(id.clone(), key.clone()))
        .cloned();
    match bytes {
        Some(bytes) => {
            state.downloads.lock().expect("lock").push((id, key, query));
            bytes.into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"code": 234_003, "msg": "file not found"})),
        )
            .into_response(),
    }
}

async fn fake_token(State(state): State<Arc<FakeState>>, Json(body): Json<Value>) -> Json<Value> {
    assert_eq!(body["app_id"], APP_ID);
    assert_eq!(body["app_secret"], APP_SECRET);
    let n = state.token_fetches.fetch_add(1, Ordering::SeqCst) + 1;
    Json(
        json!({"code": 0, "msg": "ok", "tenant_access_token": format!("t-{n}"),
                "expire": TOKEN_LIFETIME_SECS}),
    )
}

async fn fake_bot_info(headers: HeaderMap) -> Json<Value> {
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    assert!(authorization.starts_with("Bearer t-"), "{authorization:?}");
    Json(
        json!({"code": 0, "msg": "ok", "bot": {"open_id": BOT_OPEN_ID, "app_name": "Switchboard", "activate_status": 2}}),
    )
}

async fn fake_send(
    State(state): State<Arc<FakeState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = "/open-apis/im/v1/messages".to_owned();
    record(&state, path, query, &headers, body)
}

async fn fake_reply(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/open-apis/im/v1/messages/{id}/reply");
    record(&state, path, None, &headers, body)
}

fn record(
    state: &FakeState,
    path: String,
    query: Option<String>,
    headers: &HeaderMap,
    body: Value,
) -> Response {
    let recorded = Recorded::new(path, query, headers, body);
    state.messages.lock().expect("lock").push(recorded.clone());
    if let Some(refused) = refusal(state, &recorded) {
        return refused;
    }
    let uuid = recorded.body["uuid"].as_str().map(str::to_owned);
    let mut uuids = state.uuids.lock().expect("lock");
    let message_id = match uuid.as_ref().and_then(|uuid| uuids.get(uuid)) {
        Some(first) => {
            state.deduplicated.fetch_add(1, Ordering::SeqCst);
            first.clone()
        }
        None => {
            let n = state.sent.fetch_add(1, Ordering::SeqCst) + 1;
            let id = format!("om_sent_{n}");
            if let Some(uuid) = uuid {
                uuids.insert(uuid, id.clone());
            }
            state.delivered.lock().expect("lock").push(recorded);
            id
        }
    };
    Json(json!({"code": 0, "msg": "success", "data": {"message_id": message_id}})).into_response()
}

/// The answer to a request Feishu refuses: a revoked token, or the next
/// scripted answer; `None` to go on.
fn refusal(state: &FakeState, recorded: &Recorded) -> Option<Response> {
    let revoked = recorded
        .authorization
        .as_ref()
        .and_then(|auth| state.revoked.lock().expect("lock").get(auth).copied());
    if let Some(code) = revoked {
        let body = json!({"code": code, "msg": "Authentication token expired."});
        return Some((StatusCode::BAD_REQUEST, Json(body)).into_response());
    }
    let scripted = state.script.lock().expect("lock").pop_front();
    if let Some(answer) = scripted {
        let status = StatusCode::from_u16(answer.status).expect("an HTTP status");
        let mut response = (status, Json(answer.body)).into_response();
        for (name, value) in answer.headers {
            response
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        return Some(response);
    }
    None
}

async fn fake_update(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let recorded = Recorded::new(
        format!("/open-apis/im/v1/messages/{id}"),
        None,
        &headers,
        body,
    );
    state.messages.lock().expect("lock").push(recorded.clone());
    if let Some(refused) = refusal(&state, &recorded) {
        return refused;
    }
    state.updates.lock().expect("lock").push((id, recorded));
    Json(json!({"code": 0, "msg": "success", "data": {}})).into_response()
}
