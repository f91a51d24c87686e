//! API errors in OpenAI's shape: `{"error": {"message", "type", "code"}}`.
//!
//! Two faces: what the client may see (a clear message for its own mistakes,
//! a generic one for ours) and what the log keeps (the real cause, once).

use crate::domain::InboundId;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use serde_json::json;

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
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::BadSignature => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI error `type`.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Unauthorized | Self::BadSignature => "authentication_error",
            Self::Forbidden(_) => "permission_error",
            Self::Internal(_) | Self::Timeout { .. } | Self::Unavailable { .. } => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(cause) = &self {
            tracing::error!(%cause, "API request failed");
        }
        let mut body = json!({
            "error": {"message": self.to_string(), "type": self.kind(), "code": null}
        });
        if let Self::Timeout { session_id, turn } = &self {
            body["error"]["code"] = json!("reply_timeout");
            body["error"]["session_id"] = json!(session_id);
            body["error"]["turn"] = json!(turn);
            body["error"]["reply_url"] = json!(turn_path(session_id, *turn));
        }
        let mut response = (self.status(), Json(body)).into_response();
        if let Self::Unavailable {
            retry_after_secs, ..
        } = self
        {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(retry_after_secs),
            );
        }
        response
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
