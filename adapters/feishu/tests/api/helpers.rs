//! The test app: the adapter's router served on 127.0.0.1:0, the shared fake Feishu
//! open API recording what it receives, a recording `InboundSink`, and a
//! manual clock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use secrecy::SecretString;
use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ActionReply, ChatId, InboundAction, InboundMessage, InboundSink, OutboundMessage,
    PlatformName, SubmitError, Submitted, ThreadId,
};
use switchboard_feishu::{Clock, Credentials, Domain, FeishuAdapter, FeishuSettings, crypto};
use switchboard_test_support::feishu::{APP_ID, APP_SECRET, FakeFeishu};

pub use switchboard_test_support::feishu::{
    Scripted, VERIFICATION_TOKEN, card_action, card_buttons, mention, message_event,
};

pub const ENCRYPT_KEY: &str = "test_encrypt_key_123";
pub const MAX_BODY: usize = 16 * 1024;

/// What the sink answers.
#[derive(Clone, Copy)]
pub enum SinkMode {
    Accept,
    Unavailable,
    /// Accepts, but only once [`RecordingSink::unblock`] is called (a
    /// database that is write-locked until then).
    Blocked,
}

/// Records every submission and press, like the core's sink minus the
/// database; presses are answered with `reply`, once `held` (when set) is
/// released.
pub struct RecordingSink {
    pub submissions: Mutex<Vec<InboundMessage>>,
    mode: SinkMode,
    unblocked: tokio::sync::watch::Sender<bool>,
    pub actions: Mutex<Vec<InboundAction>>,
    pub reply: Mutex<ActionReply>,
    pub held: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

impl RecordingSink {
    /// Lets blocked submissions (and later ones) finish.
    pub fn unblock(&self) {
        self.unblocked.send_replace(true);
    }
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        self.submissions.lock().unwrap().push(message);
        match self.mode {
            SinkMode::Accept => Ok(Submitted::Accepted),
            SinkMode::Unavailable => Err(SubmitError::Unavailable("database down".to_owned())),
            SinkMode::Blocked => {
                let mut unblocked = self.unblocked.subscribe();
                unblocked.wait_for(|open| *open).await.unwrap();
                Ok(Submitted::Accepted)
            }
        }
    }

    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        self.actions.lock().unwrap().push(action);
        if matches!(self.mode, SinkMode::Unavailable) {
            return Err(SubmitError::Unavailable("database down".to_owned()));
        }
        let held = self.held.lock().unwrap().take();
        if let Some(held) = held {
            let _ = held.await;
        }
        Ok(self.reply.lock().unwrap().clone())
    }
}

/// A clock the tests move by hand.
pub struct ManualClock {
    base: Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock().unwrap()
    }
}

/// How to start the test app.
#[derive(Clone, Copy)]
pub struct Options {
    pub encrypted: bool,
    pub sink: SinkMode,
    pub ack_timeout_ms: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            encrypted: false,
            sink: SinkMode::Accept,
            ack_timeout_ms: 2000,
        }
    }
}

pub struct TestApp {
    pub address: SocketAddr,
    pub fake: FakeFeishu,
    pub sink: Arc<RecordingSink>,
    pub adapter: FeishuAdapter,
    pub clock: Arc<ManualClock>,
    pub http: reqwest::Client,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    let fake = FakeFeishu::start().await;
    let sink = Arc::new(RecordingSink {
        submissions: Mutex::new(Vec::new()),
        mode: options.sink,
        unblocked: tokio::sync::watch::Sender::new(false),
        actions: Mutex::new(Vec::new()),
        reply: Mutex::new(ActionReply::default()),
        held: Mutex::new(None),
    });
    let clock = Arc::new(ManualClock {
        base: Instant::now(),
        offset: Mutex::new(Duration::ZERO),
    });
    let mut settings = FeishuSettings::new(APP_ID);
    settings.domain = Domain::Custom(fake.url());
    settings.max_body_bytes = MAX_BODY;
    settings.ack_timeout_ms = options.ack_timeout_ms;
    let credentials = Credentials {
        app_secret: SecretString::from(APP_SECRET.to_owned()),
        verification_token: SecretString::from(VERIFICATION_TOKEN.to_owned()),
        encrypt_key: options
            .encrypted
            .then(|| SecretString::from(ENCRYPT_KEY.to_owned())),
    };
    let adapter = FeishuAdapter::builder(settings, credentials, sink.clone())
        .clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let router = adapter.router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    TestApp {
        address,
        fake,
        sink,
        adapter,
        clock,
        http: reqwest::Client::new(),
    }
}

impl TestApp {
    fn url(&self) -> String {
        format!("http://{}{}", self.address, self.adapter.webhook_path())
    }

    /// Posts raw bytes with optional extra headers.
    pub async fn post_raw(&self, body: Vec<u8>, headers: &[(&str, String)]) -> reqwest::Response {
        let mut request = self
            .http
            .post(self.url())
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send().await.unwrap()
    }

    /// Posts a plain JSON event.
    pub async fn post_json(&self, body: &Value) -> reqwest::Response {
        self.post_raw(body.to_string().into_bytes(), &[]).await
    }

    /// Encrypts `body` as Feishu does and posts it, signed.
    pub async fn post_encrypted(&self, body: &Value) -> reqwest::Response {
        let raw = encrypted_body(body);
        let headers = signature_headers(&raw);
        self.post_raw(raw, &headers).await
    }

    pub fn submissions(&self) -> Vec<InboundMessage> {
        self.sink.submissions.lock().unwrap().clone()
    }

    /// A reply to `reply_to` in chat `oc_chat`.
    pub fn outbound(&self, key: &str, text: &str, reply_to: Option<&str>) -> OutboundMessage {
        OutboundMessage {
            platform: PlatformName::parse("feishu").unwrap(),
            account: AccountId::parse(APP_ID).unwrap(),
            chat: ChatId::parse("oc_chat").unwrap(),
            thread: None,
            reply_to: reply_to.map(str::to_owned),
            text: text.to_owned(),
            idempotency_key: key.to_owned(),
            replaces: None,
            buttons: Vec::new(),
            redelivery: false,
        }
    }

    pub fn outbound_in_thread(&self, key: &str, text: &str, thread: &str) -> OutboundMessage {
        OutboundMessage {
            thread: Some(ThreadId::parse(thread).unwrap()),
            ..self.outbound(key, text, Some("om_question"))
        }
    }
}

pub fn encryption_key() -> SecretString {
    SecretString::from(ENCRYPT_KEY.to_owned())
}

/// `{"encrypt": …}` for `body`, with a fixed IV.
pub fn encrypted_body(body: &Value) -> Vec<u8> {
    let iv: [u8; 16] = std::array::from_fn(|i| u8::try_from(i * 7).unwrap());
    let encrypt = crypto::encrypt(&encryption_key(), iv, body.to_string().as_bytes());
    json!({ "encrypt": encrypt }).to_string().into_bytes()
}

/// Feishu's signature headers for `raw`, signed now.
pub fn signature_headers(raw: &[u8]) -> Vec<(&'static str, String)> {
    signature_headers_at(raw, unix_now())
}

/// Feishu's signature headers for `raw`, signed with `timestamp` (Unix
/// seconds).
pub fn signature_headers_at(raw: &[u8], timestamp: i64) -> Vec<(&'static str, String)> {
    let timestamp = timestamp.to_string();
    let nonce = "n0nce";
    let signature = crypto::signature(&timestamp, nonce, &encryption_key(), raw);
    vec![
        ("x-lark-request-timestamp", timestamp),
        ("x-lark-request-nonce", nonce.to_owned()),
        ("x-lark-signature", signature),
    ]
}

/// This host's clock in Unix seconds.
pub fn unix_now() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_secs()).unwrap()
}

/// A URL verification request.
pub fn challenge(token: &str) -> Value {
    json!({"challenge": "ch-123", "token": token, "type": "url_verification"})
}
