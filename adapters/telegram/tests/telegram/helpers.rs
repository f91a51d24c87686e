//! The test app: the adapter connected to a fake Bot API, with a sink that
//! records what the adapter submits, and builders for Telegram updates.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use secrecy::SecretString;
use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ActionReply, ChatId, InboundAction, InboundMessage, InboundSink, OutboundMessage,
    PlatformName, PlatformSender, SubmitError, Submitted, ThreadId,
};
use switchboard_telegram::{SECRET_HEADER, TelegramAdapter, TelegramSettings};
use tower::ServiceExt;

pub use switchboard_test_support::send::send_with_retries;
pub use switchboard_test_support::telegram::TOKEN;

use switchboard_test_support::eventually;
use switchboard_test_support::telegram::{BOT_ID, FakeTelegram};

pub const SECRET: &str = "webhook-secret_123";
pub const USER_ID: u64 = 42;

/// Records submissions and button taps; can be told to fail like an
/// unavailable core, or to panic on one text (a bug in the core met by one
/// message), and what to answer a tap with.
#[derive(Default)]
pub struct RecordingSink {
    pub messages: Mutex<Vec<InboundMessage>>,
    pub unavailable: Mutex<bool>,
    pub panic_on: Mutex<Option<String>>,
    pub actions: Mutex<Vec<InboundAction>>,
    /// What the next taps are answered with.
    pub reply: Mutex<ActionReply>,
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        if *self.unavailable.lock().unwrap() {
            return Err(SubmitError::Unavailable("database down".to_owned()));
        }
        if self.panic_on.lock().unwrap().as_deref() == Some(message.text.as_str()) {
            panic!("the sink panics on {:?}", message.text);
        }
        self.messages.lock().unwrap().push(message);
        Ok(Submitted::Accepted)
    }

    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        if *self.unavailable.lock().unwrap() {
            return Err(SubmitError::Unavailable("database down".to_owned()));
        }
        self.actions.lock().unwrap().push(action);
        Ok(self.reply.lock().unwrap().clone())
    }
}

impl RecordingSink {
    pub fn actions(&self) -> Vec<InboundAction> {
        self.actions.lock().unwrap().clone()
    }

    pub fn submitted(&self) -> Vec<InboundMessage> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until `count` messages were submitted; returns them all.
    pub async fn wait_for(&self, count: usize) -> Vec<InboundMessage> {
        let what = format!("{count} submissions");
        eventually(&what, || {
            std::future::ready(self.submitted().len() >= count)
        })
        .await;
        self.submitted()
    }
}

pub struct TestApp {
    pub fake: FakeTelegram,
    pub sink: Arc<RecordingSink>,
    pub adapter: TelegramAdapter,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(configure: impl FnOnce(&mut TelegramSettings)) -> Self {
        let fake = FakeTelegram::start().await;
        let mut settings = TelegramSettings {
            api_url: Some(fake.url()),
            poll_timeout_secs: 1,
            ..TelegramSettings::default()
        };
        configure(&mut settings);
        let sink = Arc::new(RecordingSink::default());
        let adapter = TelegramAdapter::connect_with_secrets(
            settings,
            SecretString::from(TOKEN),
            Some(SecretString::from(SECRET)),
            sink.clone(),
        )
        .await
        .expect("adapter connects to the fake");
        Self {
            fake,
            sink,
            adapter,
        }
    }

    /// Posts `body` to the webhook route with `secret` in the header.
    pub async fn post_webhook(&self, secret: Option<&str>, body: impl Into<Body>) -> StatusCode {
        let mut request =
            Request::post("/telegram/webhook").header("content-type", "application/json");
        if let Some(secret) = secret {
            request = request.header(SECRET_HEADER, secret);
        }
        let response = self
            .adapter
            .webhook_router()
            .oneshot(request.body(body.into()).expect("request"))
            .await
            .expect("router answers");
        response.status()
    }

    /// Delivers one update through the webhook and returns what the adapter
    /// submitted for it (nothing when it skipped the update).
    pub async fn deliver(&self, update: Value) -> Option<InboundMessage> {
        let before = self.sink.submitted().len();
        let status = self.post_webhook(Some(SECRET), update.to_string()).await;
        assert_eq!(status, StatusCode::OK);
        let after = self.sink.submitted();
        assert!(after.len() <= before + 1);
        after.get(before).cloned()
    }

    pub fn sender(&self) -> Arc<dyn PlatformSender> {
        self.adapter.sender()
    }
}

/// A reply as the core's outbox would hand it over.
pub fn outbound(
    chat: i64,
    thread: Option<i32>,
    reply_to: Option<i32>,
    text: &str,
) -> OutboundMessage {
    OutboundMessage {
        platform: PlatformName::parse("telegram").unwrap(),
        account: AccountId::parse(BOT_ID.to_string()).unwrap(),
        chat: ChatId::parse(chat.to_string()).unwrap(),
        thread: thread.map(|t| ThreadId::parse(t.to_string()).unwrap()),
        reply_to: reply_to.map(|id| id.to_string()),
        text: text.to_owned(),
        idempotency_key: format!("outbox-{chat}-{}", text.len()),
        replaces: None,
        buttons: Vec::new(),
        redelivery: false,
    }
}

// ---- update builders -------------------------------------------------------

pub fn user(id: u64, first_name: &str, is_bot: bool) -> Value {
    json!({"id": id, "is_bot": is_bot, "first_name": first_name, "last_name": "Tester"})
}

pub fn private_chat(id: i64) -> Value {
    json!({"id": id, "type": "private", "first_name": "Ada"})
}

pub fn group_chat(id: i64) -> Value {
    json!({"id": id, "type": "supergroup", "title": "Team"})
}

pub fn forum_chat(id: i64) -> Value {
    json!({"id": id, "type": "supergroup", "title": "Forum", "is_forum": true})
}

/// A text message; add `entities`, `reply_to_message`, … with [`with`].
pub fn text_message(message_id: i32, chat: Value, from: Value, text: &str) -> Value {
    json!({
        "message_id": message_id,
        "date": 1_700_000_000,
        "chat": chat,
        "from": from,
        "text": text,
    })
}

pub fn update(update_id: u32, message: Value) -> Value {
    json!({"update_id": update_id, "message": message})
}

/// `value` with `field` set.
pub fn with(mut value: Value, field: &str, content: Value) -> Value {
    value[field] = content;
    value
}

/// One entity; offsets in UTF-16 units, as Telegram sends them.
pub fn entity(kind: &str, offset: usize, length: usize) -> Value {
    json!({"type": kind, "offset": offset, "length": length})
}
