//! The test app: the adapter started against the fake Slack, its routes
//! served on 127.0.0.1:0 (Events API) or its Socket Mode connection run
//! (Socket Mode), a recording sink that deduplicates like the core, and a
//! recording link observer.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use secrecy::SecretString;
use serde_json::Value;
use switchboard_contract::{
    AccountId, ActionReply, Adapter, ChatId, Connection, ConnectionError, Hookup, InboundAction,
    InboundMessage, InboundSink, LinkObserver, OutboundMessage, PlatformName, PlatformSender,
    SubmitError, Submitted, ThreadId,
};
use switchboard_slack::{
    DEFAULT_WORKSPACE, Mode, Secrets, SlackAdapter, SlackSettings, WorkspaceSecrets,
};
use switchboard_test_support::slack::{
    APP_TOKEN, BOT_TOKEN, Delivered, Delivery, FakeSlack, SIGNING_SECRET, TEAM_ID, event_callback,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use switchboard_test_support::eventually;

/// The body limit the test app serves with.
pub const MAX_BODY: usize = 64 * 1024;

/// Records what the adapter hands the core, and answers like the core:
/// an event id seen before is a duplicate.
#[derive(Default)]
pub struct RecordingSink {
    submissions: Mutex<Vec<InboundMessage>>,
    seen: Mutex<HashSet<(String, String)>>,
    actions: Mutex<Vec<InboundAction>>,
    reply: Mutex<ActionReply>,
    /// Submissions still to refuse as unavailable.
    unavailable: AtomicUsize,
    /// Holds submissions until opened (a write-locked database).
    gate: Option<tokio::sync::watch::Sender<bool>>,
}

impl RecordingSink {
    /// A sink that holds every submission until [`Self::unblock`].
    pub fn blocked() -> Self {
        Self {
            gate: Some(tokio::sync::watch::Sender::new(false)),
            ..Self::default()
        }
    }

    pub fn unblock(&self) {
        if let Some(gate) = &self.gate {
            gate.send_replace(true);
        }
    }

    /// Refuses the next `n` submissions as unavailable.
    pub fn fail_next(&self, n: usize) {
        self.unavailable.store(n, Ordering::SeqCst);
    }

    /// What the next presses are answered with.
    pub fn reply_with(&self, reply: ActionReply) {
        *self.reply.lock().unwrap() = reply;
    }

    pub fn submissions(&self) -> Vec<InboundMessage> {
        self.submissions.lock().unwrap().clone()
    }

    /// How many distinct events were recorded.
    pub fn recorded(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn actions(&self) -> Vec<InboundAction> {
        self.actions.lock().unwrap().clone()
    }
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        self.submissions.lock().unwrap().push(message.clone());
        let refuse = self
            .unavailable
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refuse {
            return Err(SubmitError::Unavailable("database down".to_owned()));
        }
        if let Some(gate) = &self.gate {
            gate.subscribe().wait_for(|open| *open).await.unwrap();
        }
        let key = (message.account.to_string(), message.event_id.to_string());
        if self.seen.lock().unwrap().insert(key) {
            Ok(Submitted::Accepted)
        } else {
            Ok(Submitted::Duplicate)
        }
    }

    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        self.actions.lock().unwrap().push(action);
        Ok(self.reply.lock().unwrap().clone())
    }
}

/// Records what the adapter says of its connection.
#[derive(Default)]
pub struct RecordingObserver {
    pub ups: AtomicUsize,
    pub downs: Mutex<Vec<String>>,
}

impl LinkObserver for RecordingObserver {
    fn up(&self) {
        self.ups.fetch_add(1, Ordering::SeqCst);
    }

    fn down(&self, reason: &str) {
        self.downs.lock().unwrap().push(reason.to_owned());
    }
}

impl RecordingObserver {
    pub fn ups(&self) -> usize {
        self.ups.load(Ordering::SeqCst)
    }

    pub fn downs(&self) -> Vec<String> {
        self.downs.lock().unwrap().clone()
    }
}

/// The settings the tests start from: the fake's Web API, a small body
/// limit.
pub fn settings(fake: &FakeSlack) -> SlackSettings {
    SlackSettings {
        api_url: fake.api_url(),
        max_body_bytes: MAX_BODY,
        ..SlackSettings::default()
    }
}

/// The secrets of the fake's first workspace.
pub fn secrets() -> Secrets {
    Secrets {
        workspaces: vec![WorkspaceSecrets {
            name: DEFAULT_WORKSPACE.to_owned(),
            bot_token: SecretString::from(BOT_TOKEN),
            signing_secret: Some(SecretString::from(SIGNING_SECRET)),
            app_token: Some(SecretString::from(APP_TOKEN)),
        }],
    }
}

pub struct TestApp {
    pub fake: FakeSlack,
    pub sink: Arc<RecordingSink>,
    pub observer: Arc<RecordingObserver>,
    pub sender: Arc<dyn PlatformSender>,
    pub settings: SlackSettings,
    pub delivery: Delivery,
    /// Where the routes are served (Events API).
    pub address: Option<SocketAddr>,
    /// The Socket Mode connection and its run (Socket Mode).
    pub connection: Option<Arc<dyn Connection>>,
    pub run: Option<JoinHandle<Result<(), ConnectionError>>>,
    pub stop: CancellationToken,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The app with every default, over the Events API.
pub async fn spawn_app() -> TestApp {
    let fake = FakeSlack::start().await;
    let settings = settings(&fake);
    spawn_with(fake, settings, RecordingSink::default()).await
}

/// The app with `settings` (built with [`settings`] from `fake`) and
/// `sink`; in Socket Mode its connection runs until the app is dropped.
pub async fn spawn_with(fake: FakeSlack, settings: SlackSettings, sink: RecordingSink) -> TestApp {
    spawn_with_secrets(fake, settings, secrets(), sink).await
}

/// The app with `settings` and `secrets`, as [`spawn_with`].
pub async fn spawn_with_secrets(
    fake: FakeSlack,
    settings: SlackSettings,
    secrets: Secrets,
    sink: RecordingSink,
) -> TestApp {
    let sink = Arc::new(sink);
    let observer = Arc::new(RecordingObserver::default());
    let adapter = SlackAdapter::new(settings.clone(), secrets).expect("valid settings");
    let started = adapter
        .start(Hookup {
            sink: sink.clone(),
            observer: observer.clone(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        })
        .await
        .expect("the adapter starts");
    let address = match started.webhook {
        Some(router) => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
            Some(address)
        }
        None => None,
    };
    let stop = CancellationToken::new();
    let run = started.connection.clone().map(|connection| {
        let stop = stop.clone();
        tokio::spawn(async move { connection.run(stop).await })
    });
    TestApp {
        fake,
        sink,
        observer,
        sender: started.sender,
        settings,
        delivery: Delivery::new(SIGNING_SECRET),
        address,
        connection: started.connection,
        run,
        stop,
    }
}

/// Socket Mode settings for `fake`.
pub fn socket_settings(fake: &FakeSlack) -> SlackSettings {
    SlackSettings {
        mode: Mode::Socket,
        ..settings(fake)
    }
}

impl TestApp {
    pub fn events_url(&self) -> String {
        let address = self.address.expect("served routes");
        format!("http://{address}{}", self.settings.events_path)
    }

    pub fn interactivity_url(&self) -> String {
        let address = self.address.expect("served routes");
        format!("http://{address}{}", self.settings.interactivity_path)
    }

    /// Delivers `event` of the first workspace as Slack does, retrying
    /// until acknowledged.
    pub async fn deliver(&self, event: Value) -> Delivered {
        self.delivery
            .event(&self.events_url(), &event_callback(TEAM_ID, event))
            .await
    }

    /// The one submission, once it has arrived.
    pub async fn only_submission(&self) -> InboundMessage {
        eventually("a submission", || async {
            !self.sink.submissions().is_empty()
        })
        .await;
        let submissions = self.sink.submissions();
        assert_eq!(submissions.len(), 1, "{submissions:?}");
        submissions[0].clone()
    }
}

/// A reply in `channel` (and `thread`) of the first workspace.
pub fn outbound(channel: &str, thread: Option<&str>, text: &str, key: &str) -> OutboundMessage {
    OutboundMessage {
        platform: PlatformName::parse("slack").unwrap(),
        account: AccountId::parse(TEAM_ID).unwrap(),
        chat: ChatId::parse(channel).unwrap(),
        thread: thread.map(|t| ThreadId::parse(t).unwrap()),
        reply_to: None,
        text: text.to_owned(),
        idempotency_key: key.to_owned(),
        replaces: None,
        buttons: Vec::new(),
        redelivery: false,
    }
}

/// The reply to `message`, as the core would address it.
pub fn reply_to(message: &InboundMessage, text: &str, key: &str) -> OutboundMessage {
    OutboundMessage {
        account: message.account.clone(),
        chat: message.chat.clone(),
        thread: message.thread.clone(),
        reply_to: message.message_id.clone(),
        ..outbound(message.chat.as_str(), None, text, key)
    }
}

/// The sender of another adapter started against `fake`: a process that
/// knows nothing of what this one sent.
pub async fn restarted_sender(fake: &FakeSlack) -> Arc<dyn PlatformSender> {
    let adapter = SlackAdapter::new(settings(fake), secrets()).expect("valid settings");
    adapter
        .start(Hookup {
            sink: Arc::new(RecordingSink::default()),
            observer: Arc::new(RecordingObserver::default()),
            shutdown: tokio_util::sync::CancellationToken::new(),
        })
        .await
        .expect("the adapter starts")
        .sender
}
