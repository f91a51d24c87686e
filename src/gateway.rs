//! Wiring: builds the store, the tool registry (starting the MCP servers),
//! the agent cache, the runner and the session service from the settings,
//! and owns the process-wide resources (the HTTP client, the shutdown token).

use crate::metrics::Metrics;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::cache::{AgentCache, ProviderFactory};
use crate::config::Settings;
use crate::domain::Clock;
use crate::llm::build_provider;
use crate::media::Media;
use crate::media::cleanup::MediaHousekeeping;
use crate::platforms::PlatformStatus;
use crate::session::runner::Runner;
use crate::session::scheduler::Scheduler;
use crate::session::service::SessionService;
use crate::session::turn::TurnExecutor;
use crate::store::{Instance, Store, StoreError};
use crate::tools::ToolRegistry;
use crate::tools::approval::ApprovalPolicy;
use crate::tools::builtin::{BuiltIn, BuiltInContext};
use crate::tools::mcp::McpRegistry;
use crate::tools::tasks::{TaskTools, TaskWake};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("could not build the HTTP client: {0}")]
    Http(String),
    #[error("could not open the blob store: {0}")]
    Media(String),
    #[error("unknown tool `{0}` in agent.tools")]
    UnknownTool(String),
}

/// The running core, shared by the API, the terminal and the adapters.
pub struct Gateway {
    pub settings: Settings,
    /// Every tool offered (the built-ins and the MCP servers').
    pub tools: Arc<ToolRegistry>,
    pub store: Store,
    pub cache: Arc<AgentCache>,
    pub service: Arc<SessionService>,
    pub shutdown: CancellationToken,
    /// Names this process in lease and claim rows.
    pub instance_id: String,
    /// Cancelled `server.shutdown_grace_secs` after draining starts.
    pub drain_deadline: CancellationToken,
    /// The platform adapters' states: written by their supervisor
    /// ([`crate::platforms`]), shown by `/readyz`.
    pub platform_status: PlatformStatus,
    /// Files sent to the bot, and the blob store they are kept in.
    pub media: Arc<Media>,
    /// The clock task runs and approval expiries are timed by.
    pub clock: Clock,
    /// Wakes the scheduler when a task is made, resumed or run by hand.
    pub task_wake: Arc<TaskWake>,
}

impl Gateway {
    /// Builds the gateway with HTTP model providers.
    ///
    /// # Errors
    /// The database cannot be opened or migrated, or a setting names an
    /// unknown tool.
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|err| StartError::Http(err.without_url().to_string()))?;
        let factory: ProviderFactory =
            Arc::new(move |endpoint| build_provider(endpoint.clone(), http.clone()));
        Self::build_with(settings, factory).await
    }

    /// Builds the gateway with a given provider factory (the benchmark's
    /// in-process model).
    ///
    /// # Errors
    /// As [`Gateway::build`].
    pub async fn build_with(
        settings: Settings,
        factory: ProviderFactory,
    ) -> Result<Self, StartError> {
        let store = Store::connect(&settings.database.options())
            .await?
            .with_instance(Instance {
                id: instance_id(&settings),
                lease_ttl: settings.runner.lease_ttl,
            });
        let shutdown = CancellationToken::new();
        let clock = Clock::system();
        let task_wake = Arc::new(TaskWake::default());
        let task_tools = TaskTools {
            store: store.clone(),
            clock: clock.clone(),
            settings: settings.tasks.clone(),
            wake: Arc::clone(&task_wake),
        };
        let registry = Arc::new(build_registry(&settings, &task_tools, &shutdown).await?);
        let cache = Arc::new(AgentCache::new(
            settings.llm.endpoint(),
            factory,
            settings.agent_cache.max_capacity,
            settings.agent_cache.idle_ttl,
        ));
        let instance_id = store.instance().id.clone();
        let blobs = crate::media::blobs::open(&settings.media)
            .map_err(|err| StartError::Media(err.to_string()))?;
        let media = Arc::new(
            Media::new(blobs, &settings.media)
                .map_err(|err| StartError::Http(err.without_url().to_string()))?,
        );
        let turns = TurnExecutor {
            store: store.clone(),
            cache: Arc::clone(&cache),
            registry: Arc::clone(&registry),
            agent: settings.agent.clone(),
            limits: settings.limits.clone(),
            context: settings.context.clone(),
            memory: settings.memory.clone(),
            max_tokens: settings.llm.max_tokens,
            prices: Arc::new(settings.prices.clone()),
            media: Arc::clone(&media),
            metrics: Metrics::default(),
            cache_watch: crate::agent::cache_watch::CacheWatch::default(),
            tasks: settings.tasks.clone(),
            task_wake: Arc::clone(&task_wake),
            admins: settings.access.admins.clone(),
        };
        let runner = Runner::new(
            store.clone(),
            turns,
            settings.runner.max_concurrent_turns.get(),
            settings.sessions.burst_window,
            shutdown.clone(),
        );
        let service = Arc::new(SessionService::new(
            store.clone(),
            runner,
            Arc::clone(&registry),
            Arc::clone(&media),
            task_tools,
            &settings.service(),
        ));
        Ok(Self {
            tools: registry,
            settings,
            store,
            cache,
            service,
            shutdown,
            instance_id,
            drain_deadline: CancellationToken::new(),
            platform_status: PlatformStatus::default(),
            media,
            clock,
            task_wake,
        })
    }

    /// Resumes work left unfinished by a previous run.
    ///
    /// # Errors
    /// A database failure.
    pub async fn recover(&self) -> Result<(), StoreError> {
        self.service.runner().recover().await
    }

    /// Starts the background work of a serving instance: housekeeping
    /// (pruning deduplication records), the sweep for orphaned work, the
    /// polling for waiting callers' replies and, on PostgreSQL, the
    /// listener for other instances' signals. They run until `stop`, which
    /// the caller cancels once the HTTP server has finished (waiting callers
    /// need the signals while draining).
    pub fn spawn_background(&self, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let runner = self.service.runner();
        let (shutdown, deadline) = (self.shutdown.clone(), self.drain_deadline.clone());
        let grace = self.settings.server.shutdown_grace;
        let drained = stop.clone();
        let mut tasks = vec![
            // The drain deadline: cut the waiting callers off once the grace
            // is over, or end at once when everything drained earlier (an
            // idle instance stops without sitting out the grace).
            tokio::spawn(async move {
                shutdown.cancelled().await;
                tokio::select! {
                    () = tokio::time::sleep(grace) => deadline.cancel(),
                    () = drained.cancelled() => {}
                }
            }),
            self.spawn_maintenance(stop.clone()),
            self.spawn_sweep(stop.clone()),
            runner.spawn_reply_poller(stop.clone()),
            self.scheduler().spawn(stop.clone()),
        ];
        if self.store.is_shared() {
            tasks.push(crate::signals::spawn_listener(
                self.settings.database.url.clone(),
                runner.clone(),
                stop.clone(),
            ));
        }
        tasks
    }

    /// The loop that turns due tasks into runs.
    #[must_use]
    pub fn scheduler(&self) -> Scheduler {
        Scheduler {
            store: self.store.clone(),
            clock: self.clock.clone(),
            settings: self.settings.tasks.clone(),
            wake: Arc::clone(&self.task_wake),
            runner: self.service.runner().clone(),
            metrics: self.service.runner().metrics().clone(),
        }
    }

    /// Prunes deduplication records past their retention and expired cached
    /// tool results, and (hourly, on one instance at a time) removes blobs
    /// no message refers to, until `stop`.
    fn spawn_maintenance(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        let mut media = MediaHousekeeping::new(
            store.clone(),
            Arc::clone(self.media.blobs()),
            self.settings.media.retention_days,
            self.instance_id.clone(),
        );
        let every = self.settings.runner.maintenance_interval;
        let retention_ms = crate::domain::millis(self.settings.runner.dedup_retention);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.cancelled() => return,
                }
                match store
                    .inbound()
                    .prune_finished(crate::domain::now_ms() - retention_ms)
                    .await
                {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "old deduplication records pruned"),
                    Err(err) => tracing::warn!(error = %err, "pruning failed"),
                }
                match store.tool_cache().prune().await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "expired cached tool results removed"),
                    Err(err) => tracing::warn!(error = %err, "pruning the tool cache failed"),
                }
                match media.tick().await {
                    Ok(Some(swept)) if swept.removed > 0 => tracing::info!(
                        removed = swept.removed,
                        bytes = swept.bytes,
                        "unreferenced media blobs removed"
                    ),
                    Ok(_) => {}
                    Err(err) => tracing::warn!(error = %err, "media housekeeping failed"),
                }
            }
        })
    }

    /// Takes over orphaned sessions and undelivered replies every
    /// `runner.sweep_interval_secs`, until `stop`.
    fn spawn_sweep(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let runner = self.service.runner().clone();
        let every = self.settings.runner.sweep_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.cancelled() => return,
                }
                match runner.sweep().await {
                    Ok((0, 0)) => {}
                    Ok((sessions, replies)) => {
                        tracing::info!(sessions, replies, "orphaned work taken over");
                    }
                    Err(err) => tracing::warn!(error = %err, "sweeping for orphaned work failed"),
                }
            }
        })
    }

    /// Stops taking work, waits for running turns up to the grace period
    /// (handing back what is left), and closes the database.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.service
            .runner()
            .shutdown(self.settings.server.shutdown_grace)
            .await;
        self.store.close().await;
    }
}

/// This instance's name in lease and claim rows: `server.instance_id`, or
/// the host name and the port it serves on (stable across restarts, and
/// distinct for instances on one host).
fn instance_id(settings: &Settings) -> String {
    if let Some(id) = settings.server.instance_id.as_deref().map(str::trim)
        && !id.is_empty()
    {
        return id.to_owned();
    }
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let port = settings
        .server
        .bind
        .rsplit_once(':')
        .map_or(settings.server.bind.as_str(), |(_, port)| port);
    format!("{host}:{port}")
}

/// The tools this deployment offers, each built once for the process (the
/// `memory` tool, over `store`, left out while `memory.enabled` is off),
/// and the MCP servers, starting in the background (see
/// [`McpRegistry::wait_started`] to wait for them) and supervised until
/// `shutdown`.
///
/// # Errors
/// A setting names an unknown tool, or the HTTP client cannot be built.
pub async fn build_registry(
    settings: &Settings,
    tasks: &TaskTools,
    shutdown: &CancellationToken,
) -> Result<ToolRegistry, StartError> {
    let servers = settings
        .mcp
        .servers
        .iter()
        .filter_map(|(name, server)| Some((name.clone(), server.approval?)))
        .collect();
    let mut registry = ToolRegistry::new()
        .with_max_result_chars(settings.tools.max_result_chars)
        .with_policy(ApprovalPolicy::new(
            settings.tools.approval.clone(),
            servers,
        ));
    let context = BuiltInContext {
        tools: &settings.tools,
        memory: &settings.memory,
        store: &tasks.store,
        tasks,
    };
    for name in &settings.agent.tools {
        let tool = BuiltIn::from_str(name).map_err(|_| StartError::UnknownTool(name.clone()))?;
        match tool
            .build(&context)
            .map_err(|err| StartError::Http(err.without_url().to_string()))?
        {
            Some(built) => registry.register(built),
            None => tracing::info!(tool = %tool, "turned off in its settings: not offered"),
        }
    }
    if settings.mcp.servers.is_empty() {
        return Ok(registry);
    }
    // Connected in the background: a slow or hung server holds neither the
    // listener nor the platforms (`/readyz` shows it starting), and its
    // tools join the sessions started once it has listed them.
    Ok(registry.with_mcp(McpRegistry::start(&settings.mcp, shutdown)))
}
