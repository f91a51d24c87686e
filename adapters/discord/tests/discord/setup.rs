//! Building the adapter from settings.

use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::InboundSink;
use switchboard_discord::{DiscordAdapter, DiscordError, DiscordSettings};

use crate::support::{RecordingSink, adapter_with};

fn sink() -> Arc<dyn InboundSink> {
    Arc::new(RecordingSink::default())
}

#[test]
fn the_adapter_prints_no_token() {
    let adapter = DiscordAdapter::new(
        SecretString::from("MTIz.secret-token-value"),
        &DiscordSettings::default(),
        sink(),
    )
    .expect("adapter builds");

    let printed = format!("{adapter:?}");

    assert!(!printed.contains("secret-token-value"), "{printed}");
}

#[test]
fn an_api_proxy_must_be_an_http_url() {
    let settings = DiscordSettings {
        api_proxy: Some("127.0.0.1:3000".to_owned()),
        ..DiscordSettings::default()
    };

    let err =
        DiscordAdapter::new(SecretString::from("t"), &settings, sink()).expect_err("not a URL");

    assert!(matches!(
        err,
        DiscordError::InvalidSetting {
            key: "discord.api_proxy",
            ..
        }
    ));
}

#[test]
fn an_empty_token_is_rejected_by_name() {
    let err = DiscordAdapter::new(
        SecretString::from("  "),
        &DiscordSettings::default(),
        sink(),
    )
    .expect_err("empty");

    assert!(err.to_string().contains("DISCORD_BOT_TOKEN"));
}

#[tokio::test]
async fn the_gateway_worker_returns_on_shutdown() {
    // Stopped at once: before or while it asks for the gateway URL.
    let fake = crate::fake_discord::FakeDiscord::start().await;
    let adapter = adapter_with(&fake, "t", DiscordSettings::default(), sink());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(adapter.gateway.run(shutdown.clone()));

    shutdown.cancel();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), worker)
        .await
        .expect("stops promptly")
        .expect("does not panic");

    assert!(ended.is_ok(), "{ended:?}");
}

#[tokio::test]
async fn the_bot_account_is_asked_of_discord_without_connecting() {
    let fake = crate::fake_discord::FakeDiscord::start().await;
    let adapter = adapter_with(&fake, "t", DiscordSettings::default(), sink());

    let account = adapter.gateway.account().await.expect("answered");

    assert_eq!(
        account.as_str(),
        crate::fake_discord::BOT_USER_ID.to_string()
    );
    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert!(paths.is_empty(), "only GET /users/@me: {paths:?}");
}

#[tokio::test]
async fn a_token_discord_rejects_is_reported_as_such() {
    let fake = crate::fake_discord::FakeDiscord::start().await;
    let adapter = adapter_with(
        &fake,
        crate::fake_discord::REJECTED_TOKEN,
        DiscordSettings::default(),
        sink(),
    );

    let err = adapter.gateway.account().await.expect_err("rejected");

    assert!(matches!(err, DiscordError::InvalidToken), "{err:?}");
}
