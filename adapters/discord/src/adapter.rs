//! Building the adapter from its settings: one REST client ([`Rest`], with
//! its rate-limit state) shared by the [`DiscordSender`], the
//! [`InboundHandler`] and the [`DiscordGateway`] worker for the caller to
//! run.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use switchboard_contract::InboundSink;

use crate::error::DiscordError;
use crate::gateway::DiscordGateway;
use crate::inbound::InboundHandler;
use crate::rest::Rest;
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
        check_settings(&token, settings)?;
        let rest = Rest::new(&token, settings.api_proxy.as_deref());
        let handler = InboundHandler::new(sink, rest.clone(), settings)?;
        let sender = DiscordSender::new(rest.clone())
            .with_reply_ping(settings.reply_ping, handler.active_channels())
            .with_drafts(
                settings
                    .stream_replies
                    .then(|| Duration::from_millis(settings.edit_interval_ms)),
            );
        Ok(Self {
            sender: Arc::new(sender),
            gateway: DiscordGateway::new(token, rest, handler),
        })
    }
}

/// Checks `token` and `settings` as [`DiscordAdapter::new`] does, without
/// building anything.
///
/// # Errors
/// As [`DiscordAdapter::new`].
pub(crate) fn check_settings(
    token: &SecretString,
    settings: &DiscordSettings,
) -> Result<(), DiscordError> {
    check_token(token, &settings.token_env)?;
    if let Some(proxy) = &settings.api_proxy
        && !(proxy.starts_with("http://") || proxy.starts_with("https://"))
    {
        return Err(DiscordError::InvalidSetting {
            key: "discord.api_proxy",
            reason: "must be an http:// or https:// URL".to_owned(),
        });
    }
    settings.free_response_channel_ids()?;
    Ok(())
}
