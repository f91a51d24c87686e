//! A fake Slack on 127.0.0.1:0, for the Slack adapter's own tests and for
//! the gateway end to end.
//!
//! - The Web API (`/api/{method}`): `auth.test` for two workspaces' bot
//!   tokens ([`BOT_TOKEN`] of [`TEAM_ID`], [`OTHER_BOT_TOKEN`] of
//!   [`OTHER_TEAM_ID`]), `chat.postMessage` / `chat.update` /
//!   `chat.postEphemeral` (messages kept per channel with their thread,
//!   blocks and metadata, as the bot posted or updated them),
//!   `users.info`, `conversations.history` / `conversations.replies` (with
//!   metadata only when `include_all_metadata=true`), and
//!   `apps.connections.open` for [`APP_TOKEN`]. Every call is recorded with
//!   its bearer token and arguments; [`FakeSlack::fail_next`] (and
//!   [`FakeSlack::pass_next`]) script the next answers of a method (a 429
//!   with `Retry-After`, an `ok: false` error, a bare HTTP status). An
//!   unknown token is `invalid_auth`.
//! - Files ([`FakeSlack::add_file`]) served at their `url_private_download`
//!   to a bearer of a bot token; without one the fake answers, as Slack
//!   does, 200 with an HTML sign-in page. Each download is recorded.
//! - Socket Mode: the URL `apps.connections.open` hands out is a WebSocket
//!   server that says `hello`, sends the envelopes a test gives it
//!   ([`FakeSlack::send_envelope`]), records the acks, and sends
//!   `disconnect` on demand.
//! - Delivering what Slack posts to an app: [`Delivery`] signs events and
//!   interactivity payloads with a signing secret as Slack does, and
//!   retries an event that was not acknowledged with `X-Slack-Retry-Num`;
//!   builders for the payloads ([`message_event`], [`app_mention`],
//!   [`event_callback`], [`block_actions`], [`url_verification`]).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{SinkExt, StreamExt};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;

/// The workspace of [`BOT_TOKEN`].
pub const TEAM_ID: &str = "T0SWITCH";
/// Its bot token.
pub const BOT_TOKEN: &str = "xoxb-1111-test-bot-token";
/// The bot's user id there.
pub const BOT_USER_ID: &str = "UBOT0001";
/// The bot's id there (on the messages it posts).
pub const BOT_ID: &str = "BBOT0001";
/// A second workspace, of [`OTHER_BOT_TOKEN`].
pub const OTHER_TEAM_ID: &str = "T0OTHER";
/// Its bot token.
pub const OTHER_BOT_TOKEN: &str = "xoxb-2222-other-bot-token";
/// The bot's user id in the second workspace.
pub const OTHER_BOT_USER_ID: &str = "UBOT0002";
/// The app-level token `apps.connections.open` accepts.
pub const APP_TOKEN: &str = "xapp-1-test-app-token";
/// The signing secret tests sign with.
pub const SIGNING_SECRET: &str = "test-signing-secret-8f742231";
/// The person who writes to the bot.
pub const USER_ID: &str = "UALICE01";
/// Their display name (`users.info`).
pub const USER_NAME: &str = "Alice";

/// One Web API call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The JSON body, or the query (or form) arguments as an object.
    pub args: Value,
}

/// A scripted answer to a Web API call.
#[derive(Debug, Clone)]
pub enum Failure {
    /// HTTP 429 with `Retry-After: {0}` and `{"ok":false,"error":"ratelimited"}`.
    RateLimited(u64),
    /// HTTP 200 with `{"ok":false,"error":…}`.
    Error(&'static str),
    /// This HTTP status and a body that is not JSON.
    Status(u16),
}

/// A message the bot posted, as it stands now.
#[derive(Debug, Clone)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    pub blocks: Value,
    pub metadata: Value,
    /// The bot user who posted it.
    pub user: String,
    /// How many times `chat.update` changed it.
    pub updates: usize,
}

/// One file download.
#[derive(Debug, Clone)]
pub struct Download {
    pub path: String,
    /// Whether it carried a bot token (and so got the file).
    pub authorised: bool,
}

/// What the Socket Mode server is told to send.
#[derive(Debug)]
enum Command {
    Send(String),
    /// Drop the TCP connection without a close frame.
    Drop,
}

#[derive(Default)]
struct Socket {
    connections: usize,
    live: Option<mpsc::UnboundedSender<Command>>,
    acks: Vec<String>,
    url: String,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    /// Per method, what its next calls get: a failure, or `None` to pass.
    failures: HashMap<String, VecDeque<Option<Failure>>>,
    posted: Vec<Posted>,
    next_ts: u64,
    users: HashMap<String, Value>,
    files: HashMap<String, (Vec<u8>, String)>,
    downloads: Vec<Download>,
    socket: Socket,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().expect("fake Slack lock")
    }
}

/// The fake Slack; its servers stop when it is dropped.
pub struct FakeSlack {
    addr: SocketAddr,
    shared: Shared,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FakeSlack {
    /// Starts the Web API and the Socket Mode server on free ports.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let shared = Shared::default();
        shared.lock().users.insert(
            USER_ID.to_owned(),
            json!({"id": USER_ID, "name": "alice", "real_name": "Alice Liddell",
                   "profile": {"display_name": USER_NAME, "real_name": "Alice Liddell"}}),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Slack");
        let addr = listener.local_addr().expect("local addr");
        let app = router(shared.clone());
        let api = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake Slack serves");
        });
        let sockets = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Socket Mode");
        let socket_addr = sockets.local_addr().expect("local addr");
        shared.lock().socket.url = format!("ws://{socket_addr}/link/");
        let socket = tokio::spawn(serve_sockets(sockets, shared.clone()));
        Self {
            addr,
            shared,
            tasks: vec![api, socket],
        }
    }

    /// The Web API base URL, for the adapter's `api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// Every Web API call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The calls of `method`, oldest first.
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|call| call.method == method)
            .collect()
    }

    /// Answers the next `times` calls of `method` with `failure` (after
    /// those already scripted).
    pub fn fail_next(&self, method: &str, times: usize, failure: Failure) {
        self.script(method, std::iter::repeat_n(Some(failure), times));
    }

    /// Lets the next `times` calls of `method` through (after those
    /// already scripted), so that a failure scripted next hits a later
    /// call.
    pub fn pass_next(&self, method: &str, times: usize) {
        self.script(method, std::iter::repeat_n(None, times));
    }

    fn script(&self, method: &str, answers: impl Iterator<Item = Option<Failure>>) {
        let mut inner = self.shared.lock();
        inner
            .failures
            .entry(method.to_owned())
            .or_default()
            .extend(answers);
    }

    /// The bot's messages as they stand, oldest first.
    pub fn posted(&self) -> Vec<Posted> {
        self.shared.lock().posted.clone()
    }

    /// The bot's messages in `channel`, oldest first.
    pub fn posted_in(&self, channel: &str) -> Vec<Posted> {
        self.posted()
            .into_iter()
            .filter(|message| message.channel == channel)
            .collect()
    }

    /// Serves `bytes` as a file and returns its entry for a message's
    /// `files`, declaring `declared_size` (the real size when `None`).
    pub fn add_file(
        &self,
        name: &str,
        mimetype: &str,
        bytes: &[u8],
        declared_size: Option<u64>,
    ) -> Value {
        let mut inner = self.shared.lock();
        let id = format!("F{:08}", inner.files.len() + 1);
        let path = format!("/files-pri/{TEAM_ID}-{id}/download/{name}");
        inner
            .files
            .insert(path.clone(), (bytes.to_vec(), mimetype.to_owned()));
        let size = declared_size.unwrap_or(bytes.len() as u64);
        let url = format!("http://{}{path}", self.addr);
        json!({
            "id": id, "name": name, "title": name, "mimetype": mimetype,
            "filetype": name.rsplit('.').next(), "size": size, "mode": "hosted",
            "url_private": url, "url_private_download": url,
        })
    }

    /// The file downloads so far.
    pub fn downloads(&self) -> Vec<Download> {
        self.shared.lock().downloads.clone()
    }

    /// How many Socket Mode connections were opened.
    pub fn socket_connections(&self) -> usize {
        self.shared.lock().socket.connections
    }

    /// Whether a Socket Mode client is connected.
    pub fn socket_connected(&self) -> bool {
        self.shared.lock().socket.live.is_some()
    }

    /// Sends an envelope of `kind` (`events_api`, `interactive`) carrying
    /// `payload` to the connected client; returns its `envelope_id`.
    ///
    /// # Panics
    ///
    /// When no client is connected.
    pub fn send_envelope(&self, kind: &str, payload: Value) -> String {
        static ENVELOPES: AtomicU64 = AtomicU64::new(1);
        let id = format!("env-{}", ENVELOPES.fetch_add(1, Ordering::Relaxed));
        let frame = json!({"envelope_id": id, "type": kind, "payload": payload,
                           "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": ""});
        self.send_frame(frame.to_string());
        id
    }

    /// Sends `disconnect` with `reason` (`refresh_requested`, `warning`,
    /// `link_disabled`) to the connected client.
    ///
    /// # Panics
    ///
    /// When no client is connected.
    pub fn disconnect(&self, reason: &str) {
        let frame = json!({"type": "disconnect", "reason": reason,
                           "debug_info": {"host": "fake-slack"}});
        self.send_frame(frame.to_string());
    }

    /// Drops the client's connection without a close frame, as a network
    /// failure would.
    ///
    /// # Panics
    ///
    /// When no client is connected.
    pub fn drop_connection(&self) {
        let mut inner = self.shared.lock();
        let live = inner.socket.live.take().expect("a Socket Mode client");
        live.send(Command::Drop).expect("the connection is open");
    }

    fn send_frame(&self, text: String) {
        let inner = self.shared.lock();
        let live = inner.socket.live.as_ref().expect("a Socket Mode client");
        live.send(Command::Send(text))
            .expect("the connection is open");
    }

    /// The `envelope_id`s acknowledged so far, in order.
    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().socket.acks.clone()
    }
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route("/api/{method}", post(api_post).get(api_get))
        .route("/files-pri/{file}/download/{name}", get(file))
        .with_state(shared)
}

async fn api_post(
    State(shared): State<Shared>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    let args = if json {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    } else {
        form_object(&body)
    };
    call(&shared, method, &headers, args)
}

async fn api_get(
    State(shared): State<Shared>,
    Path(method): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    call(&shared, method, &headers, json!(query))
}

fn form_object(body: &[u8]) -> Value {
    let pairs: serde_json::Map<String, Value> = url::form_urlencoded::parse(body)
        .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned())))
        .collect();
    Value::Object(pairs)
}

/// Records a call and answers it: a scripted failure, `invalid_auth`, or
/// the method's answer.
fn call(shared: &Shared, method: String, headers: &HeaderMap, args: Value) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let mut inner = shared.lock();
    inner.calls.push(Call {
        method: method.clone(),
        authorization: authorization.clone(),
        args: args.clone(),
    });
    if let Some(Some(failure)) = inner
        .failures
        .get_mut(&method)
        .and_then(VecDeque::pop_front)
    {
        return failed(failure);
    }
    let token = authorization
        .as_deref()
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if method == "apps.connections.open" {
        if token != APP_TOKEN {
            return error("invalid_auth");
        }
        let n = inner.socket.connections + 1;
        return ok(json!({"url": format!("{}?ticket=secret-ticket-{n}", inner.socket.url)}));
    }
    let Some(bot) = bot_of(token) else {
        return error(if token.is_empty() {
            "not_authed"
        } else {
            "invalid_auth"
        });
    };
    answer(&mut inner, &method, bot, &args)
}

/// The workspace a bot token belongs to: (team id, team name, bot user).
fn bot_of(token: &str) -> Option<(&'static str, &'static str, &'static str)> {
    match token {
        BOT_TOKEN => Some((TEAM_ID, "Switchboard Test", BOT_USER_ID)),
        OTHER_BOT_TOKEN => Some((OTHER_TEAM_ID, "Other Test", OTHER_BOT_USER_ID)),
        _ => None,
    }
}

fn answer(
    inner: &mut Inner,
    method: &str,
    (team_id, team, bot_user): (&str, &str, &str),
    args: &Value,
) -> Response {
    let text = |name: &str| args[name].as_str().unwrap_or_default().to_owned();
    match method {
        "auth.test" => ok(json!({
            "url": "https://switchboard-test.slack.com/", "team": team, "user": "switchboard",
            "team_id": team_id, "user_id": bot_user, "bot_id": BOT_ID, "is_enterprise_install": false,
        })),
        "chat.postMessage" => post_message(inner, bot_user, args),
        "chat.update" => update(inner, args),
        "chat.postEphemeral" => ok(json!({"message_ts": next_ts(inner)})),
        "users.info" => match inner.users.get(&text("user")) {
            Some(user) => ok(json!({"user": user})),
            None => error("user_not_found"),
        },
        "conversations.history" => history(inner, args, None),
        "conversations.replies" => history(inner, args, Some(text("ts"))),
        _ => error("unknown_method"),
    }
}

fn next_ts(inner: &mut Inner) -> String {
    inner.next_ts += 1;
    format!("1700000000.{:06}", inner.next_ts)
}

fn post_message(inner: &mut Inner, bot_user: &str, args: &Value) -> Response {
    let channel = args["channel"].as_str().unwrap_or_default().to_owned();
    if channel.is_empty() {
        return error("channel_not_found");
    }
    let ts = next_ts(inner);
    let posted = Posted {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: args["thread_ts"].as_str().map(str::to_owned),
        text: args["text"].as_str().unwrap_or_default().to_owned(),
        blocks: args["blocks"].clone(),
        metadata: args["metadata"].clone(),
        user: bot_user.to_owned(),
        updates: 0,
    };
    let message = message_json(&posted, true);
    inner.posted.push(posted);
    ok(json!({"channel": channel, "ts": ts, "message": message}))
}

fn update(inner: &mut Inner, args: &Value) -> Response {
    let channel = args["channel"].as_str().unwrap_or_default();
    let ts = args["ts"].as_str().unwrap_or_default();
    let Some(message) = inner
        .posted
        .iter_mut()
        .find(|m| m.channel == channel && m.ts == ts)
    else {
        return error("message_not_found");
    };
    if let Some(text) = args["text"].as_str() {
        text.clone_into(&mut message.text);
    }
    if !args["blocks"].is_null() {
        message.blocks = args["blocks"].clone();
    }
    if !args["metadata"].is_null() {
        message.metadata = args["metadata"].clone();
    }
    message.updates += 1;
    ok(json!({"channel": channel, "ts": ts, "text": message.text}))
}

/// `conversations.history` (top-level messages, newest first) or
/// `conversations.replies` of the thread `thread` (oldest first).
fn history(inner: &Inner, args: &Value, thread: Option<String>) -> Response {
    let channel = args["channel"].as_str().unwrap_or_default();
    let metadata = args["include_all_metadata"].as_str() == Some("true");
    let limit = args["limit"]
        .as_str()
        .and_then(|l| l.parse().ok())
        .unwrap_or(100);
    let in_channel = inner.posted.iter().filter(|m| m.channel == channel);
    let mut messages: Vec<Value> = match &thread {
        Some(thread) => in_channel
            .filter(|m| m.thread_ts.as_ref() == Some(thread) || &m.ts == thread)
            .map(|m| message_json(m, metadata))
            .collect(),
        None => in_channel
            .rev()
            .filter(|m| m.thread_ts.is_none())
            .map(|m| message_json(m, metadata))
            .collect(),
    };
    messages.truncate(limit);
    ok(json!({"messages": messages, "has_more": false}))
}

fn message_json(posted: &Posted, metadata: bool) -> Value {
    let mut message = json!({
        "type": "message", "user": posted.user, "bot_id": BOT_ID, "text": posted.text,
        "ts": posted.ts, "thread_ts": posted.thread_ts, "blocks": posted.blocks,
    });
    if metadata && !posted.metadata.is_null() {
        message["metadata"] = posted.metadata.clone();
    }
    message
}

fn ok(mut body: Value) -> Response {
    body["ok"] = json!(true);
    Json(body).into_response()
}

fn error(code: &str) -> Response {
    Json(json!({"ok": false, "error": code})).into_response()
}

fn failed(failure: Failure) -> Response {
    match failure {
        Failure::RateLimited(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, secs.to_string())],
            Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response(),
        Failure::Error(code) => error(code),
        Failure::Status(status) => {
            let status = StatusCode::from_u16(status).expect("an HTTP status");
            (status, "upstream trouble").into_response()
        }
    }
}

/// A file added with [`FakeSlack::add_file`], for a bearer of a bot token;
/// anyone else gets Slack's sign-in page.
async fn file(
    State(shared): State<Shared>,
    Path((file, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/files-pri/{file}/download/{name}");
    let authorised = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|token| bot_of(token).is_some());
    let mut inner = shared.lock();
    inner.downloads.push(Download {
        path: path.clone(),
        authorised,
    });
    if !authorised {
        let page = "<!DOCTYPE html><html><body>Sign in to Slack</body></html>";
        return ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response();
    }
    match inner.files.get(&path) {
        Some((bytes, mimetype)) => {
            ([(header::CONTENT_TYPE, mimetype.clone())], bytes.clone()).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn serve_sockets(listener: tokio::net::TcpListener, shared: Shared) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(socket_connection(stream, shared.clone()));
    }
}

/// One Socket Mode client: `hello`, then the envelopes it is given and the
/// acks it sends, until it closes (or a newer client replaces it).
async fn socket_connection(stream: tokio::net::TcpStream, shared: Shared) {
    let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (commands, mut inbox) = mpsc::unbounded_channel();
    {
        let mut inner = shared.lock();
        inner.socket.connections += 1;
        inner.socket.live = Some(commands);
    }
    let hello = json!({"type": "hello", "num_connections": 1,
                       "debug_info": {"host": "fake-slack"}, "connection_info": {"app_id": "A0FAKE"}});
    if socket.send(Frame::Text(hello.to_string())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            command = inbox.recv() => match command {
                Some(Command::Send(text)) => {
                    if socket.send(Frame::Text(text)).await.is_err() {
                        break;
                    }
                }
                // Dropped, or a newer client took over.
                Some(Command::Drop) | None => break,
            },
            frame = socket.next() => match frame {
                Some(Ok(Frame::Text(text))) => {
                    let ack: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if let Some(id) = ack["envelope_id"].as_str() {
                        shared.lock().socket.acks.push(id.to_owned());
                    }
                }
                Some(Ok(Frame::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    drop(inbox);
    drop(socket);
    let mut inner = shared.lock();
    if inner
        .socket
        .live
        .as_ref()
        .is_some_and(mpsc::UnboundedSender::is_closed)
    {
        inner.socket.live = None;
    }
}

/// `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` with `secret`,
/// as Slack signs what it posts.
///
/// # Panics
///
/// Never: HMAC takes keys of any length.
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// This host's clock in Unix seconds.
///
/// # Panics
///
/// When the clock is before 1970.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// What happened to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The status of each attempt, the first one first.
    pub statuses: Vec<u16>,
    /// The last answer's body.
    pub body: String,
}

/// Posts to an app the way Slack does: signed with `secret`.
pub struct Delivery {
    http: reqwest::Client,
    secret: String,
    /// Attempts of an event in all (Slack tries three times more).
    pub attempts: usize,
}

impl Delivery {
    /// Signs with `secret`; an event is attempted up to four times.
    pub fn new(secret: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            secret: secret.to_owned(),
            attempts: 4,
        }
    }

    /// Posts the event `body` to `url` until it is acknowledged (2xx) or
    /// the attempts run out; retries carry `X-Slack-Retry-Num` and
    /// `X-Slack-Retry-Reason: http_error`.
    ///
    /// # Panics
    ///
    /// When the request cannot be sent.
    pub async fn event(&self, url: &str, body: &Value) -> Delivered {
        let raw = body.to_string().into_bytes();
        let mut statuses = Vec::new();
        loop {
            let retry = statuses.len();
            let mut extra = Vec::new();
            if retry > 0 {
                extra.push(("x-slack-retry-num", retry.to_string()));
                extra.push(("x-slack-retry-reason", "http_error".to_owned()));
            }
            let (status, text) = self
                .post(url, raw.clone(), "application/json", unix_now(), &extra)
                .await;
            statuses.push(status);
            if (200..300).contains(&status) || statuses.len() >= self.attempts {
                return Delivered {
                    statuses,
                    body: text,
                };
            }
        }
    }

    /// Posts an interactivity `payload` to `url` once, as the form Slack
    /// sends (`payload=<json>`).
    pub async fn interaction(&self, url: &str, payload: &Value) -> Delivered {
        let form: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        let (status, body) = self
            .post(
                url,
                form.into_bytes(),
                "application/x-www-form-urlencoded",
                unix_now(),
                &[],
            )
            .await;
        Delivered {
            statuses: vec![status],
            body,
        }
    }

    /// Posts `raw` once, signed as of `timestamp`, with `extra` headers.
    ///
    /// # Panics
    ///
    /// When the request cannot be sent.
    pub async fn post(
        &self,
        url: &str,
        raw: Vec<u8>,
        content_type: &str,
        timestamp: u64,
        extra: &[(&str, String)],
    ) -> (u16, String) {
        let timestamp = timestamp.to_string();
        let mut request = self
            .http
            .post(url)
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", &timestamp)
            .header("x-slack-signature", sign(&self.secret, &timestamp, &raw))
            .body(raw);
        for (name, value) in extra {
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("the app answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }
}

/// `url_verification` with `challenge`.
pub fn url_verification(challenge: &str) -> Value {
    json!({"token": "legacy-verification-token", "challenge": challenge, "type": "url_verification"})
}

/// The Events API envelope of `event` in workspace `team`.
pub fn event_callback(team: &str, event: Value) -> Value {
    static EVENTS: AtomicU64 = AtomicU64::new(1);
    let n = EVENTS.fetch_add(1, Ordering::Relaxed);
    json!({
        "token": "legacy-verification-token", "team_id": team, "api_app_id": "A0FAKE",
        "event": event, "type": "event_callback", "event_id": format!("Ev{n:08}"),
        "event_time": 1_700_000_000, "event_context": "4-fake",
        "authorizations": [{"team_id": team, "user_id": BOT_USER_ID, "is_bot": true}],
    })
}

/// A `message` event from [`USER_ID`]: `channel_type` is `im`, `channel`,
/// `group` or `mpim`.
pub fn message_event(channel: &str, channel_type: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message", "channel": channel, "channel_type": channel_type,
        "user": USER_ID, "text": text, "ts": ts, "event_ts": ts, "team": TEAM_ID,
        "blocks": [{"type": "rich_text", "elements": []}], "client_msg_id": "c0ffee",
    })
}

/// The `app_mention` event Slack sends beside the `message` event of a
/// channel message that mentions the bot.
pub fn app_mention(channel: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "app_mention", "channel": channel, "user": USER_ID, "text": text,
        "ts": ts, "event_ts": ts, "team": TEAM_ID, "client_msg_id": "c0ffee",
    })
}

/// A `block_actions` payload: [`USER_ID`] of `team` pressed the button of
/// `value` under the message `message_ts` in `channel` (in `thread`).
pub fn block_actions(
    team: &str,
    channel: &str,
    message_ts: &str,
    thread: Option<&str>,
    value: &str,
) -> Value {
    json!({
        "type": "block_actions",
        "team": {"id": team, "domain": "switchboard-test"},
        "user": {"id": USER_ID, "username": "alice", "name": "alice", "team_id": team},
        "api_app_id": "A0FAKE", "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel,
                      "is_ephemeral": false, "thread_ts": thread},
        "trigger_id": format!("trig.{message_ts}.{value}"),
        "channel": {"id": channel, "name": "general"},
        "message": {"type": "message", "ts": message_ts, "thread_ts": thread, "text": "?"},
        "response_url": "https://hooks.slack.invalid/actions/T/1/x",
        "actions": [{"type": "button", "action_id": value, "block_id": "switchboard_actions",
                     "value": value, "text": {"type": "plain_text", "text": "Allow"},
                     "action_ts": "1700000100.000001"}],
    })
}
