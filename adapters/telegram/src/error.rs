//! The adapter's error type and the scrubbing of the bot token out of
//! everything that may reach a log line or a caller.
//!
//! The Bot API puts the token in every request path (`/bot<token>/<Method>`),
//! so a `reqwest` error's Display carries it. teloxide's own `hide_token` only
//! recognises tokens of the usual shape; [`Scrubber`] removes the exact token
//! wherever it appears, and any `/bot…/` path segment besides.

use secrecy::{ExposeSecret, SecretString};

/// Why the adapter could not start or an API call failed. Messages never
/// contain the bot token.
#[derive(Debug, thiserror::Error)]
pub enum TelegramError {
    /// A required environment variable is missing or empty.
    #[error("telegram.{key}: environment variable {var} is not set")]
    MissingEnv { key: &'static str, var: String },
    /// A setting has an unusable value.
    #[error("telegram.{key}: {reason}")]
    InvalidSetting { key: &'static str, reason: String },
    /// The HTTP client could not be built.
    #[error("could not build the HTTP client: {0}")]
    Client(String),
    /// A Bot API call failed (the detail is scrubbed of the token).
    #[error("Telegram {method} failed: {detail}")]
    Api {
        method: &'static str,
        detail: String,
    },
    /// Telegram ended a `getUpdates` with 409 Conflict: another process
    /// polls this bot now, and polling stopped.
    #[error("another process is polling this bot (409 Conflict); only one may")]
    PollingConflict,
}

impl TelegramError {
    /// Whether trying again cannot help until the configuration changes (a
    /// missing variable, an invalid setting), as opposed to a failed call.
    #[must_use]
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Self::MissingEnv { .. } | Self::InvalidSetting { .. } | Self::Client(_)
        )
    }
}

/// Removes the bot token from text before it is logged or returned.
#[derive(Clone)]
pub(crate) struct Scrubber {
    token: SecretString,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrubber(<token>)")
    }
}

/// What replaces a token.
const REDACTED: &str = "<redacted>";

impl Scrubber {
    pub(crate) fn new(token: SecretString) -> Self {
        Self { token }
    }

    /// `text` with the token and any `/bot<anything>/` path segment redacted.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let token = self.token.expose_secret();
        let text = if token.is_empty() {
            text.to_owned()
        } else {
            text.replace(token, REDACTED)
        };
        redact_bot_segments(&text)
    }

    /// An [`TelegramError::Api`] for a failed call, scrubbed.
    pub(crate) fn api_error(
        &self,
        method: &'static str,
        error: &teloxide_core::RequestError,
    ) -> TelegramError {
        TelegramError::Api {
            method,
            detail: self.scrub(&error.to_string()),
        }
    }
}

/// Rewrites every `/bot<segment>` in a URL-like text to `/bot<redacted>`
/// (the segment runs to the next `/`, `?`, whitespace, quote or `)`).
fn redact_bot_segments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("/bot") {
        let (head, tail) = rest.split_at(at + "/bot".len());
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '"' | '\'' | ')') || c.is_whitespace())
            .unwrap_or(tail.len());
        if end > 0 && !tail[..end].starts_with(REDACTED) {
            out.push_str(REDACTED);
        } else {
            out.push_str(&tail[..end]);
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubber() -> Scrubber {
        Scrubber::new(SecretString::from("123:SECRET-token"))
    }

    #[test]
    fn the_exact_token_is_redacted_anywhere() {
        let text = "error sending request for url (http://127.0.0.1:1/bot123:SECRET-token/getMe): refused; token 123:SECRET-token";
        let scrubbed = scrubber().scrub(text);
        assert!(!scrubbed.contains("SECRET"), "{scrubbed}");
        assert!(scrubbed.contains("/bot<redacted>/getMe"), "{scrubbed}");
    }

    #[test]
    fn other_bot_path_segments_are_redacted_too() {
        let scrubbed = scrubber().scrub("url (https://api.telegram.org/bot999:other/sendMessage)");
        assert_eq!(
            scrubbed,
            "url (https://api.telegram.org/bot<redacted>/sendMessage)"
        );
    }

    #[test]
    fn text_without_tokens_is_unchanged() {
        assert_eq!(scrubber().scrub("chat not found"), "chat not found");
    }
}
