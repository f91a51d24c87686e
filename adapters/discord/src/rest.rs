//! The adapter's own REST calls (sending messages, typing, opening threads,
//! fetching missed messages): [`Rest`] runs them and reads every failure in
//! full, which serenity's `Http` does not do (it drops a 429's body and
//! headers).
//!
//! Rate limits are kept per route and channel by [`RateGate`]: a 429 closes
//! the gate for Discord's `retry_after` (the JSON body's `retry_after`, the
//! `Retry-After` and `X-RateLimit-Reset-After` headers; the longest of them
//! wins), and a response saying the bucket is used up
//! (`X-RateLimit-Remaining: 0`) closes it until the bucket resets. A call
//! through a closed gate is not made: the caller gets
//! [`RestError::RateLimited`] with the time left, and decides whether to wait
//! (a short wait) or hand it back (the sender returns `RetryAfter` to the
//! core). A global 429 closes every gate. Serenity's own rate limiter is off
//! for the whole client, so a 429 is never waited out inside serenity.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serenity::http::{Http, HttpBuilder, Request};
use serenity::model::id::ChannelId;
use tokio::time::Instant;

/// The delay assumed for a 429 that names none.
pub const FALLBACK_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest `retry_after` believed; a larger one (a broken proxy) is
/// clamped to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long one REST request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Which of the adapter's routes a call uses; with the channel, its rate
/// limit bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Bucket {
    /// `POST /channels/{id}/messages`.
    CreateMessage,
    /// `POST /channels/{id}/typing`.
    Typing,
    /// `POST /channels/{id}/messages/{id}/threads`.
    CreateThread,
    /// `GET /channels/{id}/messages`.
    GetMessages,
    /// `PATCH /channels/{id}/messages/{id}`.
    EditMessage,
    /// `POST /interactions/{id}/{token}/callback`.
    InteractionCallback,
    /// `POST /webhooks/{application}/{token}` and
    /// `PATCH /webhooks/{application}/{token}/messages/@original`.
    InteractionFollowup,
}

/// Why a REST call failed. Never carries the token or message content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RestError {
    /// Rate limited: try again after `0`.
    #[error("rate limited by Discord for {0:?}")]
    RateLimited(Duration),
    /// Discord answered with another error status.
    #[error("Discord answered HTTP {status} ({detail})")]
    Status { status: u16, detail: String },
    /// The request did not get an answer (connect error, timeout).
    #[error("request to Discord {0}")]
    Network(String),
    /// The request could not be built or the answer not read.
    #[error("Discord request failed: {0}")]
    Invalid(String),
}

impl RestError {
    /// Worth retrying later (a 5xx, 408, network failure or rate limit).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::RateLimited(_) | Self::Network(_) => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408,
            Self::Invalid(_) => false,
        }
    }
}

/// Discord's REST API, shared by the sender, the inbound handler and the
/// gateway. Cheap to clone.
#[derive(Clone)]
pub struct Rest {
    http: Arc<Http>,
    client: reqwest::Client,
    gate: Arc<RateGate>,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest")
            .field("api_proxy", &self.http.proxy)
            .finish_non_exhaustive()
    }
}

impl Rest {
    /// A client for `token`, talking to `api_proxy` instead of
    /// `https://discord.com` when set.
    #[must_use]
    pub fn new(token: &SecretString, api_proxy: Option<&str>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            // Building fails only when the TLS backend cannot start; serenity
            // then falls back the same way.
            .unwrap_or_else(|_| reqwest::Client::new());
        let mut builder = HttpBuilder::new(token.expose_secret())
            .client(client.clone())
            .ratelimiter_disabled(true);
        if let Some(proxy) = api_proxy {
            builder = builder.proxy(proxy);
        }
        Self {
            http: Arc::new(builder.build()),
            client,
            gate: Arc::new(RateGate::default()),
        }
    }

    /// Serenity's client over the same connection pool, for the calls
    /// whose errors need no reading (who the bot is, the gateway URL).
    #[must_use]
    pub fn http(&self) -> &Arc<Http> {
        &self.http
    }

    /// Runs `request` on `route` in `channel` and decodes the JSON answer.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        route: Bucket,
        channel: ChannelId,
        request: Request<'_>,
    ) -> Result<T, RestError> {
        let response = self.execute(route, channel, request).await?;
        let body = response
            .bytes()
            .await
            .map_err(|err| RestError::Network(network_failure(&err)))?;
        serde_json::from_slice(&body)
            .map_err(|err| RestError::Invalid(format!("unexpected answer: {err}")))
    }

    /// Runs `request` on `route` in `channel`, ignoring the answer's body.
    pub(crate) async fn call_empty(
        &self,
        route: Bucket,
        channel: ChannelId,
        request: Request<'_>,
    ) -> Result<(), RestError> {
        self.execute(route, channel, request).await.map(drop)
    }

    async fn execute(
        &self,
        route: Bucket,
        channel: ChannelId,
        request: Request<'_>,
    ) -> Result<reqwest::Response, RestError> {
        let blocked = self.gate.blocked_for(route, channel);
        if !blocked.is_zero() {
            return Err(RestError::RateLimited(blocked));
        }
        let built = request
            .build(&self.client, self.http.token(), self.http.proxy.as_deref())
            .map_err(|err| RestError::Invalid(err.to_string()))?
            .build()
            .map_err(|err| RestError::Invalid(err.to_string()))?;
        let response = self
            .client
            .execute(built)
            .await
            .map_err(|err| RestError::Network(network_failure(&err)))?;
        let status = response.status();
        let headers = response.headers().clone();
        if status.is_success() {
            if let Some(reset) = exhausted_bucket(&headers) {
                self.gate.close(route, channel, reset, false);
            }
            return Ok(response);
        }
        let body = response.bytes().await.unwrap_or_default();
        if status.as_u16() == 429 {
            let (wait, global) = retry_after(&headers, &body);
            self.gate.close(route, channel, wait, global);
            tracing::warn!(?route, %channel, ?wait, global, "Discord rate limit");
            return Err(RestError::RateLimited(wait));
        }
        Err(RestError::Status {
            status: status.as_u16(),
            detail: error_detail(&body),
        })
    }
}

fn network_failure(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        "failed".to_owned()
    }
}

/// Discord's error code and message from an error body, or what it was.
fn error_detail(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct DiscordError {
        #[serde(default)]
        code: i64,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<DiscordError>(body) {
        Ok(err) => format!("code {}: {}", err.code, err.message),
        Err(_) => "no Discord error body".to_owned(),
    }
}

/// How long a 429 asks to wait, and whether the limit is global: the
/// longest of the body's `retry_after` and the `Retry-After` and
/// `X-RateLimit-Reset-After` headers (all in seconds, fractions allowed),
/// [`FALLBACK_RETRY_AFTER`] when none is readable.
pub(crate) fn retry_after(headers: &HeaderMap, body: &[u8]) -> (Duration, bool) {
    #[derive(serde::Deserialize)]
    struct RateLimited {
        retry_after: Option<f64>,
        #[serde(default)]
        global: bool,
    }
    let parsed = serde_json::from_slice::<RateLimited>(body).ok();
    let from_body = parsed.as_ref().and_then(|r| r.retry_after);
    let global = parsed.is_some_and(|r| r.global)
        || headers
            .get("x-ratelimit-global")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
        || headers
            .get("x-ratelimit-scope")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"global"));
    let wait = [
        from_body,
        header_seconds(headers, "retry-after"),
        header_seconds(headers, "x-ratelimit-reset-after"),
    ]
    .into_iter()
    .flatten()
    .filter_map(seconds)
    .max()
    .unwrap_or(FALLBACK_RETRY_AFTER);
    (wait.min(MAX_RETRY_AFTER), global)
}

/// When a successful answer says the bucket is used up, how long until it
/// resets.
fn exhausted_bucket(headers: &HeaderMap) -> Option<Duration> {
    let remaining = headers.get("x-ratelimit-remaining")?.to_str().ok()?;
    if remaining.trim() != "0" {
        return None;
    }
    header_seconds(headers, "x-ratelimit-reset-after")
        .and_then(seconds)
        .map(|wait| wait.min(MAX_RETRY_AFTER))
}

fn header_seconds(headers: &HeaderMap, name: &str) -> Option<f64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

fn seconds(value: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
}

/// When each rate-limited (route, channel) opens again, and when a global
/// limit ends.
#[derive(Debug, Default)]
struct RateGate {
    /// A std mutex: held for a map lookup or insert, never across an await.
    closed: Mutex<Gates>,
}

#[derive(Debug, Default)]
struct Gates {
    routes: HashMap<(Bucket, ChannelId), Instant>,
    global: Option<Instant>,
}

impl RateGate {
    fn gates(&self) -> std::sync::MutexGuard<'_, Gates> {
        self.closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn close(&self, route: Bucket, channel: ChannelId, wait: Duration, global: bool) {
        let until = Instant::now() + wait;
        let mut gates = self.gates();
        let now = Instant::now();
        gates.routes.retain(|_, open_at| *open_at > now);
        if global {
            gates.global = Some(gates.global.map_or(until, |at| at.max(until)));
        } else {
            let entry = gates.routes.entry((route, channel)).or_insert(until);
            *entry = (*entry).max(until);
        }
    }

    fn blocked_for(&self, route: Bucket, channel: ChannelId) -> Duration {
        let gates = self.gates();
        let now = Instant::now();
        let route_until = gates.routes.get(&(route, channel)).copied();
        [route_until, gates.global]
            .into_iter()
            .flatten()
            .map(|until| until.saturating_duration_since(now))
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_longest_of_body_and_headers_is_waited() {
        let body =
            br#"{"message": "You are being rate limited.", "retry_after": 6.5, "global": false}"#;
        let (wait, global) = retry_after(&headers(&[("retry-after", "6")]), body);
        assert_eq!(wait, Duration::from_millis(6500));
        assert!(!global);

        let (wait, _) = retry_after(&headers(&[("x-ratelimit-reset-after", "12.25")]), b"");
        assert_eq!(wait, Duration::from_millis(12_250));
    }

    #[test]
    fn a_429_without_a_delay_waits_the_fallback() {
        let (wait, _) = retry_after(&HeaderMap::new(), b"not json");
        assert_eq!(wait, FALLBACK_RETRY_AFTER);
        let (wait, _) = retry_after(&headers(&[("retry-after", "-3")]), b"");
        assert_eq!(wait, FALLBACK_RETRY_AFTER);
    }

    #[test]
    fn a_global_limit_is_recognised_in_body_or_headers() {
        let (_, global) = retry_after(&HeaderMap::new(), br#"{"retry_after": 1, "global": true}"#);
        assert!(global);
        let (_, global) = retry_after(&headers(&[("x-ratelimit-scope", "global")]), b"");
        assert!(global);
    }

    #[test]
    fn an_absurd_delay_is_clamped() {
        let (wait, _) = retry_after(&headers(&[("retry-after", "99999999")]), b"");
        assert_eq!(wait, MAX_RETRY_AFTER);
    }

    #[test]
    fn a_used_up_bucket_closes_until_it_resets() {
        let used_up = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset-after", "2.5"),
        ]);
        assert_eq!(
            exhausted_bucket(&used_up),
            Some(Duration::from_millis(2500))
        );
        let left = headers(&[
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset-after", "2.5"),
        ]);
        assert_eq!(exhausted_bucket(&left), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_gate_blocks_its_route_and_channel_only() {
        let gate = RateGate::default();
        let a = ChannelId::new(1);
        let b = ChannelId::new(2);
        gate.close(Bucket::CreateMessage, a, Duration::from_secs(6), false);
        assert_eq!(
            gate.blocked_for(Bucket::CreateMessage, a),
            Duration::from_secs(6)
        );
        assert!(gate.blocked_for(Bucket::CreateMessage, b).is_zero());
        assert!(gate.blocked_for(Bucket::Typing, a).is_zero());
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(gate.blocked_for(Bucket::CreateMessage, a).is_zero());

        gate.close(Bucket::Typing, a, Duration::from_secs(2), true);
        assert_eq!(
            gate.blocked_for(Bucket::CreateMessage, b),
            Duration::from_secs(2)
        );
    }
}
