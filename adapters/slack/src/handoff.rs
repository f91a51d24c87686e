//! [`Handoff`]: the tasks that hand events and button presses to the core.
//!
//! Slack wants an answer within 3 seconds, while recording an event may
//! take longer now and then; so each is handed over in a task of its own,
//! which the request (or the Socket Mode envelope) waits for up to the ack
//! timeout and then leaves to finish by itself. A semaphore bounds how many
//! run at once; at shutdown [`Drain::drain`] waits for them up to the grace
//! period, then cancels the rest (Slack delivers an unacknowledged event
//! again, and the core deduplicates it).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::Drain;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The in-flight hand-offs of one adapter.
pub struct Handoff {
    tracker: TaskTracker,
    permits: Arc<Semaphore>,
    cancel: CancellationToken,
}

impl Handoff {
    pub(crate) fn new(max_in_flight: usize) -> Self {
        Self {
            tracker: TaskTracker::new(),
            permits: Arc::new(Semaphore::new(max_in_flight)),
            cancel: CancellationToken::new(),
        }
    }

    /// Runs `task` unless `max_in_flight` are running already (then
    /// `false`, and the caller refuses the event).
    pub(crate) fn spawn<F>(&self, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return false;
        };
        let cancel = self.cancel.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => tracing::warn!("a Slack hand-off was cancelled at shutdown"),
                () = task => {}
            }
            drop(permit);
        });
        true
    }

    /// Hand-offs still running.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.tracker.len()
    }
}

#[async_trait]
impl Drain for Handoff {
    async fn drain(&self, grace: Duration) {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = self.tracker.len(),
                "Slack hand-offs still running at the deadline; cancelling them"
            );
            self.cancel.cancel();
            self.tracker.wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bound_refuses_extra_tasks_and_drain_cancels_the_stuck() {
        let handoff = Handoff::new(1);
        assert!(handoff.spawn(std::future::pending()));
        assert!(!handoff.spawn(async {}), "one at a time");
        handoff.drain(Duration::from_secs(1)).await;
        assert_eq!(handoff.in_flight(), 0);
    }

    #[tokio::test]
    async fn drain_waits_for_finishing_tasks() {
        let handoff = Handoff::new(4);
        let (done, finished) = tokio::sync::oneshot::channel();
        assert!(handoff.spawn(async move {
            tokio::task::yield_now().await;
            let _ = done.send(());
        }));
        handoff.drain(Duration::from_secs(5)).await;
        assert!(finished.await.is_ok());
    }
}
