//! The webhook route Feishu posts events to.
//!
//! Order of checks, each on the raw request before anything is trusted:
//!
//! 1. body size (413 past `max_body_bytes`, enforced while reading);
//! 2. with an Encrypt Key, the `X-Lark-Signature` over the raw body bytes
//!    when the headers are present (401 on mismatch), and the signed
//!    `X-Lark-Request-Timestamp`, which must lie within
//!    `signature_max_age_secs` of this host's clock either way (401 when
//!    stale, so a captured request cannot be replayed later);
//! 3. decryption of `{"encrypt":…}` (400 when it fails);
//! 4. the verification token, compared in constant time (401);
//! 5. URL verification is answered with its challenge; any other request
//!    must have been signed when an Encrypt Key is set (401). Feishu's URL
//!    verification may come unsigned; it is still encrypted and carries the
//!    token.
//!
//! Card callbacks (`card.action.trigger`: a press of a button on one of the
//! bot's cards) pass the same checks and are answered by
//! [`crate::callback`] with the toast and card to show.
//!
//! Message events are normalised and handed to the core through
//! [`crate::tasks::EventTasks`]; other events, other message types and events
//! of other apps are acknowledged with 200 and dropped. A message event is
//! acknowledged only once the core has recorded it (or found it recorded
//! before): when the core fails, or has not answered within the ack timeout,
//! the answer is 503 and Feishu delivers the event again, since Feishu never
//! redelivers an acknowledged event. Rejections answer with a generic JSON
//! body and log the reason once, never the body.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use secrecy::{ExposeSecret, SecretString};
use switchboard_contract::{AccountId, InboundMessage, InboundSink, SubmitError, Submitted};
use tokio::sync::oneshot;

use crate::api::OpenApi;
use crate::callback;
use crate::crypto;
use crate::event::{self, Context, Envelope, NormaliseError};
use crate::press;
use crate::tasks::EventTasks;

/// Everything the webhook handler needs, shared by all requests.
pub(crate) struct WebhookState {
    pub sink: Arc<dyn InboundSink>,
    pub tasks: Arc<EventTasks>,
    pub verification_token: SecretString,
    pub encrypt_key: Option<SecretString>,
    pub app_id: String,
    pub account: AccountId,
    pub bot_open_id: String,
    /// Downloads the resources (images, files) of messages.
    pub api: Arc<OpenApi>,
    pub ack_timeout: Duration,
    /// How far a signed request's timestamp may be from now, either way.
    pub signature_max_age: Duration,
}

/// The webhook route at `path`, with its body limit.
pub(crate) fn router(state: Arc<WebhookState>, path: &str, max_body_bytes: usize) -> Router {
    Router::new()
        .route(path, post(receive))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Why a request was refused; the variant picks the status, the reason is
/// logged, and the response body stays generic.
#[derive(Debug, thiserror::Error)]
enum Rejection {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("unauthorised: {0}")]
    Unauthorised(&'static str),
    #[error("too many events in flight")]
    Busy,
    #[error("the core could not record the event")]
    Unavailable,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorised(_) => StatusCode::UNAUTHORIZED,
            Self::Busy | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        };
        tracing::warn!(status = status.as_u16(), reason = %self, "Feishu webhook request refused");
        let body = match status {
            StatusCode::BAD_REQUEST => "bad request",
            StatusCode::UNAUTHORIZED => "unauthorised",
            _ => "try again later",
        };
        (status, Json(serde_json::json!({ "error": body }))).into_response()
    }
}

async fn receive(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let signed = match (&state.encrypt_key, signature_headers(&headers)) {
        (Some(key), Some(sig)) => {
            if !crypto::verify_signature(sig.timestamp, sig.nonce, key, &body, sig.signature) {
                return Err(Rejection::Unauthorised("signature mismatch"));
            }
            if !is_fresh(sig.timestamp, SystemTime::now(), state.signature_max_age) {
                return Err(Rejection::Unauthorised(
                    "request timestamp outside the accepted window",
                ));
            }
            true
        }
        _ => false,
    };
    let outer: Envelope = serde_json::from_slice(&body)
        .map_err(|_| Rejection::BadRequest("body is not a JSON object"))?;
    let envelope = match outer.encrypt {
        Some(encrypted) => {
            let key = state.encrypt_key.as_ref().ok_or(Rejection::BadRequest(
                "encrypted event but no encrypt key is set",
            ))?;
            let plain = crypto::decrypt(key, &encrypted)
                .map_err(|_| Rejection::BadRequest("encrypted body does not decrypt"))?;
            serde_json::from_slice::<Envelope>(&plain)
                .map_err(|_| Rejection::BadRequest("decrypted body is not a JSON object"))?
        }
        None => outer,
    };
    let token = envelope
        .token()
        .ok_or(Rejection::Unauthorised("no verification token"))?;
    if !crypto::constant_time_eq(token, state.verification_token.expose_secret()) {
        return Err(Rejection::Unauthorised("verification token mismatch"));
    }
    if envelope.is_url_verification() {
        let challenge = envelope.challenge.ok_or(Rejection::BadRequest(
            "url_verification without a challenge",
        ))?;
        tracing::info!("answered Feishu URL verification");
        return Ok(Json(serde_json::json!({ "challenge": challenge })).into_response());
    }
    if state.encrypt_key.is_some() && !signed {
        return Err(Rejection::Unauthorised("event without a signature"));
    }
    handle_event(&state, envelope).await
}

/// Acknowledges an authenticated event, handing message events to the core.
async fn handle_event(state: &WebhookState, envelope: Envelope) -> Result<Response, Rejection> {
    let Some(header) = envelope.header else {
        tracing::debug!("Feishu event without a 2.0 header ignored");
        return Ok(acknowledged());
    };
    if header
        .app_id
        .as_deref()
        .is_some_and(|id| id != state.app_id)
    {
        tracing::warn!(event_id = %header.event_id, "Feishu event for another app ignored");
        return Ok(acknowledged());
    }
    if header.event_type == press::CARD_ACTION {
        let raw = envelope.event.unwrap_or_default();
        let answer = callback::answer(state, &header.event_id, raw)
            .await
            .ok_or(Rejection::Busy)?;
        return Ok((StatusCode::OK, Json(answer)).into_response());
    }
    if header.event_type != event::MESSAGE_RECEIVE {
        tracing::debug!(event_type = %header.event_type, "Feishu event type ignored");
        return Ok(acknowledged());
    }
    let Some(raw) = envelope.event else {
        tracing::warn!(event_id = %header.event_id, "Feishu message event without a body");
        return Ok(acknowledged());
    };
    let ctx = Context {
        account: &state.account,
        bot_open_id: &state.bot_open_id,
        api: Some(&state.api),
    };
    let message = match event::normalise(&ctx, &header.event_id, raw) {
        Ok(message) => message,
        Err(NormaliseError::UnsupportedType(kind)) => {
            tracing::debug!(event_id = %header.event_id, %kind, "Feishu message type ignored");
            return Ok(acknowledged());
        }
        // Redelivery would not fix it: acknowledge, so Feishu stops retrying.
        Err(err) => {
            tracing::warn!(event_id = %header.event_id, error = %err, "Feishu message event dropped");
            return Ok(acknowledged());
        }
    };
    let age_ms = header.create_time.as_ref().and_then(|t| t.millis());
    tracing::info!(
        event_id = %header.event_id,
        chat = %message.chat,
        kind = ?message.chat_kind,
        mentions_bot = message.mentions_bot,
        create_time_ms = age_ms,
        "Feishu message received"
    );
    submit(state, message).await
}

/// Hands `message` to the core in an owned task and waits for it up to the
/// ack timeout.
async fn submit(state: &WebhookState, message: InboundMessage) -> Result<Response, Rejection> {
    let permit = state.tasks.reserve().ok_or(Rejection::Busy)?;
    let (done, outcome) = oneshot::channel();
    let sink = Arc::clone(&state.sink);
    state.tasks.spawn(permit, async move {
        let event_id = message.event_id.clone();
        let result = sink.submit(message).await;
        match &result {
            Ok(Submitted::Duplicate) => tracing::debug!(%event_id, "Feishu event redelivered"),
            Ok(submitted) => tracing::debug!(%event_id, ?submitted, "Feishu event recorded"),
            Err(SubmitError::Rejected(reason)) => {
                tracing::warn!(%event_id, %reason, "core rejected a Feishu event");
            }
            Err(SubmitError::Unavailable(reason)) => {
                tracing::error!(%event_id, %reason, "core could not record a Feishu event");
            }
        }
        // The webhook may have stopped waiting; then nobody needs the result.
        let _ = done.send(result);
    });
    match tokio::time::timeout(state.ack_timeout, outcome).await {
        Ok(Ok(Err(SubmitError::Unavailable(_)))) => Err(Rejection::Unavailable),
        // Recorded, recorded before, or unusable (a redelivery would not
        // change that): acknowledged.
        Ok(Ok(_)) => Ok(acknowledged()),
        // The task ended without an answer (it panicked): let Feishu retry.
        Ok(Err(_)) => Err(Rejection::Unavailable),
        // Not recorded yet, so not acknowledged: Feishu delivers it again.
        // Recording goes on; if it succeeds, the redelivery is a duplicate.
        Err(_) => {
            tracing::warn!(
                ack_timeout_ms = state.ack_timeout.as_millis(),
                "core slow to record a Feishu event; answering 503 so Feishu redelivers it"
            );
            Err(Rejection::Unavailable)
        }
    }
}

/// Whether `timestamp` (Unix seconds, as Feishu signs it) lies within
/// `max_age` of `now`, either way. An unreadable timestamp is not fresh.
fn is_fresh(timestamp: &str, now: SystemTime, max_age: Duration) -> bool {
    let Ok(signed) = timestamp.trim().parse::<u64>() else {
        return false;
    };
    let Ok(now) = now.duration_since(UNIX_EPOCH) else {
        return false;
    };
    now.as_secs().abs_diff(signed) <= max_age.as_secs()
}

fn acknowledged() -> Response {
    (StatusCode::OK, Json(serde_json::json!({}))).into_response()
}

struct SignatureHeaders<'a> {
    timestamp: &'a str,
    nonce: &'a str,
    signature: &'a str,
}

fn signature_headers(headers: &HeaderMap) -> Option<SignatureHeaders<'_>> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    Some(SignatureHeaders {
        timestamp: get("x-lark-request-timestamp")?,
        nonce: get("x-lark-request-nonce")?,
        signature: get("x-lark-signature")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_within_the_window_either_way_are_fresh() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let window = Duration::from_secs(300);
        assert!(is_fresh("1800000000", now, window));
        assert!(is_fresh("1799999700", now, window));
        assert!(is_fresh("1800000300", now, window));
        assert!(!is_fresh("1799999699", now, window));
        assert!(!is_fresh("1800000301", now, window));
        assert!(!is_fresh("1642000000", now, window), "five years old");
        assert!(!is_fresh("soon", now, window));
        assert!(!is_fresh("-5", now, window));
        assert!(!is_fresh("", now, window));
    }
}
