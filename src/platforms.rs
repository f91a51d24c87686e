//! Starting the platform adapters a deployment configures (Telegram,
//! Discord, Feishu/Lark): each gets the session service as its inbound sink,
//! registers its sender with the runner, and contributes webhook routes or a
//! long-lived worker. An adapter that cannot start is reported and left out;
//! the others keep running.
//!
//! When several instances share the database (PostgreSQL), the connections
//! only one process may hold, the Telegram long poll and the Discord gateway
//! connection, run under a platform lease ([`LeasedConnection`]): one
//! instance connects, the others stand by and take over when it dies or
//! stalls. Senders are registered everywhere, so any instance delivers the
//! replies of the turns it runs; webhooks (Feishu, Telegram in webhook mode)
//! are served by every instance. On SQLite there is one instance, and no
//! lease: a restart after a crash reconnects at once.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use switchboard_contract::InboundSink;
use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_discord::{DiscordAdapter, DiscordError, DiscordGateway};
use switchboard_feishu::FeishuAdapter;
use switchboard_telegram::{Mode, TelegramAdapter};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::platform_lease::LeasedConnection;

/// Between restarts of Telegram polling that failed to start: from 1 s,
/// doubling, at most a minute.
const POLLING_RESTART: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// Between attempts to learn the Discord bot's id before its connection
/// can be leased: from 1 s, doubling, at most a minute.
const DISCORD_IDENTITY_RETRY: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// The running adapters.
pub struct Platforms {
    /// Webhook routes to serve beside the API.
    pub routes: Router,
    workers: Vec<(&'static str, JoinHandle<()>)>,
    feishu: Option<FeishuAdapter>,
}

impl Platforms {
    /// Starts every configured adapter.
    pub async fn start(gateway: &Gateway, shutdown: &CancellationToken) -> Self {
        let settings = &gateway.settings;
        let runner = gateway.service.runner();
        let sink: Arc<dyn InboundSink> = Arc::clone(&gateway.service) as Arc<dyn InboundSink>;
        let mut platforms = Self {
            routes: Router::new(),
            workers: Vec::new(),
            feishu: None,
        };

        if let Some(telegram) = settings.telegram.clone() {
            match TelegramAdapter::connect(telegram, Arc::clone(&sink)).await {
                Ok(adapter) => {
                    runner.register_sender(switchboard_telegram::PLATFORM, adapter.sender());
                    match adapter.mode() {
                        Mode::Polling => {
                            let stop = shutdown.clone();
                            let name = format!("telegram:{}", adapter.account());
                            let lease = leases(gateway).map(|lease| lease(name));
                            platforms.spawn("telegram", async move {
                                let adapter = &adapter;
                                let poll = |stop| poll_telegram(adapter, stop);
                                match lease {
                                    Some(lease) => lease.run(&stop, poll).await,
                                    None => poll(stop).await,
                                }
                            });
                        }
                        Mode::Webhook => {
                            platforms.routes = std::mem::take(&mut platforms.routes)
                                .merge(adapter.webhook_router());
                        }
                    }
                    tracing::info!("telegram adapter started");
                }
                Err(err) => tracing::error!(error = %err, "telegram adapter not started"),
            }
        }

        if let Some(discord) = settings.discord.clone() {
            match DiscordAdapter::from_settings(&discord, Arc::clone(&sink)) {
                Ok(DiscordAdapter {
                    sender,
                    gateway: connection,
                }) => {
                    runner.register_sender(switchboard_discord::PLATFORM, sender);
                    let stop = shutdown.clone();
                    let leases = leases(gateway);
                    platforms.spawn("discord", async move {
                        let connection = &connection;
                        let run = |stop| run_discord(connection, stop);
                        let Some(lease) = leases else {
                            return run(stop).await;
                        };
                        // Named by the bot's id, which takes a REST call.
                        let Some(account) = discord_account(connection, &stop).await else {
                            return;
                        };
                        lease(format!("discord:{account}")).run(&stop, run).await;
                    });
                    tracing::info!("discord adapter started");
                }
                Err(err) => tracing::error!(error = %err, "discord adapter not started"),
            }
        }

        if let Some(feishu) = settings.feishu.clone() {
            match FeishuAdapter::connect(feishu, Arc::clone(&sink)).await {
                Ok(adapter) => {
                    runner.register_sender(switchboard_feishu::PLATFORM, adapter.sender());
                    platforms.routes =
                        std::mem::take(&mut platforms.routes).merge(adapter.router());
                    platforms.feishu = Some(adapter);
                    tracing::info!("feishu adapter started");
                }
                Err(err) => tracing::error!(error = %err, "feishu adapter not started"),
            }
        }
        platforms
    }

    fn spawn(&mut self, name: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        self.workers.push((name, tokio::spawn(work)));
    }

    /// Waits (up to `grace`) for the adapters' workers after shutdown was
    /// signalled, and for Feishu events still being recorded.
    pub async fn stop(self, grace: Duration) {
        for (name, worker) in self.workers {
            match tokio::time::timeout(grace, worker).await {
                Ok(Ok(())) => tracing::debug!(adapter = name, "stopped"),
                Ok(Err(err)) => tracing::error!(adapter = name, error = %err, "worker failed"),
                Err(_) => tracing::warn!(adapter = name, "worker did not stop in time"),
            }
        }
        if let Some(feishu) = self.feishu {
            let drained = feishu.drain(grace).await;
            tracing::debug!(?drained, "feishu events drained");
        }
    }
}

/// Leases a connection only one instance may hold, by name, when several
/// instances may share the database; `None` on SQLite, where there is one
/// instance (and a restart after a crash should not wait out a lease).
fn leases(gateway: &Gateway) -> Option<impl FnOnce(String) -> LeasedConnection + Send + 'static> {
    let store = gateway.store.clone();
    let owner = gateway.instance_id.clone();
    let ttl = Duration::from_secs(gateway.settings.runner.lease_ttl_secs.max(1));
    gateway
        .store
        .is_shared()
        .then_some(move |name| LeasedConnection::new(store, name, owner, ttl))
}

/// Telegram long polling until `stop`. Polling that fails (Telegram
/// unreachable, say) starts again after a capped backoff.
async fn poll_telegram(adapter: &TelegramAdapter, stop: CancellationToken) {
    let mut retries = POLLING_RESTART.retries();
    loop {
        let Err(err) = adapter.run_polling(stop.clone()).await else {
            return;
        };
        let delay = retries.next_delay(None);
        tracing::error!(
            error = %err,
            retry_in_secs = delay.as_secs_f64(),
            "telegram polling failed"
        );
        if backoff::wait(delay, &stop).await == Wait::Cancelled {
            return;
        }
    }
}

/// The Discord gateway connection until `stop`, or until it fails for good
/// (a rejected token, a privileged intent not enabled).
async fn run_discord(connection: &DiscordGateway, stop: CancellationToken) {
    if let Err(err) = connection.clone().run(stop).await {
        tracing::error!(error = %err, "discord gateway stopped");
    }
}

/// The Discord bot's account id, asked of Discord until it answers; `None`
/// at shutdown or when the token is rejected.
async fn discord_account(connection: &DiscordGateway, stop: &CancellationToken) -> Option<String> {
    let mut retries = DISCORD_IDENTITY_RETRY.retries();
    loop {
        let asked = tokio::select! {
            biased;
            () = stop.cancelled() => return None,
            asked = connection.account() => asked,
        };
        match asked {
            Ok(account) => return Some(account.to_string()),
            Err(err @ DiscordError::InvalidToken) => {
                tracing::error!(error = %err, "discord gateway not started");
                return None;
            }
            Err(err) => {
                let delay = retries.next_delay(None);
                tracing::warn!(
                    error = %err,
                    retry_in_secs = delay.as_secs_f64(),
                    "could not ask Discord which bot this is"
                );
                if backoff::wait(delay, stop).await == Wait::Cancelled {
                    return None;
                }
            }
        }
    }
}
