//! What a failed model call becomes: the [`LlmError`] of a transport
//! failure or an error status (an error sent inside a stream is read as
//! the status it stands for), its message taken from the provider's body,
//! shortened, and never carrying the key; and the log line of a call that
//! failed for good, naming the endpoint without its credentials.

use reqwest::header::HeaderMap;

use super::LlmError;
use super::retry::retry_after_from_headers;

/// Longest provider error message we keep, in characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// Logs a model call that failed for good (retries spent, or not
/// retryable): the endpoint it went to (see [`loggable_url`]), the status,
/// what the failure means, and the error. A failure the operator must fix
/// (a wrong URL, a bad key, a refused request) is an ERROR, one that may
/// pass (unreachable, rate limited, the provider failing) a WARN.
pub(crate) fn log_failure(url: &str, error: &LlmError) {
    let failure = error.failure();
    let url = loggable_url(url);
    let status = error.status();
    if failure.needs_operator() {
        tracing::error!(
            url,
            status,
            failure = failure.as_str(),
            error = %error,
            "model call failed; check the model endpoint's configuration"
        );
    } else {
        tracing::warn!(
            url,
            status,
            failure = failure.as_str(),
            error = %error,
            "model call failed"
        );
    }
}

/// A request URL fit for a log line: scheme, host, port and path, without
/// the user info, query or fragment (where a key could hide).
pub(crate) fn loggable_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(parsed) => {
            let host = parsed.host_str().unwrap_or_default();
            let port = parsed
                .port()
                .map(|port| format!(":{port}"))
                .unwrap_or_default();
            format!("{}://{host}{port}{}", parsed.scheme(), parsed.path())
        }
        Err(_) => "(unparseable URL)".to_owned(),
    }
}

/// The error an HTTP `status` with `body` stands for, when it comes without
/// headers (an error sent inside a stream): see [`status_error`].
pub(crate) fn error_status(status: u16, body: &str, secret: &str, busy: &[u16]) -> LlmError {
    let status =
        reqwest::StatusCode::from_u16(status).unwrap_or(reqwest::StatusCode::INTERNAL_SERVER_ERROR);
    status_error(status, &HeaderMap::new(), body.as_bytes(), secret, busy)
}

/// Maps a reqwest failure (sending, or reading the body) to an [`LlmError`].
///
/// reqwest's `Display` includes the request URL, which may carry credentials
/// (a key in a query string or userinfo), so the URL is stripped; the
/// innermost cause (e.g. "Connection refused") is kept because it is what an
/// operator needs, and scrubbed of `secret` defensively.
pub(crate) fn transport_error(error: reqwest::Error, secret: &str) -> LlmError {
    if error.is_timeout() {
        return LlmError::Timeout;
    }
    let error = error.without_url();
    let mut text = error.to_string();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&error);
    let mut innermost = None;
    while let Some(current) = cause {
        innermost = Some(current);
        cause = current.source();
    }
    if let Some(innermost) = innermost {
        text.push_str(": ");
        text.push_str(&innermost.to_string());
    }
    LlmError::Network(scrub(&text, secret))
}

/// Maps a non-success HTTP status to an error: 429 (and any `busy` codes the
/// provider adds, like Anthropic's 529) is a rate limit carrying the delay
/// asked for, other 5xx a server failure, anything else a rejection (not
/// retried). Messages come from the body with `secret` scrubbed.
pub(crate) fn status_error(
    status: reqwest::StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    secret: &str,
    busy: &[u16],
) -> LlmError {
    let code = status.as_u16();
    if status == reqwest::StatusCode::TOO_MANY_REQUESTS || busy.contains(&code) {
        LlmError::RateLimited {
            status: code,
            retry_after: retry_after_from_headers(headers),
        }
    } else if status.is_server_error() {
        LlmError::Server {
            status: code,
            message: error_message(body, secret),
        }
    } else {
        LlmError::Rejected {
            status: code,
            message: error_message(body, secret),
        }
    }
}

/// A short, secret-free description of a failed response, for the error.
///
/// Prefers the provider's `error.message` (both OpenAI and Anthropic use that
/// shape); falls back to the start of the body, since a proxy's HTML or plain
/// text error is still more useful than nothing. Either way, providers echo
/// keys back ("Incorrect API key provided: ..."), so the key is removed.
pub(crate) fn error_message(body: &[u8], secret: &str) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|value| match value.pointer("/error/message") {
            Some(serde_json::Value::String(message)) => Some(message.clone()),
            _ => None,
        });
    let raw = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let collapsed = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    // Scrub before truncating, so a key cut in half cannot survive.
    let clean = scrub(&collapsed, secret);
    if clean.is_empty() {
        return "no error message".to_owned();
    }
    truncate_chars(&clean, MAX_MESSAGE_CHARS)
}

/// Removes every occurrence of `secret` from `text`.
fn scrub(text: &str, secret: &str) -> String {
    // An empty pattern would match between every character.
    if secret.is_empty() {
        return text.to_owned();
    }
    text.replace(secret, "[redacted]")
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_extracted_scrubbed_and_truncated() {
        let key = "sk-secret-123";
        let body =
            br#"{"error":{"message":"Incorrect API key provided: sk-secret-123.","type":"x"}}"#;
        let message = error_message(body, key);
        assert_eq!(message, "Incorrect API key provided: [redacted].");

        let message = error_message(b"<html>\n  bad   gateway sk-secret-123 </html>", key);
        assert_eq!(message, "<html> bad gateway [redacted] </html>");

        let long = "é".repeat(1000);
        let message = error_message(long.as_bytes(), key);
        assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert_eq!(error_message(b"", key), "no error message");
        assert_eq!(scrub("abc", ""), "abc");
    }

    #[test]
    fn logged_urls_keep_the_endpoint_and_drop_credentials() {
        assert_eq!(
            loggable_url("https://user:sk-1@llm.example:8443/v1/chat/completions?key=sk-2#x"),
            "https://llm.example:8443/v1/chat/completions"
        );
        assert_eq!(
            loggable_url("http://127.0.0.1/v1/messages"),
            "http://127.0.0.1/v1/messages"
        );
        assert_eq!(loggable_url("not a url"), "(unparseable URL)");
    }
}
