//! `GET /metrics` and `GET /readyz` as an operator scrapes them: after a few
//! turns (the API and Telegram, tools, a limit, a duplicate event, a
//! delivery the platform defers) every family shows the right counts;
//! queue depth and running turns while a turn waits on the model; readiness
//! flips when Telegram's server goes away and comes back, when a migration
//! is missing, and when the instance drains.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};
use switchboard_test_support::eventually;
use switchboard_test_support::telegram::{FakeTelegram, too_many_requests};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::helpers::{
    FakeLlm, Reply, TestApp, endless_calculator, last_is_tool_result, last_user_text,
    telegram_settings, test_settings,
};

/// A sample's name, the labels it must carry, and its value.
type Expected = (&'static str, &'static [(&'static str, &'static str)], f64);

/// One sample of a scrape: its family name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, parsed.
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    fn parse(text: String) -> Self {
        let samples = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("`series value`");
                let (name, labels) = match series.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once('=').expect("label=value");
                        (key.to_owned(), value.trim_matches('"').to_owned())
                    })
                    .collect();
                Sample {
                    name: name.to_owned(),
                    labels,
                    value: value.parse().expect("a number"),
                }
            })
            .collect();
        Self { text, samples }
    }

    /// The sum of `name`'s samples carrying every label of `labels`; `None`
    /// when there is none.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples
            .iter()
            .filter(|sample| sample.name == name)
            .filter(|sample| {
                labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(*key).map(String::as_str) == Some(value))
            })
            .map(|sample| sample.value)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// Like [`Scrape::get`], failing with the scrape when there is none.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }
}

async fn scrape(app: &TestApp) -> Scrape {
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("scraped");
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    Scrape::parse(response.text().await.expect("text"))
}

async fn readyz(app: &TestApp) -> (u16, Value) {
    let response = app.http.get(app.url("/readyz")).send().await.expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

/// `calculate` asks for the calculator and a tool that does not exist,
/// `loop` for the calculator forever; anything else is answered.
fn script(body: &Value) -> Reply {
    let text = last_user_text(body);
    if text == "loop" {
        return endless_calculator(body);
    }
    if last_is_tool_result(body) {
        return Reply::Text("done".to_owned());
    }
    if text == "calculate" {
        return Reply::Tools(vec![
            (
                "c1".to_owned(),
                "calculator".to_owned(),
                r#"{"expression":"2+3"}"#.to_owned(),
            ),
            ("c2".to_owned(), "calculater".to_owned(), "{}".to_owned()),
        ]);
    }
    Reply::Text(format!("hi: {text}"))
}

fn dm_update(update_id: u32, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": update_id + 100, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": text
    }})
}

#[tokio::test]
async fn a_scrape_after_a_few_turns_counts_each_family() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(script).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        // 127 tokens a call (120 in, 7 out): `loop` stops at its third.
        s.limits.task_max_tokens = 300;
    })
    .await;

    let before = scrape(&app).await;
    assert_eq!(before.get("switchboard_turns_total", &[]), None);
    assert_eq!(before.value("switchboard_turns_running", &[]), 0.0);
    assert_eq!(before.value("switchboard_queue_depth", &[]), 0.0);
    assert_eq!(before.value("switchboard_database_up", &[]), 1.0);
    assert_eq!(before.value("switchboard_draining", &[]), 0.0);
    assert_eq!(
        before.value("switchboard_adapter_up", &[("adapter", "telegram")]),
        1.0
    );

    // Three API turns: one model call; two calls and two tools (one
    // unknown); three calls and two tools, then the token limit.
    app.say(None, "hello").await;
    app.say(None, "calculate").await;
    let (status, _, body) = app.chat(None, "loop").await;
    assert_eq!(status.as_u16(), 400, "a turn a limit stopped is an error");
    assert_eq!(body["error"]["code"], "token_limit");
    assert_eq!(app.outcome_of_last_turn().await, "token_limit");
    // A Telegram message, answered and delivered; the same update again,
    // dropped as a duplicate.
    telegram.push(dm_update(1, "from telegram"));
    telegram
        .wait_for("the Telegram reply", || telegram.sent().len() == 1)
        .await;
    telegram.push(dm_update(1, "from telegram"));
    telegram.settled().await;
    // A reply Telegram defers for a minute: it waits in the outbox.
    telegram.script("sendMessage", 429, too_many_requests(60));
    telegram.push(dm_update(2, "later"));
    eventually("the deferred reply's delivery attempt", || async {
        telegram.calls("sendMessage").len() == 2
    })
    .await;

    let after = eventually_scrape(&app, "the deferred delivery counted", |s| {
        s.get("switchboard_outbox_delivery_failures_total", &[]) == Some(1.0)
            && s.get("switchboard_turns_total", &[]) == Some(5.0)
    })
    .await;
    let expected: &[Expected] = &[
        ("switchboard_turns_total", &[("outcome", "answered")], 4.0),
        (
            "switchboard_turns_total",
            &[("outcome", "token_limit")],
            1.0,
        ),
        ("switchboard_turn_duration_seconds_count", &[], 5.0),
        (
            "switchboard_turn_duration_seconds_bucket",
            &[("le", "+Inf")],
            5.0,
        ),
        (
            "switchboard_limit_hits_total",
            &[("kind", "token_limit")],
            1.0,
        ),
        ("switchboard_limit_hits_total", &[], 1.0),
        (
            "switchboard_model_calls_total",
            &[("model", "fake-model"), ("outcome", "ok")],
            8.0,
        ),
        (
            "switchboard_model_calls_total",
            &[("outcome", "error")],
            0.0,
        ),
        ("switchboard_model_call_duration_seconds_count", &[], 8.0),
        (
            "switchboard_model_tokens_total",
            &[("kind", "input")],
            960.0,
        ),
        (
            "switchboard_model_tokens_total",
            &[("kind", "output")],
            56.0,
        ),
        (
            "switchboard_model_tokens_total",
            &[("kind", "cache_read")],
            800.0,
        ),
        (
            "switchboard_model_tokens_total",
            &[("kind", "cache_write")],
            0.0,
        ),
        (
            "switchboard_tool_calls_total",
            &[("tool", "calculator"), ("outcome", "ok")],
            3.0,
        ),
        (
            "switchboard_tool_calls_total",
            &[("tool", "unknown"), ("outcome", "unknown_tool")],
            1.0,
        ),
        ("switchboard_tool_calls_total", &[], 4.0),
        (
            "switchboard_inbound_duplicates_dropped_total",
            &[("platform", "telegram")],
            1.0,
        ),
        (
            "switchboard_outbox_delivered_total",
            &[("platform", "telegram")],
            1.0,
        ),
        (
            "switchboard_outbox_delivery_failures_total",
            &[("platform", "telegram"), ("kind", "rate_limited")],
            1.0,
        ),
        (
            "switchboard_outbox_backlog",
            &[("platform", "telegram")],
            1.0,
        ),
        ("switchboard_queue_depth", &[], 0.0),
        ("switchboard_turns_running", &[], 0.0),
        ("switchboard_adapter_up", &[("adapter", "telegram")], 1.0),
        (
            "switchboard_adapter_state",
            &[("adapter", "telegram"), ("state", "up")],
            1.0,
        ),
    ];
    for (name, labels, value) in expected {
        assert_eq!(
            after.get(name, labels).unwrap_or(0.0),
            *value,
            "{name}{labels:?} in\n{}",
            after.text
        );
    }
    let label_values: Vec<&String> = (after.samples.iter())
        .flat_map(|sample| sample.labels.values())
        .collect();
    assert!(
        !label_values
            .iter()
            .any(|value| value.contains("calculater") || value.contains("777")),
        "no invented tool name or chat id as a label:\n{}",
        after.text
    );
    app.stop().await;
}

/// Scrapes until `done` holds, and returns that scrape.
async fn eventually_scrape(app: &TestApp, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    switchboard_test_support::eventually_some(what, || async {
        let scrape = scrape(app).await;
        done(&scrape).then_some(scrape)
    })
    .await
}

/// A model server that holds every request until [`GatedLlm::open`].
struct GatedLlm {
    addr: SocketAddr,
    open: watch::Sender<bool>,
    arrived: Arc<Notify>,
}

impl GatedLlm {
    async fn start() -> Self {
        let (open, gate) = watch::channel(false);
        let arrived = Arc::new(Notify::new());
        let notify = Arc::clone(&arrived);
        let app = Router::new().route(
            "/v1/chat/completions",
            post(move |body: axum::Json<Value>| {
                let mut gate = gate.clone();
                let notify = Arc::clone(&notify);
                async move {
                    notify.notify_one();
                    let _ = gate.wait_for(|open| *open).await;
                    axum::Json(json!({
                        "id": "chatcmpl-gated",
                        "object": "chat.completion",
                        "model": body.0["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "let through"}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
                    }))
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            open,
            arrived,
        }
    }

    fn open(&self) {
        let _ = self.open.send(true);
    }
}

#[tokio::test]
async fn queue_depth_and_running_turns_while_a_turn_waits_on_the_model() {
    let llm = GatedLlm::start().await;
    // The settings of an ordinary test app, pointed at the gated model.
    let placeholder = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(&placeholder, &dir).await;
    settings.llm.base_url = switchboard::domain::BaseUrl::parse(&format!("http://{}/v1", llm.addr))
        .expect("a test URL");
    settings.runner.max_concurrent_turns = std::num::NonZero::new(1).unwrap();
    let app = Arc::new(TestApp::start(settings, dir).await);

    let mut turns = JoinSet::new();
    let arrived = llm.arrived.notified();
    let first = Arc::clone(&app);
    turns.spawn(async move { first.say(None, "first").await });
    arrived.await;
    // Two more sessions' messages wait behind the one turn allowed.
    for text in ["second", "third"] {
        let app = Arc::clone(&app);
        turns.spawn(async move { app.say(None, text).await });
    }
    let busy = eventually_scrape(&app, "three messages unfinished, one running", |s| {
        s.get("switchboard_queue_depth", &[]) == Some(3.0)
    })
    .await;
    assert_eq!(busy.value("switchboard_turns_running", &[]), 1.0);
    assert_eq!(busy.get("switchboard_turns_total", &[]), None);

    llm.open();
    while let Some(turn) = turns.join_next().await {
        assert_eq!(turn.expect("turn").1, "let through");
    }
    let idle = scrape(&app).await;
    assert_eq!(idle.value("switchboard_queue_depth", &[]), 0.0);
    assert_eq!(idle.value("switchboard_turns_running", &[]), 0.0);
    assert_eq!(
        idle.value("switchboard_turns_total", &[("outcome", "answered")]),
        3.0
    );
    assert_eq!(
        idle.value("switchboard_model_tokens_total", &[("kind", "input")]),
        30.0
    );
    match Arc::try_unwrap(app) {
        Ok(app) => app.stop().await,
        Err(_) => panic!("the turns are done"),
    }
}

/// A loopback port forwarding to `upstream` that can be shut (refusing
/// connections and cutting those open) and opened again: the platform's
/// server going down and coming back.
struct Outage {
    addr: SocketAddr,
    upstream: SocketAddr,
    forwarding: Option<tokio::task::JoinHandle<()>>,
}

impl Outage {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut outage = Self {
            addr,
            upstream,
            forwarding: None,
        };
        outage.forward(listener);
        outage
    }

    fn forward(&mut self, listener: TcpListener) {
        let upstream = self.upstream;
        self.forwarding = Some(tokio::spawn(async move {
            // Dropped with this task: the connections close with it.
            let mut connections = JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    fn url(&self) -> url::Url {
        url::Url::parse(&format!("http://{}/", self.addr)).expect("a URL")
    }

    /// The server goes away: connections are refused, open ones cut.
    async fn down(&mut self) {
        if let Some(task) = self.forwarding.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// The server is back on the same address.
    async fn up(&mut self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind");
        self.forward(listener);
    }
}

fn addr_of(url: &url::Url) -> SocketAddr {
    let host = url.host_str().expect("a host");
    format!("{host}:{}", url.port().expect("a port"))
        .parse()
        .expect("an address")
}

#[tokio::test]
async fn readiness_and_the_adapter_gauge_follow_telegram_going_down_and_back() {
    let telegram = FakeTelegram::start().await;
    let mut outage = Outage::start(addr_of(&telegram.url())).await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut settings = telegram_settings(&telegram);
        settings.api_url = Some(outage.url());
        s.telegram = Some(settings);
    })
    .await;
    let (status, body) = readyz(&app).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));

    outage.down().await;
    let body = switchboard_test_support::eventually_some("/readyz to answer 503", || async {
        let (status, body) = readyz(&app).await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body["status"], "adapters_not_ready");
    assert_eq!(body["adapters"]["telegram"]["state"], "retrying");
    let last_error = body["adapters"]["telegram"]["last_error"]
        .as_str()
        .expect("the failure");
    // The poller fails on its poll, or on the webhook check it makes
    // before polling again, whichever the outage hits first.
    assert!(
        last_error.contains("getUpdates failed") || last_error.contains("getWebhookInfo failed"),
        "{last_error}"
    );
    assert!(!last_error.contains(switchboard_test_support::telegram::TOKEN));
    let down = scrape(&app).await;
    assert_eq!(
        down.value("switchboard_adapter_up", &[("adapter", "telegram")]),
        0.0
    );
    assert_eq!(
        down.value(
            "switchboard_adapter_state",
            &[("adapter", "telegram"), ("state", "retrying")]
        ),
        1.0
    );

    outage.up().await;
    eventually("/readyz to answer 200 again", || async {
        readyz(&app).await.0 == 200
    })
    .await;
    let up = scrape(&app).await;
    assert_eq!(
        up.value("switchboard_adapter_up", &[("adapter", "telegram")]),
        1.0
    );
    // And it works: a message through the restored server is answered.
    let reply = telegram
        .ask(
            switchboard_test_support::telegram::TgUser {
                id: 42,
                first_name: "Bo",
            },
            "back?",
        )
        .await;
    assert!(reply.contains("echo: back?"), "{reply}");
    app.stop().await;
}

#[tokio::test]
async fn readiness_flips_on_a_missing_migration_and_when_draining() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    assert_eq!(readyz(&app).await.0, 200);

    // A database restored from before the newest migration.
    let store = &app.gateway.store;
    sqlx::query("UPDATE _sqlx_migrations SET success = false WHERE version = 7")
        .execute(&mut *store.conn().await.expect("conn"))
        .await
        .expect("mark a migration failed");
    let (status, body) = readyz(&app).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("migrations_pending"))
    );
    sqlx::query("UPDATE _sqlx_migrations SET success = true WHERE version = 7")
        .execute(&mut *store.conn().await.expect("conn"))
        .await
        .expect("restore it");
    assert_eq!(readyz(&app).await.0, 200);

    // SIGTERM cancels this token: the runner drains.
    app.gateway.shutdown.cancel();
    let (status, body) = readyz(&app).await;
    assert_eq!((status, body["status"].as_str()), (503, Some("draining")));
    assert_eq!(scrape(&app).await.value("switchboard_draining", &[]), 1.0);
    app.stop().await;
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.server.metrics = false).await;
    let response = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 404);
    app.stop().await;
}
