//! The gateway connection: [`DiscordGateway`] asks Discord for the gateway
//! URL and shard count, runs one [`GatewayShard`] per shard until shutdown, and
//! stops them within [`SHUTDOWN_DEADLINE`].
//!
//! The websocket protocol (HELLO, IDENTIFY, heartbeats, RESUME) is
//! `twilight-gateway`'s, run per shard by [`crate::session`]; serenity is
//! used for its REST client and models only. Serenity's own gateway client
//! is not used: it spins a core on a close frame without a status code, and
//! its shutdown then never returns.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use secrecy::SecretString;
use serenity::http::HttpError;
use serenity::model::gateway::{GatewayIntents, SessionStartLimit};
use serenity::model::permissions::Permissions;
use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_contract::{AccountId, LinkObserver};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use twilight_gateway::queue::InMemoryQueue;

use crate::error::DiscordError;
use crate::inbound::InboundHandler;
use crate::normalise::account_id;
use crate::rest::Rest;
use crate::session::{GatewayShard, ShardConfig};

/// The intents the adapter asks for. MESSAGE_CONTENT is privileged: it must
/// be enabled in the developer portal, or the gateway closes with 4014.
#[must_use]
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
}

/// Between attempts to learn the gateway URL: from 1 s, doubling, at most a
/// minute.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long stopping may take once shutdown is signalled; a shard still
/// running then is aborted.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(3);

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
    rest: Rest,
    handler: InboundHandler,
    /// Told when a shard's connection ends and when every shard has a
    /// session again.
    link: Option<Arc<dyn LinkObserver>>,
}

impl std::fmt::Debug for DiscordGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordGateway")
            .field("rest", &self.rest)
            .field("handler", &self.handler)
            .finish_non_exhaustive()
    }
}

impl DiscordGateway {
    pub(crate) fn new(token: SecretString, rest: Rest, handler: InboundHandler) -> Self {
        Self {
            token,
            rest,
            handler,
            link: None,
        }
    }

    /// Tells `observer` when a shard's connection ends (it reconnects by
    /// itself) and when every shard has a session again (READY or
    /// RESUMED).
    #[must_use]
    pub fn with_link_observer(mut self, observer: Arc<dyn LinkObserver>) -> Self {
        self.link = Some(observer);
        self
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
        current_user(&self.rest).await
    }

    /// Connects to the gateway (as many shards as Discord recommends) and
    /// handles messages until `shutdown` is cancelled, then closes every
    /// shard and returns `Ok` within [`SHUTDOWN_DEADLINE`].
    ///
    /// A dropped connection is resumed, and when Discord refuses the RESUME
    /// a new session is identified and the messages missed in the active
    /// channels are fetched ([`InboundHandler::catch_up`]). While Discord is
    /// unreachable, connecting is retried after a capped, jittered backoff.
    /// A fatal close code (4014, 4004, 4010–4013) is returned without a
    /// retry, for the caller to log.
    ///
    /// # Errors
    /// [`DiscordError::PrivilegedIntentDisabled`] (close code 4014: enable
    /// MESSAGE CONTENT INTENT in the developer portal),
    /// [`DiscordError::InvalidToken`] (4004 or a 401), or
    /// [`DiscordError::Gateway`] for another fatal close code.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DiscordError> {
        let Some(gateway) = self.bot_gateway(&shutdown).await? else {
            return Ok(());
        };
        let count = gateway.shards.max(1);
        let queue = identify_queue(&gateway.session_start_limit);
        tracing::info!(shards = count, "connecting to the Discord gateway");
        let stop = shutdown.child_token();
        let links = self
            .link
            .clone()
            .map(|observer| Arc::new(ShardLinks::new(observer)));
        let mut shards = JoinSet::new();
        for id in 0..count {
            let shard = GatewayShard::new(
                ShardConfig {
                    token: self.token.clone(),
                    url: gateway.url.clone(),
                    intents: intents().bits(),
                    shard: [id, count],
                    queue: queue.clone(),
                },
                self.handler.clone(),
            )?
            .with_links(links.clone());
            shards.spawn(shard.run(stop.clone()));
        }
        let result = loop {
            tokio::select! {
                () = shutdown.cancelled() => break Ok(()),
                joined = shards.join_next() => match joined {
                    None => break Ok(()),
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(err))) => break Err(err),
                    Some(Err(err)) => {
                        break Err(DiscordError::Gateway(format!("a gateway shard failed: {err}")));
                    }
                },
            }
        };
        stop.cancel();
        let drained = tokio::time::timeout(SHUTDOWN_DEADLINE, async {
            while shards.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                deadline = ?SHUTDOWN_DEADLINE,
                "a Discord gateway shard did not stop in time; aborted"
            );
            shards.abort_all();
        }
        if result.is_ok() {
            tracing::info!("Discord gateway closed on shutdown");
        }
        result
    }

    /// `GET /gateway/bot`, retried until Discord answers; `None` on
    /// shutdown.
    async fn bot_gateway(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<serenity::model::gateway::BotGateway>, DiscordError> {
        let mut retries = RETRY.retries();
        loop {
            let asked = tokio::select! {
                () = shutdown.cancelled() => return Ok(None),
                asked = self.rest.http().get_bot_gateway() => asked,
            };
            match asked {
                Ok(gateway) => return Ok(Some(gateway)),
                Err(err) if rejected(&err) == Some(401) => {
                    return Err(DiscordError::InvalidToken);
                }
                Err(err) => {
                    let delay = retries.next_delay(None);
                    tracing::warn!(error = %err, backoff = ?delay, "could not ask Discord for the gateway URL");
                    if backoff::wait(delay, shutdown).await == Wait::Cancelled {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// Which bot `rest`'s token belongs to (`GET /users/@me`); see
/// [`DiscordGateway::account`].
pub(crate) async fn current_user(rest: &Rest) -> Result<AccountId, DiscordError> {
    let user = rest
        .http()
        .get_current_user()
        .await
        .map_err(|err| match rejected(&err) {
            Some(401) => DiscordError::InvalidToken,
            Some(status) => DiscordError::Identity(format!("Discord answered HTTP {status}")),
            None => DiscordError::Identity(err.to_string()),
        })?;
    account_id(user.id).map_err(|err| DiscordError::Identity(err.to_string()))
}

/// The identify queue all shards share: Discord's session start limit, and
/// IDENTIFYs of shards in the same bucket 5 s apart.
fn identify_queue(limit: &SessionStartLimit) -> InMemoryQueue {
    let total = u32::try_from(limit.total).unwrap_or(u32::MAX);
    InMemoryQueue::new(
        u16::try_from(limit.max_concurrency.max(1)).unwrap_or(u16::MAX),
        // The queue insists on remaining <= total.
        u32::try_from(limit.remaining)
            .unwrap_or(u32::MAX)
            .min(total),
        Duration::from_millis(limit.reset_after),
        total,
    )
}

/// The HTTP status of a request Discord answered with an error.
fn rejected(err: &serenity::Error) -> Option<u16> {
    match err {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            Some(response.status_code.as_u16())
        }
        _ => None,
    }
}

/// The shards' connection reports, combined into one for the adapter: down
/// when any shard's connection ends, up once every shard that went down has
/// a session again.
pub(crate) struct ShardLinks {
    observer: Arc<dyn LinkObserver>,
    /// The shards (by number) without a session since their connection
    /// ended.
    down: Mutex<BTreeSet<u32>>,
}

impl ShardLinks {
    fn new(observer: Arc<dyn LinkObserver>) -> Self {
        Self {
            observer,
            down: Mutex::new(BTreeSet::new()),
        }
    }

    /// Shard `shard`'s connection ended with `reason`.
    pub(crate) fn down(&self, shard: u32, reason: &str) {
        self.lock().insert(shard);
        self.observer.down(&format!(
            "gateway connection of shard {shard} ended: {reason}"
        ));
    }

    /// Shard `shard` has a session (READY or RESUMED).
    pub(crate) fn up(&self, shard: u32) {
        let mut down = self.lock();
        if down.remove(&shard) && down.is_empty() {
            drop(down);
            self.observer.up();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
