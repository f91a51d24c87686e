//! A fake WhatsApp Business Cloud API (the Graph API endpoints the adapter
//! uses) on 127.0.0.1:0, for the adapter's own tests and for the gateway
//! end to end, and [`Webhook`], which posts notifications to the adapter
//! the way Meta does: signed with the app secret, and delivered again
//! while they are not acknowledged.
//!
//! The fake serves, under `/{version}/`:
//!
//! - `GET /{phone-number-id}?fields=…`: the number's details, to a bearer
//!   of that number's token (401 with Graph code 190 otherwise);
//! - `POST /{phone-number-id}/messages`: every request is recorded; read
//!   receipts (`status: "read"`) answer `{"success": true}`; messages are
//!   checked like the Cloud API checks them (body lengths, at most three
//!   reply buttons of at most 20 characters, lists of at most ten rows,
//!   templates with a name and language) and answered with a fresh
//!   `wamid`; scripted failures ([`FakeWhatsApp::fail_next_sends`]) come
//!   first, and free-form messages to a person whose window was closed
//!   ([`FakeWhatsApp::close_window`]) are refused with code 131047, as
//!   the Cloud API does (templates still go through);
//! - `GET /{media-id}`: a media item's `{url, mime_type, file_size}`, to a
//!   bearer of any number's token; the URL (`/media-files/{id}`) serves
//!   the bytes to such a bearer too, and downloads are counted.
//!
//! Builders for the notifications Meta posts (messages of every type and
//! status callbacks) come with it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The Graph API version the fake serves (any other is refused).
pub const VERSION: &str = "v21.0";
/// The Phone Number ID of the fake's first number.
pub const PHONE_NUMBER_ID: &str = "106540352242922";
/// That number's access token.
pub const ACCESS_TOKEN: &str = "EAAGfakeAccessToken0123456789abcdefZZ";
/// That number as WhatsApp shows it.
pub const DISPLAY_PHONE_NUMBER: &str = "+1 555-010-4242";
/// That number's verified business name.
pub const VERIFIED_NAME: &str = "Switchboard Test";
/// The app secret that signs webhook requests.
pub const APP_SECRET: &str = "fake-app-secret-8f2c41d9";
/// The verify token of the webhook subscription.
pub const VERIFY_TOKEN: &str = "fake-verify-token-5d1e";
/// A person writing to the number: their `wa_id`, a phone number.
pub const CUSTOMER: &str = "15551234567";
/// Their profile name.
pub const CUSTOMER_NAME: &str = "Alice";

/// One request to `/{phone-number-id}/messages`.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub phone_number_id: String,
    pub authorization: Option<String>,
    pub body: Value,
    /// The `wamid` the fake answered with, when it accepted a message.
    pub message_id: Option<String>,
}

impl Recorded {
    /// The message's `type` (`text`, `interactive`, `template`).
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or_default()
    }

    /// A text message's body, or an interactive message's body text.
    pub fn text(&self) -> Option<&str> {
        self.body["text"]["body"]
            .as_str()
            .or_else(|| self.body["interactive"]["body"]["text"].as_str())
    }

    /// The message it replies to (`context.message_id`).
    pub fn reply_to(&self) -> Option<&str> {
        self.body["context"]["message_id"].as_str()
    }
}

/// A scripted failure of a message send.
#[derive(Debug, Clone)]
struct Failure {
    status: u16,
    code: Option<i64>,
    retry_after: Option<u64>,
}

struct Number {
    token: String,
    details: Value,
}

struct MediaItem {
    mime_type: String,
    bytes: Vec<u8>,
    declared: u64,
}

#[derive(Default)]
struct FakeState {
    numbers: Mutex<HashMap<String, Number>>,
    requests: Mutex<Vec<Recorded>>,
    /// What the next message sends meet: `None` passes one.
    failures: Mutex<VecDeque<Option<Failure>>>,
    closed: Mutex<HashSet<String>>,
    media: Mutex<HashMap<String, MediaItem>>,
    sent: AtomicUsize,
    media_lookups: AtomicUsize,
    media_downloads: AtomicUsize,
    /// Set once the fake knows its own address (media URLs point at it).
    base: Mutex<String>,
}

/// The fake Cloud API.
pub struct FakeWhatsApp {
    address: SocketAddr,
    state: Arc<FakeState>,
}

impl FakeWhatsApp {
    /// Starts the server on a free port, with the number
    /// [`PHONE_NUMBER_ID`] (token [`ACCESS_TOKEN`]).
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let app = Router::new()
            .route("/{version}/{id}", get(fake_get))
            .route("/{version}/{id}/messages", post(fake_messages))
            .route("/media-files/{id}", get(fake_download))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr");
        *state.base.lock().expect("lock") = format!("http://{address}");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let fake = Self { address, state };
        fake.add_number(
            PHONE_NUMBER_ID,
            ACCESS_TOKEN,
            DISPLAY_PHONE_NUMBER,
            VERIFIED_NAME,
        );
        fake
    }

    /// The Graph API base URL, without a version: the adapter's `api_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Adds a number with its own token.
    pub fn add_number(&self, phone_number_id: &str, token: &str, display: &str, name: &str) {
        let details = json!({
            "display_phone_number": display,
            "verified_name": name,
            "quality_rating": "GREEN",
            "id": phone_number_id,
        });
        self.state.numbers.lock().expect("lock").insert(
            phone_number_id.to_owned(),
            Number {
                token: token.to_owned(),
                details,
            },
        );
    }

    /// Every request to a `/messages` endpoint so far, refused ones and
    /// read receipts included, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("lock").clone()
    }

    /// The messages the fake accepted (not read receipts), oldest first.
    pub fn sent(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|request| request.message_id.is_some())
            .collect()
    }

    /// The read receipts (with or without typing indicator) accepted.
    pub fn reads(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|request| request.body["status"] == "read")
            .collect()
    }

    /// The next `count` message sends fail with HTTP `status` and, if
    /// given, Graph error `code` and a `Retry-After` of `retry_after`
    /// seconds.
    pub fn fail_next_sends(
        &self,
        count: usize,
        status: u16,
        code: Option<i64>,
        retry_after: Option<u64>,
    ) {
        let failure = Failure {
            status,
            code,
            retry_after,
        };
        let mut failures = self.state.failures.lock().expect("lock");
        failures.extend(std::iter::repeat_n(Some(failure), count));
    }

    /// The next `count` message sends go through (before failures
    /// scripted after this call).
    pub fn pass_next_sends(&self, count: usize) {
        let mut failures = self.state.failures.lock().expect("lock");
        failures.extend(std::iter::repeat_n(None, count));
    }

    /// The 24-hour window of `wa_id` is closed: free-form messages to them
    /// are refused with code 131047; templates go through.
    pub fn close_window(&self, wa_id: &str) {
        self.state
            .closed
            .lock()
            .expect("lock")
            .insert(wa_id.to_owned());
    }

    /// Serves `bytes` as media `media_id`, declaring their true size.
    pub fn add_media(&self, media_id: &str, mime_type: &str, bytes: &[u8]) {
        self.add_media_declaring(media_id, mime_type, bytes, bytes.len() as u64);
    }

    /// Serves `bytes` as media `media_id`, declaring `file_size` (which
    /// may lie).
    pub fn add_media_declaring(
        &self,
        media_id: &str,
        mime_type: &str,
        bytes: &[u8],
        declared: u64,
    ) {
        self.state.media.lock().expect("lock").insert(
            media_id.to_owned(),
            MediaItem {
                mime_type: mime_type.to_owned(),
                bytes: bytes.to_vec(),
                declared,
            },
        );
    }

    /// Media metadata lookups (`GET /{media-id}`) answered so far.
    pub fn media_lookups(&self) -> usize {
        self.state.media_lookups.load(Ordering::SeqCst)
    }

    /// Media downloads (`/media-files/{id}`) served so far.
    pub fn media_downloads(&self) -> usize {
        self.state.media_downloads.load(Ordering::SeqCst)
    }
}

/// The Graph error body for `code`.
fn graph_error(status: u16, code: i64, message: &str) -> Response {
    let status = StatusCode::from_u16(status).expect("an HTTP status");
    let body = json!({"error": {
        "message": message,
        "type": "OAuthException",
        "code": code,
        "error_data": {"messaging_product": "whatsapp", "details": message},
        "fbtrace_id": "AfakeTrace",
    }});
    (status, Json(body)).into_response()
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned)
}

fn token_refused() -> Response {
    graph_error(
        401,
        190,
        "Error validating access token: the session is invalid",
    )
}

async fn fake_get(
    State(state): State<Arc<FakeState>>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if version != VERSION {
        return graph_error(400, 100, "Unknown path components");
    }
    let token = bearer(&headers);
    if let Some(number) = state.numbers.lock().expect("lock").get(&id) {
        if token.as_deref() != Some(number.token.as_str()) {
            return token_refused();
        }
        return Json(number.details.clone()).into_response();
    }
    if !knows_token(&state, token.as_deref()) {
        return token_refused();
    }
    let media = state.media.lock().expect("lock");
    let Some(item) = media.get(&id) else {
        return graph_error(400, 100, "Unsupported get request. Object does not exist");
    };
    state.media_lookups.fetch_add(1, Ordering::SeqCst);
    let base = state.base.lock().expect("lock").clone();
    Json(json!({
        "messaging_product": "whatsapp",
        "url": format!("{base}/media-files/{id}?hash=fake"),
        "mime_type": item.mime_type,
        "sha256": "fake",
        "file_size": item.declared,
        "id": id,
    }))
    .into_response()
}

fn knows_token(state: &FakeState, token: Option<&str>) -> bool {
    let numbers = state.numbers.lock().expect("lock");
    token.is_some_and(|token| numbers.values().any(|number| number.token == token))
}

async fn fake_download(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !knows_token(&state, bearer(&headers).as_deref()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let media = state.media.lock().expect("lock");
    let Some(item) = media.get(&id) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    state.media_downloads.fetch_add(1, Ordering::SeqCst);
    let mime = HeaderValue::from_str(&item.mime_type).expect("a media type");
    ([(header::CONTENT_TYPE, mime)], item.bytes.clone()).into_response()
}

async fn fake_messages(
    State(state): State<Arc<FakeState>>,
    Path((version, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut recorded = Recorded {
        phone_number_id: id.clone(),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        body,
        message_id: None,
    };
    let response = answer(&state, &version, &mut recorded);
    state.requests.lock().expect("lock").push(recorded);
    response
}

/// The Cloud API's answer to a `/messages` request.
fn answer(state: &FakeState, version: &str, recorded: &mut Recorded) -> Response {
    if version != VERSION {
        return graph_error(400, 100, "Unknown path components");
    }
    let token = state
        .numbers
        .lock()
        .expect("lock")
        .get(&recorded.phone_number_id)
        .map(|number| format!("Bearer {}", number.token));
    let Some(token) = token else {
        return graph_error(400, 100, "Unsupported post request. Object does not exist");
    };
    if recorded.authorization.as_deref() != Some(token.as_str()) {
        return token_refused();
    }
    let body = &recorded.body;
    if body["messaging_product"] != "whatsapp" {
        return graph_error(400, 100, "Invalid parameter: messaging_product");
    }
    if body["status"] == "read" {
        if !body["message_id"].is_string() {
            return graph_error(400, 100, "Invalid parameter: message_id");
        }
        return Json(json!({"success": true})).into_response();
    }
    if let Some(refused) = refusal(state, body) {
        return refused;
    }
    let n = state.sent.fetch_add(1, Ordering::SeqCst) + 1;
    let wamid = format!("wamid.FAKE{n:06}");
    recorded.message_id = Some(wamid.clone());
    let to = body["to"].clone();
    Json(json!({
        "messaging_product": "whatsapp",
        "contacts": [{"input": to, "wa_id": to}],
        "messages": [{"id": wamid}],
    }))
    .into_response()
}

/// A scripted failure, a closed window, or a message the Cloud API would
/// refuse; `None` to accept it.
fn refusal(state: &FakeState, body: &Value) -> Option<Response> {
    let to = body["to"].as_str().unwrap_or_default();
    let scripted = state.failures.lock().expect("lock").pop_front().flatten();
    if let Some(failure) = scripted {
        // Like some of Meta's, the details name the recipient.
        let message = format!("scripted failure for recipient {to}");
        let mut response = match failure.code {
            Some(code) => graph_error(failure.status, code, &message),
            None => StatusCode::from_u16(failure.status)
                .expect("an HTTP status")
                .into_response(),
        };
        if let Some(secs) = failure.retry_after {
            let value = HeaderValue::from_str(&secs.to_string()).expect("a header");
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return Some(response);
    }
    if to.is_empty() || !to.bytes().all(|b| b.is_ascii_digit()) {
        return Some(graph_error(400, 100, "Invalid parameter: to"));
    }
    if body["recipient_type"] != "individual" {
        return Some(graph_error(400, 100, "Invalid parameter: recipient_type"));
    }
    let kind = body["type"].as_str().unwrap_or_default();
    if kind != "template" && state.closed.lock().expect("lock").contains(to) {
        return Some(graph_error(
            400,
            131_047,
            "Re-engagement message: more than 24 hours have passed since the recipient last replied",
        ));
    }
    invalid(body, kind).map(|problem| graph_error(400, 131_009, problem))
}

/// What the Cloud API would find wrong with a message of `kind`.
fn invalid(body: &Value, kind: &str) -> Option<&'static str> {
    let chars = |value: &Value| value.as_str().map_or(0, |text| text.chars().count());
    match kind {
        "text" => {
            let length = chars(&body["text"]["body"]);
            (length == 0 || length > 4096).then_some("text.body must be 1 to 4096 characters")
        }
        "interactive" => invalid_interactive(&body["interactive"]),
        "template" => {
            let template = &body["template"];
            (template["name"].as_str().is_none() || template["language"]["code"].as_str().is_none())
                .then_some("template needs a name and a language code")
        }
        _ => Some("unsupported message type"),
    }
}

fn invalid_interactive(interactive: &Value) -> Option<&'static str> {
    let chars = |value: &Value| value.as_str().map_or(0, |text| text.chars().count());
    let body = chars(&interactive["body"]["text"]);
    if body == 0 || body > 1024 {
        return Some("interactive body must be 1 to 1024 characters");
    }
    let action = &interactive["action"];
    match interactive["type"].as_str() {
        Some("button") => {
            let buttons = action["buttons"].as_array()?;
            let titles_fit = buttons.iter().all(|button| {
                let title = chars(&button["reply"]["title"]);
                (1..=20).contains(&title) && button["reply"]["id"].is_string()
            });
            (buttons.is_empty() || buttons.len() > 3 || !titles_fit)
                .then_some("1 to 3 buttons, titles 1 to 20 characters")
        }
        Some("list") => {
            let rows: Vec<&Value> = action["sections"]
                .as_array()?
                .iter()
                .flat_map(|section| section["rows"].as_array().into_iter().flatten())
                .collect();
            let rows_fit = rows.iter().all(|row| {
                (1..=24).contains(&chars(&row["title"])) && chars(&row["description"]) <= 72
            });
            let button = chars(&action["button"]);
            (rows.is_empty() || rows.len() > 10 || !rows_fit || !(1..=20).contains(&button))
                .then_some("1 to 10 rows, titles 1 to 24 characters, a button of 1 to 20")
        }
        _ => Some("unsupported interactive type"),
    }
}

/// `sha256=` and the hex HMAC-SHA256 of `body` keyed with `secret`: the
/// `X-Hub-Signature-256` Meta sends.
///
/// # Panics
///
/// Never: HMAC takes keys of any length.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Posts notifications to the adapter's webhook, as Meta does.
pub struct Webhook {
    http: reqwest::Client,
    url: String,
    secret: String,
}

impl Webhook {
    /// The webhook at `url`, signing with [`APP_SECRET`].
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.into(),
            secret: APP_SECRET.to_owned(),
        }
    }

    /// Posts `payload`, signed; returns the HTTP status.
    pub async fn deliver(&self, payload: &Value) -> u16 {
        let body = payload.to_string().into_bytes();
        let signature = sign(&self.secret, &body);
        self.post(body, Some(signature)).await
    }

    /// Posts `payload` until it is acknowledged (200), at most `attempts`
    /// times, as Meta redelivers; returns every status.
    pub async fn deliver_until_acknowledged(&self, payload: &Value, attempts: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..attempts {
            let status = self.deliver(payload).await;
            statuses.push(status);
            if status == 200 {
                break;
            }
        }
        statuses
    }

    /// Posts raw bytes with `signature` as `X-Hub-Signature-256`, if any.
    ///
    /// # Panics
    ///
    /// When the adapter cannot be reached.
    pub async fn post(&self, body: Vec<u8>, signature: Option<String>) -> u16 {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-hub-signature-256", signature);
        }
        request
            .send()
            .await
            .expect("the webhook answers")
            .status()
            .as_u16()
    }

    /// The subscription handshake with `verify_token`: status and body.
    ///
    /// # Panics
    ///
    /// When the adapter cannot be reached.
    pub async fn handshake(&self, verify_token: &str, challenge: &str) -> (u16, String) {
        let response = self
            .http
            .get(&self.url)
            .query(&[
                ("hub.mode", "subscribe"),
                ("hub.verify_token", verify_token),
                ("hub.challenge", challenge),
            ])
            .send()
            .await
            .expect("the webhook answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }
}

/// A `messages` notification for `phone_number_id` holding `value`.
pub fn notification(phone_number_id: &str, mut value: Value) -> Value {
    value["messaging_product"] = json!("whatsapp");
    value["metadata"] = json!({
        "display_phone_number": "15550104242",
        "phone_number_id": phone_number_id,
    });
    json!({
        "object": "whatsapp_business_account",
        "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": value}]}],
    })
}

/// `messages` from [`CUSTOMER`] ([`CUSTOMER_NAME`]) to `phone_number_id`.
pub fn messages(phone_number_id: &str, messages: Vec<Value>) -> Value {
    notification(
        phone_number_id,
        json!({
            "contacts": [{"profile": {"name": CUSTOMER_NAME}, "wa_id": CUSTOMER}],
            "messages": messages,
        }),
    )
}

/// Status callbacks for `phone_number_id`.
pub fn statuses(phone_number_id: &str, statuses: Vec<Value>) -> Value {
    notification(phone_number_id, json!({ "statuses": statuses }))
}

/// A message `id` of `kind` from [`CUSTOMER`], sent now, with `content`
/// under its kind.
pub fn message(id: &str, kind: &str, content: Value) -> Value {
    let mut message = json!({
        "from": CUSTOMER,
        "id": id,
        "timestamp": unix_now().to_string(),
        "type": kind,
    });
    message[kind] = content;
    message
}

/// A text message.
pub fn text(id: &str, body: &str) -> Value {
    message(id, "text", json!({ "body": body }))
}

/// `message`, replying to `context_id`.
pub fn replying(mut message: Value, context_id: &str) -> Value {
    message["context"] = json!({"from": "15550104242", "id": context_id});
    message
}

/// A voice note recorded in the app (audio with `voice: true`).
pub fn voice_note(id: &str, media_id: &str) -> Value {
    message(
        id,
        "audio",
        json!({"id": media_id, "mime_type": "audio/ogg; codecs=opus", "sha256": "x", "voice": true}),
    )
}

/// A photo with `caption`.
pub fn image(id: &str, media_id: &str, caption: &str) -> Value {
    message(
        id,
        "image",
        json!({"id": media_id, "mime_type": "image/png", "sha256": "x", "caption": caption}),
    )
}

/// A press of the reply button `button_id` under message `context_id`.
pub fn button_reply(id: &str, context_id: &str, button_id: &str, title: &str) -> Value {
    let content =
        json!({"type": "button_reply", "button_reply": {"id": button_id, "title": title}});
    replying(message(id, "interactive", content), context_id)
}

/// A status callback: `status` (`sent`, `delivered`, `read`) of `wamid`.
pub fn status(wamid: &str, status: &str) -> Value {
    json!({
        "id": wamid,
        "status": status,
        "timestamp": unix_now().to_string(),
        "recipient_id": CUSTOMER,
    })
}

/// A `failed` status callback of `wamid` with Graph error `code`.
pub fn failed_status(wamid: &str, code: i64, title: &str) -> Value {
    let mut failed = status(wamid, "failed");
    failed["errors"] = json!([{
        "code": code,
        "title": title,
        "message": title,
        "error_data": {"details": format!("{title} (recipient {CUSTOMER})")},
    }]);
    failed
}

/// This host's clock in Unix seconds.
///
/// # Panics
///
/// Before 1970.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}
