//! A fake Discord on 127.0.0.1:0. The REST API records every request (with
//! the time it arrived), creates messages (honouring `enforce_nonce` as
//! Discord does), fails requests on demand (a 429 with a chosen
//! `retry_after`), keeps each channel's history for
//! `GET /channels/{id}/messages?after=`, and says which bot a token belongs
//! to (`GET /users/@me`: the bot [`BOT_USER_ID`] for any token but
//! [`REJECTED_TOKEN`]). The gateway (`GET /gateway/bot` names it) speaks
//! enough of Discord's protocol for the adapter: HELLO, IDENTIFY → READY,
//! RESUME → RESUMED or Invalid Session, heartbeat ACKs, MESSAGE_CREATE for
//! what a user sends; on demand it goes down (connections dropped, new ones
//! refused), refuses RESUME, or sends a close frame with a chosen status code
//! or none. Files a user attaches ([`FakeDiscord::user_sends_file`]) are
//! served from its CDN path `/attachments/{id}/{filename}`, and each
//! download is counted. A user presses a button under a bot message with
//! [`FakeDiscord::user_presses`] (an INTERACTION_CREATE of type 3 on the
//! gateway; another user with [`FakeDiscord::presses_as`]); the
//! interaction's answers are recorded
//! ([`FakeDiscord::interaction_requests`]: the callback
//! `POST /interactions/{id}/{token}/callback`, follow-ups
//! `POST /webhooks/{application}/{token}`, edits of
//! `/webhooks/{application}/{token}/messages/@original`), a type 7
//! UPDATE_MESSAGE or an edit of `@original` changes the pressed message,
//! and [`FakeDiscord::buttons`] reads the buttons a message shows now.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

/// The user id of the bot every accepted token belongs to.
pub const BOT_USER_ID: u64 = 400_000_000_000_000_001;
/// The one token the fake answers 401 Unauthorized.
pub const REJECTED_TOKEN: &str = "rejected-token";

/// The user who writes to the bot in gateway tests.
pub const USER_ID: u64 = 800_000_000_000_000_001;
/// The application id interactions carry (the bot's application).
pub const APPLICATION_ID: u64 = 900_000_000_000_000_002;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
}

/// What the gateway tells its live connection to do.
#[derive(Debug)]
enum Command {
    /// Send a dispatch.
    Dispatch(&'static str, Value),
    /// Send a close frame with this status code, or without one.
    Close(Option<u16>),
    /// Drop the TCP connection without a close frame.
    Drop,
}

#[derive(Default)]
struct Gateway {
    /// Opcodes received from clients, in order.
    ops: Vec<u64>,
    /// Close codes received from clients (`None`: no status code).
    closes: Vec<Option<u16>>,
    /// The identified connection, if any.
    live: Option<mpsc::UnboundedSender<Command>>,
    /// Connections are dropped at once.
    down: bool,
    /// RESUME is answered with Invalid Session (not resumable).
    refuse_resume: bool,
    seq: u64,
    sessions: u64,
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
    /// Statuses (and a 429's `retry_after`) to answer the nth message
    /// creations with, before succeeding.
    failures: VecDeque<(usize, StatusCode, f64)>,
    next_id: u64,
    /// Messages users sent, by channel.
    history: HashMap<String, Vec<Value>>,
    gateway: Gateway,
    gateway_url: String,
    /// Attachment bytes by CDN path (`{id}/{filename}`).
    files: HashMap<String, Vec<u8>>,
    /// CDN paths downloaded, in order.
    downloads: Vec<String>,
    /// The pressed message of each interaction, by token.
    presses: HashMap<String, u64>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
    gateway: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.server.abort();
        self.gateway.abort();
    }
}

impl FakeDiscord {
    pub async fn start() -> Self {
        let shared = Shared::default();
        // Ids are snowflakes of now, as the adapter reads a message's age
        // from its id.
        shared.lock().next_id = snowflake_ago(Duration::ZERO) + 1;
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
        let gateway_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake gateway");
        let gateway_addr = gateway_listener.local_addr().expect("local addr");
        shared.lock().gateway_url = format!("ws://{gateway_addr}");
        let gateway = tokio::spawn(serve_gateway(gateway_listener, shared.clone()));
        Self {
            addr,
            shared,
            server,
            gateway,
        }
    }

    /// A user sends `text` in the DM channel `channel`: it joins the
    /// channel's history and, when a client is connected, is dispatched as
    /// MESSAGE_CREATE. Returns the message id.
    pub fn user_sends_dm(&self, channel: u64, text: &str) -> u64 {
        let mut inner = self.shared.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        Self::record_dm(&mut inner, id, channel, text)
    }

    /// Makes the messages from now on look sent `age` ago (their ids are
    /// snowflakes of that moment), until [`FakeDiscord::user_sent_dm_ago`]
    /// or a later rewind moves the clock of ids on.
    pub fn rewind(&self, age: Duration) {
        self.shared.lock().next_id = snowflake_ago(age);
    }

    /// The user [`USER_ID`] sent `text` in the DM `channel` `age` ago (the
    /// message's id says when) while no client was connected: it is in the
    /// channel's history only. Later messages get later ids.
    pub fn user_sent_dm_ago(&self, channel: u64, text: &str, age: Duration) -> u64 {
        let mut inner = self.shared.lock();
        let id = snowflake_ago(age);
        inner.next_id = inner.next_id.max(id + 1);
        Self::record_dm(&mut inner, id, channel, text)
    }

    /// Keeps the user's DM `id` in `channel`'s history, and dispatches it
    /// to a connected client.
    fn record_dm(inner: &mut Inner, id: u64, channel: u64, text: &str) -> u64 {
        let message = user_message_json(id, channel, text);
        inner
            .history
            .entry(channel.to_string())
            .or_default()
            .push(message.clone());
        if let Some(live) = &inner.gateway.live {
            let _ = live.send(Command::Dispatch("MESSAGE_CREATE", message));
        }
        id
    }

    /// The user [`USER_ID`] presses the button with `custom_id` under the
    /// bot's message `message_id` in `channel` (in the server `guild`, or a
    /// DM when `None`): the gateway dispatches INTERACTION_CREATE (type 3,
    /// a button). Returns the interaction id; its token is
    /// `itoken-<id>`.
    ///
    /// # Panics
    ///
    /// When no client is connected to the gateway.
    pub fn user_presses(
        &self,
        channel: u64,
        guild: Option<u64>,
        message_id: u64,
        custom_id: &str,
    ) -> u64 {
        self.presses_as(USER_ID, "alice", channel, guild, message_id, custom_id)
    }

    /// Like [`Self::user_presses`], by the user `user` (named `name`)
    /// instead of [`USER_ID`].
    ///
    /// # Panics
    ///
    /// When no client is connected to the gateway.
    pub fn presses_as(
        &self,
        user: u64,
        name: &str,
        channel: u64,
        guild: Option<u64>,
        message_id: u64,
        custom_id: &str,
    ) -> u64 {
        let mut inner = self.shared.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let token = format!("itoken-{id}");
        inner.presses.insert(token.clone(), message_id);
        let user = json!({"id": user.to_string(), "username": name,
                          "discriminator": "0", "global_name": name, "avatar": null});
        let mut interaction = json!({
            "id": id.to_string(), "application_id": APPLICATION_ID.to_string(),
            "type": 3, "token": token, "version": 1, "locale": "en-US",
            "channel_id": channel.to_string(),
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": {"id": message_id.to_string(), "channel_id": channel.to_string()},
        });
        match guild {
            Some(guild) => {
                interaction["guild_id"] = json!(guild.to_string());
                interaction["member"] = json!({"user": user, "nick": null, "roles": []});
            }
            None => interaction["user"] = user,
        }
        let live = inner
            .gateway
            .live
            .as_ref()
            .expect("a client on the gateway");
        let _ = live.send(Command::Dispatch("INTERACTION_CREATE", interaction));
        id
    }

    /// The requests answering interactions (callbacks, follow-ups, edits of
    /// the original message), oldest first.
    pub fn interaction_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.contains("/interactions/") || r.path.contains("/webhooks/"))
            .collect()
    }

    /// The buttons the message `id` shows now, as (label, `custom_id`) in
    /// reading order.
    pub fn buttons(&self, id: u64) -> Vec<(String, String)> {
        let inner = self.shared.lock();
        let Some(message) = inner.created.iter().find(|m| m.id == id) else {
            return Vec::new();
        };
        let rows = message.body["components"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        rows.iter()
            .filter_map(|row| row["components"].as_array())
            .flatten()
            .map(|button| {
                let label = button["label"].as_str().unwrap_or_default().to_owned();
                let id = button["custom_id"].as_str().unwrap_or_default().to_owned();
                (label, id)
            })
            .collect()
    }

    /// A user sends `text` with the file `filename` (`bytes`, declared as
    /// `content_type`) in the DM channel `channel`, as
    /// [`Self::user_sends_dm`]; the file is served at the attachment's
    /// URL. Returns the message id.
    pub fn user_sends_file(
        &self,
        channel: u64,
        text: &str,
        filename: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> u64 {
        let mut inner = self.shared.lock();
        let id = inner.next_id;
        inner.next_id += 2;
        let attachment_id = id + 1;
        let path = format!("{attachment_id}/{filename}");
        inner.files.insert(path.clone(), bytes.to_vec());
        let mut message = user_message_json(id, channel, text);
        let url = format!("http://{}/attachments/{path}", self.addr);
        message["attachments"] = json!([{
            "id": attachment_id.to_string(),
            "filename": filename,
            "size": bytes.len(),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }]);
        inner
            .history
            .entry(channel.to_string())
            .or_default()
            .push(message.clone());
        if let Some(live) = &inner.gateway.live {
            let _ = live.send(Command::Dispatch("MESSAGE_CREATE", message));
        }
        id
    }

    /// The gateway goes down: the live connection is dropped without a
    /// close frame and new ones are dropped at once, until [`Self::up`].
    pub fn down(&self) {
        let mut inner = self.shared.lock();
        inner.gateway.down = true;
        if let Some(live) = inner.gateway.live.take() {
            let _ = live.send(Command::Drop);
        }
    }

    /// The gateway accepts connections again.
    pub fn up(&self) {
        self.shared.lock().gateway.down = false;
    }

    /// Answer every RESUME with Invalid Session (not resumable).
    pub fn refuse_resume(&self) {
        self.shared.lock().gateway.refuse_resume = true;
    }

    /// Send the live connection a close frame without a status code.
    pub fn close_without_status(&self) {
        self.close(None);
    }

    /// Send the live connection a close frame with status `code`.
    pub fn close_with(&self, code: u16) {
        self.close(Some(code));
    }

    fn close(&self, code: Option<u16>) {
        let mut inner = self.shared.lock();
        if let Some(live) = inner.gateway.live.take() {
            let _ = live.send(Command::Close(code));
        }
    }

    /// Whether a client is identified (or resumed) on the gateway.
    pub fn connected(&self) -> bool {
        self.shared.lock().gateway.live.is_some()
    }

    /// The opcodes clients sent, in order (2 IDENTIFY, 6 RESUME; heartbeats
    /// left out).
    pub fn gateway_ops(&self) -> Vec<u64> {
        self.shared
            .lock()
            .gateway
            .ops
            .iter()
            .copied()
            .filter(|op| *op != 1)
            .collect()
    }

    /// The close codes of the close frames clients sent.
    pub fn client_closes(&self) -> Vec<Option<u16>> {
        self.shared.lock().gateway.closes.clone()
    }

    /// The `nth` message-creation request from now on is answered 429 with
    /// `retry_after` seconds (in the body and the `Retry-After` header).
    pub fn rate_limit_creation(&self, nth: usize, retry_after: f64) {
        self.shared
            .lock()
            .failures
            .push_back((nth, StatusCode::TOO_MANY_REQUESTS, retry_after));
    }

    /// The base URL to pass as `api_proxy`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `nth` message-creation request from now on (0-based, counting
    /// every attempt) is answered with `status` instead of a message.
    pub fn fail_creation(&self, nth: usize, status: StatusCode) {
        self.shared.lock().failures.push_back((nth, status, 1.0));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// The attachments downloaded from the CDN (`{id}/{filename}`), in
    /// order.
    pub fn downloads(&self) -> Vec<String> {
        self.shared.lock().downloads.clone()
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
        .route("/api/v10/gateway/bot", get(bot_gateway))
        .route(
            "/api/v10/channels/{channel_id}/messages",
            get(channel_history),
        )
        .route(
            "/api/v10/channels/{channel_id}/messages/{message_id}/threads",
            post(create_thread),
        )
        .route(
            "/api/v10/channels/{channel_id}/messages/{message_id}",
            patch(edit_message),
        )
        .route(
            "/api/v10/interactions/{id}/{token}/callback",
            post(interaction_callback),
        )
        .route("/api/v10/webhooks/{application}/{token}", post(follow_up))
        .route(
            "/api/v10/webhooks/{application}/{token}/messages/{message}",
            patch(edit_original),
        )
        .route("/attachments/{id}/{filename}", get(attachment))
        .with_state(shared)
}

/// A file attached with [`FakeDiscord::user_sends_file`].
async fn attachment(
    State(shared): State<Shared>,
    Path((id, filename)): Path<(String, String)>,
) -> Response {
    let path = format!("{id}/{filename}");
    let mut inner = shared.lock();
    inner.downloads.push(path.clone());
    match inner.files.get(&path) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn bot_gateway(State(shared): State<Shared>) -> Json<Value> {
    let url = shared.lock().gateway_url.clone();
    Json(json!({
        "url": url,
        "shards": 1,
        "session_start_limit": {
            "total": 1000,
            "remaining": 1000,
            "reset_after": 0,
            "max_concurrency": 1
        }
    }))
}

async fn channel_history(
    State(shared): State<Shared>,
    Path(channel_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Value> {
    let mut inner = shared.lock();
    inner.requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/messages?after"),
        body: json!(query),
        at: Instant::now(),
    });
    let after: u64 = query.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(50);
    let mut found: Vec<Value> = inner
        .history
        .get(&channel_id)
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["id"].as_str().and_then(|id| id.parse::<u64>().ok()) > Some(after))
                .take(limit)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    // Discord lists newest first; REST messages carry no guild_id.
    found.reverse();
    Json(Value::Array(found))
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
        at: Instant::now(),
    });
    if let Some(pos) = inner
        .failures
        .iter()
        .position(|(nth, _, _)| *nth == attempt)
    {
        let (_, status, retry_after) = inner.failures.remove(pos).expect("position is valid");
        return failure(status, retry_after);
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

/// `PATCH` of a message: the bot's own messages get their content
/// replaced (and the edit recorded); any other id is 404 Unknown Message.
async fn edit_message(
    State(shared): State<Shared>,
    Path((channel_id, message_id)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = shared.lock();
    inner.requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/messages/{message_id}"),
        body: body.clone(),
        at: Instant::now(),
    });
    let Some(message) = inner
        .created
        .iter_mut()
        .find(|m| m.id.to_string() == message_id && m.channel_id == channel_id)
    else {
        let body = json!({"message": "Unknown Message", "code": 10008});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    };
    apply_edit(message, &body);
    let edited = message.clone();
    Json(message_json(&edited)).into_response()
}

/// `body`'s content and components (where given) on `message`.
fn apply_edit(message: &mut Created, body: &Value) {
    if let Some(content) = body["content"].as_str() {
        content.clone_into(&mut message.content);
    }
    if let Some(components) = body.get("components") {
        message.body["components"] = components.clone();
    }
}

/// Applies `edit` to the message pressed in the interaction with `token`;
/// `false` when there is none.
fn edit_pressed(inner: &mut Inner, token: &str, edit: &Value) -> bool {
    let Some(&id) = inner.presses.get(token) else {
        return false;
    };
    match inner.created.iter_mut().find(|m| m.id == id) {
        Some(message) => {
            apply_edit(message, edit);
            true
        }
        None => false,
    }
}

/// `POST /interactions/{id}/{token}/callback`: recorded; a type 7
/// UPDATE_MESSAGE changes the pressed message. An unknown token is 404
/// Unknown Interaction, as Discord answers one too late.
async fn interaction_callback(
    State(shared): State<Shared>,
    Path((id, token)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = shared.lock();
    inner.requests.push(Recorded {
        path: format!("/api/v10/interactions/{id}/{token}/callback"),
        body: body.clone(),
        at: Instant::now(),
    });
    if !inner.presses.contains_key(&token) {
        let body = json!({"message": "Unknown interaction", "code": 10062});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    if body["type"] == 7 {
        edit_pressed(&mut inner, &token, &body["data"]);
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /webhooks/{application}/{token}`: a follow-up message, recorded.
async fn follow_up(
    State(shared): State<Shared>,
    Path((application, token)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = shared.lock();
    inner.requests.push(Recorded {
        path: format!("/api/v10/webhooks/{application}/{token}"),
        body: body.clone(),
        at: Instant::now(),
    });
    let id = inner.next_id;
    inner.next_id += 1;
    let message = Created {
        id,
        channel_id: "0".to_owned(),
        content: body["content"].as_str().unwrap_or_default().to_owned(),
        body,
    };
    Json(message_json(&message)).into_response()
}

/// `PATCH /webhooks/{application}/{token}/messages/@original`: the pressed
/// message edited.
async fn edit_original(
    State(shared): State<Shared>,
    Path((application, token, message)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let mut inner = shared.lock();
    inner.requests.push(Recorded {
        path: format!("/api/v10/webhooks/{application}/{token}/messages/{message}"),
        body: body.clone(),
        at: Instant::now(),
    });
    if message != "@original" || !edit_pressed(&mut inner, &token, &body) {
        let body = json!({"message": "Unknown Message", "code": 10008});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    let id = inner.presses[&token];
    let edited = inner.created.iter().find(|m| m.id == id).cloned();
    match edited {
        Some(edited) => Json(message_json(&edited)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn typing(State(shared): State<Shared>, Path(channel_id): Path<String>) -> StatusCode {
    shared.lock().requests.push(Recorded {
        path: format!("/api/v10/channels/{channel_id}/typing"),
        body: Value::Null,
        at: Instant::now(),
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
        at: Instant::now(),
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

fn failure(status: StatusCode, retry_after: f64) -> Response {
    let body = if status == StatusCode::TOO_MANY_REQUESTS {
        json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": false})
    } else {
        json!({"message": "failure on purpose", "code": 0})
    };
    let mut response = (status, Json(body)).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let headers = response.headers_mut();
        let whole = retry_after.ceil().to_string();
        headers.insert("retry-after", whole.parse().expect("header"));
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
        "components": created.body.get("components").cloned().unwrap_or_else(|| json!([]))
    })
}

/// A DM from [`USER_ID`] as Discord sends it (no guild id).
fn user_message_json(id: u64, channel: u64, text: &str) -> Value {
    json!({
        "id": id.to_string(),
        "type": 0,
        "channel_id": channel.to_string(),
        "content": text,
        "author": {
            "id": USER_ID.to_string(),
            "username": "alice",
            "discriminator": "0",
            "global_name": "Alice",
            "avatar": null
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
        "flags": 0,
        "components": []
    })
}

async fn serve_gateway(listener: tokio::net::TcpListener, shared: Shared) {
    while let Ok((stream, _)) = listener.accept().await {
        if shared.lock().gateway.down {
            drop(stream);
            continue;
        }
        tokio::spawn(gateway_connection(stream, shared.clone()));
    }
}

/// One client connection: HELLO, then answers and commands until it ends.
async fn gateway_connection(stream: tokio::net::TcpStream, shared: Shared) {
    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (commands, mut inbox) = mpsc::unbounded_channel();
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 45_000}});
    if socket.send(Frame::Text(hello.to_string())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            command = inbox.recv() => match command {
                Some(Command::Dispatch(t, d)) => {
                    let seq = {
                        let mut inner = shared.lock();
                        inner.gateway.seq += 1;
                        inner.gateway.seq
                    };
                    let frame = json!({"op": 0, "t": t, "s": seq, "d": d});
                    if socket.send(Frame::Text(frame.to_string())).await.is_err() {
                        return;
                    }
                }
                Some(Command::Close(code)) => {
                    let frame = code.map(|code| CloseFrame {
                        code: code.into(),
                        reason: "".into(),
                    });
                    let _ = socket.send(Frame::Close(frame)).await;
                    // Read the client's answer until the stream ends.
                    while let Some(Ok(frame)) = socket.next().await {
                        record_close(&shared, &frame);
                    }
                    return;
                }
                Some(Command::Drop) | None => return,
            },
            frame = socket.next() => {
                let Some(Ok(frame)) = frame else { return };
                record_close(&shared, &frame);
                let Frame::Text(text) = frame else { continue };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else { continue };
                let op = payload["op"].as_u64().unwrap_or(u64::MAX);
                let reply = answer(&shared, op, &commands);
                if let Some(reply) = reply
                    && socket.send(Frame::Text(reply.to_string())).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

fn record_close(shared: &Shared, frame: &Frame) {
    if let Frame::Close(close) = frame {
        let code = close.as_ref().map(|c| u16::from(c.code));
        shared.lock().gateway.closes.push(code);
    }
}

/// The gateway's answer to an opcode from the client.
fn answer(shared: &Shared, op: u64, commands: &mpsc::UnboundedSender<Command>) -> Option<Value> {
    let mut inner = shared.lock();
    let gateway = &mut inner.gateway;
    gateway.ops.push(op);
    match op {
        1 => Some(json!({"op": 11})),
        2 => {
            gateway.sessions += 1;
            gateway.seq += 1;
            gateway.live = Some(commands.clone());
            let url = inner.gateway_url.clone();
            let session = inner.gateway.sessions;
            let seq = inner.gateway.seq;
            Some(json!({
                "op": 0, "t": "READY", "s": seq,
                "d": {
                    "v": 10,
                    "user": {
                        "id": BOT_USER_ID.to_string(),
                        "username": "switchboard",
                        "discriminator": "0",
                        "global_name": null,
                        "avatar": null,
                        "bot": true
                    },
                    "guilds": [],
                    "session_id": format!("session-{session}"),
                    "resume_gateway_url": url,
                    "application": {"id": "900000000000000002", "flags": 0}
                }
            }))
        }
        6 if gateway.refuse_resume => Some(json!({"op": 9, "d": false})),
        6 => {
            gateway.seq += 1;
            gateway.live = Some(commands.clone());
            Some(json!({"op": 0, "t": "RESUMED", "s": gateway.seq, "d": {}}))
        }
        _ => None,
    }
}

/// The first snowflake of the moment `age` ago: milliseconds since
/// Discord's epoch (2015-01-01) in the top 42 bits.
fn snowflake_ago(age: Duration) -> u64 {
    let at = std::time::SystemTime::now() - age;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    (u64::try_from(ms).expect("ms fit") - 1_420_070_400_000) << 22
}
