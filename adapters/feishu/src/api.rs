//! The Feishu open API client: tenant token, bot identity, sending and
//! replying to messages, and reading errors out of response bodies.
//!
//! Feishu reports errors in the body's `code` even on HTTP 400, so every
//! response body is read before its status is judged. Rate limits (code
//! 230020, or HTTP 429 / code 99991400 with `x-ogw-ratelimit-reset`) become
//! [`ApiError::RateLimited`]. Errors carry Feishu's code and message, never a
//! token or secret; network errors have their URL removed.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use switchboard_contract::{FetchError, collect_capped};

use crate::token::{Clock, IssuedToken, TokenCache};

/// Wait used when Feishu rate-limits without saying for how long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Feishu's codes for an access token that is missing, malformed, invalid
/// or expired. The official SDKs refresh the token and retry once on
/// 99991663 (tenant token invalid), 99991664 (app token invalid) and
/// 99991671 (token malformed); Feishu's error code list adds 99991661 (no
/// token), 99991665/99991666/99991668 (token invalid) and 99991677
/// ("Authentication token expired"). Each one means the same here: drop the
/// cached tenant token, fetch a new one, and retry once.
pub const TOKEN_ERROR_CODES: [i64; 8] = [
    99_991_661, 99_991_663, 99_991_664, 99_991_665, 99_991_666, 99_991_668, 99_991_671, 99_991_677,
];

/// Feishu's error codes that the adapter treats specially.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 230020: this chat or user is sending too fast.
    RateLimited,
    /// 99991400: the app's request frequency limit (with HTTP 429).
    FrequencyLimit,
    /// The access token is missing, malformed, invalid or expired: any of
    /// [`TOKEN_ERROR_CODES`]. A fresh tenant token may work.
    TokenInvalid,
    /// 230002: the bot is not in the chat.
    BotNotInChat,
    /// 230011: the message replied to was recalled.
    MessageRecalled,
    Unknown(i64),
}

impl ErrorCode {
    #[must_use]
    pub fn from_code(code: i64) -> Self {
        match code {
            230_020 => Self::RateLimited,
            99_991_400 => Self::FrequencyLimit,
            code if TOKEN_ERROR_CODES.contains(&code) => Self::TokenInvalid,
            230_002 => Self::BotNotInChat,
            230_011 => Self::MessageRecalled,
            other => Self::Unknown(other),
        }
    }
}

/// Why an open API call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// Feishu asked us to slow down.
    #[error("rate limited (code {code}), retry after {retry_after:?}")]
    RateLimited { code: i64, retry_after: Duration },
    /// The request did not complete (connect, timeout, reset).
    #[error("network error: {0}")]
    Network(String),
    /// A 5xx without a usable body.
    #[error("server error: HTTP {status}")]
    Server { status: u16 },
    /// The tenant token was refused; a fresh one may work.
    #[error("tenant access token rejected (code {code})")]
    TokenRejected { code: i64 },
    /// Any other error Feishu reported.
    #[error("Feishu error {code}: {msg}")]
    Api { code: i64, msg: String },
    /// A body that is not the JSON Feishu documents.
    #[error("unreadable response body (HTTP {status})")]
    InvalidJson { status: u16 },
}

impl ApiError {
    /// The Feishu code, when the error carries one.
    #[must_use]
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::RateLimited { code, .. }
            | Self::TokenRejected { code }
            | Self::Api { code, .. } => Some(ErrorCode::from_code(*code)),
            _ => None,
        }
    }
}

impl From<reqwest::Error> for ApiError {
    fn from(err: reqwest::Error) -> Self {
        // The URL holds no secret today (the token travels in a header), but
        // it is dropped anyway so that stays true.
        Self::Network(err.without_url().to_string())
    }
}

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// A new message in a chat: `POST /open-apis/im/v1/messages?receive_id_type=chat_id`.
    Chat(&'a str),
    /// A reply: `POST /open-apis/im/v1/messages/{message_id}/reply`.
    Reply {
        message_id: &'a str,
        in_thread: bool,
    },
}

/// One message's type and content (the content is itself a JSON string).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Payload {
    pub msg_type: &'static str,
    pub content: String,
}

pub(crate) struct OpenApi {
    http: reqwest::Client,
    base_url: String,
    app_id: String,
    app_secret: SecretString,
    tokens: TokenCache,
}

impl OpenApi {
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        app_id: &str,
        app_secret: SecretString,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            app_id: app_id.to_owned(),
            app_secret,
            tokens: TokenCache::new(clock),
        }
    }

    /// The bot's own open_id (`GET /open-apis/bot/v3/info`).
    pub async fn bot_open_id(&self) -> Result<String, ApiError> {
        #[derive(Deserialize)]
        struct Info {
            bot: Bot,
        }
        #[derive(Deserialize)]
        struct Bot {
            open_id: String,
        }
        let info: Info = self
            .authorised(|token| {
                self.http
                    .get(format!("{}/open-apis/bot/v3/info", self.base_url))
                    .bearer_auth(token.expose_secret())
            })
            .await?;
        Ok(info.bot.open_id)
    }

    /// Sends one message and returns its `message_id`. `uuid` makes the send
    /// idempotent on Feishu's side for an hour.
    pub async fn send(
        &self,
        target: &Target<'_>,
        payload: &Payload,
        uuid: &str,
    ) -> Result<String, ApiError> {
        #[derive(Deserialize)]
        struct Sent {
            data: SentData,
        }
        #[derive(Deserialize)]
        struct SentData {
            message_id: String,
        }
        let (url, body) = self.request_for(target, payload, uuid);
        let sent: Sent = self
            .authorised(|token| {
                self.http
                    .post(url.as_str())
                    .bearer_auth(token.expose_secret())
                    .json(&body)
            })
            .await?;
        Ok(sent.data.message_id)
    }

    /// Replaces the content of the bot's card message `message_id`
    /// (`PATCH /open-apis/im/v1/messages/{id}`; the card must have been
    /// sent with `update_multi`).
    pub async fn update_card(&self, message_id: &str, card: &str) -> Result<(), ApiError> {
        let url = format!(
            "{}/open-apis/im/v1/messages/{}",
            self.base_url,
            encode_path_segment(message_id)
        );
        let body = serde_json::json!({ "content": card });
        let _: serde::de::IgnoredAny = self
            .authorised(|token| {
                self.http
                    .patch(url.as_str())
                    .bearer_auth(token.expose_secret())
                    .json(&body)
            })
            .await?;
        Ok(())
    }

    /// The URL and JSON body of a send; also used to measure a chunk.
    pub fn request_for(
        &self,
        target: &Target<'_>,
        payload: &Payload,
        uuid: &str,
    ) -> (String, serde_json::Value) {
        match target {
            Target::Chat(chat_id) => (
                format!(
                    "{}/open-apis/im/v1/messages?receive_id_type=chat_id",
                    self.base_url
                ),
                serde_json::json!({
                    "receive_id": chat_id,
                    "msg_type": payload.msg_type,
                    "content": payload.content,
                    "uuid": uuid,
                }),
            ),
            Target::Reply {
                message_id,
                in_thread,
            } => {
                let mut body = serde_json::json!({
                    "msg_type": payload.msg_type,
                    "content": payload.content,
                    "uuid": uuid,
                });
                if *in_thread {
                    body["reply_in_thread"] = serde_json::Value::Bool(true);
                }
                (
                    format!(
                        "{}/open-apis/im/v1/messages/{}/reply",
                        self.base_url,
                        encode_path_segment(message_id)
                    ),
                    body,
                )
            }
        }
    }

    /// Runs a request with the tenant token. When Feishu refuses the token
    /// (any of [`TOKEN_ERROR_CODES`]), it is dropped from the cache and the
    /// request runs once more with a freshly fetched one; a second refusal
    /// is returned (and that token dropped too).
    async fn authorised<T, B>(&self, build: B) -> Result<T, ApiError>
    where
        T: DeserializeOwned,
        B: Fn(&SecretString) -> reqwest::RequestBuilder,
    {
        let token = self.tenant_token().await?;
        let result = execute(build(&token)).await;
        let Err(ApiError::TokenRejected { code }) = &result else {
            return result;
        };
        tracing::warn!(
            code,
            "tenant access token rejected; refreshing it and retrying once"
        );
        self.tokens.invalidate(&token).await;
        let token = self.tenant_token().await?;
        let retried = execute(build(&token)).await;
        if let Err(ApiError::TokenRejected { code }) = &retried {
            tracing::warn!(code, "a fresh tenant access token was rejected too");
            self.tokens.invalidate(&token).await;
        }
        retried
    }

    /// The bytes of a message's resource (`GET /open-apis/im/v1/messages/
    /// {message_id}/resources/{key}?type=image|file`), at most `max_bytes`
    /// of them. The tenant token goes in the header only; nothing of the
    /// request is logged.
    pub async fn resource(
        &self,
        message_id: &str,
        key: &str,
        kind: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, FetchError> {
        let failed = |what: String| FetchError::Failed(what);
        let token = self
            .tenant_token()
            .await
            .map_err(|err| failed(format!("tenant token: {err}")))?;
        let url = format!(
            "{}/open-apis/im/v1/messages/{}/resources/{}",
            self.base_url,
            encode_path_segment(message_id),
            encode_path_segment(key)
        );
        let response = self
            .http
            .get(url)
            .query(&[("type", kind)])
            .bearer_auth(token.expose_secret())
            .send()
            .await
            .map_err(|err| failed(err.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status().as_u16())));
        }
        let declared = response.content_length();
        collect_capped(response.bytes_stream(), declared, max_bytes, |err| {
            err.without_url().to_string()
        })
        .await
    }

    async fn tenant_token(&self) -> Result<SecretString, ApiError> {
        self.tokens.get(|| self.fetch_tenant_token()).await
    }

    async fn fetch_tenant_token(&self) -> Result<IssuedToken, ApiError> {
        #[derive(Deserialize)]
        struct Issued {
            tenant_access_token: String,
            expire: u64,
        }
        let request = self
            .http
            .post(format!(
                "{}/open-apis/auth/v3/tenant_access_token/internal",
                self.base_url
            ))
            .json(&serde_json::json!({
                "app_id": self.app_id,
                "app_secret": self.app_secret.expose_secret(),
            }));
        let issued: Issued = execute(request).await?;
        tracing::info!(
            expire_secs = issued.expire,
            "fetched a Feishu tenant access token"
        );
        Ok(IssuedToken {
            token: SecretString::from(issued.tenant_access_token),
            lifetime: Duration::from_secs(issued.expire),
        })
    }
}

/// Sends a request and reads a Feishu response (`{"code":0,"msg":…,…}`).
async fn execute<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, ApiError> {
    #[derive(Deserialize)]
    struct Status {
        code: i64,
        #[serde(default)]
        msg: String,
    }
    let response = request.send().await?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.bytes().await?;
    let Ok(reported) = serde_json::from_slice::<Status>(&body) else {
        return Err(if status.as_u16() == 429 {
            ApiError::RateLimited {
                code: 0,
                retry_after: retry_after(&headers),
            }
        } else if status.is_server_error() {
            ApiError::Server {
                status: status.as_u16(),
            }
        } else {
            ApiError::InvalidJson {
                status: status.as_u16(),
            }
        });
    };
    let code = ErrorCode::from_code(reported.code);
    if status.as_u16() == 429 || matches!(code, ErrorCode::RateLimited | ErrorCode::FrequencyLimit)
    {
        return Err(ApiError::RateLimited {
            code: reported.code,
            retry_after: retry_after(&headers),
        });
    }
    if reported.code != 0 {
        return Err(match code {
            ErrorCode::TokenInvalid => ApiError::TokenRejected {
                code: reported.code,
            },
            _ if status.is_server_error() => ApiError::Server {
                status: status.as_u16(),
            },
            _ => ApiError::Api {
                code: reported.code,
                msg: reported.msg,
            },
        });
    }
    if !status.is_success() {
        return Err(ApiError::Server {
            status: status.as_u16(),
        });
    }
    serde_json::from_slice(&body).map_err(|_| ApiError::InvalidJson {
        status: status.as_u16(),
    })
}

/// `x-ogw-ratelimit-reset`: seconds until the limit resets.
fn retry_after(headers: &HeaderMap) -> Duration {
    headers
        .get("x-ogw-ratelimit-reset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        .map_or(DEFAULT_RETRY_AFTER, |secs| {
            Duration::from_secs_f64(secs.min(3600.0))
        })
}

/// Message ids are `om_` plus alphanumerics; anything else is escaped so an
/// odd id cannot change the path.
fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_header_sets_the_wait() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), DEFAULT_RETRY_AFTER);
        headers.insert("x-ogw-ratelimit-reset", "3".parse().unwrap());
        assert_eq!(retry_after(&headers), Duration::from_secs(3));
        headers.insert("x-ogw-ratelimit-reset", "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), DEFAULT_RETRY_AFTER);
    }

    #[test]
    fn odd_message_ids_cannot_escape_the_path() {
        assert_eq!(encode_path_segment("om_abc123"), "om_abc123");
        assert_eq!(encode_path_segment("../x?y"), "..%2Fx%3Fy");
    }
}
