//! [`DiscordPlatform`]: the adapter as the core starts, supervises and
//! checks it ([`Adapter`]).
//!
//! - Built from [`DiscordSettings`] without a call: the bot token is read
//!   from the environment and the settings checked then, so what fails
//!   there is the configuration.
//! - [`Adapter::start`] builds a [`DiscordAdapter`] around the core's sink
//!   and asks which bot this is (`GET /users/@me`). Any failure of that
//!   call, a rejected token included (the operator may reset it in the
//!   developer portal), is [`StartError::Unavailable`]: tried again.
//! - Its [`Connection`] is the gateway connection (lease `discord:<bot user
//!   id>`): a second one would handle every event twice. It reconnects by
//!   itself after most failures; one it gives up on (a privileged intent
//!   not enabled, say) ends it with [`ConnectionError::Failed`].
//! - It takes no webhooks and leaves no work at shutdown.
//! - [`Adapter::check`] is `GET /users/@me` alone.

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use switchboard_contract::{
    AccountId, Adapter, Connection, ConnectionError, Hookup, PlatformName, StartError, Started,
};
use tokio_util::sync::CancellationToken;

use crate::adapter::{DiscordAdapter, check_settings};
use crate::error::DiscordError;
use crate::gateway::{DiscordGateway, current_user};
use crate::normalise::PLATFORM;
use crate::rest::Rest;
use crate::settings::DiscordSettings;

/// The Discord adapter, built from its settings and not yet started.
#[derive(Debug)]
pub struct DiscordPlatform {
    token: SecretString,
    settings: DiscordSettings,
}

impl DiscordPlatform {
    /// Reads the bot token from the environment variable `settings` names
    /// and checks the settings. Makes no call.
    ///
    /// # Errors
    /// [`DiscordError::MissingToken`] or [`DiscordError::InvalidSetting`].
    pub fn new(settings: DiscordSettings) -> Result<Self, DiscordError> {
        let token = settings.token_from_env()?;
        Self::with_token(token, settings)
    }

    /// Like [`DiscordPlatform::new`], with the token given.
    ///
    /// # Errors
    /// As [`DiscordPlatform::new`].
    pub fn with_token(
        token: SecretString,
        settings: DiscordSettings,
    ) -> Result<Self, DiscordError> {
        check_settings(&token, &settings)?;
        Ok(Self { token, settings })
    }
}

#[async_trait]
impl Adapter for DiscordPlatform {
    fn platform(&self) -> PlatformName {
        PlatformName::parse(PLATFORM).expect("`discord` is a platform name")
    }

    async fn start(&self, hookup: Hookup) -> Result<Started, StartError> {
        let DiscordAdapter { sender, gateway } =
            DiscordAdapter::new(self.token.clone(), &self.settings, hookup.sink)
                .map_err(|err| StartError::Configuration(err.to_string()))?;
        let gateway = gateway.with_link_observer(hookup.observer);
        let account = gateway
            .account()
            .await
            .map_err(|err| StartError::Unavailable(err.to_string()))?;
        let connection = GatewayConnection { gateway, account };
        Ok(Started::sender(sender).with_connection(Arc::new(connection)))
    }

    async fn check(&self) -> Result<String, StartError> {
        let rest = Rest::new(&self.token, self.settings.api_proxy.as_deref());
        let account = current_user(&rest)
            .await
            .map_err(|err| StartError::Unavailable(err.to_string()))?;
        Ok(format!("GET /users/@me answered: bot user {account}"))
    }
}

/// The gateway connection of a started bot.
struct GatewayConnection {
    gateway: DiscordGateway,
    account: AccountId,
}

#[async_trait]
impl Connection for GatewayConnection {
    fn lease_name(&self) -> String {
        format!("{PLATFORM}:{}", self.account)
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), ConnectionError> {
        self.gateway
            .clone()
            .run(stop)
            .await
            .map_err(|err| ConnectionError::Failed(err.to_string()))
    }
}
