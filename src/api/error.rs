//! API errors in OpenAI's shape: `{"error": {"message", "type", "code"}}`.
//!
//! Two faces: what the client may see (a clear message for its own mistakes,
//! a generic one for ours) and what the log keeps (the real cause, once).

use crate::domain::InboundId;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use serde_json::json;

use super::failure::TurnFailure;
use crate::session::service::ServiceError;

/// An error answered to an API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("invalid or missing API key")]
    Unauthorized,
    /// A signed request (a task hook) whose signature is missing or wrong.
    #[error("missing or wrong signature (X-Switchboard-Signature: sha256=<hex HMAC of the body>)")]
    BadSignature,
    /// The key may not act for this (it names no session, so nothing is
    /// confirmed by it).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The Idempotency-Key was used before by this caller with another
    /// request body (422).
    #[error(
        "this Idempotency-Key was used with a different request; retry with the same request \
         or send a new request under a new key"
    )]
    IdempotencyKeyReused,
    /// The Idempotency-Key was used before by another caller (409): nothing
    /// of theirs is named.
    #[error("this Idempotency-Key is already in use; choose a key of your own")]
    IdempotencyKeyTaken,
    #[error("the request body is too large")]
    TooLarge,
    /// The reply timeout passed; the turn goes on, and its reply can be
    /// fetched (and waited for) at [`turn_path`].
    #[error(
        "the reply is taking too long; the turn goes on: GET {} returns its reply \
         (add ?wait=SECONDS to wait for it)",
        turn_path(session_id, *turn)
    )]
    Timeout { session_id: String, turn: InboundId },
    /// This instance is shutting down (or not ready): the client should try
    /// again, on another instance, after `retry_after_secs`. A message
    /// already taken is answered to a retry with the same Idempotency-Key.
    #[error("{reason}; retry with the same Idempotency-Key")]
    Unavailable {
        reason: &'static str,
        retry_after_secs: u64,
    },
    #[error("internal error")]
    Internal(String),
    /// A streamed answer showed text its turn's reply does not have (a
    /// retried model call answered differently); the reply is at
    /// [`turn_path`].
    #[error(
        "the model's retried answer differs from the text already streamed; GET {} returns \
         the reply",
        turn_path(session_id, *turn)
    )]
    Diverged { session_id: String, turn: InboundId },
    /// The turn ended without an answer (the model failed, a limit
    /// stopped it): its status and code say why (`failure`).
    #[error("{}", .0.message)]
    TurnFailed(Box<TurnFailure>),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::BadSignature => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) | Self::IdempotencyKeyTaken => StatusCode::CONFLICT,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Diverged { .. } => StatusCode::BAD_GATEWAY,
            Self::TurnFailed(failure) => failure.status,
        }
    }

    /// The OpenAI error `type`.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Unauthorized | Self::BadSignature => "authentication_error",
            Self::Forbidden(_) => "permission_error",
            Self::TurnFailed(failure) => failure.kind(),
            Self::Internal(_)
            | Self::Timeout { .. }
            | Self::Unavailable { .. }
            | Self::Diverged { .. } => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(cause) = &self {
            tracing::error!(%cause, "API request failed");
        }
        let body = json!({"error": self.body()});
        let mut response = (self.status(), Json(body)).into_response();
        let retry_after = match &self {
            Self::Unavailable {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Self::TurnFailed(failure) => failure.retry_after_secs,
            _ => None,
        };
        if let Some(secs) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        response
    }
}

impl ApiError {
    /// The `error` object: `message`, `type`, `code`, `param`, and for a
    /// turn that did not answer in time or failed, where it is.
    pub(super) fn body(&self) -> serde_json::Value {
        let mut body = json!({
            "message": self.to_string(), "type": self.kind(), "param": null, "code": null
        });
        match self {
            Self::Timeout { session_id, turn } | Self::Diverged { session_id, turn } => {
                body["code"] = json!(if matches!(self, Self::Timeout { .. }) {
                    "reply_timeout"
                } else {
                    "stream_diverged"
                });
                body["session_id"] = json!(session_id);
                body["turn"] = json!(turn);
                body["reply_url"] = json!(turn_path(session_id, *turn));
            }
            Self::TurnFailed(failure) => {
                let session_id = failure.session_id.as_str();
                body["code"] = json!(failure.code);
                body["session_id"] = json!(session_id);
                body["turn"] = json!(failure.turn);
                body["reply_url"] = json!(turn_path(session_id, failure.turn));
            }
            Self::IdempotencyKeyReused => body["code"] = json!("idempotency_key_reused"),
            Self::IdempotencyKeyTaken => body["code"] = json!("idempotency_key_in_use"),
            _ => {}
        }
        body
    }
}

/// Where a turn's reply is read: `GET` it, with `?wait=SECONDS` to wait.
pub fn turn_path(session_id: &str, turn: InboundId) -> String {
    format!("/v1/sessions/{session_id}/turns/{turn}")
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::UnknownSession(id) => Self::NotFound(format!("no session with id {id}")),
            ServiceError::Store(err) => Self::Internal(err.to_string()),
            ServiceError::Media(err) => Self::Internal(err.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::TooLarge
        } else {
            Self::BadRequest(rejection.body_text())
        }
    }
}
