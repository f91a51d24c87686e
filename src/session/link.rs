//! One-time link codes: 8 characters from an alphabet without look-alikes
//! (no `0`/`O`, `1`/`I`/`L`), drawn from the operating system's random
//! source, read back case-insensitively.

use std::fmt;
use std::time::Duration;

/// The characters a code is made of.
pub const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters per code: 31^8 ≈ 8.5 × 10^11 codes.
pub const CODE_LEN: usize = 8;
/// How long a code can be redeemed.
pub const CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// Failed redemptions an identity may make per [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u64 = 5;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// A well-formed link code.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkCode(String);

/// Why text is not a link code.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a link code is {CODE_LEN} letters and digits")]
pub struct InvalidCode;

impl LinkCode {
    /// A fresh random code.
    pub fn generate() -> Self {
        let mut code = String::with_capacity(CODE_LEN);
        // Rejection sampling keeps every character equally likely: bytes at
        // or above the largest multiple of 31 below 256 are skipped. A v4
        // UUID carries 122 bits from the OS random source; its version and
        // variant bytes are skipped too.
        let limit = u8::try_from(256 - 256 % ALPHABET.len()).unwrap_or(u8::MAX);
        while code.len() < CODE_LEN {
            let bytes = *uuid::Uuid::new_v4().as_bytes();
            for (index, byte) in bytes.iter().enumerate() {
                if index == 6 || index == 8 || *byte >= limit || code.len() == CODE_LEN {
                    continue;
                }
                code.push(char::from(ALPHABET[usize::from(*byte) % ALPHABET.len()]));
            }
        }
        Self(code)
    }

    /// Reads a code as a user typed it (case and surrounding spaces ignored).
    ///
    /// # Errors
    /// Wrong length or a character outside [`ALPHABET`].
    pub fn parse(text: &str) -> Result<Self, InvalidCode> {
        let code = text.trim().to_ascii_uppercase();
        if code.len() == CODE_LEN && code.bytes().all(|b| ALPHABET.contains(&b)) {
            Ok(Self(code))
        } else {
            Err(InvalidCode)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Codes are credentials: never printed by `{:?}` (logs).
impl fmt::Debug for LinkCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkCode(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_codes_are_well_formed_and_differ() {
        let a = LinkCode::generate();
        let b = LinkCode::generate();
        assert_eq!(a.as_str().len(), CODE_LEN);
        assert!(a.as_str().bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a, b);
        assert_eq!(LinkCode::parse(a.as_str()), Ok(a));
    }

    #[test]
    fn codes_parse_case_insensitively_and_reject_look_alikes() {
        assert_eq!(
            LinkCode::parse(" abcd2345 ").map(|c| c.as_str().to_owned()),
            Ok("ABCD2345".to_owned())
        );
        assert_eq!(LinkCode::parse("ABCD0345"), Err(InvalidCode));
        assert_eq!(LinkCode::parse("ABCD234"), Err(InvalidCode));
        assert!(!format!("{:?}", LinkCode::generate()).contains(char::is_numeric));
    }
}
