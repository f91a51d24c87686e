//! Building the adapter from its settings: one REST client shared by the
//! [`DiscordSender`] and the [`InboundHandler`], and the [`DiscordGateway`]
//! worker for the caller to run.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serenity::http::{Http, HttpBuilder};
use switchboard_contract::InboundSink;

use crate::error::DiscordError;
use crate::gateway::DiscordGateway;
use crate::inbound::InboundHandler;
use crate::sender::DiscordSender;
use crate::settings::{DiscordSettings, check_token};

/// The Discord adapter, built and not yet running.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use switchboard_contract::{InboundSink, PlatformSender};
/// # use switchboard_discord::{DiscordAdapter, DiscordSettings};
/// # async fn start(settings: DiscordSettings, sink: Arc<dyn InboundSink>,
/// #     shutdown: tokio_util::sync::CancellationToken) -> Result<(), Box<dyn std::error::Error>> {
/// let DiscordAdapter { sender, gateway } = DiscordAdapter::from_settings(&settings, sink)?;
/// let sender: Arc<dyn PlatformSender> = sender; // register under "discord"
/// let worker = tokio::spawn(gateway.run(shutdown));
/// # let _ = (sender, worker); Ok(()) }
/// ```
#[derive(Debug)]
pub struct DiscordAdapter {
    /// Delivers replies; register it with the core for platform `discord`.
    pub sender: Arc<DiscordSender>,
    /// The gateway worker; run it with a shutdown token.
    pub gateway: DiscordGateway,
}

impl DiscordAdapter {
    /// Builds the adapter with the token from the environment variable named
    /// by `settings.token_env`.
    ///
    /// # Errors
    /// [`DiscordError::MissingToken`] or [`DiscordError::InvalidSetting`].
    pub fn from_settings(
        settings: &DiscordSettings,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Self, DiscordError> {
        let token = settings.token_from_env()?;
        Self::new(token, settings, sink)
    }

    /// Builds the adapter with an explicit token. Makes no network call.
    ///
    /// # Errors
    /// [`DiscordError::MissingToken`] or [`DiscordError::InvalidSetting`].
    pub fn new(
        token: SecretString,
        settings: &DiscordSettings,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Self, DiscordError> {
        check_token(&token, &settings.token_env)?;
        let api_proxy = settings.api_proxy.clone();
        if let Some(proxy) = &api_proxy
            && !(proxy.starts_with("http://") || proxy.starts_with("https://"))
        {
            return Err(DiscordError::InvalidSetting {
                key: "discord.api_proxy",
                reason: "must be an http:// or https:// URL".to_owned(),
            });
        }
        let http = Arc::new(build_http(&token, api_proxy.as_deref()));
        let handler = InboundHandler::new(sink, Arc::clone(&http), settings)?;
        Ok(Self {
            sender: Arc::new(DiscordSender::new(http)),
            gateway: DiscordGateway::new(token, api_proxy, handler),
        })
    }
}

/// A REST client; with a proxy (tests, or a rate-limiting proxy) serenity's
/// own rate limiter is off, as serenity requires.
pub(crate) fn build_http(token: &SecretString, api_proxy: Option<&str>) -> Http {
    let builder = HttpBuilder::new(token.expose_secret());
    match api_proxy {
        Some(proxy) => builder.proxy(proxy).ratelimiter_disabled(true).build(),
        None => builder.build(),
    }
}
