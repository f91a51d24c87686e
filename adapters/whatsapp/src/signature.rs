//! Webhook authenticity: Meta signs every webhook request with the app
//! secret (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`),
//! and the subscription handshake carries the verify token. Both are
//! compared in constant time, and the signature is checked over the raw
//! bytes before anything is parsed.

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

const PREFIX: &str = "sha256=";

type HmacSha256 = Hmac<Sha256>;

/// The header value Meta sends for `body`: `sha256=` and the lowercase hex
/// HMAC-SHA256 of the raw bytes keyed with `app_secret`.
#[must_use]
pub fn sign(app_secret: &[u8], body: &[u8]) -> String {
    let mut mac = keyed(app_secret);
    mac.update(body);
    format!("{PREFIX}{}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header` is a valid signature of `body` under `app_secret`.
/// The hex may be in either case; anything malformed is not valid.
#[must_use]
pub fn verify(app_secret: &SecretString, body: &[u8], header: &str) -> bool {
    let Some(hex_digest) = header.trim().strip_prefix(PREFIX) else {
        return false;
    };
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let mut mac = keyed(app_secret.expose_secret().as_bytes());
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&expected).is_ok()
}

/// Compares two secrets without leaking where they differ.
#[must_use]
pub fn constant_time_eq(given: &str, expected: &SecretString) -> bool {
    given
        .as_bytes()
        .ct_eq(expected.expose_secret().as_bytes())
        .into()
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HMAC-SHA256 example of RFC 2104's Wikipedia page.
    const FOX: &[u8] = b"The quick brown fox jumps over the lazy dog";
    const FOX_MAC: &str = "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8";

    fn secret(text: &str) -> SecretString {
        SecretString::from(text.to_owned())
    }

    #[test]
    fn a_known_vector_signs_and_verifies() {
        assert_eq!(sign(b"key", FOX), format!("sha256={FOX_MAC}"));
        assert!(verify(&secret("key"), FOX, &format!("sha256={FOX_MAC}")));
        let upper = FOX_MAC.to_ascii_uppercase();
        assert!(verify(&secret("key"), FOX, &format!("sha256={upper}")));
    }

    #[test]
    fn other_bytes_keys_or_shapes_do_not_verify() {
        let good = format!("sha256={FOX_MAC}");
        assert!(!verify(&secret("key"), b"The quick brown fox", &good));
        assert!(!verify(&secret("other"), FOX, &good));
        assert!(!verify(&secret("key"), FOX, FOX_MAC));
        assert!(!verify(&secret("key"), FOX, "sha1=abc"));
        assert!(!verify(&secret("key"), FOX, "sha256=zz"));
        assert!(!verify(&secret("key"), FOX, "sha256="));
        assert!(!verify(&secret("key"), FOX, &good[..good.len() - 2]));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq("verify-me", &secret("verify-me")));
        assert!(!constant_time_eq("verify-m", &secret("verify-me")));
        assert!(!constant_time_eq("", &secret("verify-me")));
    }
}
