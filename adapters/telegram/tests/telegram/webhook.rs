//! The webhook route: secret, body checks, registration.

use axum::http::StatusCode;
use switchboard_telegram::{Mode, TelegramAdapter, TelegramError, TelegramSettings};

use crate::helpers::*;

fn a_dm_update() -> serde_json::Value {
    update(
        1,
        text_message(1, private_chat(1), user(USER_ID, "Ada", false), "hi"),
    )
}

#[tokio::test]
async fn a_wrong_secret_gets_401_and_submits_nothing() {
    let app = TestApp::spawn().await;

    let wrong = app
        .post_webhook(Some("not-the-secret"), a_dm_update().to_string())
        .await;
    let missing = app.post_webhook(None, a_dm_update().to_string()).await;

    assert_eq!(wrong, StatusCode::UNAUTHORIZED);
    assert_eq!(missing, StatusCode::UNAUTHORIZED);
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn the_right_secret_gets_200_and_submits() {
    let app = TestApp::spawn().await;

    let status = app
        .post_webhook(Some(SECRET), a_dm_update().to_string())
        .await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(app.sink.submitted().len(), 1);
}

#[tokio::test]
async fn a_malformed_body_gets_400() {
    let app = TestApp::spawn().await;

    let status = app.post_webhook(Some(SECRET), "{not json").await;

    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn an_oversized_body_gets_413() {
    let app = TestApp::spawn_with(|settings| settings.webhook_max_body_bytes = 1024).await;

    let status = app.post_webhook(Some(SECRET), "x".repeat(4096)).await;

    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn an_unavailable_core_gets_503_so_telegram_redelivers() {
    let app = TestApp::spawn().await;
    *app.sink.unavailable.lock().unwrap() = true;

    let status = app
        .post_webhook(Some(SECRET), a_dm_update().to_string())
        .await;

    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn webhook_mode_registers_the_webhook_with_its_secret() {
    let app = TestApp::spawn_with(|settings| {
        settings.mode = Mode::Webhook;
        settings.set_webhook_url =
            Some("https://bot.example.org/telegram/webhook".parse().unwrap());
    })
    .await;

    let calls = app.fake.calls("setWebhook");
    assert_eq!(calls.len(), 1);
    // setWebhook goes out as multipart form data.
    let form = calls[0]["__raw"].as_str().expect("multipart body");
    assert!(
        form.contains("https://bot.example.org/telegram/webhook"),
        "{form}"
    );
    assert!(
        form.contains("name=\"secret_token\"\r\n\r\nwebhook-secret_123"),
        "{form}"
    );
    assert!(form.contains("[\"message\",\"callback_query\"]"), "{form}");
}

#[tokio::test]
async fn webhook_mode_without_a_secret_does_not_start() {
    let fake = switchboard_test_support::telegram::FakeTelegram::start().await;
    let settings = TelegramSettings {
        api_url: Some(fake.url()),
        mode: Mode::Webhook,
        ..TelegramSettings::default()
    };

    let result = TelegramAdapter::connect_with_secrets(
        settings,
        secrecy::SecretString::from(TOKEN),
        None,
        std::sync::Arc::new(RecordingSink::default()),
    )
    .await;

    assert!(matches!(
        result,
        Err(TelegramError::InvalidSetting {
            key: "webhook_secret_env",
            ..
        })
    ));
}

#[tokio::test]
async fn a_failed_connection_never_shows_the_token() {
    // A port that was just free: the connection is refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let settings = TelegramSettings {
        api_url: Some(url.parse().unwrap()),
        ..TelegramSettings::default()
    };

    let error = TelegramAdapter::connect_with_secrets(
        settings,
        secrecy::SecretString::from(TOKEN),
        None,
        std::sync::Arc::new(RecordingSink::default()),
    )
    .await
    .expect_err("nothing listens");

    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("TEST-fake-token"), "{shown}");
    assert!(shown.contains("getMe"), "{shown}");
}
