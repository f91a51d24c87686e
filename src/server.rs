//! Serving: the HTTP server (the API, the web console and the platforms'
//! webhooks on one listener), the platform adapters, the background work,
//! and the order a serving instance starts and drains in.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::config::Settings;
use crate::console::ConsoleState;
use crate::gateway::Gateway;
use crate::platforms::{self, Platforms};

/// Runs the gateway until SIGTERM or Ctrl-C, then drains: the HTTP server
/// keeps answering (503 for new work) while running turns finish within
/// the grace period, then the platforms, the background work and the
/// database stop.
///
/// # Errors
/// The address cannot be bound, the gateway cannot start, or serving fails.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let addr: SocketAddr = settings.bind_addr()?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let database = crate::check::shown_url(&settings.database.url);
    let gateway = Gateway::build(settings)
        .await
        .with_context(|| format!("starting the gateway (database {database})"))?;
    tracing::info!(database = %database, "database open");
    let shutdown = gateway.shutdown.clone();
    tokio::spawn(watch_signals(shutdown.clone()));
    let mut platforms = start_platforms(&gateway, &shutdown);
    // Stopped only once the HTTP server is done: callers still waiting
    // while the instance drains get their replies through them.
    let background_stop = CancellationToken::new();
    let background = gateway.spawn_background(&background_stop);
    let routes = std::mem::take(&mut platforms.routes);
    let grace = gateway.settings.server.shutdown_grace;
    // On SIGTERM the runner drains (no new claims, queued sessions handed
    // back, running turns given the grace period). The server keeps
    // accepting meanwhile, so that `/readyz` and new API requests get 503
    // rather than a refused connection; once the runner is done it stops
    // accepting and answers the requests in flight (bounded by the drain
    // deadline).
    let drained = CancellationToken::new();
    let (served, ()) = tokio::join!(
        async {
            let served = run_server(
                &gateway,
                listener,
                routes,
                drained.clone().cancelled_owned(),
            )
            .await;
            shutdown.cancel();
            served
        },
        async {
            shutdown.cancelled().await;
            tracing::info!("draining");
            gateway.service.runner().shutdown(grace).await;
            drained.cancel();
        }
    );
    served?;
    platforms.stop(grace).await;
    background_stop.cancel();
    for task in background {
        if let Err(err) = task.await {
            tracing::error!(error = %err, "background task failed");
        }
    }
    gateway.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the platform adapters the settings configure (see
/// [`crate::platforms`]), handed the parts of `gateway` they need; they stop
/// when `shutdown` is cancelled.
#[must_use]
pub fn start_platforms(gateway: &Gateway, shutdown: &CancellationToken) -> Platforms {
    let core = platforms::Core {
        sink: Arc::clone(&gateway.service) as Arc<dyn switchboard_contract::InboundSink>,
        runner: gateway.service.runner().clone(),
        status: gateway.platform_status.clone(),
        shutdown: shutdown.clone(),
        leases: gateway.store.is_shared().then(|| platforms::Leases {
            store: gateway.store.clone(),
            owner: gateway.instance_id.clone(),
            ttl: gateway.settings.runner.lease_ttl,
        }),
    };
    Platforms::start(core, platforms::registry::configured(&gateway.settings))
}

/// Serves the gateway on `listener` until `stop` resolves: recovers
/// unfinished work first, then answers HTTP.
///
/// # Errors
/// Recovery or the server failing.
pub async fn run_server(
    gateway: &Gateway,
    listener: TcpListener,
    platform_routes: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    gateway
        .recover()
        .await
        .context("recovering unfinished work")?;
    let settings = &gateway.settings;
    let mut models = vec![settings.llm.model.clone()];
    models.extend(settings.llm.extra_models.iter().cloned());
    let keys = settings.api.keys().context("reading the API keys")?;
    if keys.is_empty() {
        tracing::warn!(
            env = settings.api.keys_env,
            "no API keys configured: the API accepts any caller; keep server.bind on loopback"
        );
    }
    let state = Arc::new(ApiState {
        service: Arc::clone(&gateway.service),
        store: gateway.store.clone(),
        keys,
        models,
        provider: settings.llm.provider,
        client_instructions: settings.api.client_instructions,
        reply_timeout: settings.api.reply_timeout,
        drain_deadline: gateway.drain_deadline.clone(),
        platforms: gateway.platform_status.clone(),
        tools: Arc::clone(&gateway.tools),
        serve_metrics: settings.server.metrics,
        images: api::ImageFetcher::new(
            &settings.tools.http_get,
            settings.media.max_file_bytes.get(),
        )
        .context("building the image_url client")?,
    });
    let console = ConsoleState::from_settings(
        settings,
        gateway.store.clone(),
        gateway.platform_status.clone(),
    )
    .context("starting the web console")?;
    let mut router = api::router(state, settings.api.max_body_bytes, settings.api.enabled)
        .merge(platform_routes);
    if let Some(console) = console {
        tracing::info!("web console at /console");
        router = router.merge(crate::console::router(Arc::new(console)));
    }
    let local = listener.local_addr()?;
    tracing::info!(address = %local, "listening");
    // Replies are small writes (a streamed delta, a whole answer): Nagle
    // would hold each one back until the client's delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY on a connection");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .context("serving HTTP")?;
    Ok(())
}

/// Cancels `token` on Ctrl-C or SIGTERM.
async fn watch_signals(token: CancellationToken) {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}
