//! The Events API routes: Slack posts events to `events_path` and button
//! presses to `interactivity_path`.
//!
//! Order of checks, each on the raw request before anything is trusted:
//!
//! 1. body size: 413 past `max_body_bytes`, enforced while reading;
//! 2. the signature (`X-Slack-Signature` over `X-Slack-Request-Timestamp`
//!    and the raw body, with any of the apps' signing secrets): 401 when
//!    missing or wrong, and 401 when the timestamp is more than
//!    `signature_max_age_secs` from this host's clock;
//! 3. the body: 400 when it is not the JSON (events) or the form with a
//!    JSON `payload` (interactivity) Slack sends.
//!
//! `url_verification` is answered with its challenge. Events are
//! acknowledged (200) only once the core has recorded them, and answered
//! 503 otherwise so that Slack retries (`X-Slack-Retry-Num`); see
//! [`crate::inbound`]. Rejections answer a generic body and log the reason
//! once, never the body.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use secrecy::SecretString;

use crate::events::{Envelope, Interaction};
use crate::inbound::{Ack, Inbound};
use crate::signature::{self, SignatureError};

/// What the routes share.
pub(crate) struct WebhookState {
    pub inbound: Arc<Inbound>,
    /// The signing secrets of the apps served (one per distinct app).
    pub secrets: Vec<SecretString>,
    pub max_age: Duration,
}

/// Where the routes are served.
pub(crate) struct Paths<'a> {
    pub events: &'a str,
    pub interactivity: &'a str,
}

/// The two routes, with their body limit.
pub(crate) fn router(state: Arc<WebhookState>, paths: &Paths<'_>, max_body_bytes: usize) -> Router {
    Router::new()
        .route(paths.events, post(events))
        .route(paths.interactivity, post(interactivity))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// A refused request: its status comes from the variant; Slack is told
/// no more than a generic word, the log gets the reason.
#[derive(Debug, thiserror::Error)]
enum Rejection {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("unauthorised: {0}")]
    Unauthorised(SignatureError),
    #[error("not acknowledged: {0}")]
    Unavailable(&'static str),
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad request"),
            Self::Unauthorised(_) => (StatusCode::UNAUTHORIZED, "unauthorised"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "try again later"),
        };
        tracing::warn!(status = status.as_u16(), reason = %self, "Slack request refused");
        (status, Json(serde_json::json!({ "error": body }))).into_response()
    }
}

impl WebhookState {
    fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), Rejection> {
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        signature::verify(
            &self.secrets,
            header("x-slack-request-timestamp"),
            header("x-slack-signature"),
            body,
            SystemTime::now(),
            self.max_age,
        )
        .map_err(Rejection::Unauthorised)
    }
}

async fn events(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    state.verify(&headers, &body)?;
    let envelope: Envelope = serde_json::from_slice(&body)
        .map_err(|_| Rejection::BadRequest("the body is not an Events API payload"))?;
    if envelope.kind == "url_verification" {
        let challenge = envelope.challenge.ok_or(Rejection::BadRequest(
            "url_verification without a challenge",
        ))?;
        tracing::info!("answered Slack's URL verification");
        return Ok(Json(serde_json::json!({ "challenge": challenge })).into_response());
    }
    if let Some(retry) = headers
        .get("x-slack-retry-num")
        .and_then(|v| v.to_str().ok())
    {
        let reason = headers
            .get("x-slack-retry-reason")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        tracing::info!(retry, reason, event_id = ?envelope.event_id, "Slack redelivered an event");
    }
    match state.inbound.event(envelope).await {
        Ack::Yes => Ok(acknowledged()),
        Ack::No(reason) => Err(Rejection::Unavailable(reason)),
    }
}

async fn interactivity(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    state.verify(&headers, &body)?;
    let payload = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "payload")
        .map(|(_, value)| value.into_owned())
        .ok_or(Rejection::BadRequest("no payload field"))?;
    let interaction: Interaction = serde_json::from_str(&payload)
        .map_err(|_| Rejection::BadRequest("the payload is not an interaction"))?;
    match state.inbound.interaction(interaction) {
        Ack::Yes => Ok(StatusCode::OK.into_response()),
        Ack::No(reason) => Err(Rejection::Unavailable(reason)),
    }
}

fn acknowledged() -> Response {
    (StatusCode::OK, Json(serde_json::json!({}))).into_response()
}
