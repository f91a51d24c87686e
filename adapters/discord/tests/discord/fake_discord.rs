//! A fake Discord REST API on 127.0.0.1:0: records every request, creates
//! messages (honouring `enforce_nonce` as Discord does), fails requests on
//! demand, and says which bot a token belongs to (`GET /users/@me`: the
//! bot [`BOT_USER_ID`] for any token but [`REJECTED_TOKEN`]).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The user id of the bot every accepted token belongs to.
pub const BOT_USER_ID: u64 = 400_000_000_000_000_001;
/// The one token the fake answers 401 Unauthorized.
pub const REJECTED_TOKEN: &str = "rejected-token";

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
}

/// A message the fake created (what a user would see).
#[derive(Debug, Clone)]
pub struct Created {
    pub id: u64,
    pub channel_id: String,
    pub content: String,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    requests: Vec<Recorded>,
    created: Vec<Created>,
    /// (channel, nonce) → index into `created`.
    nonces: HashMap<(String, String), usize>,
    /// Statuses to answer the next message creations with, before succeeding.
    failures: VecDeque<(usize, StatusCode)>,
    next_id: u64,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeDiscord {
    pub async fn start() -> Self {
        let shared = Shared::default();
        shared.lock().next_id = 1_000_000_000_000_000_001;
        let app = router(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Discord");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("fake Discord serves");
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// The base URL to pass as `api_proxy`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `nth` message-creation request from now on (0-based, counting
    /// every attempt) is answered with `status` instead of a message.
    pub fn fail_creation(&self, nth: usize, status: StatusCode) {
        self.shared.lock().failures.push_back((nth, status));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    pub fn message_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/messages"))
            .collect()
    }

    pub fn created(&self) -> Vec<Created> {
        self.shared.lock().created.clone()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().expect("fake state lock")
    }
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route(
            "/api/v10/channels/{channel_id}/messages",
            post(create_message),
        )
        .route("/api/v10/channels/{channel_id}/typing", post(typing))
        .route("/api/v10/users/@me", get(current_user))
        .route(
            "/api/v10/channels/{channel_id}/messages/{message_id}/threads",
            post(create_thread),
        )
        .with_state(shared)
}

async fn current_user(headers: HeaderMap) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if authorization == format!("Bot {REJECTED_TOKEN}") {
        let body = json!({"code": 0, "message": "401: Unauthorized"});
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    Json(json!({
        "id": BOT_USER_ID.to_string(),
        "username": "switchboard",
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
    }))
    .into_response()
}

async fn create_message(
    State(shared): State<Shared>,
    Path(channel_id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = shared.lock();
    let attempt = inner
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/messages"))
        .count();
    inner.requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/messages"),
        body: body.clone(),
    });
    if let Some(pos) = inner.failures.iter().position(|(nth, _)| *nth == attempt) {
        let (_, status) = inner.failures.remove(pos).expect("position is valid");
        return failure(status);
    }
    let nonce = body["nonce"].as_str().map(str::to_owned);
    let enforced = body["enforce_nonce"].as_bool() == Some(true);
    if let (Some(nonce), true) = (&nonce, enforced) {
        let key = (channel_id.clone(), nonce.clone());
        if let Some(&index) = inner.nonces.get(&key) {
            let existing = inner.created[index].clone();
            return Json(message_json(&existing)).into_response();
        }
    }
    let id = inner.next_id;
    inner.next_id += 1;
    let created = Created {
        id,
        channel_id: channel_id.clone(),
        content: body["content"].as_str().unwrap_or_default().to_owned(),
        body: body.clone(),
    };
    inner.created.push(created.clone());
    if let (Some(nonce), true) = (nonce, enforced) {
        let index = inner.created.len() - 1;
        inner.nonces.insert((channel_id, nonce), index);
    }
    Json(message_json(&created)).into_response()
}

async fn typing(State(shared): State<Shared>, Path(channel_id): Path<String>) -> StatusCode {
    shared.lock().requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/typing"),
        body: Value::Null,
    });
    StatusCode::NO_CONTENT
}

async fn create_thread(
    State(shared): State<Shared>,
    Path((channel_id, message_id)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Json<Value> {
    shared.lock().requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/messages/{message_id}/threads"),
        body: body.clone(),
    });
    // Discord gives a thread started from a message the message's id.
    Json(json!({
        "id": message_id,
        "type": 11,
        "guild_id": "700000000000000001",
        "parent_id": channel_id,
        "owner_id": "900000000000000001",
        "name": body["name"],
        "last_message_id": null,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "thread_metadata": {
            "archived": false,
            "auto_archive_duration": 1440,
            "archive_timestamp": "2025-05-01T10:00:00.000000+00:00",
            "locked": false
        },
        "flags": 0
    }))
}

fn failure(status: StatusCode) -> Response {
    let body = if status == StatusCode::TOO_MANY_REQUESTS {
        json!({"message": "You are being rate limited.", "retry_after": 0.25, "global": false})
    } else {
        json!({"message": "failure on purpose", "code": 0})
    };
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let headers = response.headers_mut();
        headers.insert("retry-after", "1".parse().expect("header"));
        headers.insert("x-ratelimit-scope", "user".parse().expect("header"));
    }
    response
}

fn message_json(created: &Created) -> Value {
    json!({
        "id": created.id.to_string(),
        "type": if created.body.get("message_reference").is_some() { 19 } else { 0 },
        "channel_id": created.channel_id,
        "content": created.content,
        "author": {
            "id": "900000000000000001",
            "username": "switchboard",
            "discriminator": "4242",
            "global_name": null,
            "avatar": null,
            "bot": true
        },
        "timestamp": "2025-05-01T10:00:00.000000+00:00",
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "nonce": created.body["nonce"],
        "flags": 0,
        "components": []
    })
}
