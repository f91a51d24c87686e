//! Shared test helpers: a recording `InboundSink` that applies the core's
//! rules, fixtures, and an adapter pointed at the fake REST API.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use secrecy::SecretString;
use serenity::model::channel::Message;
use serenity::model::id::UserId;
use switchboard_contract::{
    ActionReply, ChatKind, InboundAction, InboundMessage, InboundSink, OutboundMessage,
    SubmitError, Submitted,
};
use switchboard_discord::{DiscordAdapter, DiscordSender, DiscordSettings, InboundHandler};
use tokio::sync::oneshot;

use crate::fake_discord::FakeDiscord;

pub const BOT_ID: UserId = UserId::new(900_000_000_000_000_001);

/// The bot token the tests' adapters use, unless a test wants another.
pub const TOKEN: &str = "test-token.not-real";

/// `settings` with REST calls going to `fake`.
pub fn proxied(fake: &FakeDiscord, settings: DiscordSettings) -> DiscordSettings {
    DiscordSettings {
        api_proxy: Some(fake.url()),
        ..settings
    }
}

/// An adapter with `token` and `settings`, against `fake`, submitting to
/// `sink`.
pub fn adapter_with(
    fake: &FakeDiscord,
    token: &str,
    settings: DiscordSettings,
    sink: Arc<dyn InboundSink>,
) -> DiscordAdapter {
    let settings = proxied(fake, settings);
    DiscordAdapter::new(SecretString::from(token.to_owned()), &settings, sink)
        .expect("adapter builds")
}

/// Records submissions and answers like the core's `SessionService::submit`:
/// bots ignored, unaddressed group messages ignored, duplicates by
/// (platform, account, event id) dropped. Button presses are recorded and
/// answered with `reply`, after `held` is released when one is set (a slow
/// core).
#[derive(Default)]
pub struct RecordingSink {
    submitted: Mutex<Vec<InboundMessage>>,
    seen: Mutex<HashSet<(String, String, String)>>,
    pub actions: Mutex<Vec<InboundAction>>,
    pub reply: Mutex<ActionReply>,
    pub held: Mutex<Option<oneshot::Receiver<()>>>,
}

impl RecordingSink {
    pub fn actions(&self) -> Vec<InboundAction> {
        self.actions.lock().expect("lock").clone()
    }

    pub fn submitted(&self) -> Vec<InboundMessage> {
        self.submitted.lock().expect("lock").clone()
    }
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        self.submitted.lock().expect("lock").push(message.clone());
        if message.sender.is_bot || (message.chat_kind == ChatKind::Group && !message.mentions_bot)
        {
            return Ok(Submitted::Ignored);
        }
        let key = (
            message.platform.to_string(),
            message.account.to_string(),
            message.event_id.to_string(),
        );
        if !self.seen.lock().expect("lock").insert(key) {
            return Ok(Submitted::Duplicate);
        }
        Ok(Submitted::Accepted)
    }

    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        self.actions.lock().expect("lock").push(action);
        let held = self.held.lock().expect("lock").take();
        if let Some(held) = held {
            let _ = held.await;
        }
        Ok(self.reply.lock().expect("lock").clone())
    }
}

/// A recorded MESSAGE_CREATE payload from `tests/fixtures`.
pub fn fixture(name: &str) -> Message {
    // The package folder as `cargo test` names it at run time (a build
    // reused from another checkout keeps its compile-time path).
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    let path = format!("{root}/tests/fixtures/{name}.json");
    let raw = std::fs::read_to_string(&path).expect("fixture exists");
    serde_json::from_str(&raw).unwrap_or_else(|err| panic!("{name} deserialises: {err}"))
}

/// The adapter under test, talking to a fresh fake Discord.
pub struct TestAdapter {
    pub fake: FakeDiscord,
    pub sink: Arc<RecordingSink>,
    pub sender: Arc<DiscordSender>,
    pub handler: InboundHandler,
}

impl TestAdapter {
    pub async fn start() -> Self {
        Self::with_settings(DiscordSettings::default()).await
    }

    pub async fn with_settings(settings: DiscordSettings) -> Self {
        let fake = FakeDiscord::start().await;
        let sink = Arc::new(RecordingSink::default());
        let adapter = adapter_with(&fake, TOKEN, settings, Arc::clone(&sink) as _);
        let handler = adapter.gateway.handler().clone();
        handler.connected_as(BOT_ID);
        Self {
            fake,
            sink,
            sender: adapter.sender,
            handler,
        }
    }

    /// The reply the core would queue for `inbound` (outbox row `row_id`).
    pub fn reply_to(inbound: &InboundMessage, row_id: i64, text: &str) -> OutboundMessage {
        OutboundMessage {
            platform: inbound.platform.clone(),
            account: inbound.account.clone(),
            chat: inbound.chat.clone(),
            thread: inbound.thread.clone(),
            reply_to: inbound.message_id.clone(),
            text: text.to_owned(),
            idempotency_key: format!("sb-{row_id}"),
            replaces: None,
            buttons: Vec::new(),
            redelivery: false,
        }
    }
}
