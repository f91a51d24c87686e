//! The Graph API client: sending messages (and read receipts), reading a
//! phone number's details and a media item's download URL, and reading
//! Graph errors.
//!
//! Errors come as `{"error": {"message", "type", "code", "error_data":
//! {"details"}, "fbtrace_id"}}`; `classify` sorts them by code (as Meta
//! advises, rather than by HTTP status) into what the sender acts on: a
//! rate limit ([`RATE_LIMIT_CODES`] or HTTP 429), the closed 24-hour
//! window ([`REENGAGEMENT_CODES`]), a refused access token, a transient
//! failure on Meta's side, or a refusal. The token travels in the
//! `Authorization` header only; errors never carry it, network errors lose
//! their URL, and Graph's texts are scrubbed of phone numbers.

use std::time::Duration;

use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::redact;

/// Graph codes that mean "slow down": 4 (application request limit), 613
/// (calls exceeded the rate limit), 80007 (WhatsApp Business Account rate
/// limit), 130429 (Cloud API throughput), 131048 (spam rate limit), 131056
/// (pair rate limit: too many messages to one person).
pub const RATE_LIMIT_CODES: [i64; 6] = [4, 613, 80_007, 130_429, 131_048, 131_056];

/// Graph codes that mean the 24-hour customer service window is closed:
/// 131047 (re-engagement message) and 470, its older form. (131026,
/// "message undeliverable", is not one: the number may not be on WhatsApp
/// at all.)
pub const REENGAGEMENT_CODES: [i64; 2] = [131_047, 470];

/// Graph codes for a failure on Meta's side that a retry may mend: 1 (API
/// unknown), 2 (API service), 131000 (something went wrong), 131016
/// (service unavailable), 133004 (server temporarily unavailable).
pub const TRANSIENT_CODES: [i64; 5] = [1, 2, 131_000, 131_016, 133_004];

/// Graph's code for an access token that is invalid or expired.
pub const TOKEN_CODE: i64 = 190;

/// Why a Graph API call failed. The texts name no token and no phone
/// number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Meta asked us to slow down; `retry_after` when it said for how long.
    #[error("rate limited by WhatsApp (code {})", show_code(*.code))]
    RateLimited {
        code: Option<i64>,
        retry_after: Option<Duration>,
    },
    /// A free-form message to someone whose last message is more than 24
    /// hours old.
    #[error("the 24-hour customer service window is closed (code {code})")]
    WindowClosed { code: i64 },
    /// The access token is invalid, expired or revoked.
    #[error("WhatsApp refused the access token (HTTP {status}, code {}): {message}", show_code(*.code))]
    TokenRejected {
        status: u16,
        code: Option<i64>,
        message: String,
    },
    /// Meta failed; a retry may work.
    #[error("WhatsApp failed (HTTP {status}, code {})", show_code(*.code))]
    Server { status: u16, code: Option<i64> },
    /// The request did not complete (connect, timeout, reset).
    #[error("network error: {0}")]
    Network(String),
    /// Meta refused the request; sending it again will not help.
    #[error("WhatsApp refused the request (HTTP {status}, code {code}): {message}")]
    Refused {
        status: u16,
        code: i64,
        message: String,
    },
    /// A success without the JSON the Graph API documents.
    #[error("unreadable response from WhatsApp (HTTP {status})")]
    InvalidResponse { status: u16 },
    /// An id that cannot be a Graph id; nothing was sent.
    #[error("not a Graph id")]
    InvalidId,
}

fn show_code(code: Option<i64>) -> String {
    code.map_or_else(|| "none".to_owned(), |code| code.to_string())
}

/// The `error` object of a Graph error response.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct GraphError {
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub code: Option<i64>,
    #[serde(default)]
    pub error_data: Option<ErrorData>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ErrorData {
    #[serde(default)]
    pub details: Option<String>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: GraphError,
}

/// Sorts a failed response into an [`ApiError`]; see the module docs.
pub(crate) fn classify(
    status: u16,
    error: Option<GraphError>,
    retry_after: Option<Duration>,
) -> ApiError {
    let code = error.as_ref().and_then(|error| error.code);
    let is = |codes: &[i64]| code.is_some_and(|code| codes.contains(&code));
    if status == 429 || is(&RATE_LIMIT_CODES) {
        return ApiError::RateLimited { code, retry_after };
    }
    if let Some(code) = code.filter(|code| REENGAGEMENT_CODES.contains(code)) {
        return ApiError::WindowClosed { code };
    }
    let message = error.as_ref().map(describe).unwrap_or_default();
    if status == 401 || code == Some(TOKEN_CODE) {
        return ApiError::TokenRejected {
            status,
            code,
            message,
        };
    }
    if status >= 500 || is(&TRANSIENT_CODES) {
        return ApiError::Server { status, code };
    }
    match code {
        Some(code) => ApiError::Refused {
            status,
            code,
            message,
        },
        None if (400..500).contains(&status) => ApiError::Refused {
            status,
            code: 0,
            message: "no error details".to_owned(),
        },
        None => ApiError::InvalidResponse { status },
    }
}

/// Graph's message and details, scrubbed of phone numbers.
fn describe(error: &GraphError) -> String {
    let details = error
        .error_data
        .as_ref()
        .and_then(|data| data.details.as_deref())
        .filter(|details| !details.is_empty() && *details != error.message);
    let text = match details {
        Some(details) => format!("{} ({details})", error.message),
        None => error.message.clone(),
    };
    redact::scrub(&text)
}

/// A phone number's details (`GET /{phone-number-id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PhoneNumberDetails {
    /// As WhatsApp shows it (`+1 555-010-4242`).
    #[serde(default)]
    pub display_phone_number: Option<String>,
    /// The business name WhatsApp verified.
    #[serde(default)]
    pub verified_name: Option<String>,
    /// `GREEN`, `YELLOW`, `RED` or `UNKNOWN`.
    #[serde(default)]
    pub quality_rating: Option<String>,
}

/// Where a media item can be downloaded (`GET /{media-id}`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MediaInfo {
    /// Short-lived (minutes); downloading it needs the access token.
    pub url: String,
    #[serde(default, deserialize_with = "crate::payload::lenient_u64")]
    pub file_size: Option<u64>,
}

/// The Graph API at one base URL and version.
pub(crate) struct Graph {
    http: reqwest::Client,
    /// `{api_url}/{api_version}`, without a trailing slash.
    base: String,
}

impl Graph {
    pub(crate) fn new(http: reqwest::Client, base: String) -> Self {
        Self { http, base }
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends one message (`POST /{phone-number-id}/messages`) and returns
    /// its `wamid`.
    pub(crate) async fn send(
        &self,
        phone_number_id: &str,
        token: &SecretString,
        body: &Value,
    ) -> Result<String, ApiError> {
        #[derive(Deserialize)]
        struct Sent {
            messages: Vec<SentMessage>,
        }
        #[derive(Deserialize)]
        struct SentMessage {
            id: String,
        }
        let sent: Sent = self.post_messages(phone_number_id, token, body).await?;
        sent.messages
            .into_iter()
            .next()
            .map(|message| message.id)
            .ok_or(ApiError::InvalidResponse { status: 200 })
    }

    /// Marks `message_id` read, with the typing indicator when `typing`.
    pub(crate) async fn mark_read(
        &self,
        phone_number_id: &str,
        token: &SecretString,
        message_id: &str,
        typing: bool,
    ) -> Result<(), ApiError> {
        let mut body = serde_json::json!({
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
        });
        if typing {
            body["typing_indicator"] = serde_json::json!({ "type": "text" });
        }
        let _: serde::de::IgnoredAny = self.post_messages(phone_number_id, token, &body).await?;
        Ok(())
    }

    async fn post_messages<T: DeserializeOwned>(
        &self,
        phone_number_id: &str,
        token: &SecretString,
        body: &Value,
    ) -> Result<T, ApiError> {
        let url = format!("{}/{}/messages", self.base, segment(phone_number_id)?);
        let request = self
            .http
            .post(url)
            .bearer_auth(token.expose_secret())
            .json(body);
        execute(request).await
    }

    /// The number's display number, verified name and quality rating.
    pub(crate) async fn phone_number(
        &self,
        phone_number_id: &str,
        token: &SecretString,
    ) -> Result<PhoneNumberDetails, ApiError> {
        let url = format!("{}/{}", self.base, segment(phone_number_id)?);
        let request = self
            .http
            .get(url)
            .query(&[(
                "fields",
                "display_phone_number,verified_name,quality_rating",
            )])
            .bearer_auth(token.expose_secret());
        execute(request).await
    }

    /// Where media `media_id` can be downloaded, and its declared size.
    pub(crate) async fn media(
        &self,
        token: &SecretString,
        media_id: &str,
    ) -> Result<MediaInfo, ApiError> {
        let url = format!("{}/{}", self.base, segment(media_id)?);
        let request = self.http.get(url).bearer_auth(token.expose_secret());
        execute(request).await
    }
}

/// Sends a request and reads a Graph response.
async fn execute<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, ApiError> {
    let response = request.send().await.map_err(network)?;
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers());
    let body = response.bytes().await.map_err(network)?;
    if (200..300).contains(&status) {
        return serde_json::from_slice(&body).map_err(|_| ApiError::InvalidResponse { status });
    }
    let error = serde_json::from_slice::<ErrorEnvelope>(&body)
        .ok()
        .map(|envelope| envelope.error);
    Err(classify(status, error, retry_after))
}

/// A network error without its URL, with its causes.
pub(crate) fn network(err: reqwest::Error) -> ApiError {
    ApiError::Network(describe_network(err))
}

/// What went wrong in a request, without its URL.
pub(crate) fn describe_network(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    redact::scrub(&text)
}

/// `Retry-After` in seconds, when present and sane (at most an hour).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs.min(3600)))
}

/// `id` as a path segment: Graph ids are digits (media ids too), so
/// anything but letters, digits, `-` and `_` is refused rather than let an
/// odd id change the path (`..` would, even escaped).
fn segment(id: &str) -> Result<&str, ApiError> {
    let plain = !id.is_empty()
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'));
    if plain {
        Ok(id)
    } else {
        Err(ApiError::InvalidId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(code: i64, message: &str) -> Option<GraphError> {
        Some(GraphError {
            message: message.to_owned(),
            code: Some(code),
            error_data: None,
        })
    }

    #[test]
    fn rate_limits_come_by_status_or_code() {
        let wait = Some(Duration::from_secs(3));
        assert_eq!(
            classify(429, None, wait),
            ApiError::RateLimited {
                code: None,
                retry_after: wait
            }
        );
        for code in RATE_LIMIT_CODES {
            assert!(
                matches!(classify(400, graph(code, "slow"), None), ApiError::RateLimited { code: Some(c), .. } if c == code),
                "{code}"
            );
        }
    }

    #[test]
    fn the_closed_window_is_its_own_error() {
        assert_eq!(
            classify(400, graph(131_047, "Re-engagement message"), None),
            ApiError::WindowClosed { code: 131_047 }
        );
        assert!(matches!(
            classify(400, graph(131_026, "Message undeliverable"), None),
            ApiError::Refused { code: 131_026, .. }
        ));
    }

    #[test]
    fn tokens_server_failures_and_refusals() {
        assert!(matches!(
            classify(401, graph(190, "Error validating access token"), None),
            ApiError::TokenRejected {
                code: Some(190),
                ..
            }
        ));
        assert!(matches!(
            classify(400, graph(190, "expired"), None),
            ApiError::TokenRejected { .. }
        ));
        assert!(matches!(
            classify(503, None, None),
            ApiError::Server { status: 503, .. }
        ));
        assert!(matches!(
            classify(400, graph(131_000, "Something went wrong"), None),
            ApiError::Server { .. }
        ));
        assert!(matches!(
            classify(400, graph(100, "Invalid parameter"), None),
            ApiError::Refused { code: 100, .. }
        ));
        assert!(matches!(
            classify(404, None, None),
            ApiError::Refused { code: 0, .. }
        ));
    }

    #[test]
    fn graph_texts_lose_phone_numbers() {
        let error = GraphError {
            message: "(#131030) Recipient phone number not in allowed list".to_owned(),
            code: Some(131_030),
            error_data: Some(ErrorData {
                details: Some("Add 15551234567 to the allowed list".to_owned()),
            }),
        };
        let shown = classify(400, Some(error), None).to_string();
        assert!(!shown.contains("15551234567"), "{shown}");
        assert!(
            shown.contains("…4567") && shown.contains("131030"),
            "{shown}"
        );
    }

    #[test]
    fn sizes_read_as_numbers_or_strings() {
        let info: MediaInfo = serde_json::from_str(r#"{"url":"u","file_size":"303833"}"#).unwrap();
        assert_eq!(info.file_size, Some(303_833));
        let info: MediaInfo = serde_json::from_str(r#"{"url":"u","file_size":12}"#).unwrap();
        assert_eq!(info.file_size, Some(12));
        let info: MediaInfo = serde_json::from_str(r#"{"url":"u"}"#).unwrap();
        assert_eq!(info.file_size, None);
    }

    #[test]
    fn odd_ids_cannot_escape_the_path() {
        assert_eq!(segment("106540352242922"), Ok("106540352242922"));
        for odd in ["..", "../me", "a?b", "%2e%2e", ""] {
            assert_eq!(segment(odd), Err(ApiError::InvalidId), "{odd}");
        }
    }
}
