//! Starting the platform adapters a deployment configures (Telegram,
//! Discord, Feishu/Lark): each gets the session service as its inbound sink,
//! registers its sender with the runner, and contributes webhook routes or a
//! long-lived worker. An adapter that cannot start is reported and left out;
//! the others keep running.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use switchboard_contract::InboundSink;
use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_discord::DiscordAdapter;
use switchboard_feishu::FeishuAdapter;
use switchboard_telegram::{Mode, TelegramAdapter};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;

/// Between restarts of Telegram polling that failed to start: from 1 s,
/// doubling, at most a minute.
const POLLING_RESTART: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

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
                            platforms.spawn("telegram", async move {
                                // Polling that fails (Telegram unreachable,
                                // say) starts again after a capped backoff.
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
                Ok(DiscordAdapter { sender, gateway }) => {
                    runner.register_sender(switchboard_discord::PLATFORM, sender);
                    let stop = shutdown.clone();
                    platforms.spawn("discord", async move {
                        if let Err(err) = gateway.run(stop).await {
                            tracing::error!(error = %err, "discord gateway stopped");
                        }
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
