//! The cached `tenant_access_token` and the clock that ages it.
//!
//! Feishu tokens live two hours (`expire: 7200`) and the token endpoint hands
//! out a fresh one once less than 30 minutes remain, so the cache refreshes at
//! that point: one token request per ~90 minutes, however many messages go
//! out. Concurrent callers that find the token stale wait for one refresh
//! instead of each starting their own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};

use crate::api::ApiError;

/// A token is refreshed once less than this remains (Feishu only issues a new
/// token at that point anyway).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(30 * 60);

/// Where the adapter reads the time. Injectable so tests can age tokens
/// without sleeping.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A token with its lifetime, as the token endpoint returned it.
pub(crate) struct IssuedToken {
    pub token: SecretString,
    pub lifetime: Duration,
}

pub(crate) struct TokenCache {
    /// A tokio mutex, held across the refresh request on purpose: that is
    /// what coalesces concurrent refreshes into one request. Callers with a
    /// fresh token hold it only to clone the token.
    state: tokio::sync::Mutex<Option<Cached>>,
    clock: Arc<dyn Clock>,
}

struct Cached {
    token: SecretString,
    refresh_at: Instant,
}

impl TokenCache {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: tokio::sync::Mutex::new(None),
            clock,
        }
    }

    /// The cached token, or a new one from `fetch` when there is none or it
    /// is due for refresh.
    pub async fn get<F, Fut>(&self, fetch: F) -> Result<SecretString, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<IssuedToken, ApiError>>,
    {
        let mut state = self.state.lock().await;
        if let Some(cached) = state.as_ref()
            && self.clock.now() < cached.refresh_at
        {
            return Ok(cached.token.clone());
        }
        let fetched_at = self.clock.now();
        let issued = fetch().await?;
        // Refresh when REFRESH_MARGIN remains; for a token issued with less
        // than that (near the end of its life), use it for half of what is
        // left rather than refetching on every call.
        let usable = issued
            .lifetime
            .saturating_sub(REFRESH_MARGIN)
            .max(issued.lifetime / 2);
        *state = Some(Cached {
            token: issued.token.clone(),
            refresh_at: fetched_at + usable,
        });
        Ok(issued.token)
    }

    /// Forgets `rejected` (the API refused it) so the next call fetches a new
    /// token; a newer token cached meanwhile is kept.
    pub async fn invalidate(&self, rejected: &SecretString) {
        let mut state = self.state.lock().await;
        if state
            .as_ref()
            .is_some_and(|c| c.token.expose_secret() == rejected.expose_secret())
        {
            *state = None;
        }
    }
}
