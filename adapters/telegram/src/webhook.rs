//! The webhook route: Telegram posts each update to the gateway's HTTP
//! server.
//!
//! The route checks `X-Telegram-Bot-Api-Secret-Token` in constant time and
//! answers 401 on a missing or wrong secret without reading further (and
//! refuses everything when no secret is configured). A body over the size
//! limit gets 413, one that is not an update 400 (the body is never logged).
//! A valid update is normalised and submitted, which returns at once; the
//! answer is 200, or 503 when the core is temporarily unavailable, so that
//! Telegram delivers the update again (the core's dedup drops repeats). An
//! update whose handling panics is logged at ERROR and answered 200 too:
//! delivered again it would panic again, and Telegram would hold every
//! later update back behind it.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;
use switchboard_contract::SubmitError;
use teloxide_core::types::Update;

use crate::inbound::Inbound;

/// The header Telegram echoes the webhook secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

#[derive(Clone)]
struct WebhookState {
    inbound: Arc<Inbound>,
    secret: Option<Arc<SecretString>>,
}

/// Builds the router serving `POST path`.
pub(crate) fn router(
    path: &str,
    inbound: Arc<Inbound>,
    secret: Option<SecretString>,
    max_body_bytes: usize,
) -> Router {
    if secret.is_none() {
        tracing::warn!(
            "no Telegram webhook secret configured; the webhook route refuses every request"
        );
    }
    let state = WebhookState {
        inbound,
        secret: secret.map(Arc::new),
    };
    Router::new()
        .route(path, post(receive))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

async fn receive(State(state): State<WebhookState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if !authorised(state.secret.as_deref(), &headers) {
        tracing::warn!("Telegram webhook call with a missing or wrong secret");
        return StatusCode::UNAUTHORIZED;
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(error) => {
            // Only the category and position: serde's message can quote
            // values from the payload.
            tracing::warn!(
                category = ?error.classify(),
                line = error.line(),
                column = error.column(),
                bytes = body.len(),
                "Telegram webhook body is not an update"
            );
            return StatusCode::BAD_REQUEST;
        }
    };
    match state.inbound.handle_contained(&update).await {
        Ok(_) => StatusCode::OK,
        Err(SubmitError::Rejected(reason)) => {
            // Redelivery would not help.
            tracing::warn!(update_id = update.id.0, %reason, "update rejected by the core");
            StatusCode::OK
        }
        Err(SubmitError::Unavailable(reason)) => {
            tracing::warn!(update_id = update.id.0, %reason, "core unavailable; Telegram will redeliver");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// Whether the request carries the configured secret (compared in constant
/// time; only its length can leak).
fn authorised(secret: Option<&SecretString>, headers: &HeaderMap) -> bool {
    let (Some(secret), Some(given)) = (secret, headers.get(SECRET_HEADER)) else {
        return false;
    };
    bool::from(secret.expose_secret().as_bytes().ct_eq(given.as_bytes()))
}
