//! Adapters are supervised: one whose platform is unreachable at start (a
//! boot before the network is up) is tried again with a capped backoff and
//! comes up on its own; meanwhile `/readyz` answers 503 and names its state
//! and last error, its webhook answers 503 (the platform delivers again),
//! and once it is up `/readyz` answers 200 and messages are answered.

use std::net::SocketAddr;

use serde_json::{Value, json};
use switchboard_feishu::{Domain, FeishuSettings};
use switchboard_test_support::feishu::{
    APP_ID, APP_SECRET, FakeFeishu, VERIFICATION_TOKEN, message_event,
};
use switchboard_test_support::telegram::{FakeTelegram, TgUser, too_many_requests};
use switchboard_test_support::{eventually, eventually_some};
use tokio::net::TcpListener;

use crate::helpers::{FakeLlm, TestApp, telegram_settings};

/// A loopback port that refuses connections until [`LatePort::open`]
/// forwards it to a fake platform: the platform "comes up".
struct LatePort {
    addr: SocketAddr,
}

impl LatePort {
    /// Reserves a free port (bound and released: nothing listens on it).
    fn reserve() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        Self { addr }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// From now on, connections to the port reach `upstream`.
    async fn open(&self, upstream: SocketAddr) {
        let listener = TcpListener::bind(self.addr).await.expect("rebind the port");
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
    }
}

fn addr_of(url: &str) -> SocketAddr {
    let url = url::Url::parse(url).expect("a URL");
    let host = url.host_str().expect("a host");
    format!("{host}:{}", url.port().expect("a port"))
        .parse()
        .expect("an address")
}

/// `/readyz`: the status code and the body.
async fn readyz(app: &TestApp) -> (u16, Value) {
    let response = app.http.get(app.url("/readyz")).send().await.expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Waits until `/readyz` shows `adapter` retrying after a failed attempt;
/// returns that body.
async fn until_retrying(app: &TestApp, adapter: &str) -> Value {
    eventually_some("the adapter to be retrying", || async {
        let (status, body) = readyz(app).await;
        (body["adapters"][adapter]["state"] == "retrying").then(|| {
            assert_eq!(status, 503, "{body}");
            body
        })
    })
    .await
}

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};

#[tokio::test]
async fn a_telegram_adapter_down_at_start_comes_up_and_answers() {
    let telegram = FakeTelegram::start().await;
    let late = LatePort::reserve();
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_unready(&llm, |s| {
        let mut settings = telegram_settings(&telegram);
        settings.api_url = Some(late.url().parse().expect("a URL"));
        s.telegram = Some(settings);
    })
    .await;

    // getMe is refused: /readyz says so, and why.
    let body = until_retrying(&app, "telegram").await;
    assert_eq!(body["status"], "adapters_not_ready");
    let adapter = &body["adapters"]["telegram"];
    assert!(adapter["failed_attempts"].as_u64() >= Some(1), "{body}");
    assert!(adapter["since"].as_str().is_some(), "{body}");
    let error = adapter["last_error"].as_str().expect("the last error");
    assert!(error.contains("getMe"), "{error}");
    assert!(
        !error.contains(switchboard_test_support::telegram::TOKEN),
        "no token in /readyz"
    );
    // Liveness is another matter.
    let health = app
        .http
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("sent");
    assert_eq!(health.status(), 200);

    // Telegram comes up: the adapter starts on its next attempt.
    late.open(addr_of(telegram.url().as_str())).await;
    // (On PostgreSQL it may stand by for a moment first, until it holds
    // the platform lease; standing by is ready too.)
    let body = eventually_some("/readyz to answer 200 with Telegram up", || async {
        let (status, body) = readyz(&app).await;
        (status == 200 && body["adapters"]["telegram"]["state"] == "up").then_some(body)
    })
    .await;
    assert_eq!(body["status"], "ok");

    let reply = telegram.ask(ADA, "are you there?").await;
    assert!(reply.contains("echo: are you there?"), "{reply}");
    app.stop().await;
}

#[tokio::test]
async fn a_telegram_adapter_whose_get_me_fails_is_tried_again() {
    let telegram = FakeTelegram::start().await;
    // Transient errors. (Not 5xx: teloxide waits 10 s after each.)
    telegram.script("getMe", 429, too_many_requests(1));
    telegram.script("getMe", 429, too_many_requests(1));
    let llm = FakeLlm::echo().await;
    let app =
        TestApp::spawn_unready(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    let status = app.gateway.platform_status.clone();
    eventually("the adapter to be up", || {
        std::future::ready(status.all_ready())
    })
    .await;
    assert_eq!(telegram.calls("getMe").len(), 3, "two failures, then up");
    let (code, body) = readyz(&app).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["adapters"]["telegram"]["failed_attempts"], 0);
    assert!(
        body["adapters"]["telegram"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("getMe") && e.contains("Retry after")),
        "{body}"
    );
    let reply = telegram.ask(ADA, "hello").await;
    assert!(reply.contains("echo: hello"), "{reply}");
    app.stop().await;
}

#[tokio::test]
async fn a_feishu_adapter_down_at_start_comes_up_and_answers() {
    // SAFETY (test): variable names unique to this test.
    unsafe {
        std::env::set_var("SB_TEST_SUP_FS_SECRET", APP_SECRET);
        std::env::set_var("SB_TEST_SUP_FS_TOKEN", VERIFICATION_TOKEN);
    }
    let feishu = FakeFeishu::start().await;
    let late = LatePort::reserve();
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_unready(&llm, |s| {
        let mut settings = FeishuSettings::new(APP_ID);
        settings.app_secret_env = "SB_TEST_SUP_FS_SECRET".to_owned();
        settings.verification_token_env = "SB_TEST_SUP_FS_TOKEN".to_owned();
        settings.domain = Domain::Custom(late.url().trim_end_matches('/').to_owned());
        s.feishu = Some(settings);
    })
    .await;
    let event = message_event("ev-sup-1", "p2p", "hello feishu", json!([]));
    let post = |event: &Value| {
        let request = app.http.post(app.url("/feishu/events")).json(event);
        async move { request.send().await.expect("sent") }
    };

    let body = until_retrying(&app, "feishu").await;
    assert!(
        body["adapters"]["feishu"]["last_error"].is_string(),
        "{body}"
    );
    // The webhook is served, with 503 until the adapter is up: Feishu
    // delivers the event again.
    let early = post(&event).await;
    assert_eq!(early.status(), 503);
    assert!(early.headers().contains_key("retry-after"));

    late.open(addr_of(&feishu.url())).await;
    eventually("/readyz to answer 200", || async {
        readyz(&app).await.0 == 200
    })
    .await;
    assert_eq!(post(&event).await.status(), 200);
    eventually("the reply", || {
        std::future::ready(!feishu.messages().is_empty())
    })
    .await;
    assert!(
        feishu.messages()[0]
            .body
            .to_string()
            .contains("echo: hello feishu")
    );
    app.stop().await;
}
