//! Bearer-key authentication for `/v1`, compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{ApiError, ApiState};

/// Lets a request through when no keys are configured or its bearer key is
/// one of them.
pub async fn require_key(
    State(state): State<Arc<ApiState>>,
    request: Request,
    next: Next,
) -> Response {
    if state.keys.is_empty() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(presented) = presented else {
        return ApiError::Unauthorized.into_response();
    };
    // Hashing first gives equal-length inputs, so the comparison time says
    // nothing about the key's length or prefix.
    let presented = Sha256::digest(presented.as_bytes());
    let mut accepted = subtle::Choice::from(0);
    for key in &state.keys {
        let expected = Sha256::digest(key.expose_secret().as_bytes());
        accepted |= presented.ct_eq(&expected);
    }
    if bool::from(accepted) {
        next.run(request).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}
