//! [`TelegramPlatform`]: the adapter as the core starts, supervises and
//! checks it ([`Adapter`]).
//!
//! - Built from [`TelegramSettings`] without a call: the bot token and the
//!   webhook secret are read from the environment and the settings checked
//!   then, so what fails there is the configuration.
//! - [`Adapter::start`] is [`TelegramAdapter::connect_with_secrets`]:
//!   `getMe`, and `setWebhook` when configured. A missing variable or an
//!   invalid setting is a [`StartError::Configuration`], a failed call
//!   [`StartError::Unavailable`].
//! - In webhook mode it serves the webhook route
//!   ([`TelegramSettings::webhook_path`]); in polling mode its
//!   [`Connection`] is the long poll (lease `telegram:<bot id>`), which a
//!   409 Conflict ends with [`ConnectionError::Conflict`]. The handled
//!   updates are confirmed only at shutdown ([`Hookup::shutdown`]), never
//!   when the poll is stopped to hand the bot to another instance.
//! - [`Adapter::check`] is `getMe` alone: no webhook is registered.

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use switchboard_contract::{
    Adapter, Connection, ConnectionError, Hookup, PlatformName, StartError, Started,
};
use tokio_util::sync::CancellationToken;

use crate::{
    Mode, PLATFORM, TelegramAdapter, TelegramError, TelegramSettings, client, identify,
    read_secrets, validate,
};

/// The Telegram adapter, built from its settings and not yet started.
#[derive(Debug)]
pub struct TelegramPlatform {
    settings: TelegramSettings,
    token: SecretString,
    webhook_secret: Option<SecretString>,
}

impl TelegramPlatform {
    /// Reads the secrets from the environment variables the settings name
    /// and checks the settings. Makes no call.
    ///
    /// # Errors
    /// A missing variable or an invalid setting (named).
    pub fn new(settings: TelegramSettings) -> Result<Self, TelegramError> {
        let (token, webhook_secret) = read_secrets(&settings)?;
        Self::with_secrets(settings, token, webhook_secret)
    }

    /// Like [`TelegramPlatform::new`], with the secrets given.
    ///
    /// # Errors
    /// An invalid setting (named), or webhook mode without a secret.
    pub fn with_secrets(
        settings: TelegramSettings,
        token: SecretString,
        webhook_secret: Option<SecretString>,
    ) -> Result<Self, TelegramError> {
        validate(&settings, webhook_secret.as_ref())?;
        Ok(Self {
            settings,
            token,
            webhook_secret,
        })
    }
}

#[async_trait]
impl Adapter for TelegramPlatform {
    fn platform(&self) -> PlatformName {
        PlatformName::parse(PLATFORM).expect("`telegram` is a platform name")
    }

    fn webhook_paths(&self) -> Vec<String> {
        match self.settings.mode {
            Mode::Webhook => vec![self.settings.webhook_path.clone()],
            Mode::Polling => Vec::new(),
        }
    }

    async fn start(&self, hookup: Hookup) -> Result<Started, StartError> {
        let adapter = TelegramAdapter::connect_with_secrets(
            self.settings.clone(),
            self.token.clone(),
            self.webhook_secret.clone(),
            hookup.sink,
        )
        .await
        .map_err(start_error)?
        .with_link_observer(hookup.observer);
        let started = Started::sender(adapter.sender());
        Ok(match adapter.mode() {
            Mode::Webhook => started.with_webhook(adapter.webhook_router()),
            Mode::Polling => started.with_connection(Arc::new(LongPoll {
                adapter,
                shutdown: hookup.shutdown,
            })),
        })
    }

    async fn check(&self) -> Result<String, StartError> {
        let (bot, scrubber) = client(&self.settings, self.token.clone()).map_err(start_error)?;
        let (identity, _) = identify(&bot, &scrubber).await.map_err(start_error)?;
        Ok(format!("getMe answered: bot @{}", identity.username))
    }
}

/// An error of starting, as the core sorts it.
fn start_error(err: TelegramError) -> StartError {
    if err.is_configuration() {
        StartError::Configuration(err.to_string())
    } else {
        StartError::Unavailable(err.to_string())
    }
}

/// The long poll of a started bot in polling mode.
struct LongPoll {
    adapter: TelegramAdapter,
    shutdown: CancellationToken,
}

#[async_trait]
impl Connection for LongPoll {
    fn lease_name(&self) -> String {
        format!("{PLATFORM}:{}", self.adapter.account())
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), ConnectionError> {
        match self
            .adapter
            .run_polling_until(stop, self.shutdown.clone())
            .await
        {
            Ok(()) => Ok(()),
            Err(err @ TelegramError::PollingConflict) => {
                Err(ConnectionError::Conflict(err.to_string()))
            }
            Err(err) => Err(ConnectionError::Failed(err.to_string())),
        }
    }
}
