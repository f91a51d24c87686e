//! A fake Telegram Bot API on 127.0.0.1:0, for the adapter's own tests and
//! for the gateway end to end: it serves `/bot<token>/<method>` (any case,
//! as Telegram does), hands queued updates to `getUpdates` (holding an empty
//! long poll a little), records every call, plays scripted answers (errors,
//! rate limits) before its defaults, answers `sendMessage` like Telegram,
//! and tells a test when the adapter has handled everything queued. Like
//! Telegram, it ends a held `getUpdates` with 409 Conflict when another
//! `getUpdates` for the bot arrives (two processes polling one bot), and
//! counts those conflicts; started with [`FakeTelegram::start_confirming`]
//! it also keeps updates until a later poll confirms them, as Telegram does.
//! Files added with [`FakeTelegram::add_file`] are described by `getFile`
//! and served from `/file/bot<token>/<file_path>`, as Telegram serves them.
//! A test taps an inline button with [`FakeTelegram::tap`] (a
//! `callback_query` update under one of the bot's messages) and reads the
//! answer ([`FakeTelegram::answers`], `answerCallbackQuery`) and the
//! keyboard a message shows now ([`FakeTelegram::buttons`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;
use url::Url;

use crate::wait::eventually;

/// The bot token the fake accepts; any other is `401 Unauthorized`.
pub const TOKEN: &str = "123456:TEST-fake-token_abcdefghijklmnopqrstu";
/// The fake bot's user id (`getMe`): the gateway's Telegram account id.
pub const BOT_ID: u64 = 999;
/// The fake bot's username (`getMe`), for `@mentions` and `/cmd@bot`.
pub const BOT_USERNAME: &str = "SwitchboardBot";

/// How long the fake holds an empty `getUpdates` open, at most (the
/// adapter's poll timeout may be longer; a queued update answers at once).
const LONG_POLL: Duration = Duration::from_millis(500);
/// The id of the first message the fake sends on the bot's behalf.
pub const FIRST_SENT_ID: i64 = 5000;

/// A Telegram user writing to the bot.
#[derive(Debug, Clone, Copy)]
pub struct TgUser {
    pub id: i64,
    pub first_name: &'static str,
}

/// One `sendMessage` call Telegram accepted.
#[derive(Debug, Clone)]
pub struct SentMessage {
    pub chat_id: i64,
    /// The text with Telegram HTML entities decoded.
    pub text: String,
    pub body: Value,
}

/// The fake server; cheap to clone.
#[derive(Clone)]
pub struct FakeTelegram {
    url: Url,
    api: Arc<BotApi>,
}

impl FakeTelegram {
    /// Starts the server on a free port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        Self::serve(BotApi::default()).await
    }

    /// Starts a server that, like Telegram, keeps each update queued until
    /// a later `getUpdates` confirms it (its `offset` is past the update's
    /// id), handing it out again meanwhile: a poller that dies or stalls
    /// after taking a batch loses nothing, and the next poller gets the
    /// batch again. ([`FakeTelegram::start`] hands each update out once,
    /// so that a test can queue the same update twice.)
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start_confirming() -> Self {
        Self::serve(BotApi {
            confirming: true,
            ..BotApi::default()
        })
        .await
    }

    async fn serve(api: BotApi) -> Self {
        let api = Arc::new(api);
        let app = Router::new()
            .route("/{bot}/{method}", post(handle))
            .route("/file/{bot}/{*path}", get(download))
            .with_state(Arc::clone(&api));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = Url::parse(&format!("http://{addr}/")).expect("a loopback URL");
        Self { url, api }
    }

    /// The base URL to point the adapter's `api_url` at.
    pub fn url(&self) -> Url {
        self.url.clone()
    }

    /// The next call of `method` gets this answer instead of the default.
    pub fn script(&self, method: &str, status: u16, body: Value) {
        let status = StatusCode::from_u16(status).expect("an HTTP status");
        self.api
            .scripted
            .lock()
            .expect("lock")
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back((status, body));
    }

    /// Queues an update as it is.
    pub fn push(&self, update: Value) {
        self.push_updates([update]);
    }

    /// Queues updates for the next `getUpdates`.
    pub fn push_updates(&self, updates: impl IntoIterator<Item = Value>) {
        self.api.queue.lock().expect("lock").updates.extend(updates);
        self.api.queued.notify_one();
    }

    /// Queues `text` from `user` in their private chat with the bot.
    pub fn dm(&self, user: TgUser, text: &str) {
        let chat = json!({"id": user.id, "type": "private", "first_name": user.first_name});
        self.push_message(chat, user, text);
    }

    /// Queues `text` from `user` in the group `chat` (a negative id).
    pub fn group(&self, chat: i64, user: TgUser, text: &str) {
        let chat = json!({"id": chat, "type": "supergroup", "title": "Test group"});
        self.push_message(chat, user, text);
    }

    /// `user` writes `text` in their private chat; returns the reply, which
    /// must come back to that chat.
    pub async fn ask(&self, user: TgUser, text: &str) -> String {
        let before = self.sent().len();
        self.dm(user, text);
        self.reply_after(before, user.id, &format!("{text:?}"))
            .await
    }

    /// `user` writes `text` in the group `chat`; returns the reply there.
    pub async fn ask_in_group(&self, chat: i64, user: TgUser, text: &str) -> String {
        let before = self.sent().len();
        self.group(chat, user, text);
        self.reply_after(before, chat, &format!("{text:?}")).await
    }

    /// `user` sends the photo `file_id` (declared 1×1, see
    /// [`FakeTelegram::dm_photo`]) with `caption` in their private chat;
    /// returns the reply, which must come back to that chat.
    pub async fn ask_with_photo(
        &self,
        user: TgUser,
        file_id: &str,
        caption: Option<&str>,
    ) -> String {
        let before = self.sent().len();
        self.dm_photo(user, file_id, (1, 1), caption);
        self.reply_after(before, user.id, "the photo").await
    }

    /// The bodies of every call of `method` (any case), oldest first.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.api
            .calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|call| call.method.eq_ignore_ascii_case(method))
            .map(|call| call.body.clone())
            .collect()
    }

    /// Every `sendMessage` call Telegram accepted (scripted failures left
    /// out), oldest first.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.api
            .calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|call| call.method == "sendmessage" && call.delivered)
            .map(|call| SentMessage {
                chat_id: call.body["chat_id"].as_i64().expect("numeric chat_id"),
                text: unescape_html(call.body["text"].as_str().unwrap_or_default()),
                body: call.body.clone(),
            })
            .collect()
    }

    /// The bot's messages in `chat` as its members see them now: each
    /// accepted `sendMessage` with every later accepted `editMessageText`
    /// of it applied (text with HTML entities decoded), oldest first.
    pub fn chat_view(&self, chat: i64) -> Vec<String> {
        let calls = self.api.calls.lock().expect("lock");
        let mut messages: Vec<String> = Vec::new();
        let mut index_of = HashMap::new();
        for call in calls.iter().filter(|call| call.delivered) {
            if call.body["chat_id"].as_i64() != Some(chat) {
                continue;
            }
            let text = unescape_html(call.body["text"].as_str().unwrap_or_default());
            match (call.method.as_str(), call.message_id) {
                ("sendmessage", Some(id)) => {
                    index_of.insert(id, messages.len());
                    messages.push(text);
                }
                ("editmessagetext", _) => {
                    let id = call.body["message_id"].as_i64().unwrap_or_default();
                    if let Some(&index) = index_of.get(&id) {
                        messages[index] = text;
                    }
                }
                _ => {}
            }
        }
        messages
    }

    /// The inline buttons the bot's message `message_id` in `chat` shows
    /// now, as (label, `callback_data`) in reading order: those it was sent
    /// with, as the last accepted edit left them (`editMessageText` without
    /// a `reply_markup` leaves none, as on Telegram).
    pub fn buttons(&self, chat: i64, message_id: i64) -> Vec<(String, String)> {
        let calls = self.api.calls.lock().expect("lock");
        let mut markup = Value::Null;
        for call in calls.iter().filter(|call| call.delivered) {
            let here = call.body["chat_id"].as_i64() == Some(chat);
            let edited = call.body["message_id"].as_i64() == Some(message_id);
            match call.method.as_str() {
                "sendmessage" if here && call.message_id == Some(message_id) => {
                    markup = call.body["reply_markup"].clone();
                }
                "editmessagetext" | "editmessagereplymarkup" if here && edited => {
                    markup = call.body["reply_markup"].clone();
                }
                _ => {}
            }
        }
        let rows = markup["inline_keyboard"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        rows.iter()
            .filter_map(Value::as_array)
            .flatten()
            .map(|button| {
                let text = button["text"].as_str().unwrap_or_default().to_owned();
                let data = button["callback_data"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                (text, data)
            })
            .collect()
    }

    /// `user` taps the inline button carrying `data` under the bot's
    /// message `message_id` in `chat` (a group when negative): queues the
    /// `callback_query` update and returns the query's id. The message is
    /// described as the bot sent it (its text), or plainly if it sent no
    /// such message.
    pub fn tap(&self, user: TgUser, chat: i64, message_id: i64, data: &str) -> String {
        let text = {
            let calls = self.api.calls.lock().expect("lock");
            calls
                .iter()
                .find(|call| call.method == "sendmessage" && call.message_id == Some(message_id))
                .map(|call| call.body["text"].clone())
                .unwrap_or_else(|| json!("A question"))
        };
        let mut queue = self.api.queue.lock().expect("lock");
        queue.next_update_id += 1;
        let update_id = queue.next_update_id;
        let id = format!("cbq-{update_id}");
        queue
            .updates
            .push_back(json!({"update_id": update_id, "callback_query": {
                "id": id,
                "from": {"id": user.id, "is_bot": false, "first_name": user.first_name},
                "chat_instance": format!("instance-{chat}"),
                "data": data,
                "message": {
                    "message_id": message_id, "date": 1_700_000_000,
                    "chat": chat_of(chat), "from": me(), "text": text,
                },
            }}));
        drop(queue);
        self.api.queued.notify_one();
        id
    }

    /// Every `answerCallbackQuery` call, oldest first.
    pub fn answers(&self) -> Vec<Value> {
        self.calls("answerCallbackQuery")
    }

    /// The texts Telegram accepted through `sendMessage`, as sent (HTML).
    pub fn delivered_texts(&self) -> Vec<String> {
        self.sent()
            .iter()
            .map(|sent| sent.body["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits until the adapter has taken every queued update and handled it
    /// (submitted it to the gateway or skipped it): it polled again after
    /// the batch that held the last one.
    pub async fn settled(&self) {
        self.wait_for("the adapter to handle the queued updates", || {
            let queue = self.api.queue.lock().expect("lock");
            queue.updates.is_empty() && queue.polls > queue.delivered_by
        })
        .await;
    }

    /// How many `getUpdates` were cut short with 409 Conflict because
    /// another one arrived while they were held.
    pub fn conflicts(&self) -> u64 {
        self.api.polling.lock().expect("lock").conflicts
    }

    /// How many `getUpdates` calls were answered so far, 409s included.
    pub fn polls(&self) -> u64 {
        self.api.queue.lock().expect("lock").polls
    }

    /// Polls `done` until it holds (see [`eventually`]).
    pub async fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        eventually(what, || std::future::ready(done())).await;
    }

    /// Waits for the bot's message after the first `before` (counted as
    /// [`FakeTelegram::sent`] counts), which must go to `chat`; returns its
    /// text. `what` names what it answers.
    pub async fn reply_after(&self, before: usize, chat: i64, what: &str) -> String {
        self.wait_for(&format!("a reply to {what}"), || self.sent().len() > before)
            .await;
        let reply = self.sent().swap_remove(before);
        assert_eq!(
            reply.chat_id, chat,
            "the reply to {what} goes to the chat it came from: {reply:?}"
        );
        reply.text
    }

    /// Makes a file downloadable under `file_id` (`getFile`, then
    /// `/file/bot<token>/files/<file_id>`).
    pub fn add_file(&self, file_id: &str, bytes: &[u8]) {
        self.api
            .files
            .lock()
            .expect("lock")
            .insert(file_id.to_owned(), bytes.to_vec());
    }

    /// How many times the file `file_id` was downloaded.
    pub fn downloads(&self, file_id: &str) -> usize {
        self.api
            .downloads
            .lock()
            .expect("lock")
            .iter()
            .filter(|id| *id == file_id)
            .count()
    }

    /// Queues a photo (the file `file_id`, added with
    /// [`FakeTelegram::add_file`], of `width`×`height`) from `user` in
    /// their private chat, with `caption` if any.
    pub fn dm_photo(&self, user: TgUser, file_id: &str, size: (u32, u32), caption: Option<&str>) {
        let mut message = self.new_message(
            json!({"id": user.id, "type": "private", "first_name": user.first_name}),
            user,
        );
        message["photo"] = json!([
            {"file_id": format!("{file_id}-thumb"), "file_unique_id": "thumb",
             "width": 1, "height": 1},
            {"file_id": file_id, "file_unique_id": file_id, "width": size.0,
             "height": size.1, "file_size": self.file_size(file_id).unwrap_or(0)},
        ]);
        if let Some(caption) = caption {
            message["caption"] = json!(caption);
        }
        self.push_built(message);
    }

    /// Queues a document (the file `file_id`, added with
    /// [`FakeTelegram::add_file`], named `file_name`, declared
    /// `mime_type`) from `user` in their private chat, with `caption` if any.
    pub fn dm_document(
        &self,
        user: TgUser,
        file_id: &str,
        file_name: &str,
        mime_type: &str,
        caption: Option<&str>,
    ) {
        let mut message = self.new_message(
            json!({"id": user.id, "type": "private", "first_name": user.first_name}),
            user,
        );
        message["document"] = json!({"file_id": file_id, "file_unique_id": file_id,
            "file_name": file_name, "mime_type": mime_type,
            "file_size": self.file_size(file_id).unwrap_or(0)});
        if let Some(caption) = caption {
            message["caption"] = json!(caption);
        }
        self.push_built(message);
    }

    /// Queues a voice note (the file `file_id`) from `user` in their
    /// private chat.
    pub fn dm_voice(&self, user: TgUser, file_id: &str) {
        let mut message = self.new_message(
            json!({"id": user.id, "type": "private", "first_name": user.first_name}),
            user,
        );
        message["voice"] = json!({"file_id": file_id, "file_unique_id": file_id,
            "duration": 2, "mime_type": "audio/ogg",
            "file_size": self.file_size(file_id).unwrap_or(12)});
        self.push_built(message);
    }

    /// The size of the file `file_id`, if added.
    fn file_size(&self, file_id: &str) -> Option<usize> {
        self.api
            .files
            .lock()
            .expect("lock")
            .get(file_id)
            .map(Vec::len)
    }

    /// A message from `user` in `chat`, numbered, without content.
    fn new_message(&self, chat: Value, user: TgUser) -> Value {
        let mut queue = self.api.queue.lock().expect("lock");
        queue.next_message_id += 1;
        json!({
            "message_id": queue.next_message_id, "date": 1_700_000_000,
            "chat": chat,
            "from": {"id": user.id, "is_bot": false, "first_name": user.first_name},
        })
    }

    /// Queues `message` in an update of its own.
    fn push_built(&self, message: Value) {
        let mut queue = self.api.queue.lock().expect("lock");
        queue.next_update_id += 1;
        let update_id = queue.next_update_id;
        queue
            .updates
            .push_back(json!({"update_id": update_id, "message": message}));
        drop(queue);
        self.api.queued.notify_one();
    }

    fn push_message(&self, chat: Value, user: TgUser, text: &str) {
        let mut queue = self.api.queue.lock().expect("lock");
        queue.next_update_id += 1;
        let update_id = queue.next_update_id;
        queue.next_message_id += 1;
        let message_id = queue.next_message_id;
        queue
            .updates
            .push_back(json!({"update_id": update_id, "message": {
                "message_id": message_id, "date": 1_700_000_000,
                "chat": chat,
                "from": {"id": user.id, "is_bot": false, "first_name": user.first_name},
                "text": text,
                "entities": entities(text),
            }}));
        drop(queue);
        self.api.queued.notify_one();
    }
}

/// The fake bot as `getMe` describes it (also the `from` of its messages).
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

/// The `409 Conflict` body Telegram ends a held `getUpdates` with when
/// another one arrives.
pub fn conflict() -> Value {
    json!({
        "ok": false,
        "error_code": 409,
        "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
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

/// One recorded method call.
struct Call {
    /// Lower case: Telegram ignores the case (teloxide writes `GetMe`).
    method: String,
    /// The JSON body; a multipart one (`setWebhook`) kept raw under `__raw`.
    body: Value,
    /// Answered by the default (success), not by a script.
    delivered: bool,
    /// The id of the message a successful `sendMessage` created.
    message_id: Option<i64>,
}

#[derive(Default)]
struct BotApi {
    queue: Mutex<Queue>,
    calls: Mutex<Vec<Call>>,
    scripted: Mutex<HashMap<String, VecDeque<(StatusCode, Value)>>>,
    /// Woken when an update is queued, so a held `getUpdates` answers.
    queued: Notify,
    polling: Mutex<Polling>,
    /// Updates stay queued until a `getUpdates` offset confirms them.
    confirming: bool,
    /// Downloadable files by file id.
    files: Mutex<HashMap<String, Vec<u8>>>,
    /// The file ids downloaded, in order.
    downloads: Mutex<Vec<String>>,
}

/// The `getUpdates` being held, and how many were cut short by another.
#[derive(Default)]
struct Polling {
    /// The number of the held poll, and the signal that ends it with 409.
    held: Option<(u64, Arc<Notify>)>,
    conflicts: u64,
}

/// Marks a poll as no longer held when it ends, or when its client went
/// away and the server dropped it.
struct Held<'a> {
    api: &'a BotApi,
    poll: u64,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut polling = self.api.polling.lock().expect("lock");
        if polling
            .held
            .as_ref()
            .is_some_and(|(poll, _)| *poll == self.poll)
        {
            polling.held = None;
        }
    }
}

#[derive(Default)]
struct Queue {
    updates: VecDeque<Value>,
    next_update_id: u32,
    /// The id of the last message pushed through [`FakeTelegram::dm`] or
    /// [`FakeTelegram::group`].
    next_message_id: i64,
    /// Messages sent on the bot's behalf so far.
    sent: i64,
    /// `getUpdates` calls received so far.
    polls: u64,
    /// The number of the `getUpdates` call that handed out the last batch.
    /// The adapter handles a batch before it polls again, so a later poll
    /// means the batch was handled.
    delivered_by: u64,
}

async fn handle(
    State(api): State<Arc<BotApi>>,
    Path((bot, method)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let method = method.to_ascii_lowercase();
    if bot != format!("bot{TOKEN}") {
        let body = json!({"ok": false, "error_code": 401, "description": "Unauthorized"});
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    let body: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| json!({"__raw": String::from_utf8_lossy(&body)}));
    let scripted = api
        .scripted
        .lock()
        .expect("lock")
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    let mut delivered = scripted.is_none();
    let mut message_id = None;
    let response = match scripted {
        Some((status, answer)) => (status, Json(answer)).into_response(),
        None => match default_result(&api, &method, &body).await {
            Some(result) => {
                message_id = result["message_id"].as_i64();
                Json(json!({"ok": true, "result": result})).into_response()
            }
            None => {
                delivered = false;
                (StatusCode::CONFLICT, Json(conflict())).into_response()
            }
        },
    };
    api.calls.lock().expect("lock").push(Call {
        method,
        body,
        delivered,
        message_id,
    });
    response
}

/// Serves a file added with [`FakeTelegram::add_file`] at its
/// `getFile` path (`files/<file_id>`).
async fn download(
    State(api): State<Arc<BotApi>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(file_id) = path.strip_prefix("files/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let bytes = api.files.lock().expect("lock").get(file_id).cloned();
    match bytes {
        Some(bytes) => {
            api.downloads.lock().expect("lock").push(file_id.to_owned());
            bytes.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The successful answer to `method`; `None` for a `getUpdates` that
/// another one cut short (409 Conflict).
async fn default_result(api: &BotApi, method: &str, body: &Value) -> Option<Value> {
    let result = match method {
        "getme" => me(),
        "getwebhookinfo" => {
            json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0})
        }
        "getupdates" => {
            let hold = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0)).min(LONG_POLL);
            let offset = body["offset"].as_i64();
            json!(updates(api, hold, offset).await?)
        }
        "sendmessage" => {
            let chat_id = body["chat_id"].as_i64().unwrap_or_default();
            let chat = chat_of(chat_id);
            let message_id = {
                let mut queue = api.queue.lock().expect("lock");
                queue.sent += 1;
                FIRST_SENT_ID + queue.sent - 1
            };
            json!({"message_id": message_id, "date": 1_700_000_000, "chat": chat,
                   "from": me(), "text": body["text"]})
        }
        "editmessagetext" => {
            let chat_id = body["chat_id"].as_i64().unwrap_or_default();
            json!({"message_id": body["message_id"], "date": 1_700_000_000,
                   "edit_date": 1_700_000_001, "chat": chat_of(chat_id),
                   "from": me(), "text": body["text"]})
        }
        "getfile" => {
            let file_id = body["file_id"].as_str().unwrap_or_default();
            let size = api.files.lock().expect("lock").get(file_id).map(Vec::len);
            json!({"file_id": file_id, "file_unique_id": file_id,
                   "file_size": size.unwrap_or(0), "file_path": format!("files/{file_id}")})
        }
        _ => json!(true),
    };
    Some(result)
}

/// The chat object of `chat_id`: a group when negative, else a private chat.
fn chat_of(chat_id: i64) -> Value {
    if chat_id < 0 {
        json!({"id": chat_id, "type": "supergroup", "title": "Test group"})
    } else {
        json!({"id": chat_id, "type": "private", "first_name": "User"})
    }
}

/// One `getUpdates`: what is queued, or (after up to `hold` with nothing
/// queued) an empty list; `None` when another `getUpdates` arrived while
/// this one was held (Telegram's 409 Conflict), which ends this one and
/// not the newcomer.
async fn updates(api: &BotApi, hold: Duration, offset: Option<i64>) -> Option<Vec<Value>> {
    let poll = {
        let mut queue = api.queue.lock().expect("lock");
        queue.polls += 1;
        if let Some(offset) = offset.filter(|_| api.confirming) {
            queue
                .updates
                .retain(|update| update["update_id"].as_i64().is_some_and(|id| id >= offset));
        }
        queue.polls
    };
    let cut_short = Arc::new(Notify::new());
    {
        let mut polling = api.polling.lock().expect("lock");
        if let Some((_, earlier)) = polling.held.replace((poll, Arc::clone(&cut_short))) {
            polling.conflicts += 1;
            earlier.notify_one();
        }
    }
    let _held = Held { api, poll };
    let take = || {
        let mut queue = api.queue.lock().expect("lock");
        let batch: Vec<Value> = if api.confirming {
            queue.updates.iter().cloned().collect()
        } else {
            queue.updates.drain(..).collect()
        };
        if !batch.is_empty() {
            queue.delivered_by = poll;
        }
        batch
    };
    let batch = take();
    if !batch.is_empty() || hold.is_zero() {
        return Some(batch);
    }
    // A permit stored by an earlier push makes this return at once; the
    // queue is checked again either way.
    tokio::select! {
        () = cut_short.notified() => return None,
        _ = tokio::time::timeout(hold, api.queued.notified()) => {}
    }
    Some(take())
}

/// What Telegram marks in a text: a leading `/command` (with its `@bot`) and
/// `@username` mentions, with offsets and lengths in UTF-16 units.
fn entities(text: &str) -> Vec<Value> {
    let utf16 = |s: &str| s.encode_utf16().count();
    let mut found = Vec::new();
    if text.starts_with('/') {
        let word = text.split_whitespace().next().unwrap_or_default();
        found.push(json!({"type": "bot_command", "offset": 0, "length": utf16(word)}));
    }
    let mut start = 0;
    while let Some(at) = text[start..].find('@').map(|i| start + i) {
        let name_len = text[at + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(text.len() - at - 1);
        let preceded_by_word = text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| !c.is_whitespace());
        if name_len > 0 && !preceded_by_word {
            found.push(json!({"type": "mention", "offset": utf16(&text[..at]),
                              "length": name_len + 1}));
        }
        start = at + 1 + name_len;
    }
    found
}

/// Decodes the entities Telegram HTML escaping produces.
fn unescape_html(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
