//! [`EventTasks`]: owns the tasks that hand webhook events to the core.
//!
//! The webhook answers Feishu within its 3-second budget, but recording an
//! event in the core's database may occasionally take longer. So each event
//! is handed to the core in a spawned task; the webhook waits for it up to the
//! configured ack timeout (so a database outage can still be reported to
//! Feishu as a 503, which makes Feishu redeliver), then answers 200 and lets
//! the task finish on its own. Those tasks live here: finished ones are reaped
//! (and a panic logged) whenever a new one starts, and [`EventTasks::drain`]
//! waits for the rest at shutdown. A semaphore bounds how many run at once.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};

/// The in-flight event tasks of one adapter.
pub struct EventTasks {
    /// A std mutex: held only to spawn into or reap the set, never across an
    /// await.
    set: Mutex<JoinSet<()>>,
    permits: Arc<Semaphore>,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Tasks that finished before the deadline.
    pub finished: usize,
    /// Tasks still running at the deadline, aborted. Their events were not
    /// recorded; Feishu may redeliver them and the core dedups.
    pub aborted: usize,
}

impl EventTasks {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Self {
            set: Mutex::new(JoinSet::new()),
            permits: Arc::new(Semaphore::new(max_in_flight)),
        }
    }

    /// A slot for one more task, or `None` when `max_in_flight` are running.
    pub(crate) fn reserve(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }

    /// Spawns `task`, holding `permit` until it ends.
    pub(crate) fn spawn<F>(&self, permit: OwnedSemaphorePermit, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut set = self.lock();
        while let Some(done) = set.try_join_next() {
            report(done);
        }
        set.spawn(async move {
            task.await;
            drop(permit);
        });
    }

    /// Tasks not yet reaped (running, or finished since the last spawn).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// Waits up to `deadline` for every task, then aborts the rest. Tasks
    /// spawned while draining are not waited for: stop serving the webhook
    /// first.
    pub async fn drain(&self, deadline: Duration) -> Drained {
        let mut set = std::mem::take(&mut *self.lock());
        let mut finished = 0;
        let waited = tokio::time::timeout(deadline, async {
            while let Some(done) = set.join_next().await {
                report(done);
                finished += 1;
            }
        })
        .await;
        let aborted = set.len();
        if waited.is_err() {
            tracing::warn!(
                aborted,
                "Feishu event tasks still running at the deadline; aborting"
            );
            set.shutdown().await;
        }
        Drained { finished, aborted }
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        // Each critical section is one call on the set; a panic cannot leave
        // it half-updated, so a poisoned lock is safe to reuse.
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn report(done: Result<(), JoinError>) {
    if let Err(err) = done {
        if err.is_panic() {
            tracing::error!("a Feishu event task panicked");
        } else {
            tracing::debug!("a Feishu event task was cancelled");
        }
    }
}
