//! The operators' web console at `/console` (issue 20): an overview of turns,
//! latency, tokens, cost, prompt-cache reads, limit hits, adapters and the
//! outbox; conversations found by platform, principal, title or text and
//! read turn by turn, with the audit of each approval a turn asked for;
//! people with their identities, today's spend and the
//! pairing queue; scheduled and background tasks with their runs (their
//! outcome, lateness, duration and cost); usage by principal, session,
//! model and day, also as CSV.
//!
//! Off unless `console.enabled`. Server-rendered HTML ([`templates`], with
//! `maud`) and SVG charts ([`charts`]), no script. Every page reads through
//! the store's read functions (`store::console_views` and the usage report),
//! paginated; the only writes are the pairing decisions and unlinking,
//! through the same code as the chat commands. Nothing here changes a
//! conversation's history. The admin credential, the session cookies and
//! the CSRF and origin checks are [`auth`]'s.

pub mod auth;
pub mod charts;
mod pages;
mod tasks;
pub mod templates;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Router, middleware};

use crate::config::{ConfigError, Settings};
use crate::platforms::PlatformStatus;
use crate::session::access::Access;
use crate::store::Store;
use crate::usage::Price;

/// What the console's handlers share.
pub struct ConsoleState {
    pub store: Store,
    pub credentials: auth::Credentials,
    /// Pairing decisions go through access control, as `/approve` does.
    pub access: Access,
    /// Prices per model, for the cost estimates (as `switchboard usage`).
    pub prices: BTreeMap<String, Price>,
    /// `limits.principal_daily_usd` (0: no cap).
    pub daily_cap_usd: f64,
    /// The platform adapters' states.
    pub platforms: PlatformStatus,
    /// Held while a password is checked (and a moment after a wrong one):
    /// one guess at a time per instance.
    pub login_gate: tokio::sync::Mutex<()>,
}

impl ConsoleState {
    /// The console's state, when `console.enabled`.
    ///
    /// # Errors
    /// The console is enabled but its secret or credential is missing.
    pub fn from_settings(
        settings: &Settings,
        store: Store,
        platforms: PlatformStatus,
    ) -> Result<Option<Self>, ConfigError> {
        if !settings.console.enabled {
            return Ok(None);
        }
        Ok(Some(Self {
            credentials: auth::Credentials::from_settings(&settings.console)?,
            access: Access::new(store.clone(), settings.access.clone()),
            store,
            prices: settings.prices.clone(),
            daily_cap_usd: settings.limits.principal_daily_usd,
            platforms,
            login_gate: tokio::sync::Mutex::new(()),
        }))
    }
}

/// The console's routes, each behind [`auth::guard`].
pub fn router(state: Arc<ConsoleState>) -> Router {
    Router::new()
        .route("/console", get(pages::overview))
        .route(auth::LOGIN_PATH, get(pages::login_form).post(pages::login))
        .route("/console/logout", post(pages::logout))
        .route("/console/conversations", get(pages::conversations))
        .route("/console/conversations/{id}", get(pages::conversation))
        .route("/console/people", get(pages::people))
        .route("/console/people/unlink", post(pages::unlink))
        .route("/console/pairing", post(pages::decide_pairing))
        .route("/console/tasks", get(tasks::tasks))
        .route("/console/tasks/{id}", get(tasks::task))
        .route("/console/usage", get(pages::usage))
        .route("/console/usage.csv", get(pages::usage_csv))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::guard,
        ))
        .layer(middleware::map_response(security_headers))
        .with_state(state)
}

/// No scripts, no framing, no caching, no referrer to other sites.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
