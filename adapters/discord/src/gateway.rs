//! The gateway connection: [`DiscordGateway`] runs serenity's client until
//! shutdown and routes its events to the [`InboundHandler`].

use std::time::Duration;

use secrecy::SecretString;
use serenity::client::{ClientBuilder, Context, EventHandler};
use serenity::gateway::GatewayError;
use serenity::http::HttpError;
use serenity::model::channel::Message;
use serenity::model::gateway::{GatewayIntents, Ready};
use serenity::model::permissions::Permissions;
use switchboard_contract::AccountId;
use switchboard_contract::backoff::{self, Backoff, Wait};
use tokio_util::sync::CancellationToken;

use crate::adapter::build_http;
use crate::error::DiscordError;
use crate::inbound::InboundHandler;
use crate::normalise::account_id;

/// The intents the adapter asks for. MESSAGE_CONTENT is privileged: it must
/// be enabled in the developer portal, or the gateway closes with 4014.
#[must_use]
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
}

/// Between rebuilds of a failed client: from 1 s, doubling, at most a minute.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// The bot permissions to request in the invite link (README): View
/// Channels, Send Messages, Send Messages in Threads, Create Public Threads,
/// Read Message History.
#[must_use]
pub fn invite_permissions() -> Permissions {
    Permissions::VIEW_CHANNEL
        | Permissions::SEND_MESSAGES
        | Permissions::SEND_MESSAGES_IN_THREADS
        | Permissions::CREATE_PUBLIC_THREADS
        | Permissions::READ_MESSAGE_HISTORY
}

/// The long-lived gateway worker, returned by
/// [`DiscordAdapter`](crate::DiscordAdapter) for the caller to run. Cloned
/// to run it again after it stopped (a caller that hands the connection
/// between processes).
#[derive(Clone)]
pub struct DiscordGateway {
    token: SecretString,
    api_proxy: Option<String>,
    handler: InboundHandler,
}

impl std::fmt::Debug for DiscordGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordGateway")
            .field("api_proxy", &self.api_proxy)
            .field("handler", &self.handler)
            .finish_non_exhaustive()
    }
}

impl DiscordGateway {
    pub(crate) fn new(
        token: SecretString,
        api_proxy: Option<String>,
        handler: InboundHandler,
    ) -> Self {
        Self {
            token,
            api_proxy,
            handler,
        }
    }

    /// The handler messages go through (for tests and diagnostics).
    #[must_use]
    pub fn handler(&self) -> &InboundHandler {
        &self.handler
    }

    /// Asks Discord which bot the token belongs to (`GET /users/@me`),
    /// without connecting to the gateway: the bot's user id names the
    /// connection for a caller that must hold it in one process only.
    ///
    /// # Errors
    /// [`DiscordError::InvalidToken`] when Discord rejects the token (401),
    /// [`DiscordError::Identity`] for any other failure (retry later).
    pub async fn account(&self) -> Result<AccountId, DiscordError> {
        let http = build_http(&self.token, self.api_proxy.as_deref());
        let user = http.get_current_user().await.map_err(|err| match err {
            serenity::Error::Http(HttpError::UnsuccessfulRequest(response))
                if response.status_code.as_u16() == 401 =>
            {
                DiscordError::InvalidToken
            }
            serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
                DiscordError::Identity(format!(
                    "Discord answered HTTP {}",
                    response.status_code.as_u16()
                ))
            }
            other => DiscordError::Identity(other.to_string()),
        })?;
        account_id(user.id).map_err(|err| DiscordError::Identity(err.to_string()))
    }

    /// Connects to the gateway (autosharded) and handles messages until
    /// `shutdown` is cancelled, then closes every shard and returns `Ok`.
    ///
    /// Serenity resumes dropped connections by itself. When the client
    /// stops with a non-fatal error (Discord unreachable at start, say), it
    /// is rebuilt after a capped, jittered backoff (the wait ends at
    /// shutdown). A fatal error (4014, 4004) is returned without a retry,
    /// for the caller to log; the rest of the process keeps running, and the
    /// caller decides what a stopped Discord adapter means.
    ///
    /// # Errors
    /// [`DiscordError::PrivilegedIntentDisabled`] (close code 4014: enable
    /// MESSAGE CONTENT INTENT in the developer portal) or
    /// [`DiscordError::InvalidToken`] (4004).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DiscordError> {
        let mut retries = RECONNECT.retries();
        loop {
            match self.run_once(&shutdown).await {
                Ok(()) => return Ok(()),
                Err(
                    err @ (DiscordError::PrivilegedIntentDisabled | DiscordError::InvalidToken),
                ) => return Err(err),
                Err(err) => {
                    let delay = retries.next_delay(None);
                    tracing::warn!(error = %err, backoff = ?delay, "Discord gateway failed; reconnecting");
                    if backoff::wait(delay, &shutdown).await == Wait::Cancelled {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One client lifetime: `Ok` only on shutdown.
    async fn run_once(&self, shutdown: &CancellationToken) -> Result<(), DiscordError> {
        let http = build_http(&self.token, self.api_proxy.as_deref());
        let events = Events {
            handler: self.handler.clone(),
        };
        let mut client = ClientBuilder::new_with_http(http, intents())
            .event_handler(events)
            .await
            .map_err(gateway_error)?;
        let shards = client.shard_manager.clone();
        tracing::info!("connecting to the Discord gateway");
        tokio::select! {
            result = client.start_autosharded() => match result {
                // Serenity returns Ok when its shards were shut down from
                // elsewhere; treat that like a failure so we reconnect.
                Ok(()) => Err(DiscordError::Gateway("the shards stopped".to_owned())),
                Err(err) => Err(gateway_error(err)),
            },
            () = shutdown.cancelled() => {
                shards.shutdown_all().await;
                tracing::info!("Discord gateway closed on shutdown");
                Ok(())
            }
        }
    }
}

/// Serenity's event handler: forwards to [`InboundHandler`].
struct Events {
    handler: InboundHandler,
}

#[serenity::async_trait]
impl EventHandler for Events {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        tracing::info!(
            bot_id = %ready.user.id,
            guilds = ready.guilds.len(),
            "connected to Discord"
        );
        self.handler.connected_as(ready.user.id);
    }

    async fn message(&self, _ctx: Context, msg: Message) {
        self.handler.on_message(&msg).await;
    }
}

fn gateway_error(err: serenity::Error) -> DiscordError {
    match err {
        serenity::Error::Gateway(GatewayError::DisallowedGatewayIntents) => {
            DiscordError::PrivilegedIntentDisabled
        }
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => DiscordError::InvalidToken,
        other => DiscordError::Gateway(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_code_4014_explains_how_to_enable_the_intent() {
        let err = gateway_error(serenity::Error::Gateway(
            GatewayError::DisallowedGatewayIntents,
        ));
        assert!(matches!(err, DiscordError::PrivilegedIntentDisabled));
        let text = err.to_string();
        assert!(text.contains("4014"));
        assert!(text.contains("MESSAGE CONTENT INTENT"));
        assert!(text.contains("developer"));
    }

    #[test]
    fn the_invite_permissions_match_the_readme() {
        assert_eq!(invite_permissions().bits(), 309_237_713_920);
    }

    #[test]
    fn the_message_content_intent_is_requested() {
        assert!(intents().contains(GatewayIntents::MESSAGE_CONTENT));
        assert!(intents().contains(GatewayIntents::GUILD_MESSAGES));
        assert!(intents().contains(GatewayIntents::DIRECT_MESSAGES));
    }
}
