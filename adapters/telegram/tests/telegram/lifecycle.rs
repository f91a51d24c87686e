//! The adapter as the core runs it ([`TelegramPlatform`] as a
//! `switchboard_contract::Adapter`): built without a call, checked with
//! `getMe` alone, started into a long poll under the bot's lease or a
//! webhook route.

use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::{Adapter, Hookup};
use switchboard_telegram::{Mode, TelegramError, TelegramPlatform, TelegramSettings};
use switchboard_test_support::telegram::{BOT_ID, BOT_USERNAME, FakeTelegram};

use crate::helpers::{RecordingSink, SECRET, TOKEN};

fn hookup() -> Hookup {
    switchboard_test_support::lifecycle::hookup(Arc::new(RecordingSink::default()))
}

fn platform(settings: TelegramSettings) -> TelegramPlatform {
    TelegramPlatform::with_secrets(
        settings,
        SecretString::from(TOKEN),
        Some(SecretString::from(SECRET)),
    )
    .expect("valid settings")
}

#[tokio::test]
async fn a_polling_bot_checks_with_get_me_and_starts_a_long_poll_under_its_lease() {
    let fake = FakeTelegram::start().await;
    let platform = platform(TelegramSettings {
        api_url: Some(fake.url()),
        ..TelegramSettings::default()
    });
    assert_eq!(platform.platform().as_str(), "telegram");
    assert!(platform.webhook_paths().is_empty());

    let found = platform.check().await.expect("getMe answers");
    assert_eq!(found, format!("getMe answered: bot @{BOT_USERNAME}"));

    let started = platform.start(hookup()).await.expect("starts");
    assert!(started.webhook.is_none());
    let connection = started.connection.expect("a long poll");
    assert_eq!(connection.lease_name(), format!("telegram:{BOT_ID}"));
    assert_eq!(fake.calls("getMe").len(), 2);
}

#[tokio::test]
async fn a_webhook_bot_registers_its_webhook_on_start_and_not_on_check() {
    let fake = FakeTelegram::start().await;
    let platform = platform(TelegramSettings {
        api_url: Some(fake.url()),
        mode: Mode::Webhook,
        webhook_secret_env: Some("SB_TEST_TG_LIFECYCLE_SECRET".to_owned()),
        set_webhook_url: Some("https://bot.example.org/telegram/webhook".parse().unwrap()),
        ..TelegramSettings::default()
    });
    assert_eq!(platform.webhook_paths(), ["/telegram/webhook"]);

    platform.check().await.expect("getMe answers");
    assert!(fake.calls("setWebhook").is_empty(), "check changes nothing");

    let started = platform.start(hookup()).await.expect("starts");
    assert!(started.webhook.is_some());
    assert!(started.connection.is_none());
    assert_eq!(fake.calls("setWebhook").len(), 1);
}

#[test]
fn a_missing_token_is_a_configuration_error_at_build_time() {
    let settings = TelegramSettings {
        token_env: "SB_TEST_TG_LIFECYCLE_UNSET_TOKEN".to_owned(),
        ..TelegramSettings::default()
    };
    let err = TelegramPlatform::new(settings).expect_err("no token");
    assert!(matches!(err, TelegramError::MissingEnv { .. }), "{err:?}");
    assert!(err.to_string().contains("SB_TEST_TG_LIFECYCLE_UNSET_TOKEN"));
}

#[test]
fn webhook_mode_without_a_secret_is_refused_at_build_time() {
    let settings = TelegramSettings {
        mode: Mode::Webhook,
        ..TelegramSettings::default()
    };
    let err = TelegramPlatform::with_secrets(settings, SecretString::from(TOKEN), None)
        .expect_err("no secret");
    assert!(err.to_string().contains("webhook_secret_env"), "{err}");
}
