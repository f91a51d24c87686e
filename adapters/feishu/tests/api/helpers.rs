//! The test app: the adapter's router served on 127.0.0.1:0, a fake Feishu
//! open API recording what it receives, a recording `InboundSink`, and a
//! manual clock.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use secrecy::SecretString;
use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ChatId, InboundMessage, InboundSink, OutboundMessage, PlatformName, SubmitError,
    Submitted, ThreadId,
};
use switchboard_feishu::{Clock, Credentials, Domain, FeishuAdapter, FeishuSettings, crypto};

pub const APP_ID: &str = "cli_test_app";
pub const BOT_OPEN_ID: &str = "ou_bot";
pub const VERIFICATION_TOKEN: &str = "verify-token";
pub const ENCRYPT_KEY: &str = "test_encrypt_key_123";
pub const MAX_BODY: usize = 16 * 1024;

/// What the sink answers.
#[derive(Clone, Copy)]
pub enum SinkMode {
    Accept,
    Unavailable,
}

/// Records every submission, like the core's sink minus the database.
pub struct RecordingSink {
    pub submissions: Mutex<Vec<InboundMessage>>,
    mode: SinkMode,
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        self.submissions.lock().unwrap().push(message);
        match self.mode {
            SinkMode::Accept => Ok(Submitted::Accepted),
            SinkMode::Unavailable => Err(SubmitError::Unavailable("database down".to_owned())),
        }
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

/// One request the fake open API received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub query: Option<String>,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Recorded {
    /// The `content` field, parsed (it is a JSON string).
    pub fn content(&self) -> Value {
        serde_json::from_str(self.body["content"].as_str().unwrap()).unwrap()
    }
}

/// A scripted answer to a message request.
pub struct Scripted {
    pub status: u16,
    pub body: Value,
    pub headers: Vec<(&'static str, &'static str)>,
}

#[derive(Default)]
pub struct FakeState {
    pub token_fetches: AtomicUsize,
    pub token_expire: Mutex<u64>,
    pub messages: Mutex<Vec<Recorded>>,
    pub script: Mutex<VecDeque<Scripted>>,
    sent: AtomicUsize,
}

/// The fake Feishu open API.
pub struct FakeFeishu {
    pub address: SocketAddr,
    pub state: Arc<FakeState>,
}

impl FakeFeishu {
    async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        *state.token_expire.lock().unwrap() = 7200;
        let app = Router::new()
            .route(
                "/open-apis/auth/v3/tenant_access_token/internal",
                post(fake_token),
            )
            .route("/open-apis/bot/v3/info", get(fake_bot_info))
            .route("/open-apis/im/v1/messages", post(fake_send))
            .route("/open-apis/im/v1/messages/{id}/reply", post(fake_reply))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { address, state }
    }

    pub fn token_fetches(&self) -> usize {
        self.state.token_fetches.load(Ordering::SeqCst)
    }

    pub fn messages(&self) -> Vec<Recorded> {
        self.state.messages.lock().unwrap().clone()
    }

    /// Answers the next message requests with these, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.state.script.lock().unwrap().extend(answers);
    }
}

async fn fake_token(State(state): State<Arc<FakeState>>, Json(body): Json<Value>) -> Json<Value> {
    assert_eq!(body["app_id"], APP_ID);
    assert_eq!(body["app_secret"], "app-secret");
    let n = state.token_fetches.fetch_add(1, Ordering::SeqCst) + 1;
    let expire = *state.token_expire.lock().unwrap();
    Json(json!({"code": 0, "msg": "ok", "tenant_access_token": format!("t-{n}"), "expire": expire}))
}

async fn fake_bot_info(headers: HeaderMap) -> Json<Value> {
    assert!(
        headers["authorization"]
            .to_str()
            .unwrap()
            .starts_with("Bearer t-")
    );
    Json(
        json!({"code": 0, "msg": "ok", "bot": {"open_id": BOT_OPEN_ID, "app_name": "Switchboard", "activate_status": 2}}),
    )
}

async fn fake_send(
    State(state): State<Arc<FakeState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(
        &state,
        "/open-apis/im/v1/messages".to_owned(),
        query,
        &headers,
        body,
    )
}

async fn fake_reply(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let path = format!("/open-apis/im/v1/messages/{id}/reply");
    record(&state, path, None, &headers, body)
}

fn record(
    state: &FakeState,
    path: String,
    query: Option<String>,
    headers: &HeaderMap,
    body: Value,
) -> Response {
    state.messages.lock().unwrap().push(Recorded {
        path,
        query,
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned()),
        body,
    });
    if let Some(answer) = state.script.lock().unwrap().pop_front() {
        let mut response = (
            StatusCode::from_u16(answer.status).unwrap(),
            Json(answer.body),
        )
            .into_response();
        for (name, value) in answer.headers {
            response
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        return response;
    }
    let n = state.sent.fetch_add(1, Ordering::SeqCst) + 1;
    Json(json!({"code": 0, "msg": "success", "data": {"message_id": format!("om_sent_{n}")}}))
        .into_response()
}

/// How to start the test app.
#[derive(Clone, Copy)]
pub struct Options {
    pub encrypted: bool,
    pub sink: SinkMode,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            encrypted: false,
            sink: SinkMode::Accept,
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
    });
    let clock = Arc::new(ManualClock {
        base: Instant::now(),
        offset: Mutex::new(Duration::ZERO),
    });
    let mut settings = FeishuSettings::new(APP_ID);
    settings.domain = Domain::Custom(format!("http://{}", fake.address));
    settings.max_body_bytes = MAX_BODY;
    let credentials = Credentials {
        app_secret: SecretString::from("app-secret".to_owned()),
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

pub fn signature_headers(raw: &[u8]) -> Vec<(&'static str, String)> {
    let timestamp = "1700000000";
    let nonce = "n0nce";
    vec![
        ("x-lark-request-timestamp", timestamp.to_owned()),
        ("x-lark-request-nonce", nonce.to_owned()),
        (
            "x-lark-signature",
            crypto::signature(timestamp, nonce, &encryption_key(), raw),
        ),
    ]
}

/// A URL verification request.
pub fn challenge(token: &str) -> Value {
    json!({"challenge": "ch-123", "token": token, "type": "url_verification"})
}

/// An `im.message.receive_v1` event.
pub fn message_event(event_id: &str, chat_type: &str, text: &str, mentions: Value) -> Value {
    json!({
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000000",
            "token": VERIFICATION_TOKEN,
            "app_id": APP_ID,
            "tenant_key": "tenant",
            "some_future_field": {"x": 1}
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": "ou_alice", "union_id": "on_alice", "user_id": null},
                "sender_type": "user",
                "tenant_key": "tenant"
            },
            "message": {
                "message_id": "om_msg1",
                "root_id": "",
                "parent_id": "",
                "create_time": 1_700_000_000_000_i64,
                "chat_id": "oc_chat",
                "chat_type": chat_type,
                "message_type": "text",
                "content": json!({"text": text}).to_string(),
                "mentions": mentions,
                "user_agent": "Mozilla"
            }
        }
    })
}

/// A mention of `open_id` under `key`.
pub fn mention(key: &str, open_id: &str, name: &str) -> Value {
    json!({"key": key, "id": {"open_id": open_id, "union_id": "on_x", "user_id": "u"}, "name": name, "tenant_key": "t"})
}
