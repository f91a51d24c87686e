//! A thin client for the Slack Web API methods the adapter calls, over
//! `reqwest`: write methods are posted as JSON, read methods as GET query
//! strings (Slack's read methods do not take JSON bodies), each with the
//! token in the `Authorization` header only.
//!
//! Slack answers `{"ok": false, "error": "channel_not_found"}` with HTTP
//! 200 for most failures, HTTP 429 with `Retry-After` (seconds) when a
//! method's rate tier is exhausted, and 5xx when it is unwell. Each becomes
//! an [`ApiError`] whose text names the method and Slack's error code,
//! never a token; network errors have their URL removed.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Wait used when Slack rate-limits without saying for how long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest `Retry-After` honoured as given.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Slack's error codes that trying again may mend.
const TRANSIENT_ERRORS: [&str; 7] = [
    "ratelimited",
    "rate_limited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "team_added_to_org",
];

/// Slack's error codes that say the token itself is refused.
const AUTH_ERRORS: [&str; 6] = [
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

/// Why a Web API call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Slack asked us to slow down (HTTP 429, or `ratelimited`).
    #[error("Slack {method}: rate limited, retry after {retry_after:?}")]
    RateLimited {
        method: &'static str,
        retry_after: Duration,
    },
    /// The request did not complete (connect, timeout, reset).
    #[error("Slack {method}: network error: {detail}")]
    Network {
        method: &'static str,
        detail: String,
    },
    /// A 5xx.
    #[error("Slack {method}: server error, HTTP {status}")]
    Server { method: &'static str, status: u16 },
    /// Slack answered `ok: false` with this error code.
    #[error("Slack {method}: {error}")]
    Slack { method: &'static str, error: String },
    /// A body that is not the JSON Slack documents.
    #[error("Slack {method}: unreadable response (HTTP {status})")]
    InvalidJson { method: &'static str, status: u16 },
}

impl ApiError {
    /// Slack's error code, for an `ok: false` answer.
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Slack { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Whether trying again later may work: rate limits, network and
    /// server failures, and Slack's own transient error codes.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Slack { error, .. } => TRANSIENT_ERRORS.contains(&error.as_str()),
            _ => true,
        }
    }

    /// Whether Slack refused the token (revoked, invalid, wrong type).
    #[must_use]
    pub fn is_auth(&self) -> bool {
        self.code().is_some_and(|code| AUTH_ERRORS.contains(&code))
    }
}

/// `auth.test`: who a bot token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BotIdentity {
    /// The workspace's id (`T…`).
    pub team_id: String,
    /// The workspace's name.
    #[serde(default)]
    pub team: String,
    /// The bot's user id (`U…`), as mentions name it.
    pub user_id: String,
    /// The bot's id (`B…`), as its messages carry it.
    #[serde(default)]
    pub bot_id: Option<String>,
    /// The bot user's name.
    #[serde(default)]
    pub user: String,
    /// The Enterprise Grid organisation, if any.
    #[serde(default)]
    pub enterprise_id: Option<String>,
}

/// The Web API client, shared by every part of the adapter.
#[derive(Clone)]
pub(crate) struct WebApi {
    http: reqwest::Client,
    base: String,
}

impl WebApi {
    pub fn new(http: reqwest::Client, base: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// The HTTP client (file downloads use it too).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `auth.test`.
    pub async fn auth_test(&self, token: &SecretString) -> Result<BotIdentity, ApiError> {
        self.post_form("auth.test", token).await
    }

    /// `apps.connections.open` with an app-level token: a Socket Mode
    /// WebSocket URL (single use; it carries a ticket, so it is never
    /// logged).
    pub async fn open_connection(&self, app_token: &SecretString) -> Result<String, ApiError> {
        #[derive(Deserialize)]
        struct Opened {
            url: String,
        }
        let opened: Opened = self.post_form("apps.connections.open", app_token).await?;
        Ok(opened.url)
    }

    /// Posts `body` as JSON to a write method (`chat.postMessage`…).
    pub async fn post<T: DeserializeOwned>(
        &self,
        method: &'static str,
        token: &SecretString,
        body: &Value,
    ) -> Result<T, ApiError> {
        let request = self
            .http
            .post(self.url(method))
            .bearer_auth(token.expose_secret())
            .json(body);
        execute(method, request).await
    }

    /// Calls a read method (`users.info`…) with `query`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        method: &'static str,
        token: &SecretString,
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        let request = self
            .http
            .get(self.url(method))
            .bearer_auth(token.expose_secret())
            .query(query);
        execute(method, request).await
    }

    /// Calls a method that takes no arguments, as an empty form post.
    async fn post_form<T: DeserializeOwned>(
        &self,
        method: &'static str,
        token: &SecretString,
    ) -> Result<T, ApiError> {
        let request = self
            .http
            .post(self.url(method))
            .bearer_auth(token.expose_secret())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body("");
        execute(method, request).await
    }

    fn url(&self, method: &str) -> String {
        format!("{}/{method}", self.base)
    }
}

/// Sends a request and reads Slack's answer.
async fn execute<T: DeserializeOwned>(
    method: &'static str,
    request: reqwest::RequestBuilder,
) -> Result<T, ApiError> {
    #[derive(Deserialize)]
    struct Status {
        ok: bool,
        #[serde(default)]
        error: Option<String>,
    }
    let network = |err: reqwest::Error| ApiError::Network {
        method,
        detail: err.without_url().to_string(),
    };
    let response = request.send().await.map_err(network)?;
    let status = response.status();
    if status.as_u16() == 429 {
        return Err(ApiError::RateLimited {
            method,
            retry_after: retry_after(response.headers()),
        });
    }
    let body = response.bytes().await.map_err(network)?;
    if status.is_server_error() {
        return Err(ApiError::Server {
            method,
            status: status.as_u16(),
        });
    }
    let invalid = || ApiError::InvalidJson {
        method,
        status: status.as_u16(),
    };
    let reported: Status = serde_json::from_slice(&body).map_err(|_| invalid())?;
    if !reported.ok {
        let error = reported.error.unwrap_or_else(|| "unknown_error".to_owned());
        if matches!(error.as_str(), "ratelimited" | "rate_limited") {
            return Err(ApiError::RateLimited {
                method,
                retry_after: DEFAULT_RETRY_AFTER,
            });
        }
        return Err(ApiError::Slack { method, error });
    }
    serde_json::from_slice(&body).map_err(|_| invalid())
}

/// `Retry-After`: seconds to wait (capped at an hour).
fn retry_after(headers: &HeaderMap) -> Duration {
    headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map_or(DEFAULT_RETRY_AFTER, |secs| {
            Duration::from_secs(secs).clamp(Duration::from_secs(1), MAX_RETRY_AFTER)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), DEFAULT_RETRY_AFTER);
        headers.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Duration::from_secs(7));
        headers.insert(RETRY_AFTER, "0".parse().unwrap());
        assert_eq!(retry_after(&headers), Duration::from_secs(1));
        headers.insert(RETRY_AFTER, "999999".parse().unwrap());
        assert_eq!(retry_after(&headers), MAX_RETRY_AFTER);
        headers.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), DEFAULT_RETRY_AFTER);
    }

    #[test]
    fn errors_are_classified() {
        let slack = |error: &str| ApiError::Slack {
            method: "chat.postMessage",
            error: error.to_owned(),
        };
        assert!(!slack("channel_not_found").is_transient());
        assert!(!slack("not_in_channel").is_transient());
        assert!(!slack("invalid_auth").is_transient());
        assert!(slack("invalid_auth").is_auth());
        assert!(slack("internal_error").is_transient());
        assert!(
            ApiError::Server {
                method: "auth.test",
                status: 503
            }
            .is_transient()
        );
        assert_eq!(
            slack("channel_not_found").to_string(),
            "Slack chat.postMessage: channel_not_found"
        );
    }
}
