//! Slack's request signatures: `X-Slack-Signature` is `v0=` and the hex
//! HMAC-SHA256, keyed with the app's signing secret, of
//! `v0:{X-Slack-Request-Timestamp}:{raw body}`. The raw bytes are signed,
//! so they are checked before anything parses them; the comparison runs in
//! constant time ([`hmac::Mac::verify_slice`]); and a timestamp further than
//! the allowed age from this host's clock is refused, so that a captured
//! request cannot be replayed later.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// The signature scheme's version, the prefix of every signature.
const VERSION: &str = "v0";

/// Why a request's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no X-Slack-Signature or X-Slack-Request-Timestamp header")]
    Missing,
    #[error("the signature does not match the body")]
    Mismatch,
    #[error("the request timestamp is outside the accepted window")]
    Stale,
}

/// `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` keyed with
/// `secret`: what Slack sends in `X-Slack-Signature`.
#[must_use]
pub fn sign(secret: &SecretString, timestamp: &str, body: &[u8]) -> String {
    let mac = mac(secret, timestamp, body);
    format!("{VERSION}={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a request's signature against each of `secrets` (the signing
/// secrets of the apps this adapter serves), then its timestamp's age.
///
/// # Errors
/// [`SignatureError::Missing`] without the headers, [`SignatureError::Mismatch`]
/// when no secret signs these bytes, [`SignatureError::Stale`] when the
/// timestamp is more than `max_age` from `now` either way (or unreadable).
pub fn verify(
    secrets: &[SecretString],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: SystemTime,
    max_age: Duration,
) -> Result<(), SignatureError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(SignatureError::Missing);
    };
    let digest = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or(SignatureError::Mismatch)?;
    let signed = secrets
        .iter()
        .any(|secret| mac(secret, timestamp, body).verify_slice(&digest).is_ok());
    if !signed {
        return Err(SignatureError::Mismatch);
    }
    if !is_fresh(timestamp, now, max_age) {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

fn mac(secret: &SecretString, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.expose_secret().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(VERSION.as_bytes());
    mac.update(b":");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// Whether the request signed at `timestamp` (Unix seconds) was signed at
/// most `max_age` before or after `now`. An unreadable timestamp is not
/// fresh.
fn is_fresh(timestamp: &str, now: SystemTime, max_age: Duration) -> bool {
    let signed_at = timestamp
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|secs| UNIX_EPOCH.checked_add(Duration::from_secs(secs)));
    let Some(signed_at) = signed_at else {
        return false;
    };
    // A timestamp ahead of this clock is as far off as one behind it.
    let skew = now
        .duration_since(signed_at)
        .unwrap_or_else(|ahead| ahead.duration());
    skew <= max_age
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of Slack's "Verifying requests from Slack" guide.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TIMESTAMP: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn secret() -> SecretString {
        SecretString::from(SECRET)
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    const WINDOW: Duration = Duration::from_secs(300);

    #[test]
    fn slacks_documented_example_signs_and_verifies() {
        assert_eq!(sign(&secret(), TIMESTAMP, BODY.as_bytes()), SIGNATURE);
        let checked = verify(
            &[secret()],
            Some(TIMESTAMP),
            Some(SIGNATURE),
            BODY.as_bytes(),
            at(1_531_420_618 + 60),
            WINDOW,
        );
        assert_eq!(checked, Ok(()));
    }

    #[test]
    fn any_of_several_secrets_may_sign() {
        let other = SecretString::from("another-app");
        let checked = verify(
            &[other, secret()],
            Some(TIMESTAMP),
            Some(SIGNATURE),
            BODY.as_bytes(),
            at(1_531_420_618),
            WINDOW,
        );
        assert_eq!(checked, Ok(()));
    }

    #[test]
    fn other_bytes_or_another_secret_do_not_match() {
        let now = at(1_531_420_618);
        let check = |secret: SecretString, signature: &str, body: &str| {
            verify(
                &[secret],
                Some(TIMESTAMP),
                Some(signature),
                body.as_bytes(),
                now,
                WINDOW,
            )
        };
        let mismatch = Err(SignatureError::Mismatch);
        assert_eq!(check(secret(), SIGNATURE, &format!("{BODY} ")), mismatch);
        assert_eq!(check(SecretString::from("x"), SIGNATURE, BODY), mismatch);
        assert_eq!(check(secret(), "v1=00", BODY), mismatch);
        assert_eq!(check(secret(), "v0=not-hex", BODY), mismatch);
        assert_eq!(check(secret(), &SIGNATURE[..20], BODY), mismatch);
    }

    #[test]
    fn timestamps_outside_the_window_either_way_are_stale() {
        let signed = 1_531_420_618;
        let check = |now: u64| {
            verify(
                &[secret()],
                Some(TIMESTAMP),
                Some(SIGNATURE),
                BODY.as_bytes(),
                at(now),
                WINDOW,
            )
        };
        assert_eq!(check(signed + 300), Ok(()));
        assert_eq!(check(signed - 300), Ok(()));
        assert_eq!(check(signed + 301), Err(SignatureError::Stale));
        assert_eq!(check(signed - 301), Err(SignatureError::Stale));
        assert!(!is_fresh("soon", at(signed), WINDOW));
        assert!(!is_fresh("-5", at(signed), WINDOW));
    }

    #[test]
    fn missing_headers_are_refused() {
        let now = at(1_531_420_618);
        let body = BODY.as_bytes();
        let missing = Err(SignatureError::Missing);
        assert_eq!(
            verify(&[secret()], None, Some(SIGNATURE), body, now, WINDOW),
            missing
        );
        assert_eq!(
            verify(&[secret()], Some(TIMESTAMP), None, body, now, WINDOW),
            missing
        );
    }
}
