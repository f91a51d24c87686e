//! The adapter as the core runs it ([`DiscordPlatform`] as a
//! `switchboard_contract::Adapter`): built without a call, checked and
//! started with `GET /users/@me`, its gateway connection leased under the
//! bot's user id.

use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::{Adapter, Hookup, StartError};
use switchboard_discord::{DiscordError, DiscordPlatform, DiscordSettings};

use crate::fake_discord::{BOT_USER_ID, FakeDiscord, REJECTED_TOKEN};
use crate::support::{RecordingSink, proxied};

fn hookup() -> Hookup {
    switchboard_test_support::lifecycle::hookup(Arc::new(RecordingSink::default()))
}

fn platform(fake: &FakeDiscord, token: &str) -> DiscordPlatform {
    let settings = proxied(fake, DiscordSettings::default());
    DiscordPlatform::with_token(SecretString::from(token.to_owned()), settings)
        .expect("valid settings")
}

#[tokio::test]
async fn the_bot_is_checked_and_started_by_its_user_id_without_a_gateway_connection() {
    let fake = FakeDiscord::start().await;
    let platform = platform(&fake, "t");
    assert_eq!(platform.platform().as_str(), "discord");
    assert!(platform.webhook_paths().is_empty());

    let found = platform.check().await.expect("answered");
    assert_eq!(
        found,
        format!("GET /users/@me answered: bot user {BOT_USER_ID}")
    );

    let started = platform.start(hookup()).await.expect("starts");
    assert!(started.webhook.is_none() && started.drain.is_none());
    let connection = started.connection.expect("the gateway connection");
    assert_eq!(connection.lease_name(), format!("discord:{BOT_USER_ID}"));
    assert!(!fake.connected(), "not connected before it runs");
}

#[tokio::test]
async fn a_rejected_token_is_tried_again_at_start() {
    let fake = FakeDiscord::start().await;
    let platform = platform(&fake, REJECTED_TOKEN);

    let err = platform.start(hookup()).await.err().expect("rejected");
    assert!(matches!(err, StartError::Unavailable(_)), "{err:?}");
    assert_eq!(err.to_string(), DiscordError::InvalidToken.to_string());
    assert!(platform.check().await.is_err());
}

#[test]
fn settings_are_checked_at_build_time() {
    let settings = DiscordSettings {
        free_response_channels: vec!["general".to_owned()],
        ..DiscordSettings::default()
    };
    let err =
        DiscordPlatform::with_token(SecretString::from("t"), settings).expect_err("not an id");
    assert!(
        matches!(err, DiscordError::InvalidSetting { .. }),
        "{err:?}"
    );

    let settings = DiscordSettings {
        token_env: "SB_TEST_DISCORD_LIFECYCLE_UNSET".to_owned(),
        ..DiscordSettings::default()
    };
    let err = DiscordPlatform::new(settings).expect_err("no token");
    assert!(matches!(err, DiscordError::MissingToken { .. }), "{err:?}");
}
