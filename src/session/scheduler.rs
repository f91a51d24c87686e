//! The scheduler: the loop that turns due tasks into runs, and expires
//! approvals nobody decided in time (their turns resume with the call not
//! run; see `session::approvals`).
//!
//! It reads one thing while idle, the next due time (one look at the
//! `tasks_due` index, however many tasks there are), and sleeps on the
//! gateway's [`Clock`] until then, or until a task is made or resumed
//! ([`TaskWake`]), or at most [`LOOK_AGAIN`] (another instance may have
//! made one). When tasks are due it claims each run through the database
//! ([`crate::store::tasks::Tasks::claim`]): every instance runs this loop,
//! and whichever claims a due time first puts its message in the task's
//! session queue, where the runner takes it like any other, under that
//! session's lease. A run due longer ago than `tasks.catch_up_secs` (no
//! instance was up) is recorded as missed and the task moved on: never a
//! burst of old runs. It also wakes the conversations a background run's
//! answer was relayed to.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::approvals::Approvals;
use super::runner::Runner;
use crate::domain::{Clock, RunStatus, RunTrigger, millis};
use crate::metrics::Metrics;
use crate::store::tasks::{RunClaim, TaskRow};
use crate::store::{Store, StoreError};
use crate::tools::tasks::{TaskSettings, TaskWake, run_text};

/// The longest the scheduler sleeps without looking (tasks made on
/// another instance, clock jumps).
pub const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// Due tasks claimed per read.
const BATCH: i64 = 200;

/// Turns due tasks into runs.
#[derive(Clone)]
pub struct Scheduler {
    pub store: Store,
    pub clock: Clock,
    pub settings: TaskSettings,
    pub wake: Arc<TaskWake>,
    pub runner: Runner,
    pub metrics: Metrics,
}

impl Scheduler {
    /// Runs the loop until `stop`.
    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let next = match self.tick().await {
                    Ok(next) => next,
                    Err(err) => {
                        tracing::warn!(error = %err, "the scheduler's look failed");
                        None
                    }
                };
                let at = next.unwrap_or(i64::MAX);
                tokio::select! {
                    () = self.clock.sleep_until(at, LOOK_AGAIN) => {}
                    () = self.wake.woken() => {}
                    () = stop.cancelled() => return,
                }
            }
        })
    }

    /// One look: wakes conversations with a relayed answer, claims (or
    /// records as missed) every run due now, and returns when the next one
    /// is due.
    ///
    /// # Errors
    /// A database failure.
    pub async fn tick(&self) -> Result<Option<i64>, StoreError> {
        for session in self.wake.take_sessions() {
            self.runner.notify(&session);
        }
        self.runner.spawn_deliveries(self.wake.take_notices());
        loop {
            let now = self.clock.now_ms();
            let due = self.store.tasks().due(now, BATCH).await?;
            let full = i64::try_from(due.len()).unwrap_or(i64::MAX) >= BATCH;
            for task in &due {
                if let Err(err) = self.fire(task, now).await {
                    tracing::warn!(task = %task.id, error = %err, "a due task could not be run");
                }
            }
            if !full {
                break;
            }
        }
        let approvals = Approvals {
            store: &self.store,
            runner: &self.runner,
            metrics: &self.metrics,
        };
        approvals.expire_due().await?;
        let next_task = self.store.tasks().next_due().await?;
        let next_expiry = self.store.approvals().next_expiry().await?;
        Ok(match (next_task, next_expiry) {
            (Some(task), Some(expiry)) => Some(task.min(expiry)),
            (task, expiry) => task.or(expiry),
        })
    }

    /// Claims `task`'s run due now (or records it missed) and moves the
    /// task on to its next due time after now.
    async fn fire(&self, task: &TaskRow, now: i64) -> Result<(), StoreError> {
        let Some(due_at) = task.next_run_at else {
            return Ok(());
        };
        let next = task.schedule()?.next_after(now.max(due_at));
        let late = now.saturating_sub(due_at);
        if late > millis(self.settings.catch_up) {
            tracing::info!(task = %task.id, late_ms = late, "a run was missed: too late to catch up");
            self.metrics.task_run(RunStatus::Missed, late);
            return self.store.tasks().miss(task, due_at, next).await;
        }
        let claim = RunClaim {
            task,
            due_at,
            trigger: RunTrigger::Schedule,
            run_key: format!("due:{due_at}"),
            text: run_text(task, None),
            next_run_at: next,
        };
        if self.store.tasks().claim(&claim).await?.is_some() {
            tracing::info!(task = %task.id, late_ms = late, "a task's run is queued");
            self.metrics.task_run(RunStatus::Queued, late);
            self.runner.notify(task.run_session());
        }
        Ok(())
    }
}
