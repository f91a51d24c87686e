//! A fake Telegram Bot API on 127.0.0.1 for end-to-end tests through the real
//! Telegram adapter (teloxide long polling): it hands queued updates to
//! `getUpdates`, records every method call, answers `sendMessage` like
//! Telegram, and tells a test when the adapter has handled everything queued.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use crate::helpers::eventually;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use serde_json::{Value, json};
use switchboard_telegram::TelegramSettings;
use tokio::sync::Notify;

/// The fake bot's username (`getMe`), for `@mentions` and `/cmd@bot`.
pub const BOT_USERNAME: &str = "sb_test_bot";
/// The fake bot's user id: the gateway's Telegram account id.
pub const BOT_ID: i64 = 4242;
/// The variable holding the bot token, set once per test process.
const TOKEN_ENV: &str = "SB_TEST_TG_TOKEN";
const TOKEN: &str = "4242:TEST-token";
/// How long the fake holds an empty `getUpdates` open, at most (the
/// adapter's poll timeout is longer; a queued update answers at once).
const LONG_POLL: Duration = Duration::from_millis(500);

/// A Telegram user writing to the bot.
#[derive(Debug, Clone, Copy)]
pub struct TgUser {
    pub id: i64,
    pub first_name: &'static str,
}

/// One `sendMessage` call the gateway made.
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
    pub addr: SocketAddr,
    api: Arc<BotApi>,
}

#[derive(Default)]
struct BotApi {
    queue: Mutex<Queue>,
    calls: Mutex<Vec<(String, Value)>>,
    /// Woken when an update is queued, so a held `getUpdates` answers.
    queued: Notify,
}

#[derive(Default)]
struct Queue {
    updates: VecDeque<Value>,
    next_update_id: u32,
    next_message_id: i64,
    /// `getUpdates` calls received so far.
    polls: u64,
    /// The number of the `getUpdates` call that handed out the last batch.
    /// The adapter handles a batch before it polls again, so a later poll
    /// means the batch was handled.
    delivered_by: u64,
}

impl FakeTelegram {
    /// Starts the server on a free port.
    pub async fn start() -> Self {
        let api = Arc::new(BotApi::default());
        let app = axum::Router::new()
            .route("/{bot}/{method}", post(handle))
            .with_state(Arc::clone(&api));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, api }
    }

    /// The `[telegram]` settings that point the adapter here (long polling).
    pub fn settings(&self) -> TelegramSettings {
        static TOKEN_SET: Once = Once::new();
        // SAFETY (test): set once per process, before the first adapter
        // reads it; nothing else writes this variable.
        TOKEN_SET.call_once(|| unsafe { std::env::set_var(TOKEN_ENV, TOKEN) });
        TelegramSettings {
            token_env: TOKEN_ENV.to_owned(),
            api_url: Some(url::Url::parse(&format!("http://{}/", self.addr)).expect("url")),
            poll_timeout_secs: 1,
            ..TelegramSettings::default()
        }
    }

    /// Queues an update as it is.
    pub fn push(&self, update: Value) {
        self.api
            .queue
            .lock()
            .expect("lock")
            .updates
            .push_back(update);
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
        self.reply_after(before, user.id, text).await
    }

    /// `user` writes `text` in the group `chat`; returns the reply there.
    pub async fn ask_in_group(&self, chat: i64, user: TgUser, text: &str) -> String {
        let before = self.sent().len();
        self.group(chat, user, text);
        self.reply_after(before, chat, text).await
    }

    /// Every `sendMessage` call so far, oldest first.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.api
            .calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|(method, _)| method == "sendmessage")
            .map(|(_, body)| SentMessage {
                chat_id: body["chat_id"].as_i64().expect("numeric chat_id"),
                text: unescape_html(body["text"].as_str().unwrap_or_default()),
                body: body.clone(),
            })
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

    /// Polls `done` until it holds (see [`eventually`]).
    pub async fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        eventually(what, || std::future::ready(done())).await;
    }

    async fn reply_after(&self, before: usize, chat: i64, text: &str) -> String {
        let what = format!("a reply to {text:?}");
        self.wait_for(&what, || self.sent().len() > before).await;
        let reply = self.sent().swap_remove(before);
        assert_eq!(
            reply.chat_id, chat,
            "the reply to {text:?} goes to the chat it came from: {reply:?}"
        );
        reply.text
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

fn me() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Switchboard", "username": BOT_USERNAME,
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
        "getupdates" => json!(updates(&api).await),
        "sendmessage" => {
            let chat_id = body["chat_id"].as_i64().unwrap_or_default();
            let chat = if chat_id < 0 {
                json!({"id": chat_id, "type": "supergroup", "title": "Test group"})
            } else {
                json!({"id": chat_id, "type": "private", "first_name": "User"})
            };
            let message_id = {
                let mut queue = api.queue.lock().expect("lock");
                queue.next_message_id += 1;
                queue.next_message_id
            };
            json!({"message_id": message_id, "date": 1_700_000_000, "chat": chat,
                   "from": me(), "text": body["text"]})
        }
        _ => json!(true),
    };
    Json(json!({"ok": true, "result": result}))
}

/// One `getUpdates`: what is queued, or (after up to [`LONG_POLL`] with
/// nothing queued) an empty list.
async fn updates(api: &BotApi) -> Vec<Value> {
    let poll = {
        let mut queue = api.queue.lock().expect("lock");
        queue.polls += 1;
        queue.polls
    };
    let take = || {
        let mut queue = api.queue.lock().expect("lock");
        let batch: Vec<Value> = queue.updates.drain(..).collect();
        if !batch.is_empty() {
            queue.delivered_by = poll;
        }
        batch
    };
    let batch = take();
    if !batch.is_empty() {
        return batch;
    }
    // A permit stored by an earlier push makes this return at once; the
    // queue is checked again either way.
    let _ = tokio::time::timeout(LONG_POLL, api.queued.notified()).await;
    take()
}

/// Decodes the entities Telegram HTML escaping produces.
fn unescape_html(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
