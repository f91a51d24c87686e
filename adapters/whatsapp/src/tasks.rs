//! [`WebhookTasks`]: the tasks that hand webhook payloads to the core.
//!
//! Each payload is handed to the core in a task of its own, so that a
//! recording that outlasts the webhook's wait (answered 503, so Meta
//! delivers again) still finishes, and so does what follows it (the
//! answer to a button press). A semaphore bounds how many run at once;
//! finished tasks are reaped whenever a new one starts, and the core's
//! shutdown waits for the rest ([`Drain`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::Drain;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};

/// The in-flight payload tasks of one adapter.
pub struct WebhookTasks {
    /// A std mutex: held only to spawn into or reap the set.
    set: Mutex<JoinSet<()>>,
    permits: Arc<Semaphore>,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Tasks that finished in time.
    pub finished: usize,
    /// Tasks still running at the deadline, aborted. Meta delivers their
    /// payloads again (they were not acknowledged) unless the core had
    /// recorded them.
    pub aborted: usize,
}

impl WebhookTasks {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Self {
            set: Mutex::new(JoinSet::new()),
            permits: Arc::new(Semaphore::new(max_in_flight)),
        }
    }

    /// A slot for one more task, or `None` when all are taken.
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

    /// Tasks not yet reaped.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// Waits up to `deadline` for every task, then aborts the rest. Stop
    /// serving the webhook first: tasks spawned meanwhile are not waited
    /// for.
    pub async fn finish(&self, deadline: Duration) -> Drained {
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
                "WhatsApp webhook tasks still running at the deadline; aborting"
            );
            set.shutdown().await;
        }
        Drained { finished, aborted }
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        // Each critical section is one call on the set; a poisoned lock is
        // safe to reuse.
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Drain for WebhookTasks {
    async fn drain(&self, grace: Duration) {
        let drained = self.finish(grace).await;
        tracing::debug!(?drained, "WhatsApp webhook tasks drained");
    }
}

fn report(done: Result<(), JoinError>) {
    if let Err(err) = done {
        if err.is_panic() {
            tracing::error!("a WhatsApp webhook task panicked");
        } else {
            tracing::debug!("a WhatsApp webhook task was cancelled");
        }
    }
}
