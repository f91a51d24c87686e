//! What a person (by `/tasks`), an operator (by the API) or the agent (by
//! `cancel_task`) does to a task that exists: pause, resume, cancel, run it
//! now, or fire it from a signed request. One set of rules for all three
//! doors: only the owner's tasks (the API's caller, or a chat's person),
//! only live ones, and a run fired by hand is claimed like a scheduled one
//! (one per key, whoever asks twice).

use crate::domain::{InboundId, PrincipalId, RunTrigger, TaskId, TaskStatus};
use crate::store::StoreError;
use crate::store::tasks::{RunClaim, TaskRow};

use super::TaskTools;

/// What became of a change asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// Done.
    Yes,
    /// No such live task of this owner.
    NoSuchTask,
}

impl TaskTools {
    /// `owner`'s task `id`, if it is theirs (`None` as owner: tasks with
    /// no owner, the API's).
    ///
    /// # Errors
    /// A database failure.
    pub async fn owned(
        &self,
        id: TaskId,
        owner: Option<PrincipalId>,
    ) -> Result<Option<TaskRow>, StoreError> {
        Ok(self
            .store
            .tasks()
            .get(id)
            .await?
            .filter(|task| task.principal_id == owner))
    }

    /// Pauses `owner`'s task: no run comes due until it is resumed.
    ///
    /// # Errors
    /// A database failure.
    pub async fn pause(
        &self,
        id: TaskId,
        owner: Option<PrincipalId>,
    ) -> Result<Changed, StoreError> {
        self.move_to(id, owner, TaskStatus::Paused, None).await
    }

    /// Cancels `owner`'s task.
    ///
    /// # Errors
    /// A database failure.
    pub async fn cancel(
        &self,
        id: TaskId,
        owner: Option<PrincipalId>,
    ) -> Result<Changed, StoreError> {
        self.move_to(id, owner, TaskStatus::Cancelled, None).await
    }

    /// Moves `owner`'s task to `status` (and its next run to `next`, when
    /// given), if it may change so.
    async fn move_to(
        &self,
        id: TaskId,
        owner: Option<PrincipalId>,
        status: TaskStatus,
        next: Option<i64>,
    ) -> Result<Changed, StoreError> {
        let changed = self
            .store
            .tasks()
            .set_status(id, owner, status, next)
            .await?;
        Ok(if changed {
            Changed::Yes
        } else {
            Changed::NoSuchTask
        })
    }

    /// Resumes `owner`'s paused task: its next run is the schedule's next
    /// one after now (a one-off task whose time has passed runs now); the
    /// runs it missed while paused are not made up.
    ///
    /// # Errors
    /// A database failure, or a corrupt stored schedule.
    pub async fn resume(
        &self,
        id: TaskId,
        owner: Option<PrincipalId>,
    ) -> Result<Changed, StoreError> {
        let Some(task) = self.owned(id, owner).await? else {
            return Ok(Changed::NoSuchTask);
        };
        if task.status != TaskStatus::Paused {
            return Ok(Changed::NoSuchTask);
        }
        let now = self.clock.now_ms();
        let next = task.schedule()?.next_after(now).unwrap_or(now);
        let changed = self
            .move_to(id, owner, TaskStatus::Active, Some(next))
            .await?;
        self.wake.wake();
        Ok(changed)
    }

    /// Runs `owner`'s live task now, outside its schedule (which it does
    /// not move): `/tasks run ID` (`trigger` manual, a fresh key each
    /// time) or a signed hook (the request's digest as `key`, so a
    /// repeated request fires once), with `context` (a hook's body) handed
    /// to the run. Returns the run's message, or `None` when the same key
    /// fired it before.
    ///
    /// # Errors
    /// A database failure.
    pub async fn fire(
        &self,
        task: &TaskRow,
        trigger: RunTrigger,
        key: String,
        context: Option<&str>,
    ) -> Result<Option<InboundId>, StoreError> {
        let now = self.clock.now_ms();
        let claim = RunClaim {
            task,
            due_at: now,
            trigger,
            run_key: key,
            text: run_text(task, context),
            next_run_at: None,
        };
        let inbound_id = self.store.tasks().claim(&claim).await?;
        if inbound_id.is_some() {
            self.wake.wake_session(task.run_session().clone());
        }
        Ok(inbound_id)
    }
}

/// The text of a run's message, as the model and the history see it: the
/// task's prompt marked as the task's, and a hook's body after it.
#[must_use]
pub fn run_text(task: &TaskRow, context: Option<&str>) -> String {
    let label = if task.background.0 {
        "background task"
    } else {
        "scheduled task"
    };
    match context {
        Some(context) => format!(
            "[{label} {}] {}\n\n[the request that fired it]\n{context}",
            task.id, task.prompt
        ),
        None => format!("[{label} {}] {}", task.id, task.prompt),
    }
}
