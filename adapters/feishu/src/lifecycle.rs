//! [`FeishuPlatform`]: the adapter as the core starts, supervises and
//! checks it ([`Adapter`]).
//!
//! - Built from [`FeishuSettings`] without a call: the secrets are read
//!   from the environment and the settings and app id checked then, so what
//!   fails there is the configuration.
//! - [`Adapter::start`] is [`FeishuAdapterBuilder::connect`](crate::FeishuAdapterBuilder::connect):
//!   a tenant token and the bot's identity. Feishu unreachable or refusing
//!   is [`StartError::Unavailable`]; the HTTP client failing to build,
//!   [`StartError::Configuration`].
//! - It serves the webhook route ([`FeishuSettings::webhook_path`]) and
//!   holds no connection: events over HTTP work on every instance.
//! - At shutdown it drains the tasks still handing events to the core
//!   ([`EventTasks`]), which the webhook answered before they finished.
//! - [`Adapter::check`] fetches a tenant token and the bot info.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::{Adapter, Drain, Hookup, PlatformName, StartError, Started};

use crate::settings::{Credentials, FeishuSettings};
use crate::tasks::EventTasks;
use crate::token::SystemClock;
use crate::{FeishuAdapter, PLATFORM, checked, open_api};

/// The Feishu adapter, built from its settings and not yet started.
#[derive(Debug)]
pub struct FeishuPlatform {
    settings: FeishuSettings,
    secrets: Credentials,
}

impl FeishuPlatform {
    /// Reads the secrets from the environment variables `settings` names
    /// and checks the settings. Makes no call.
    ///
    /// # Errors
    /// A missing secret, an invalid setting or app id.
    pub fn new(settings: FeishuSettings) -> Result<Self, crate::StartError> {
        let credentials = Credentials::from_env(&settings)?;
        Self::with_credentials(settings, credentials)
    }

    /// Like [`FeishuPlatform::new`], with the secrets given.
    ///
    /// # Errors
    /// An invalid setting or app id.
    pub fn with_credentials(
        settings: FeishuSettings,
        secrets: Credentials,
    ) -> Result<Self, crate::StartError> {
        checked(&settings)?;
        Ok(Self { settings, secrets })
    }
}

#[async_trait]
impl Adapter for FeishuPlatform {
    fn platform(&self) -> PlatformName {
        PlatformName::parse(PLATFORM).expect("`feishu` is a platform name")
    }

    fn webhook_paths(&self) -> Vec<String> {
        vec![self.settings.webhook_path.clone()]
    }

    async fn start(&self, hookup: Hookup) -> Result<Started, StartError> {
        let adapter =
            FeishuAdapter::builder(self.settings.clone(), self.secrets.clone(), hookup.sink)
                .connect()
                .await
                .map_err(start_error)?;
        Ok(Started::sender(adapter.sender())
            .with_webhook(adapter.router())
            .with_drain(Arc::new(EventDrain(adapter.tasks()))))
    }

    async fn check(&self) -> Result<String, StartError> {
        let api = open_api(
            &self.settings,
            self.secrets.app_secret.clone(),
            Arc::new(SystemClock),
        )
        .map_err(start_error)?;
        let bot = api
            .bot_open_id()
            .await
            .map_err(|err| start_error(err.into()))?;
        Ok(format!("tenant token and bot info fetched: bot {bot}"))
    }
}

/// An error of starting, as the core sorts it: only Feishu's answer may
/// change by trying again.
fn start_error(err: crate::StartError) -> StartError {
    match err {
        crate::StartError::BotInfo(_) => StartError::Unavailable(err.to_string()),
        _ => StartError::Configuration(err.to_string()),
    }
}

/// The event tasks of a started app, drained at shutdown.
struct EventDrain(Arc<EventTasks>);

#[async_trait]
impl Drain for EventDrain {
    async fn drain(&self, grace: Duration) {
        let drained = self.0.drain(grace).await;
        tracing::debug!(?drained, "feishu events drained");
    }
}
