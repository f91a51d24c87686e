//! Feishu's webhook cryptography: AES-256-CBC event decryption, the
//! `X-Lark-Signature` check, and constant-time secret comparison.
//!
//! With an Encrypt Key set, Feishu sends `{"encrypt":"<base64>"}`; the base64
//! decodes to a 16-byte IV followed by the ciphertext, encrypted with
//! AES-256-CBC (PKCS#7 padding) under the key SHA-256(encrypt key). The
//! signature is plain SHA-256 (not HMAC) over timestamp, nonce, encrypt key and
//! the raw body bytes, in lowercase hex.
//!
//! [`encrypt`] is the inverse of [`decrypt`]; the adapter never encrypts, but
//! tests (this crate's and the gateway's) use it to play Feishu.

use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type Aes256CbcDec = cbc::Decryptor<aes::Aes256>;
type Aes256CbcEnc = cbc::Encryptor<aes::Aes256>;

/// The AES block (and IV) size in bytes.
const BLOCK: usize = 16;

/// Why an `encrypt` field could not be decrypted. Carries no key or payload
/// material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    #[error("the encrypted payload is not valid base64")]
    Base64,
    #[error("the encrypted payload is too short or not a whole number of blocks")]
    Length,
    #[error("the encrypted payload does not decrypt under the configured key (bad padding)")]
    Padding,
}

/// Decrypts a Feishu `encrypt` field with the app's Encrypt Key.
///
/// # Errors
/// Not base64, shorter than an IV plus one block, not block-aligned, or bad
/// PKCS#7 padding (most often: the wrong key).
pub fn decrypt(encrypt_key: &SecretString, encrypted: &str) -> Result<Vec<u8>, DecryptError> {
    let raw = BASE64
        .decode(encrypted.trim())
        .map_err(|_| DecryptError::Base64)?;
    if raw.len() < 2 * BLOCK || raw.len() % BLOCK != 0 {
        return Err(DecryptError::Length);
    }
    let (iv, ciphertext) = raw.split_at(BLOCK);
    let key = derive_key(encrypt_key);
    let mut buffer = ciphertext.to_vec();
    let cipher = Aes256CbcDec::new_from_slices(&key, iv).map_err(|_| DecryptError::Length)?;
    let plain = cipher
        .decrypt_padded_mut::<Pkcs7>(&mut buffer)
        .map_err(|_| DecryptError::Padding)?;
    Ok(plain.to_vec())
}

/// Encrypts `plaintext` the way Feishu does, with the given IV, and returns
/// the base64 `encrypt` field.
#[must_use]
pub fn encrypt(encrypt_key: &SecretString, iv: [u8; BLOCK], plaintext: &[u8]) -> String {
    let key = derive_key(encrypt_key);
    let cipher = Aes256CbcEnc::new((&key).into(), (&iv).into());
    let mut buffer = vec![0_u8; (plaintext.len() / BLOCK + 1) * BLOCK];
    buffer[..plaintext.len()].copy_from_slice(plaintext);
    let mut raw = iv.to_vec();
    // The buffer holds the plaintext plus one whole block, which is always
    // room enough for PKCS#7 padding, so this cannot fail.
    if let Ok(ciphertext) = cipher.encrypt_padded_mut::<Pkcs7>(&mut buffer, plaintext.len()) {
        raw.extend_from_slice(ciphertext);
    }
    BASE64.encode(raw)
}

/// The expected `X-Lark-Signature` for a request: lowercase hex
/// SHA-256(timestamp + nonce + encrypt key + body).
#[must_use]
pub fn signature(timestamp: &str, nonce: &str, encrypt_key: &SecretString, body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(timestamp.as_bytes());
    hasher.update(nonce.as_bytes());
    hasher.update(encrypt_key.expose_secret().as_bytes());
    hasher.update(body);
    to_hex(&hasher.finalize())
}

/// Whether `provided` is the signature of this request, compared in constant
/// time (hex case is ignored).
#[must_use]
pub fn verify_signature(
    timestamp: &str,
    nonce: &str,
    encrypt_key: &SecretString,
    body: &[u8],
    provided: &str,
) -> bool {
    let expected = signature(timestamp, nonce, encrypt_key, body);
    constant_time_eq(&expected, &provided.to_ascii_lowercase())
}

/// Compares two strings in time that depends only on their lengths.
#[must_use]
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

fn derive_key(encrypt_key: &SecretString) -> [u8; 32] {
    Sha256::digest(encrypt_key.expose_secret().as_bytes()).into()
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &str) -> SecretString {
        SecretString::from(value.to_owned())
    }

    #[test]
    fn the_first_protocol_vector_decrypts_to_hello_world() {
        let plain = decrypt(
            &key("test key"),
            "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=",
        )
        .unwrap();
        assert_eq!(plain, b"hello world");
    }

    #[test]
    fn the_second_protocol_vector_decrypts_to_hello_feishu() {
        let plain = decrypt(
            &key("test_encrypt_key_123"),
            "AAECAwQFBgcICQoLDA0OD/Z6EGyAB32fHiHSf6gwqpQ=",
        )
        .unwrap();
        assert_eq!(plain, b"hello feishu");
    }

    #[test]
    fn encryption_reproduces_the_second_protocol_vector() {
        let iv: [u8; 16] = std::array::from_fn(|i| u8::try_from(i).unwrap());
        let encrypted = encrypt(&key("test_encrypt_key_123"), iv, b"hello feishu");
        assert_eq!(encrypted, "AAECAwQFBgcICQoLDA0OD/Z6EGyAB32fHiHSf6gwqpQ=");
    }

    #[test]
    fn the_protocol_signature_vector_matches() {
        let sig = signature("1700000000", "n0nce", &key("test_encrypt_key_123"), b"{}");
        assert_eq!(
            sig,
            "fccc4628069090c66bba0adeba0b680728919eb54bdebe6c0df7ea24bf5778db"
        );
        assert!(verify_signature(
            "1700000000",
            "n0nce",
            &key("test_encrypt_key_123"),
            b"{}",
            &sig.to_ascii_uppercase()
        ));
    }

    #[test]
    fn a_signature_over_other_bytes_is_rejected() {
        let sig = signature("1700000000", "n0nce", &key("test_encrypt_key_123"), b"{}");
        assert!(!verify_signature(
            "1700000000",
            "n0nce",
            &key("test_encrypt_key_123"),
            b"{ }",
            &sig
        ));
        assert!(!verify_signature(
            "1700000000",
            "n0nce",
            &key("test_encrypt_key_123"),
            b"{}",
            ""
        ));
    }

    #[test]
    fn the_wrong_key_fails_with_a_padding_error_or_garbage() {
        let result = decrypt(
            &key("another key"),
            "AAECAwQFBgcICQoLDA0OD/Z6EGyAB32fHiHSf6gwqpQ=",
        );
        assert_ne!(result, Ok(b"hello feishu".to_vec()));
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        let k = key("k");
        assert_eq!(decrypt(&k, "not base64!"), Err(DecryptError::Base64));
        assert_eq!(decrypt(&k, ""), Err(DecryptError::Length));
        assert_eq!(
            decrypt(&k, "AAECAwQFBgcICQoLDA0ODw=="),
            Err(DecryptError::Length)
        );
        assert_eq!(
            decrypt(&k, &BASE64.encode([0_u8; 33])),
            Err(DecryptError::Length)
        );
    }
}
