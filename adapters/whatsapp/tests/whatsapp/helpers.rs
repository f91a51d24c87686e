//! The test app: the adapter started against the shared fake Cloud API,
//! its webhook served on 127.0.0.1:0, a recording sink that deduplicates
//! like the core, a link observer, a clock the tests move, and log capture.

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use secrecy::SecretString;
use switchboard_contract::{
    AccountId, ActionReply, Adapter, ChatId, DeliveryStatus, Hookup, InboundAction, InboundMessage,
    InboundSink, LinkObserver, OutboundMessage, PlatformName, PlatformSender, StartError, Started,
    SubmitError, Submitted,
};
use switchboard_test_support::whatsapp::{
    ACCESS_TOKEN, APP_SECRET, CUSTOMER, FakeWhatsApp, PHONE_NUMBER_ID, VERIFY_TOKEN, VERSION,
    Webhook,
};
use switchboard_whatsapp::{Clock, Secrets, WhatsAppAdapter, WhatsAppSettings};

/// The webhook's body limit in these tests.
pub const MAX_BODY: usize = 64 * 1024;

/// Records what the core would be handed; a repeated event id is a
/// duplicate, as in the core.
#[derive(Default)]
pub struct RecordingSink {
    pub submissions: Mutex<Vec<InboundMessage>>,
    pub actions: Mutex<Vec<InboundAction>>,
    pub statuses: Mutex<Vec<DeliveryStatus>>,
    seen: Mutex<HashSet<String>>,
    /// The next this many calls answer `Unavailable`.
    unavailable: AtomicUsize,
    /// What `act` answers.
    pub action_reply: Mutex<ActionReply>,
}

impl RecordingSink {
    /// The next `count` calls fail as a database outage would.
    pub fn fail_next(&self, count: usize) {
        self.unavailable.store(count, Ordering::SeqCst);
    }

    fn outage(&self) -> Result<(), SubmitError> {
        let left = self.unavailable.load(Ordering::SeqCst);
        if left == 0 {
            return Ok(());
        }
        self.unavailable.store(left - 1, Ordering::SeqCst);
        Err(SubmitError::Unavailable("database down".to_owned()))
    }

    pub fn submissions(&self) -> Vec<InboundMessage> {
        self.submissions.lock().unwrap().clone()
    }

    pub fn actions(&self) -> Vec<InboundAction> {
        self.actions.lock().unwrap().clone()
    }

    pub fn statuses(&self) -> Vec<DeliveryStatus> {
        self.statuses.lock().unwrap().clone()
    }
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        self.submissions.lock().unwrap().push(message.clone());
        self.outage()?;
        let fresh = self
            .seen
            .lock()
            .unwrap()
            .insert(message.event_id.to_string());
        Ok(if fresh {
            Submitted::Accepted
        } else {
            Submitted::Duplicate
        })
    }

    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        self.actions.lock().unwrap().push(action);
        self.outage()?;
        Ok(self.action_reply.lock().unwrap().clone())
    }

    async fn delivery_status(&self, status: DeliveryStatus) -> Result<(), SubmitError> {
        self.statuses.lock().unwrap().push(status);
        self.outage()
    }
}

/// Counts what the adapter says of its link.
#[derive(Default)]
pub struct Observer {
    pub ups: AtomicUsize,
    pub downs: Mutex<Vec<String>>,
}

impl LinkObserver for Observer {
    fn up(&self) {
        self.ups.fetch_add(1, Ordering::SeqCst);
    }

    fn down(&self, reason: &str) {
        self.downs.lock().unwrap().push(reason.to_owned());
    }
}

/// The system clock moved forward by hand.
#[derive(Default)]
pub struct ManualClock {
    offset: Mutex<Duration>,
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + *self.offset.lock().unwrap()
    }
}

pub struct TestApp {
    pub fake: FakeWhatsApp,
    pub sink: Arc<RecordingSink>,
    pub observer: Arc<Observer>,
    pub clock: Arc<ManualClock>,
    pub sender: Arc<dyn PlatformSender>,
    pub webhook: Webhook,
}

/// Settings pointing at `fake`, with the test body limit.
pub fn settings(fake: &FakeWhatsApp) -> WhatsAppSettings {
    let mut settings = WhatsAppSettings::new(PHONE_NUMBER_ID);
    settings.api_url = fake.url();
    settings.api_version = VERSION.to_owned();
    settings.max_body_bytes = MAX_BODY;
    settings.ack_timeout_ms = 2000;
    settings
}

/// The fake's secrets, with the token of the `default` number.
pub fn secrets() -> Secrets {
    Secrets::new(
        SecretString::from(APP_SECRET.to_owned()),
        SecretString::from(VERIFY_TOKEN.to_owned()),
    )
    .with_token("default", SecretString::from(ACCESS_TOKEN.to_owned()))
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Starts the app with settings `adjust` changes.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut WhatsAppSettings)) -> TestApp {
    let fake = FakeWhatsApp::start().await;
    let mut settings = settings(&fake);
    adjust(&mut settings);
    spawn_on(fake, settings, secrets()).await
}

/// Starts the app against `fake` with `settings` and `secrets`.
pub async fn spawn_on(fake: FakeWhatsApp, settings: WhatsAppSettings, secrets: Secrets) -> TestApp {
    let clock = Arc::new(ManualClock::default());
    let sink = Arc::new(RecordingSink::default());
    let observer = Arc::new(Observer::default());
    let path = settings.webhook_path.clone();
    let started = start(settings, secrets, &clock, &sink, &observer)
        .await
        .expect("the adapter starts");
    let router = started.webhook.expect("a webhook router");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    TestApp {
        fake,
        sink,
        observer,
        clock,
        sender: started.sender,
        webhook: Webhook::new(format!("http://{address}{path}")),
    }
}

/// Builds and starts the adapter.
pub async fn start(
    settings: WhatsAppSettings,
    secrets: Secrets,
    clock: &Arc<ManualClock>,
    sink: &Arc<RecordingSink>,
    observer: &Arc<Observer>,
) -> Result<Started, StartError> {
    let adapter = WhatsAppAdapter::new(settings, secrets)
        .expect("valid settings")
        .with_clock(clock.clone());
    assert_eq!(adapter.platform().as_str(), "whatsapp");
    adapter
        .start(Hookup {
            sink: sink.clone(),
            observer: observer.clone(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        })
        .await
}

/// A reply of `text` to [`CUSTOMER`] from the default number.
pub fn outbound(key: &str, text: &str, reply_to: Option<&str>) -> OutboundMessage {
    OutboundMessage {
        platform: PlatformName::parse("whatsapp").unwrap(),
        account: AccountId::parse(PHONE_NUMBER_ID).unwrap(),
        chat: ChatId::parse(CUSTOMER).unwrap(),
        thread: None,
        reply_to: reply_to.map(str::to_owned),
        text: text.to_owned(),
        idempotency_key: key.to_owned(),
        replaces: None,
        buttons: Vec::new(),
        redelivery: false,
    }
}

/// Everything logged while the guard lives, on this thread (the tests run
/// on tokio's current-thread runtime, so the adapter's tasks log here too).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures every event and span, at every level, until the guard drops.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
