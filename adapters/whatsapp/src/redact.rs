//! Keeping people's phone numbers out of logs and errors.
//!
//! On WhatsApp a person's id (`wa_id`) is their phone number, and a message
//! id (`wamid.…`) is base64 that encodes it too. So neither is ever logged
//! as is, not even at debug level: [`phone`] shows the last four digits,
//! [`message`] a short hash that tells messages apart without revealing
//! anything, and [`scrub`] masks every long run of digits in a text from
//! the Graph API (its error details may name the recipient) before it goes
//! into a log line or an error.

use std::fmt;

use sha2::{Digest, Sha256};

/// Digits a masked number keeps.
const KEPT_DIGITS: usize = 4;

/// Runs of digits at least this long are taken for phone numbers by
/// [`scrub`] (error codes have up to six).
const SCRUBBED_RUN: usize = 7;

/// A phone number shown as its last four digits (`…4567`).
#[derive(Clone, Copy)]
pub struct MaskedPhone<'a>(&'a str);

/// A message id shown as a short hash (`msg:1a2b3c4d`).
#[derive(Clone, Copy)]
pub struct MaskedMessage<'a>(&'a str);

/// `number` masked for a log line.
#[must_use]
pub fn phone(number: &str) -> MaskedPhone<'_> {
    MaskedPhone(number)
}

/// `id` (a `wamid`) masked for a log line.
#[must_use]
pub fn message(id: &str) -> MaskedMessage<'_> {
    MaskedMessage(id)
}

impl fmt::Display for MaskedPhone<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits: Vec<char> = self.0.chars().filter(char::is_ascii_digit).collect();
        if digits.len() <= KEPT_DIGITS {
            return f.write_str("…");
        }
        let tail: String = digits[digits.len() - KEPT_DIGITS..].iter().collect();
        write!(f, "…{tail}")
    }
}

impl fmt::Debug for MaskedPhone<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MaskedMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digest = Sha256::digest(self.0.as_bytes());
        write!(f, "msg:{}", hex::encode(&digest[..4]))
    }
}

impl fmt::Debug for MaskedMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `text` with every run of seven or more digits (phone numbers, and ids
/// that could be) masked as [`phone`] masks one.
#[must_use]
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            run.push(c);
            continue;
        }
        if run.len() >= SCRUBBED_RUN {
            out.push_str(&phone(&run).to_string());
        } else {
            out.push_str(&run);
        }
        run.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phone_numbers_keep_their_last_four_digits() {
        assert_eq!(phone("15551234567").to_string(), "…4567");
        assert_eq!(phone("+1 555-010-4242").to_string(), "…4242");
        assert_eq!(phone("123").to_string(), "…");
        assert_eq!(phone("").to_string(), "…");
    }

    #[test]
    fn message_ids_become_short_stable_hashes() {
        let id = "wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQTk";
        let shown = message(id).to_string();
        assert_eq!(shown, message(id).to_string());
        assert_ne!(shown, message("wamid.other").to_string());
        assert!(shown.starts_with("msg:") && shown.len() == 12, "{shown}");
        assert!(!shown.contains("HBgL"));
    }

    #[test]
    fn scrub_masks_long_digit_runs_only() {
        assert_eq!(
            scrub("(#131030) Recipient 15551234567 not in allowed list"),
            "(#131030) Recipient …4567 not in allowed list"
        );
        assert_eq!(scrub("code 100, HTTP 400"), "code 100, HTTP 400");
        assert_eq!(scrub("ends 1234567"), "ends …4567");
        assert_eq!(scrub("code 131047"), "code 131047");
        assert_eq!(scrub(""), "");
    }
}
