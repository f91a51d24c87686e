//! The adapter as the core runs it ([`FeishuPlatform`] as a
//! `switchboard_contract::Adapter`): built without a call, checked with a
//! tenant token and the bot info, started into a webhook route and event
//! tasks to drain at shutdown.

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use switchboard_contract::{Adapter, InboundMessage, InboundSink, SubmitError, Submitted};
use switchboard_feishu::{Credentials, Domain, FeishuPlatform, FeishuSettings, StartError};
use switchboard_test_support::feishu::{APP_ID, APP_SECRET, BOT_OPEN_ID, FakeFeishu};

use crate::helpers::VERIFICATION_TOKEN;

struct Nothing;

#[async_trait]
impl InboundSink for Nothing {
    async fn submit(&self, _message: InboundMessage) -> Result<Submitted, SubmitError> {
        Ok(Submitted::Ignored)
    }
}

fn credentials() -> Credentials {
    Credentials {
        app_secret: SecretString::from(APP_SECRET.to_owned()),
        verification_token: SecretString::from(VERIFICATION_TOKEN.to_owned()),
        encrypt_key: None,
    }
}

#[tokio::test]
async fn the_app_is_checked_and_started_into_a_webhook_with_events_to_drain() {
    let fake = FakeFeishu::start().await;
    let mut settings = FeishuSettings::new(APP_ID);
    settings.domain = Domain::Custom(fake.url());
    let platform = FeishuPlatform::with_credentials(settings, credentials()).expect("valid");
    assert_eq!(platform.platform().as_str(), "feishu");
    assert_eq!(platform.webhook_paths(), ["/feishu/events"]);

    let found = platform.check().await.expect("answered");
    assert_eq!(
        found,
        format!("tenant token and bot info fetched: bot {BOT_OPEN_ID}")
    );

    let hookup = switchboard_test_support::lifecycle::hookup(Arc::new(Nothing));
    let started = platform.start(hookup).await.expect("starts");
    assert!(started.webhook.is_some() && started.connection.is_none());
    let drain = started.drain.expect("event tasks");
    drain.drain(std::time::Duration::from_millis(10)).await;
}

#[test]
fn a_missing_secret_is_a_configuration_error_at_build_time() {
    let mut settings = FeishuSettings::new(APP_ID);
    settings.app_secret_env = "SB_TEST_FEISHU_LIFECYCLE_UNSET".to_owned();
    let err = FeishuPlatform::new(settings).expect_err("no secret");
    assert!(matches!(err, StartError::Settings(_)), "{err:?}");
    assert!(err.to_string().contains("SB_TEST_FEISHU_LIFECYCLE_UNSET"));
}
