//! Starting and supervising the platform adapters a deployment configures
//! (Telegram, Discord, Feishu/Lark): each gets the session service as its
//! inbound sink, registers its sender with the runner, and contributes
//! webhook routes or a long-lived worker.
//!
//! Every adapter runs as a supervised task, so that one that cannot start
//! (the platform unreachable at boot, a transient error) comes up on its own
//! later:
//!
//! - its start-up call (Telegram `getMe`, Discord `GET /users/@me`, Feishu's
//!   tenant token and bot info) is tried again after a capped backoff (1 s,
//!   doubling, at most a minute) until it succeeds, each failure logged at
//!   WARN, success at INFO; only a configuration error (a missing variable,
//!   an invalid setting) stops it for good (ERROR);
//! - once up, a connection that fails (Telegram polling, the Discord
//!   gateway) is restarted with the same backoff; what the adapters retry
//!   by themselves is reported too (a failed Telegram `getUpdates`, a
//!   Discord gateway connection that ended): the adapter is `retrying`
//!   until a poll works again or the shard has a session again;
//! - a task that panics is logged at ERROR and started again;
//! - its state (starting, up, standby, retrying since …, failed, with the
//!   last error) is kept in [`PlatformStatus`] for `/readyz`.
//!
//! Webhook routes (Feishu, Telegram in webhook mode) are served from the
//! start: until their adapter is up they answer 503 with `Retry-After`, and
//! the platform delivers the event again later.
//!
//! When several instances share the database (PostgreSQL), the connections
//! only one process may hold, the Telegram long poll and the Discord gateway
//! connection, run under a platform lease ([`LeasedConnection`]): one
//! instance connects, the others stand by and take over when it dies or
//! stalls. Senders are registered everywhere, so any instance delivers the
//! replies of the turns it runs; webhooks are served by every instance. On
//! SQLite there is one instance, and no lease: a restart after a crash
//! reconnects at once.
//!
//! At shutdown [`Platforms::stop`] waits for the adapters up to the grace
//! period, then abandons (aborts) those still running.

use std::fmt::Display;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use switchboard_contract::InboundSink;
use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_discord::{DiscordAdapter, DiscordGateway};
use switchboard_feishu::{EventTasks, FeishuAdapter, FeishuSettings};
use switchboard_telegram::{Mode, TelegramAdapter, TelegramError, TelegramSettings};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tower::ServiceExt;

use crate::gateway::Gateway;
use crate::platform_lease::LeasedConnection;
use crate::platform_status::PlatformStatus;
use crate::session::runner::Runner;

/// Between attempts to start an adapter, or to restart its connection or
/// its panicked task: from 1 s, doubling, at most a minute.
const RESTART: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// A connection that ran this long before it failed is restarted from the
/// shortest backoff again.
const RESTART_RESET: Duration = Duration::from_secs(60);

/// What a webhook route answers in `Retry-After` while its adapter starts.
const WEBHOOK_RETRY_AFTER_SECS: &str = "5";

/// The running adapters.
pub struct Platforms {
    /// Webhook routes to serve beside the API.
    pub routes: Router,
    workers: Vec<(&'static str, JoinHandle<()>)>,
    /// Feishu's event hand-off tasks, once it is up (drained at stop).
    feishu_tasks: Arc<OnceLock<Arc<EventTasks>>>,
}

/// What every adapter's task needs from the gateway.
#[derive(Clone)]
struct Context {
    sink: Arc<dyn InboundSink>,
    runner: Runner,
    status: PlatformStatus,
    shutdown: CancellationToken,
    /// Leases for the connections one instance may hold (shared database).
    leases: Option<Leases>,
}

/// Makes [`LeasedConnection`]s on a shared database.
#[derive(Clone)]
struct Leases {
    store: crate::store::Store,
    owner: String,
    ttl: Duration,
}

impl Leases {
    fn lease(&self, name: String) -> LeasedConnection {
        LeasedConnection::new(self.store.clone(), name, self.owner.clone(), self.ttl)
    }
}

impl Platforms {
    /// Starts a supervised task for every configured adapter, and returns
    /// at once: adapters come up in the background (see the module docs).
    pub async fn start(gateway: &Gateway, shutdown: &CancellationToken) -> Self {
        let settings = &gateway.settings;
        let context = Context {
            sink: Arc::clone(&gateway.service) as Arc<dyn InboundSink>,
            runner: gateway.service.runner().clone(),
            status: gateway.platform_status.clone(),
            shutdown: shutdown.clone(),
            leases: gateway.store.is_shared().then(|| Leases {
                store: gateway.store.clone(),
                owner: gateway.instance_id.clone(),
                ttl: gateway.settings.runner.lease_ttl,
            }),
        };
        let mut platforms = Self {
            routes: Router::new(),
            workers: Vec::new(),
            feishu_tasks: Arc::new(OnceLock::new()),
        };

        if let Some(telegram) = settings.telegram.clone() {
            context.status.starting("telegram");
            let webhook = Arc::new(OnceLock::new());
            if telegram.mode == Mode::Webhook {
                platforms.mount("telegram", &telegram.webhook_path, &webhook);
            }
            let context = context.clone();
            platforms.supervise("telegram", &context.clone(), move || {
                run_telegram(context.clone(), telegram.clone(), Arc::clone(&webhook))
            });
        }

        if let Some(discord) = settings.discord.clone() {
            context.status.starting("discord");
            // Builds without a network call: what fails here is the
            // configuration, which no retry mends.
            match DiscordAdapter::from_settings(&discord, Arc::clone(&context.sink)) {
                Ok(DiscordAdapter {
                    sender,
                    gateway: connection,
                }) => {
                    let connection = connection.with_link_observer(context.status.link("discord"));
                    context
                        .runner
                        .register_sender(switchboard_discord::PLATFORM, sender);
                    let context = context.clone();
                    platforms.supervise("discord", &context.clone(), move || {
                        run_discord(context.clone(), connection.clone())
                    });
                }
                Err(err) => {
                    tracing::error!(error = %err, "discord adapter cannot start; fix the configuration");
                    context.status.failed("discord", &err.to_string());
                }
            }
        }

        if let Some(feishu) = settings.feishu.clone() {
            context.status.starting("feishu");
            let webhook = Arc::new(OnceLock::new());
            platforms.mount("feishu", &feishu.webhook_path, &webhook);
            let tasks = Arc::clone(&platforms.feishu_tasks);
            let context = context.clone();
            platforms.supervise("feishu", &context.clone(), move || {
                run_feishu(
                    context.clone(),
                    feishu.clone(),
                    Arc::clone(&webhook),
                    Arc::clone(&tasks),
                )
            });
        }
        platforms
    }

    /// Serves `path` with the router `adapter` puts in `slot` once it is up,
    /// and with 503 until then.
    fn mount(&mut self, adapter: &'static str, path: &str, slot: &Arc<OnceLock<Router>>) {
        let slot = Arc::clone(slot);
        let route = Router::new().route(
            path,
            any(move |request: Request| {
                let router = slot.get().cloned();
                async move {
                    match router {
                        Some(router) => match router.oneshot(request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        },
                        None => not_up(adapter),
                    }
                }
            }),
        );
        self.routes = std::mem::take(&mut self.routes).merge(route);
    }

    /// Runs `task()` as `name`'s supervised task: when it panics, it is
    /// logged, and a new `task()` starts after a backoff.
    fn supervise<F, Fut>(&mut self, name: &'static str, context: &Context, mut task: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (status, shutdown) = (context.status.clone(), context.shutdown.clone());
        let supervisor = async move {
            let mut retries = RESTART.retries();
            loop {
                // Aborted with the supervisor (at the end of the grace period).
                let run = AbortOnDropHandle::new(tokio::spawn(task()));
                match run.await {
                    Ok(()) => return,
                    Err(err) if err.is_panic() => {
                        let delay = retries.next_delay(None);
                        tracing::error!(
                            adapter = name,
                            retry_in_secs = delay.as_secs_f64(),
                            "the adapter's task panicked; restarting it"
                        );
                        status.retrying(name, "the adapter's task panicked");
                        if backoff::wait(delay, &shutdown).await == Wait::Cancelled {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        };
        self.workers.push((name, tokio::spawn(supervisor)));
    }

    /// Waits for the adapters' tasks after shutdown was signalled, for the
    /// grace period at most (for all of them together), then aborts those
    /// still running; then waits (again up to `grace`) for Feishu events
    /// still being recorded.
    pub async fn stop(self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        for (name, mut worker) in self.workers {
            match tokio::time::timeout_at(deadline, &mut worker).await {
                Ok(Ok(())) => tracing::debug!(adapter = name, "stopped"),
                Ok(Err(err)) => tracing::error!(adapter = name, error = %err, "worker failed"),
                Err(_) => {
                    tracing::warn!(
                        adapter = name,
                        grace_secs = grace.as_secs_f64(),
                        "the adapter did not stop within the grace period; abandoned"
                    );
                    worker.abort();
                }
            }
        }
        if let Some(tasks) = self.feishu_tasks.get() {
            let drained = tasks.drain(grace).await;
            tracing::debug!(?drained, "feishu events drained");
        }
    }
}

/// A webhook call while its adapter is not up yet: the platform delivers
/// it again later.
fn not_up(adapter: &'static str) -> Response {
    tracing::debug!(
        adapter,
        "webhook call before the adapter is up; answered 503"
    );
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, WEBHOOK_RETRY_AFTER_SECS)],
        format!("the {adapter} adapter is starting"),
    )
        .into_response()
}

/// Calls `attempt` until it succeeds (`Some`), and records and logs each
/// failure; `None` at shutdown, or after an error `permanent` says no retry
/// can mend.
async fn start_up<T, E, Fut>(
    name: &'static str,
    context: &Context,
    mut attempt: impl FnMut() -> Fut,
    permanent: impl Fn(&E) -> bool,
) -> Option<T>
where
    E: Display,
    Fut: Future<Output = Result<T, E>>,
{
    let mut retries = RESTART.retries();
    loop {
        let result = tokio::select! {
            biased;
            () = context.shutdown.cancelled() => return None,
            result = attempt() => result,
        };
        match result {
            Ok(started) => return Some(started),
            Err(err) if permanent(&err) => {
                tracing::error!(adapter = name, error = %err, "the adapter cannot start; fix the configuration");
                context.status.failed(name, &err.to_string());
                return None;
            }
            Err(err) => {
                let delay = retries.next_delay(None);
                tracing::warn!(
                    adapter = name,
                    error = %err,
                    retry_in_secs = delay.as_secs_f64(),
                    "the adapter could not start; trying again"
                );
                context.status.retrying(name, &err.to_string());
                if backoff::wait(delay, &context.shutdown).await == Wait::Cancelled {
                    return None;
                }
            }
        }
    }
}

/// Telegram: connects (`getMe`, and `setWebhook` when configured), then
/// serves the webhook or polls (under the lease on a shared database).
async fn run_telegram(
    context: Context,
    settings: TelegramSettings,
    webhook: Arc<OnceLock<Router>>,
) {
    let connect = || TelegramAdapter::connect(settings.clone(), Arc::clone(&context.sink));
    let Some(adapter) = start_up(
        "telegram",
        &context,
        connect,
        TelegramError::is_configuration,
    )
    .await
    else {
        return;
    };
    let adapter = adapter.with_link_observer(context.status.link("telegram"));
    context
        .runner
        .register_sender(switchboard_telegram::PLATFORM, adapter.sender());
    match adapter.mode() {
        Mode::Webhook => {
            // Already set when this task runs again after a panic.
            let _ = webhook.set(adapter.webhook_router());
            context.status.up("telegram");
            tracing::info!("telegram adapter up (webhook)");
        }
        Mode::Polling => {
            let shutdown = context.shutdown.clone();
            match &context.leases {
                Some(leases) => {
                    let lease = leases.lease(format!("telegram:{}", adapter.account()));
                    context.status.standby("telegram");
                    let ttl = leases.ttl;
                    lease
                        .run(&shutdown, |stop| {
                            poll_telegram(&adapter, &context, stop, Some(ttl))
                        })
                        .await;
                }
                None => poll_telegram(&adapter, &context, shutdown.clone(), None).await,
            }
        }
    }
}

/// Telegram long polling until `stop` (shutdown, or a lost lease). Polling
/// that fails is started again after a capped backoff.
///
/// When Telegram says another process polls the bot (409 Conflict): under a
/// lease, the lease decides first (this poller waits up to half a TTL to be
/// stopped, as when the lease went to another instance while this one
/// stalled). A single conflict is logged at WARN and polling starts again
/// after the backoff (a process that lost the bot may send one last poll);
/// conflicts in a row mean another process keeps polling the bot, an ERROR.
async fn poll_telegram(
    adapter: &TelegramAdapter,
    context: &Context,
    stop: CancellationToken,
    lease_ttl: Option<Duration>,
) {
    let mut retries = RESTART.retries();
    let mut conflicts_in_a_row = 0u32;
    loop {
        context.status.up("telegram");
        tracing::info!("telegram adapter up (long polling)");
        let started = tokio::time::Instant::now();
        let polled = adapter
            .run_polling_until(stop.clone(), context.shutdown.clone())
            .await;
        if started.elapsed() > RESTART_RESET {
            retries.reset();
        }
        let err = match polled {
            Ok(()) => break,
            Err(err @ TelegramError::PollingConflict) => {
                if let Some(ttl) = lease_ttl
                    && tokio::time::timeout(ttl / 2, stop.cancelled())
                        .await
                        .is_ok()
                {
                    break;
                }
                conflicts_in_a_row += 1;
                err
            }
            Err(err) => {
                conflicts_in_a_row = 0;
                err
            }
        };
        let delay = retries.next_delay(None);
        if conflicts_in_a_row > 1 {
            tracing::error!(
                error = %err,
                conflicts_in_a_row,
                retry_in_secs = delay.as_secs_f64(),
                "telegram polling stopped: another process keeps polling this bot"
            );
        } else {
            tracing::warn!(
                error = %err,
                retry_in_secs = delay.as_secs_f64(),
                "telegram polling stopped; restarting it"
            );
        }
        context.status.retrying("telegram", &err.to_string());
        if backoff::wait(delay, &stop).await == Wait::Cancelled {
            break;
        }
    }
    if !context.shutdown.is_cancelled() && lease_ttl.is_some() {
        context.status.standby("telegram");
    }
}

/// Discord: asks which bot this is (`GET /users/@me`) until Discord
/// answers, then runs the gateway connection (under the lease on a shared
/// database), started again when it stops with an error.
async fn run_discord(context: Context, connection: DiscordGateway) {
    let account = || connection.account();
    let Some(account) = start_up("discord", &context, account, |_| false).await else {
        return;
    };
    let shutdown = context.shutdown.clone();
    match &context.leases {
        Some(leases) => {
            context.status.standby("discord");
            leases
                .lease(format!("discord:{account}"))
                .run(&shutdown, |stop| {
                    run_discord_gateway(&connection, &context, stop, true)
                })
                .await;
        }
        None => run_discord_gateway(&connection, &context, shutdown.clone(), false).await,
    }
}

/// The Discord gateway connection until `stop`. It reconnects by itself
/// after most failures; one it gives up on (a rejected token, a privileged
/// intent not enabled, which the operator may fix in the developer portal)
/// is started again after a capped backoff.
async fn run_discord_gateway(
    connection: &DiscordGateway,
    context: &Context,
    stop: CancellationToken,
    leased: bool,
) {
    let mut retries = RESTART.retries();
    loop {
        context.status.up("discord");
        tracing::info!("discord adapter up");
        let started = tokio::time::Instant::now();
        let Err(err) = connection.clone().run(stop.clone()).await else {
            break;
        };
        if started.elapsed() > RESTART_RESET {
            retries.reset();
        }
        let delay = retries.next_delay(None);
        tracing::warn!(
            error = %err,
            retry_in_secs = delay.as_secs_f64(),
            "the Discord gateway stopped; restarting it"
        );
        context.status.retrying("discord", &err.to_string());
        if backoff::wait(delay, &stop).await == Wait::Cancelled {
            break;
        }
    }
    if leased && !context.shutdown.is_cancelled() {
        context.status.standby("discord");
    }
}

/// Feishu: fetches a tenant token and the bot's identity until Feishu
/// answers, then serves the webhook.
async fn run_feishu(
    context: Context,
    settings: FeishuSettings,
    webhook: Arc<OnceLock<Router>>,
    tasks: Arc<OnceLock<Arc<EventTasks>>>,
) {
    let connect = || FeishuAdapter::connect(settings.clone(), Arc::clone(&context.sink));
    let configuration = |err: &switchboard_feishu::StartError| {
        !matches!(err, switchboard_feishu::StartError::BotInfo(_))
    };
    let Some(adapter) = start_up("feishu", &context, connect, configuration).await else {
        return;
    };
    context
        .runner
        .register_sender(switchboard_feishu::PLATFORM, adapter.sender());
    // Already set when this task runs again after a panic.
    let _ = tasks.set(adapter.tasks());
    let _ = webhook.set(adapter.router());
    context.status.up("feishu");
    tracing::info!("feishu adapter up");
}
