//! What each configured platform adapter is doing, as its supervisor (the
//! parent module, [`platforms`](super)) last reported it: starting, up,
//! standing by (another instance holds its connection), retrying since a
//! failed attempt or a connection that failed while running (as the adapter
//! reports it through [`PlatformStatus::link`]), or failed for good (a
//! configuration error). `/readyz` shows it and answers 503 while a
//! configured adapter is neither up nor standing by; `/metrics` shows it as
//! `switchboard_adapter_up` and `switchboard_adapter_state`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use switchboard_contract::LinkObserver;

/// The states an adapter goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterState {
    /// Configured; the first start-up attempt is under way.
    Starting,
    /// Connected: it takes messages in and delivers replies.
    Up,
    /// Ready, while another instance holds its platform connection (the
    /// platform lease); it takes over when that instance goes.
    Standby,
    /// The last attempt to start it, or its connection, failed; it is tried
    /// again after a capped backoff.
    Retrying,
    /// It cannot start until the configuration changes (a missing
    /// variable, an invalid setting); not retried.
    Failed,
    /// Stopped at shutdown.
    Stopped,
}

impl AdapterState {
    /// The state's name, as `/readyz` and `/metrics` show it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Up => "up",
            Self::Standby => "standby",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }

    /// Whether the instance is ready as far as this adapter goes.
    #[must_use]
    pub fn is_ready(self) -> bool {
        matches!(self, Self::Up | Self::Standby)
    }
}

/// One adapter's state, as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterStatus {
    pub state: AdapterState,
    /// When it entered this state (RFC 3339, UTC); while retrying, when the
    /// first of the failed attempts in a row failed.
    pub since: String,
    /// Failed attempts since it was last up.
    pub failed_attempts: u32,
    /// The last failure (never a secret: the adapters scrub their errors).
    pub last_error: Option<String>,
}

/// The adapters' states, shared by the supervisor and the API; cheap to
/// clone.
#[derive(Debug, Clone, Default)]
pub struct PlatformStatus {
    adapters: Arc<Mutex<BTreeMap<String, AdapterStatus>>>,
}

impl PlatformStatus {
    /// An adapter is configured and starting.
    pub fn starting(&self, adapter: &str) {
        self.lock().insert(
            adapter.to_owned(),
            AdapterStatus {
                state: AdapterState::Starting,
                since: now(),
                failed_attempts: 0,
                last_error: None,
            },
        );
    }

    /// The adapter is connected.
    pub fn up(&self, adapter: &str) {
        self.enter(adapter, AdapterState::Up, |status| {
            status.failed_attempts = 0;
        });
    }

    /// The adapter stands by while another instance holds its connection.
    pub fn standby(&self, adapter: &str) {
        self.enter(adapter, AdapterState::Standby, |status| {
            status.failed_attempts = 0;
        });
    }

    /// An attempt failed with `error`; the adapter will be tried again.
    pub fn retrying(&self, adapter: &str, error: &str) {
        self.enter(adapter, AdapterState::Retrying, |status| {
            status.failed_attempts = status.failed_attempts.saturating_add(1);
            status.last_error = Some(error.to_owned());
        });
    }

    /// The adapter cannot start until the configuration changes.
    pub fn failed(&self, adapter: &str, error: &str) {
        self.enter(adapter, AdapterState::Failed, |status| {
            status.failed_attempts = status.failed_attempts.saturating_add(1);
            status.last_error = Some(error.to_owned());
        });
    }

    /// The adapter stopped at shutdown.
    pub fn stopped(&self, adapter: &str) {
        self.enter(adapter, AdapterState::Stopped, |_| {});
    }

    /// What `adapter` reports about its connection while it runs, entered
    /// here: a failure makes it `retrying`, working again `up`.
    #[must_use]
    pub fn link(&self, adapter: &str) -> Arc<dyn LinkObserver> {
        Arc::new(AdapterLink {
            status: self.clone(),
            adapter: adapter.to_owned(),
        })
    }

    /// One adapter's state.
    #[must_use]
    pub fn get(&self, adapter: &str) -> Option<AdapterStatus> {
        self.lock().get(adapter).cloned()
    }

    /// Every configured adapter's state, by name.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<String, AdapterStatus> {
        self.lock().clone()
    }

    /// Whether every configured adapter is up or standing by (true when
    /// none is configured).
    #[must_use]
    pub fn all_ready(&self) -> bool {
        self.lock().values().all(|status| status.state.is_ready())
    }

    /// Moves `adapter` to `state` (its `since` changes only when the state
    /// does), then applies `update`.
    fn enter(&self, adapter: &str, state: AdapterState, update: impl FnOnce(&mut AdapterStatus)) {
        let mut adapters = self.lock();
        let status = adapters
            .entry(adapter.to_owned())
            .or_insert_with(|| AdapterStatus {
                state,
                since: now(),
                failed_attempts: 0,
                last_error: None,
            });
        if status.state != state {
            status.state = state;
            status.since = now();
        }
        update(status);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, AdapterStatus>> {
        // The map stays consistent whatever panicked while holding it.
        self.adapters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An adapter's connection reports, entered into its status.
struct AdapterLink {
    status: PlatformStatus,
    adapter: String,
}

impl LinkObserver for AdapterLink {
    fn up(&self) {
        self.status.up(&self.adapter);
    }

    fn down(&self, reason: &str) {
        self.status.retrying(&self.adapter, reason);
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrying_keeps_the_time_of_the_first_failure_and_counts_attempts() {
        let status = PlatformStatus::default();
        assert!(status.all_ready(), "nothing configured");
        status.starting("telegram");
        assert!(!status.all_ready());
        status.retrying("telegram", "getMe failed");
        let first = status.get("telegram").expect("configured");
        status.retrying("telegram", "getMe failed again");
        let second = status.get("telegram").expect("configured");
        assert_eq!(second.state, AdapterState::Retrying);
        assert_eq!(second.since, first.since);
        assert_eq!(second.failed_attempts, 2);
        assert_eq!(second.last_error.as_deref(), Some("getMe failed again"));
        status.up("telegram");
        let up = status.get("telegram").expect("configured");
        assert_eq!((up.state, up.failed_attempts), (AdapterState::Up, 0));
        assert_eq!(up.last_error.as_deref(), Some("getMe failed again"));
        assert!(status.all_ready());
        status.standby("telegram");
        assert!(status.all_ready());
    }
}
