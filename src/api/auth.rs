//! Bearer-key authentication for `/v1`, compared in constant time. The
//! matching key's [`Caller`] (whom it acts for) goes into the request's
//! extensions for the handlers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::caller::Caller;
use super::{ApiError, ApiState};

/// Lets a request through, as the caller of its key, when its bearer key is
/// one of those configured, or as the open caller when none is.
pub async fn require_key(
    State(state): State<Arc<ApiState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if state.keys.is_empty() {
        request.extensions_mut().insert(Caller::open());
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
    // nothing about the key's length or prefix. Every key is compared.
    let presented = Sha256::digest(presented.as_bytes());
    let mut matched = None;
    for key in &state.keys {
        let expected = Sha256::digest(key.secret.expose_secret().as_bytes());
        if bool::from(presented.ct_eq(&expected)) && matched.is_none() {
            matched = Some(key);
        }
    }
    match matched {
        Some(key) => {
            request.extensions_mut().insert(Caller::of_key(key));
            next.run(request).await
        }
        None => ApiError::Unauthorized.into_response(),
    }
}
