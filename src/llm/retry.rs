//! Retrying model calls.
//!
//! Owns [`RetryPolicy`] and [`with_retry`] (the shared [`Backoff`]: capped
//! exponential backoff with jitter, honouring the provider's `Retry-After`,
//! which is itself capped at [`MAX_RETRY_AFTER`]), and the parsing of the
//! `Retry-After` / `retry-after-ms` headers.

use std::future::Future;
use std::time::Duration;

use reqwest::header::HeaderMap;
use switchboard_contract::backoff::Backoff;

use super::LlmError;

/// The longest wait we accept from a provider's `Retry-After`.
///
/// The provider knows when its window resets better than our backoff does, so
/// its delay is honoured even beyond [`RetryPolicy::max_delay`]; but a chat
/// user is waiting on the other end, so anything past a minute is cut to a
/// minute (the retry will then most likely fail fast and surface the error).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how long to retry a failed model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Three retries, starting at 500 ms, never waiting more than 20 s.
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The shared backoff policy with these delays.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.base_delay, self.max_delay)
    }

    /// The backoff ceiling before retry number `retry` (0-based):
    /// `base_delay * 2^retry`, capped at `max_delay`, without jitter.
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        self.backoff().ceiling(retry)
    }

    /// How long to wait before retry number `retry` (0-based) after `error`.
    ///
    /// A provider-sent `Retry-After` wins (capped at [`MAX_RETRY_AFTER`]) and is
    /// used as is. Otherwise the [`Backoff`]'s jittered delay, between half the
    /// ceiling and the ceiling.
    pub fn delay_for(&self, retry: u32, error: &LlmError) -> Duration {
        self.backoff().delay(retry, asked_delay(error))
    }
}

/// Runs `attempt` until it succeeds, fails with a non-retryable error, or the
/// policy's retries are spent; returns the last result.
///
/// Only [`LlmError::is_retryable`] errors (429, 5xx, timeouts, network) are
/// retried: any other 4xx would fail the same way again.
///
/// # Errors
/// The first non-retryable error, or the last error once retries are spent.
pub async fn with_retry<T, F, Fut>(policy: &RetryPolicy, mut attempt: F) -> Result<T, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LlmError>>,
{
    let mut retries = policy.backoff().retries();
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_retryable() && retries.count() < policy.max_retries => {
                let delay = retries.next_delay(asked_delay(&error));
                tracing::warn!(
                    retry = retries.count(),
                    max_retries = policy.max_retries,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    error = %error,
                    "model call failed, retrying"
                );
                tokio::time::sleep(delay).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The delay a response asks for: `retry-after-ms` (sent by OpenAI, more
/// precise) first, then `Retry-After` in seconds or as an HTTP-date.
/// Unparseable values are ignored.
pub fn retry_after_from_headers(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    header("retry-after-ms")
        .and_then(parse_retry_after_ms)
        .or_else(|| {
            header("retry-after").and_then(|value| parse_retry_after(value, jiff::Timestamp::now()))
        })
}

/// Parses a `retry-after-ms` value: milliseconds, possibly fractional.
pub fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    parse_seconds(value).map(|seconds| seconds / 1000)
}

/// Parses a `Retry-After` value: seconds (possibly fractional) or an HTTP-date,
/// taken relative to `now` (a date in the past means "now").
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Some(seconds) = parse_seconds(value) {
        return Some(seconds);
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    let millis = at.as_millisecond().saturating_sub(now.as_millisecond());
    Some(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}

/// A non-negative, finite decimal number of seconds.
fn parse_seconds(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// The delay the provider asked for, cut to [`MAX_RETRY_AFTER`].
fn asked_delay(error: &LlmError) -> Option<Duration> {
    error.retry_after().map(|after| after.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::time::Instant;

    use super::*;

    fn policy(max_retries: u32, base_ms: u64, max_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(base_ms),
            max_delay: Duration::from_millis(max_ms),
        }
    }

    fn server_error() -> LlmError {
        LlmError::Server {
            status: 503,
            message: "busy".to_owned(),
        }
    }

    /// Fails with the given errors in turn, then succeeds; counts calls.
    async fn run(
        policy: &RetryPolicy,
        errors: Vec<LlmError>,
    ) -> (Result<&'static str, LlmError>, u32, Duration) {
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let result = with_retry(policy, || {
            let index = calls.fetch_add(1, Ordering::SeqCst) as usize;
            let outcome = errors.get(index).cloned().map_or(Ok("done"), Err);
            async move { outcome }
        })
        .await;
        (result, calls.load(Ordering::SeqCst), start.elapsed())
    }

    #[test]
    fn default_policy() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_retries, 3);
        assert_eq!(policy.base_delay, Duration::from_millis(500));
        assert_eq!(policy.max_delay, Duration::from_secs(20));
    }

    #[test]
    fn backoff_doubles_then_caps_without_overflow() {
        let policy = policy(10, 100, 1000);
        let ceilings: Vec<_> = (0..6)
            .map(|n| policy.backoff_ceiling(n).as_millis())
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(policy.backoff_ceiling(40), Duration::from_millis(1000));
        assert_eq!(
            policy.backoff_ceiling(u32::MAX),
            Duration::from_millis(1000)
        );
    }

    #[test]
    fn jittered_delay_stays_between_half_and_full_ceiling() {
        let policy = policy(10, 100, 1000);
        for retry in 0..8 {
            let ceiling = policy.backoff_ceiling(retry);
            for _ in 0..50 {
                let delay = policy.delay_for(retry, &server_error());
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
            }
        }
    }

    #[test]
    fn retry_after_wins_and_is_capped() {
        let policy = policy(3, 100, 1000);
        let limited = |secs| LlmError::RateLimited {
            status: 429,
            retry_after: Some(Duration::from_secs(secs)),
        };
        assert_eq!(policy.delay_for(0, &limited(5)), Duration::from_secs(5));
        assert_eq!(policy.delay_for(0, &limited(0)), Duration::ZERO);
        assert_eq!(policy.delay_for(0, &limited(3600)), MAX_RETRY_AFTER);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_with_backoff() {
        let policy = policy(3, 100, 1000);
        let (result, calls, elapsed) = run(&policy, vec![server_error(), LlmError::Timeout]).await;
        assert_eq!(result, Ok("done"));
        assert_eq!(calls, 3);
        // First wait in [50, 100] ms, second in [100, 200] ms.
        assert!(
            elapsed >= Duration::from_millis(150) && elapsed <= Duration::from_millis(300),
            "{elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn honours_retry_after_exactly() {
        let policy = policy(3, 100, 1000);
        let limited = LlmError::RateLimited {
            status: 429,
            retry_after: Some(Duration::from_secs(7)),
        };
        let (result, calls, elapsed) = run(&policy, vec![limited]).await;
        assert_eq!(result, Ok("done"));
        assert_eq!(calls, 2);
        assert_eq!(elapsed, Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn caps_long_retry_after() {
        let policy = policy(3, 100, 1000);
        let limited = LlmError::RateLimited {
            status: 429,
            retry_after: Some(Duration::from_secs(3600)),
        };
        let (_, _, elapsed) = run(&policy, vec![limited]).await;
        assert_eq!(elapsed, MAX_RETRY_AFTER);
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_rejections() {
        let policy = policy(3, 100, 1000);
        let rejected = LlmError::Rejected {
            status: 400,
            message: "bad".to_owned(),
        };
        let (result, calls, elapsed) = run(&policy, vec![rejected.clone()]).await;
        assert_eq!(result, Err(rejected));
        assert_eq!(calls, 1);
        assert_eq!(elapsed, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries_with_last_error() {
        let policy = policy(2, 100, 1000);
        let last = LlmError::Network("down".to_owned());
        let (result, calls, elapsed) =
            run(&policy, vec![server_error(), server_error(), last.clone()]).await;
        assert_eq!(result, Err(last));
        assert_eq!(calls, 3);
        assert!(elapsed <= Duration::from_millis(300), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_retries_means_one_attempt() {
        let policy = policy(0, 100, 1000);
        let (result, calls, _) = run(&policy, vec![server_error()]).await;
        assert_eq!(result, Err(server_error()));
        assert_eq!(calls, 1);
    }

    #[test]
    fn parses_retry_after_values() {
        let now: jiff::Timestamp = "2024-01-01T00:00:00Z".parse().expect("timestamp");
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("NaN", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(
            parse_retry_after("Mon, 01 Jan 2024 00:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 31 Dec 2023 23:59:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after_ms("250"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after_ms("1.5"),
            Some(Duration::from_micros(1500))
        );
    }

    #[test]
    fn retry_after_ms_header_takes_precedence() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "2".parse().expect("value"));
        assert_eq!(
            retry_after_from_headers(&headers),
            Some(Duration::from_secs(2))
        );
        headers.insert("retry-after-ms", "120".parse().expect("value"));
        assert_eq!(
            retry_after_from_headers(&headers),
            Some(Duration::from_millis(120))
        );
        assert_eq!(retry_after_from_headers(&HeaderMap::new()), None);
    }
}
