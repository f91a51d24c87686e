//! Starting and supervising the platform adapters a deployment configures,
//! every one the same way, through the contract's [`Adapter`] trait:
//! [`registry`] turns the configured sections into adapters (the one place
//! that names them), and [`Platforms::start`] supervises each; [`status`]
//! keeps their states for `/readyz`, and [`lease`] runs a connection in one
//! instance at a time.
//!
//! This module is handed what it needs ([`Core`]: the session service as the
//! inbound sink, the runner that delivers replies, the status, the shutdown
//! token, and the store and instance name for leases); it knows nothing of
//! the gateway, the API or the CLI.
//!
//! Every adapter runs as a supervised task, so that one that cannot start
//! (the platform unreachable at boot, a transient error) comes up on its own
//! later:
//!
//! - an adapter whose configuration is wrong (a missing variable, an
//!   invalid setting) is not built, and stops for good (ERROR, `failed`);
//! - its webhook paths ([`Adapter::webhook_paths`]) are served at once:
//!   until it is up they answer 503 with `Retry-After`, and the platform
//!   delivers the event again later;
//! - [`Adapter::start`] (Telegram `getMe`, Discord `GET /users/@me`,
//!   Feishu's tenant token and bot info) is tried again after a capped
//!   backoff (1 s, doubling, at most a minute) until it succeeds, each
//!   failure logged at WARN, success at INFO; only a
//!   [`StartError::Configuration`] stops it for good (ERROR);
//! - once started, its sender is registered with the runner under its
//!   platform name, its router serves the webhook paths, and its
//!   [`Connection`], if any (Telegram long polling, the Discord gateway),
//!   runs, restarted with the same backoff when it fails; what the adapters
//!   retry by themselves is reported too (a failed Telegram `getUpdates`, a
//!   Discord gateway connection that ended): the adapter is `retrying`
//!   until a poll works again or the shard has a session again;
//! - a task that panics is logged at ERROR and started again;
//! - its state (starting, up, standby, retrying since …, failed, with the
//!   last error) is kept in [`PlatformStatus`] for `/readyz`.
//!
//! When several instances share the database (PostgreSQL), a connection
//! only one process may hold runs under its platform lease
//! ([`LeasedConnection`], named [`Connection::lease_name`]): one instance
//! connects, the others stand by and take over when it dies or stalls.
//! Senders are registered everywhere, so any instance delivers the replies
//! of the turns it runs; webhooks are served by every instance. On SQLite
//! there is one instance, and no lease: a restart after a crash reconnects
//! at once. When the platform says another process holds the connection
//! ([`ConnectionError::Conflict`], Telegram's 409), the lease decides first:
//! the connection waits up to half a TTL to be stopped, as when the lease
//! went to another instance while this one stalled. A single conflict is
//! logged at WARN and the connection starts again after the backoff (a
//! process that lost it may send one last request); conflicts in a row mean
//! another process keeps holding it, an ERROR.
//!
//! At shutdown [`Platforms::stop`] waits for the adapters up to the grace
//! period, then abandons (aborts) those still running, then lets each
//! finish the work it took on ([`Drain`]: Feishu's events still being
//! recorded).

pub mod lease;
pub mod registry;
pub mod status;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_contract::{
    Adapter, Connection, ConnectionError, Drain, Hookup, InboundSink, StartError, Started,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tower::ServiceExt;

pub use lease::{LeasedConnection, Leases};
pub use registry::Configured;
pub use status::{AdapterState, AdapterStatus, PlatformStatus};

use crate::session::runner::Runner;

/// Between attempts to start an adapter, or to restart its connection or
/// its panicked task: from 1 s, doubling, at most a minute.
const RESTART: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// A connection that ran this long before it failed is restarted from the
/// shortest backoff again.
const RESTART_RESET: Duration = Duration::from_secs(60);

/// What a webhook route answers in `Retry-After` while its adapter starts.
const WEBHOOK_RETRY_AFTER_SECS: &str = "5";

/// What the adapters are handed by the core.
pub struct Core {
    /// Where adapters hand what arrives (the session service).
    pub sink: Arc<dyn InboundSink>,
    /// Delivers replies through the senders registered with it.
    pub runner: Runner,
    pub status: PlatformStatus,
    /// Cancelled at shutdown.
    pub shutdown: CancellationToken,
    /// Leases for the connections one instance may hold, when the database
    /// is shared.
    pub leases: Option<Leases>,
}

/// The router an adapter serves its webhook paths with, once it is up.
type WebhookSlot = Arc<OnceLock<Router>>;
/// The work an adapter finishes at shutdown, once it is up.
type DrainSlot = Arc<OnceLock<Arc<dyn Drain>>>;

/// The running adapters.
pub struct Platforms {
    /// Webhook routes to serve beside the API.
    pub routes: Router,
    workers: Vec<(String, JoinHandle<()>)>,
    drains: Vec<DrainSlot>,
}

impl Platforms {
    /// Starts a supervised task for every configured adapter, and returns
    /// at once: adapters come up in the background (see the module docs).
    #[must_use]
    pub fn start(core: Core, adapters: Vec<Configured>) -> Self {
        let core = Arc::new(core);
        let mut platforms = Self {
            routes: Router::new(),
            workers: Vec::new(),
            drains: Vec::new(),
        };
        for Configured { platform, adapter } in adapters {
            core.status.starting(&platform);
            match adapter {
                Ok(adapter) => platforms.supervise(&core, platform, adapter),
                Err(err) => {
                    tracing::error!(adapter = %platform, error = %err, "the adapter cannot start; fix the configuration");
                    core.status.failed(&platform, &err);
                }
            }
        }
        platforms
    }

    /// Mounts `adapter`'s webhook paths and runs it as a supervised task.
    fn supervise(&mut self, core: &Arc<Core>, name: String, adapter: Arc<dyn Adapter>) {
        let webhook = WebhookSlot::default();
        for path in adapter.webhook_paths() {
            self.mount(&name, &path, &webhook);
        }
        let drain = DrainSlot::default();
        self.drains.push(Arc::clone(&drain));
        let task_core = Arc::clone(core);
        self.spawn_supervised(name, core, move || {
            run(
                Arc::clone(&task_core),
                Arc::clone(&adapter),
                Arc::clone(&webhook),
                Arc::clone(&drain),
            )
        });
    }

    /// Serves `path` with the router `adapter` puts in `slot` once it is up,
    /// and with 503 until then.
    fn mount(&mut self, adapter: &str, path: &str, slot: &WebhookSlot) {
        let (slot, adapter) = (Arc::clone(slot), Arc::<str>::from(adapter));
        let route = Router::new().route(
            path,
            any(move |request: Request| {
                let router = slot.get().cloned();
                let adapter = Arc::clone(&adapter);
                async move {
                    match router {
                        Some(router) => match router.oneshot(request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        },
                        None => not_up(&adapter),
                    }
                }
            }),
        );
        self.routes = std::mem::take(&mut self.routes).merge(route);
    }

    /// Runs `task()` as `name`'s supervised task: when it panics, it is
    /// logged, and a new `task()` starts after a backoff.
    fn spawn_supervised<F, Fut>(&mut self, name: String, core: &Core, mut task: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (status, shutdown) = (core.status.clone(), core.shutdown.clone());
        let adapter = name.clone();
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
                            %adapter,
                            retry_in_secs = delay.as_secs_f64(),
                            "the adapter's task panicked; restarting it"
                        );
                        status.retrying(&adapter, "the adapter's task panicked");
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
    /// still running; then lets each started adapter finish its work (each
    /// again up to `grace`: Feishu events still being recorded).
    pub async fn stop(self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        for (adapter, mut worker) in self.workers {
            match tokio::time::timeout_at(deadline, &mut worker).await {
                Ok(Ok(())) => tracing::debug!(%adapter, "stopped"),
                Ok(Err(err)) => tracing::error!(%adapter, error = %err, "worker failed"),
                Err(_) => {
                    tracing::warn!(
                        %adapter,
                        grace_secs = grace.as_secs_f64(),
                        "the adapter did not stop within the grace period; abandoned"
                    );
                    worker.abort();
                }
            }
        }
        for drain in self.drains {
            if let Some(drain) = drain.get() {
                drain.drain(grace).await;
            }
        }
    }
}

/// A webhook call while its adapter is not up yet: the platform delivers
/// it again later.
fn not_up(adapter: &str) -> Response {
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

/// One adapter's task: starts it, hands what it started to the core (the
/// sender to the runner, the router to its webhook paths, the work to
/// finish to [`Platforms::stop`]), then runs its connection, if any.
async fn run(core: Arc<Core>, adapter: Arc<dyn Adapter>, webhook: WebhookSlot, drain: DrainSlot) {
    let name = adapter.platform().to_string();
    let hookup = Hookup {
        sink: Arc::clone(&core.sink),
        observer: core.status.link(&name),
        shutdown: core.shutdown.clone(),
    };
    let Some(started) = start_up(&name, &core, || adapter.start(hookup.clone())).await else {
        return;
    };
    let Started {
        sender,
        webhook: router,
        connection,
        drain: work,
    } = started;
    core.runner.register_sender(&name, sender);
    // Already set when this task runs again after a panic.
    if let Some(router) = router {
        let _ = webhook.set(router);
    }
    if let Some(work) = work {
        let _ = drain.set(work);
    }
    match connection {
        None => {
            core.status.up(&name);
            tracing::info!(adapter = %name, "adapter up");
        }
        Some(connection) => hold(&name, &core, &*connection).await,
    }
}

/// Calls `attempt` until it succeeds (`Some`), and records and logs each
/// failure; `None` at shutdown, or after a [`StartError::Configuration`],
/// which no retry mends.
async fn start_up<Fut>(name: &str, core: &Core, mut attempt: impl FnMut() -> Fut) -> Option<Started>
where
    Fut: Future<Output = Result<Started, StartError>>,
{
    let mut retries = RESTART.retries();
    loop {
        let result = tokio::select! {
            biased;
            () = core.shutdown.cancelled() => return None,
            result = attempt() => result,
        };
        match result {
            Ok(started) => return Some(started),
            Err(err @ StartError::Configuration(_)) => {
                tracing::error!(adapter = name, error = %err, "the adapter cannot start; fix the configuration");
                core.status.failed(name, &err.to_string());
                return None;
            }
            Err(err @ StartError::Unavailable(_)) => {
                let (delay, err) = (retries.next_delay(None), err.to_string());
                let what = "the adapter could not start; trying again";
                if retry_later(core, name, &err, delay, what, &core.shutdown).await
                    == Wait::Cancelled
                {
                    return None;
                }
            }
        }
    }
}

/// Runs `connection` until shutdown: under its lease on a shared database
/// (standing by while another instance holds it), at once otherwise.
async fn hold(name: &str, core: &Core, connection: &dyn Connection) {
    match &core.leases {
        Some(leases) => {
            core.status.standby(name);
            leases
                .lease(connection.lease_name())
                .run(&core.shutdown, |stop| {
                    keep_connected(name, core, connection, stop, Some(leases.ttl))
                })
                .await;
        }
        None => keep_connected(name, core, connection, core.shutdown.clone(), None).await,
    }
}

/// Runs `connection` until `stop` (shutdown, or a lost lease), started
/// again after a capped backoff when it fails; a conflict is handled as the
/// module docs say. `lease_ttl`: the TTL of the lease it runs under.
async fn keep_connected(
    name: &str,
    core: &Core,
    connection: &dyn Connection,
    stop: CancellationToken,
    lease_ttl: Option<Duration>,
) {
    let mut retries = RESTART.retries();
    let mut conflicts_in_a_row = 0u32;
    loop {
        core.status.up(name);
        tracing::info!(adapter = name, "adapter up; connected");
        let started = tokio::time::Instant::now();
        let ran = connection.run(stop.clone()).await;
        if started.elapsed() > RESTART_RESET {
            retries.reset();
        }
        let err = match ran {
            Ok(()) => break,
            Err(err @ ConnectionError::Conflict(_)) => {
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
            Err(err @ ConnectionError::Failed(_)) => {
                conflicts_in_a_row = 0;
                err
            }
        };
        let (delay, err) = (retries.next_delay(None), err.to_string());
        let waited = if conflicts_in_a_row > 1 {
            tracing::error!(
                adapter = name,
                error = %err,
                conflicts_in_a_row,
                retry_in_secs = delay.as_secs_f64(),
                "the connection stopped: another process keeps holding it"
            );
            core.status.retrying(name, &err);
            backoff::wait(delay, &stop).await
        } else {
            let what = "the connection stopped; restarting it";
            retry_later(core, name, &err, delay, what, &stop).await
        };
        if waited == Wait::Cancelled {
            break;
        }
    }
    if lease_ttl.is_some() && !core.shutdown.is_cancelled() {
        core.status.standby(name);
    }
}

/// Logs `name`'s failed attempt (`what`, at WARN, with `err`) and records
/// it, then waits `delay` unless `until` is cancelled first.
async fn retry_later(
    core: &Core,
    name: &str,
    err: &str,
    delay: Duration,
    what: &str,
    until: &CancellationToken,
) -> Wait {
    tracing::warn!(
        adapter = name,
        error = err,
        retry_in_secs = delay.as_secs_f64(),
        "{what}"
    );
    core.status.retrying(name, err);
    backoff::wait(delay, until).await
}
