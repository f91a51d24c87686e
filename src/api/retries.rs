//! Identical requests are one turn, without the client's help: the event id
//! a chat request is recorded under.
//!
//! The official clients retry a 5xx, a 429 or a timeout on their own, with
//! no `Idempotency-Key`. A request without one is recorded under an event
//! id derived from its caller (the key's namespace), its `X-Session-Id` and
//! its body's bytes: `req-<hash>-<attempt>` (attempts 0 to 15; past those
//! an id of its own, which no retry joins). An identical request whose
//! previous attempt is still running, or finished within the reply window
//! (`api.reply_timeout_secs`) without failing and without its reply handed
//! out (a 504, a dropped connection: [`answered`] records the others),
//! takes that attempt's event id, so it is a duplicate: it joins the running
//! turn or gets its reply. Otherwise (no attempt, one that failed, one
//! whose caller got the reply: the same words sent again, as "yes" may be)
//! it is a new attempt and a new turn. An `Idempotency-Key` is used as it
//! is, and joins its first request's turn when it comes from the same
//! caller with the same body ([`check_key`]; otherwise it is refused).

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::domain::{InboundStatus, LocalPlatform, now_ms};
use crate::store::KeyClaim;

use super::caller::Caller;
use super::{ApiError, ApiState, SESSION_HEADER};

/// Numbered attempts of one request looked up; a request repeated more
/// often within the dedup retention is recorded under an id of its own.
const ATTEMPTS: u64 = 16;

/// The event id a request is recorded under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEvent {
    pub event_id: String,
    /// Whether it names an earlier attempt (an `Idempotency-Key`, or an
    /// identical request's event id): it goes where that attempt went.
    pub retry: bool,
}

/// The event id of a request with `headers` and `body` from `caller`.
///
/// # Errors
/// An `Idempotency-Key` that is not 1 to 128 characters of text (400), or
/// a database failure.
pub async fn request_event(
    state: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<RequestEvent, ApiError> {
    if let Some(key) = super::completions::header_value(headers, "idempotency-key")? {
        return Ok(RequestEvent {
            event_id: key,
            retry: true,
        });
    }
    let prefix = fingerprint(caller.account(), headers, body);
    let attempts: Vec<String> = (0..ATTEMPTS).map(|n| format!("{prefix}{n}")).collect();
    let latest = state
        .store
        .api()
        .latest_attempt(LocalPlatform::Api.name(), caller.account(), &attempts)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let window = i64::try_from(state.reply_timeout.as_millis()).unwrap_or(i64::MAX);
    let Some(latest) = latest else {
        return Ok(RequestEvent {
            event_id: format!("{prefix}0"),
            retry: false,
        });
    };
    let joins = match (latest.status, latest.finished_at) {
        (InboundStatus::Pending | InboundStatus::Running, _) => true,
        (InboundStatus::Failed, _) => false,
        (_, Some(finished)) => !latest.answered && now_ms().saturating_sub(finished) <= window,
        (_, None) => false,
    };
    if joins {
        return Ok(RequestEvent {
            event_id: latest.event_id,
            retry: true,
        });
    }
    let next = latest
        .event_id
        .strip_prefix(prefix.as_str())
        .and_then(|n| n.parse::<u64>().ok())
        .map_or(ATTEMPTS, |n| n + 1);
    // Past the last numbered attempt (the same request sent that often
    // within the dedup retention), a request is its own.
    let event_id = if next < ATTEMPTS {
        format!("{prefix}{next}")
    } else {
        format!("{prefix}x-{}", uuid::Uuid::new_v4().simple())
    };
    Ok(RequestEvent {
        event_id,
        retry: false,
    })
}

/// Checks a request's `Idempotency-Key` (when it has one) against the
/// request it was first used with, claiming it on first use: the same key
/// from the same caller with the same body is a retry; with another body it
/// is a 422, from another caller of the key's namespace a 409 that names
/// nothing of theirs. Either refusal stores nothing.
///
/// # Errors
/// Those refusals, a malformed key (400), or a database failure.
pub async fn check_key(
    state: &ApiState,
    caller: &Caller,
    sender: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let Some(key) = super::completions::header_value(headers, "idempotency-key")? else {
        return Ok(());
    };
    let fingerprint = hex::encode(Sha256::digest(body));
    let claim = state
        .store
        .api()
        .claim_idempotency_key(caller.account(), &key, sender, &fingerprint)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    match claim {
        KeyClaim::Same => Ok(()),
        KeyClaim::OtherBody => Err(ApiError::IdempotencyKeyReused),
        KeyClaim::OtherCaller => Err(ApiError::IdempotencyKeyTaken),
    }
}

/// Records that the reply of turn `inbound_id` reached its caller, so that
/// the same request again is a new message. A failure is logged: an
/// identical request within the window then gets this reply once more.
pub async fn answered(state: &ApiState, inbound_id: crate::domain::InboundId) {
    if let Err(err) = state.store.api().record_answered(inbound_id).await {
        tracing::warn!(error = %err, "a handed-out reply was not recorded");
    }
}

/// `req-<hash>-`: the SHA-256 (first 32 hex digits) of the caller's
/// namespace, the session header and the body.
fn fingerprint(account: &str, headers: &HeaderMap, body: &[u8]) -> String {
    let session = headers
        .get(SESSION_HEADER)
        .map(|value| value.as_bytes())
        .unwrap_or_default();
    let mut hash = Sha256::new();
    for part in [account.as_bytes(), b"\n", session, b"\n", body] {
        hash.update(part);
    }
    let digest = hex::encode(hash.finalize());
    format!("req-{}-", &digest[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_covers_caller_session_and_body() {
        let none = HeaderMap::new();
        let mut named = HeaderMap::new();
        named.insert(SESSION_HEADER, "s-1".parse().expect("a header value"));
        let base = fingerprint("keys_env.1", &none, b"{}");
        assert_eq!(base, fingerprint("keys_env.1", &none, b"{}"));
        assert_ne!(base, fingerprint("keys_env.2", &none, b"{}"));
        assert_ne!(base, fingerprint("keys_env.1", &named, b"{}"));
        assert_ne!(base, fingerprint("keys_env.1", &none, b"{ }"));
        assert!(base.starts_with("req-") && base.ends_with('-') && base.len() == 37);
    }
}
