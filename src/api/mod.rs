//! The gateway's HTTP server: the OpenAI-compatible API and health checks.
//!
//! `POST /v1/chat/completions` (plain and `stream: true`), the Responses API
//! (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`, `POST
//! /v1/responses/{id}/cancel`, see [`responses`]), `GET /v1/models`,
//! `GET /healthz` (liveness: the process answers and reaches its database)
//! and `GET /readyz` (readiness: 503 while the instance drains, so that a
//! load balancer sends new requests elsewhere, while the database is
//! unreachable or misses a migration, and while a configured platform
//! adapter is not up; the body lists each adapter's state and each MCP
//! server's, `starting`, `up` or `down`, which never makes it 503), and `GET
//! /metrics` (Prometheus, unless `server.metrics = false`; see
//! [`crate::metrics`]). The server keeps each conversation's history: a client
//! names the conversation with the `X-Session-Id` header and sends only the
//! new user message; without the header a new session starts and its id comes
//! back in the `X-Session-Id` response header, unless the request resends a
//! transcript that continues one (`transcript`); a header naming no session
//! yet creates it. `GET /v1/sessions`,
//! `GET /v1/sessions/{id}/messages` and `GET /v1/sessions/{id}/turns/{turn}`
//! read conversations and replies back. The new user message may carry
//! `image_url` content parts, taken in as images before anything is stored
//! ([`images`]). Bearer keys come from the
//! environment variables named in `api.keys_env` and `api.keys`; each key
//! reaches only its own users' sessions ([`caller`]).

mod approvals;
mod auth;
pub mod caller;
mod completions;
mod error;
mod failure;
mod follow;
pub mod images;
mod options;
mod reply;
mod responses;
mod retries;
mod sessions;
mod shown;
mod tasks;
mod transcript;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use axum::{Router, middleware};
use serde_json::json;

use crate::config::ApiKey;
use crate::metrics::Snapshot;
use crate::session::service::SessionService;
use crate::store::Store;

pub use error::ApiError;
pub use images::ImageFetcher;

/// The response header (and request header) naming a conversation.
pub const SESSION_HEADER: &str = "x-session-id";

/// What the handlers share.
pub struct ApiState {
    pub service: Arc<SessionService>,
    pub store: Store,
    /// The accepted keys; none: the API is open.
    pub keys: Vec<ApiKey>,
    /// Models listed by `GET /v1/models`; the first is the default.
    pub models: Vec<String>,
    /// The provider the models are served by: what a request's call
    /// settings are checked for (`options`).
    pub provider: crate::llm::ProviderKind,
    /// `api.client_instructions`: whether a client's system/developer
    /// message (or `instructions`) reaches its turns.
    pub client_instructions: bool,
    pub reply_timeout: std::time::Duration,
    /// Cancelled when a draining instance's grace period ends: callers
    /// still waiting for a reply then get 503, to retry elsewhere.
    pub drain_deadline: tokio_util::sync::CancellationToken,
    /// The tools: the MCP servers' states, for `/readyz`.
    pub tools: Arc<crate::tools::ToolRegistry>,
    /// The platform adapters' states, for `/readyz`.
    pub platforms: crate::platforms::PlatformStatus,
    /// Whether `GET /metrics` is served (`server.metrics`).
    pub serve_metrics: bool,
    /// Takes in the `image_url` parts of requests.
    pub images: images::ImageFetcher,
}

/// Builds the router (also used by tests without a socket). With
/// `api_enabled` false only the health check is served.
pub fn router(state: Arc<ApiState>, max_body_bytes: usize, api_enabled: bool) -> Router {
    let v1 = Router::new()
        .route("/chat/completions", post(completions::create))
        .route("/responses", post(responses::create))
        .route(
            "/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route("/responses/{id}/cancel", post(responses::cancel))
        .route("/models", get(models))
        .route("/sessions", get(sessions::list))
        .route("/sessions/{id}/messages", get(sessions::messages))
        .route("/sessions/{id}/turns/{turn}", get(sessions::turn))
        .route("/approvals", get(approvals::list))
        .route("/approvals/{id}", post(approvals::decide))
        .route("/tasks", get(tasks::list).post(tasks::create))
        .route("/tasks/{id}", get(tasks::get).delete(tasks::cancel))
        .route("/tasks/{id}/runs", get(tasks::runs))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::require_key,
        ))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            refuse_while_draining,
        ));
    let root = if api_enabled {
        Router::new()
            .nest("/v1", v1)
            .route("/hooks/tasks/{id}", post(tasks::hook))
    } else {
        Router::new()
    };
    let root = if state.serve_metrics {
        root.route("/metrics", get(metrics))
    } else {
        root
    };
    root.route("/healthz", get(health))
        .route("/readyz", get(ready))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

async fn health(State(state): State<Arc<ApiState>>) -> Response {
    match state.store.ping().await {
        Ok(()) => Json(json!({"status": "ok"})).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "health check: database unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable"})),
            )
                .into_response()
        }
    }
}

/// Ready to take new work: not draining, the database answers and has
/// every migration of this build applied, and every configured platform
/// adapter is up (or standing by while another instance holds its
/// connection). The body names the reason and lists each adapter's state:
/// `{"status": "ok" | "draining" | "unavailable" | "migrations_pending" |
/// "adapters_not_ready", "adapters": {"telegram": {"state": "retrying",
/// "since": …, "failed_attempts": …, "last_error": …}}}`.
async fn ready(State(state): State<Arc<ApiState>>) -> Response {
    let adapters = state.platforms.snapshot();
    // Shown, never waited for: a server still starting (or down) only
    // fails its own tools' calls.
    let mcp = state
        .tools
        .mcp()
        .map(|mcp| mcp.states())
        .unwrap_or_default();
    let not_ready = |status: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": status, "adapters": adapters, "mcp": mcp})),
        )
            .into_response()
    };
    if state.service.runner().is_draining() {
        return not_ready("draining");
    }
    if let Err(err) = state.store.ping().await {
        tracing::error!(error = %err, "readiness check: database unreachable");
        return not_ready("unavailable");
    }
    match state.store.gauges().pending_migrations().await {
        Ok(pending) if pending.is_empty() => {}
        Ok(pending) => {
            tracing::error!(?pending, "readiness check: migrations not applied");
            return not_ready("migrations_pending");
        }
        Err(err) => {
            tracing::error!(error = %err, "readiness check: migrations not readable");
            return not_ready("unavailable");
        }
    }
    if !adapters.values().all(|adapter| adapter.state.is_ready()) {
        return not_ready("adapters_not_ready");
    }
    Json(json!({"status": "ok", "adapters": adapters, "mcp": mcp})).into_response()
}

/// The Prometheus exposition ([`crate::metrics`]): what this instance
/// counted, and the gauges read now (the queue and outbox backlog from the
/// database, running turns, adapters, draining).
async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    let store = &state.store;
    let (queue_depth, outbox_backlog, tasks_active) = tokio::join!(
        store.gauges().queue_depth(),
        store.gauges().outbox_backlog(),
        store.gauges().tasks_active()
    );
    if let Some(err) = queue_depth.as_ref().err().or(outbox_backlog.as_ref().err()) {
        tracing::warn!(error = %err, "metrics: the database did not answer");
    }
    let runner = state.service.runner();
    let snapshot = Snapshot {
        queue_depth: queue_depth.ok(),
        outbox_backlog: outbox_backlog.ok(),
        turns_running: i64::try_from(runner.turns_running()).unwrap_or(i64::MAX),
        adapters: state
            .platforms
            .snapshot()
            .into_iter()
            .map(|(name, status)| (name, status.state.as_str(), status.state.is_ready()))
            .collect(),
        draining: runner.is_draining(),
        tasks_active: tasks_active.ok(),
    };
    let text = runner.metrics().render(&snapshot);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// New API requests to a draining instance get 503 with `Retry-After`;
/// those already in flight are answered.
async fn refuse_while_draining(
    State(state): State<Arc<ApiState>>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    if state.service.runner().is_draining() {
        return ApiError::Unavailable {
            reason: "this instance is shutting down",
            retry_after_secs: 1,
        }
        .into_response();
    }
    next.run(request).await
}

async fn models(State(state): State<Arc<ApiState>>) -> Json<serde_json::Value> {
    let data: Vec<_> = state
        .models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchboard"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".to_owned())
}
