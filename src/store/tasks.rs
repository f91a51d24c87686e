//! Tasks and their runs (migration 0030): what the scheduler reads (the next
//! due time, from the `tasks_due` index; the tasks due now), the claim of a
//! run, and what the people who own tasks list and change.
//!
//! A run is claimed in one batch that any number of instances may send for
//! the same due time: the run row is unique per (task, run key), the inbound
//! message it puts in its session's queue is unique per event id
//! (`task-run:<run id>`), and the task's next due time moves only from the
//! one it had. Whoever comes second changes nothing, so each due run is one
//! turn, whatever crashes and restarts come between.

use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId, UserId};

use super::{Arg, Batch, Store, StoreError};
use crate::domain::{
    InboundId, InboundStatus, Outcome, PrincipalId, RunStatus, RunTrigger, Schedule, SessionId,
    TaskId, TaskStatus, now_ms,
};

/// Tasks: their rows, the scheduler's reads and claims, their runs.
#[derive(Clone, Copy)]
pub struct Tasks<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Tasks: their rows, the scheduler's reads and claims, their runs.
    pub fn tasks(&self) -> Tasks<'_> {
        Tasks { store: self }
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TaskRow {
    pub id: TaskId,
    /// Who made it (its runs count against their spend).
    pub principal_id: Option<PrincipalId>,
    /// The conversation it reports to.
    pub session_id: SessionId,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    /// Who asked for it, on that platform: its runs' messages are theirs.
    pub sender_id: UserId,
    pub sender_name: Option<String>,
    /// What to do when it fires, an instruction to the agent itself.
    pub prompt: String,
    pub kind: String,
    pub spec: String,
    pub timezone: String,
    pub until_at: Option<i64>,
    pub max_runs: Option<i64>,
    /// Runs delivered so far.
    pub runs: i64,
    #[sqlx(try_from = "i64")]
    pub background: Flag,
    /// A background task's own session.
    pub run_session: Option<SessionId>,
    pub status: TaskStatus,
    pub next_run_at: Option<i64>,
    /// Runs failed in a row.
    pub failures: i64,
    pub last_outcome: Option<Outcome>,
    pub last_run_at: Option<i64>,
    pub created_at: i64,
}

impl TaskRow {
    /// Its schedule.
    ///
    /// # Errors
    /// The stored schedule is not one.
    pub fn schedule(&self) -> Result<Schedule, StoreError> {
        Schedule::stored(&self.kind, &self.spec, &self.timezone)
            .map_err(|err| StoreError::Corrupt(err.to_string()))
    }

    /// The session its runs' turns run in: its own for a background task.
    #[must_use]
    pub fn run_session(&self) -> &SessionId {
        self.run_session.as_ref().unwrap_or(&self.session_id)
    }
}

/// A stored 0/1 column, as a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flag(pub bool);

impl From<i64> for Flag {
    fn from(value: i64) -> Self {
        Self(value != 0)
    }
}

/// A task to make.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub principal_id: Option<PrincipalId>,
    pub session_id: SessionId,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub sender_id: UserId,
    pub sender_name: Option<String>,
    pub prompt: String,
    pub schedule: Schedule,
    pub timezone: String,
    pub until_at: Option<i64>,
    pub max_runs: Option<i64>,
    pub background: bool,
    pub run_session: Option<SessionId>,
    pub next_run_at: Option<i64>,
}

/// One run of a task as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RunRow {
    pub id: i64,
    pub task_id: TaskId,
    pub due_at: i64,
    pub trigger: RunTrigger,
    pub status: RunStatus,
    pub inbound_id: Option<InboundId>,
    pub claimed_at: i64,
    pub finished_at: Option<i64>,
    pub outcome: Option<Outcome>,
}

/// A run with what its turn's model calls cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunUsage {
    pub run: RunRow,
    pub calls: i64,
    /// Billionths of a dollar; `None` when no call had a price.
    pub cost_nanousd: Option<i64>,
}

/// A run to claim: its task, when it is due and why it runs.
#[derive(Debug, Clone)]
pub struct RunClaim<'a> {
    pub task: &'a TaskRow,
    pub due_at: i64,
    pub trigger: RunTrigger,
    /// Unique per task: `due:<ms>` for a scheduled run, the request's
    /// digest for a hook, `manual:<ms>`.
    pub run_key: String,
    /// The text of the run's message (`[scheduled task 7] …`).
    pub text: String,
    /// The task's next due time after this run, for a scheduled run
    /// (`None`: no more).
    pub next_run_at: Option<i64>,
}

pub(super) const TASK_COLUMNS: &str = "id, principal_id, session_id, platform, account, chat_id, thread_id, \
    sender_id, sender_name, prompt, kind, spec, timezone, until_at, max_runs, runs, background, \
    run_session, status, next_run_at, failures, last_outcome, last_run_at, created_at";

const RUN_COLUMNS: &str =
    "id, task_id, due_at, trigger, status, inbound_id, claimed_at, finished_at, outcome";

impl Tasks<'_> {
    /// Makes a task; returns its id.
    ///
    /// # Errors
    /// A database failure.
    pub async fn create(self, task: &NewTask) -> Result<TaskId, StoreError> {
        let now = now_ms();
        let mut batch = Batch::new();
        batch.push_returning(
            "INSERT INTO tasks (principal_id, session_id, platform, account, chat_id, thread_id, \
             sender_id, sender_name, prompt, kind, spec, timezone, until_at, max_runs, \
             background, run_session, status, next_run_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
             $18, $19, $19) RETURNING id",
            vec![
                task.principal_id.into(),
                (&task.session_id).into(),
                task.platform.as_str().into(),
                task.account.as_str().into(),
                task.chat_id.as_str().into(),
                task.thread_id.as_ref().map(ThreadId::as_str).into(),
                task.sender_id.as_str().into(),
                task.sender_name.as_deref().into(),
                task.prompt.as_str().into(),
                task.schedule.kind().into(),
                task.schedule.spec().into(),
                task.timezone.as_str().into(),
                task.until_at.into(),
                task.max_runs.into(),
                i64::from(task.background).into(),
                task.run_session.as_ref().into(),
                TaskStatus::Active.as_str().into(),
                task.next_run_at.into(),
                now.into(),
            ],
        );
        let ids = self.store.write_ids(batch).await?;
        ids.first()
            .copied()
            .map(TaskId::new)
            .ok_or_else(|| StoreError::Corrupt("no id for the new task".to_owned()))
    }

    /// A task by id.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn get(self, id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let row = sqlx::query(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *self.store.read_conn().await?)
            .await?;
        row.as_ref().map(super::read).transpose()
    }

    /// The task of the run `run_id`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn of_run(self, run_id: i64) -> Result<Option<TaskRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE id = (SELECT task_id FROM task_runs \
             WHERE id = $1)"
        ))
        .bind(run_id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.as_ref().map(super::read).transpose()
    }

    /// A principal's tasks, newest first; cancelled and done ones only with
    /// `all`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn of_principal(
        self,
        principal: PrincipalId,
        all: bool,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let filter = if all {
            String::new()
        } else {
            format!(
                " AND status IN ('{}', '{}')",
                TaskStatus::Active,
                TaskStatus::Paused
            )
        };
        let rows = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE principal_id = $1{filter} ORDER BY id DESC"
        ))
        .bind(principal)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// Every task, newest first: the live ones, or with `all` every one.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn all(self, all: bool) -> Result<Vec<TaskRow>, StoreError> {
        self.list(all, i64::MAX, 0).await
    }

    /// A page of [`Tasks::all`]: `limit` tasks after skipping `offset`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn list(
        self,
        all: bool,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let filter = if all {
            String::new()
        } else {
            format!(
                " WHERE status IN ('{}', '{}')",
                TaskStatus::Active,
                TaskStatus::Paused
            )
        };
        let rows = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks{filter} ORDER BY id DESC LIMIT $1 OFFSET $2"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// How many active or paused tasks a principal has.
    ///
    /// # Errors
    /// A database failure.
    pub async fn count_live(self, principal: PrincipalId) -> Result<i64, StoreError> {
        let count = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT COUNT(*) FROM tasks WHERE principal_id = $1 AND status IN ('{}', '{}')",
            TaskStatus::Active,
            TaskStatus::Paused
        ))
        .bind(principal)
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(count)
    }

    /// Moves `principal`'s task `id` to `status` (from a live one it may
    /// change from); with
    /// `next_run_at` (resuming) its next run is set too. Returns whether it
    /// changed: another principal's task, or a finished one, does not.
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_status(
        self,
        id: TaskId,
        principal: Option<PrincipalId>,
        status: TaskStatus,
        next_run_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let owner = match principal {
            Some(_) => "AND principal_id = $4",
            None => "AND $4 IS NULL",
        };
        // Paused from active, active (resumed) from paused, done or
        // cancelled from either.
        let from = match status {
            TaskStatus::Paused => format!("'{}'", TaskStatus::Active),
            TaskStatus::Active => format!("'{}'", TaskStatus::Paused),
            TaskStatus::Done | TaskStatus::Cancelled => {
                format!("'{}', '{}'", TaskStatus::Active, TaskStatus::Paused)
            }
        };
        let result = sqlx::query(&format!(
            "UPDATE tasks SET status = $1, next_run_at = COALESCE($2, next_run_at), \
             failures = CASE WHEN $1 = '{active}' THEN 0 ELSE failures END, updated_at = $3 \
             WHERE id = $5 AND status IN ({from}) {owner}",
            active = TaskStatus::Active,
        ))
        .bind(status)
        .bind(next_run_at)
        .bind(now_ms())
        .bind(principal)
        .bind(id)
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(result.rows_affected() > 0)
    }

    /// Cancels every live task of `principal` (deleted, unlinked or
    /// denied); returns how many.
    ///
    /// # Errors
    /// A database failure.
    pub async fn cancel_all_of(self, principal: PrincipalId) -> Result<u64, StoreError> {
        let result = sqlx::query(&format!(
            "UPDATE tasks SET status = '{cancelled}', updated_at = $1 \
             WHERE principal_id = $2 AND status IN ('{active}', '{paused}')",
            cancelled = TaskStatus::Cancelled,
            active = TaskStatus::Active,
            paused = TaskStatus::Paused,
        ))
        .bind(now_ms())
        .bind(principal)
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(result.rows_affected())
    }

    /// Cancels the live tasks that the identity `identity_id` made while
    /// it belonged to `principal` (it was unlinked from it), or (`None`)
    /// under any principal (its access was denied); returns how many.
    ///
    /// # Errors
    /// A database failure.
    pub async fn cancel_made_by(
        self,
        identity_id: i64,
        principal: Option<PrincipalId>,
    ) -> Result<u64, StoreError> {
        let result = sqlx::query(&format!(
            "UPDATE tasks SET status = '{cancelled}', updated_at = $1 \
             WHERE status IN ('{active}', '{paused}') AND ($2 IS NULL OR principal_id = $2) \
             AND EXISTS (SELECT 1 FROM identities i WHERE i.id = $3 \
             AND i.platform = tasks.platform AND i.account = tasks.account \
             AND i.user_id = tasks.sender_id)",
            cancelled = TaskStatus::Cancelled,
            active = TaskStatus::Active,
            paused = TaskStatus::Paused,
        ))
        .bind(now_ms())
        .bind(principal)
        .bind(identity_id)
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(result.rows_affected())
    }

    /// When the next active task is due; `None` when none is. One read of
    /// the `tasks_due` index, whatever the number of tasks.
    ///
    /// # Errors
    /// A database failure.
    pub async fn next_due(self) -> Result<Option<i64>, StoreError> {
        let next = sqlx::query_scalar::<_, Option<i64>>(&format!(
            "SELECT MIN(next_run_at) FROM tasks WHERE status = '{}'",
            TaskStatus::Active
        ))
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(next)
    }

    /// Up to `limit` active tasks due at `now_ms`, the longest due first.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn due(self, now_ms: i64, limit: i64) -> Result<Vec<TaskRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE status = '{}' AND next_run_at <= $1 \
             ORDER BY next_run_at LIMIT $2",
            TaskStatus::Active
        ))
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// Claims a run: records it, puts its message in its session's queue
    /// and (for a scheduled run) moves the task's next due time on, in one
    /// batch. Returns the message's id, or `None` when the run was claimed
    /// before (by this instance or another).
    ///
    /// # Errors
    /// A database failure.
    pub async fn claim(self, run: &RunClaim<'_>) -> Result<Option<InboundId>, StoreError> {
        let now = now_ms();
        let task = run.task;
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO task_runs (task_id, run_key, due_at, trigger, status, claimed_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (task_id, run_key) DO NOTHING",
            vec![
                task.id.get().into(),
                run.run_key.as_str().into(),
                run.due_at.into(),
                run.trigger.as_str().into(),
                RunStatus::Queued.as_str().into(),
                now.into(),
            ],
        );
        batch.push_returning_optional(
            format!(
                "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, \
                 thread_id, sender_id, sender_name, text, status, received_at, principal_id, \
                 task_run_id) \
                 SELECT $1, $2, 'task-run:' || CAST(r.id AS TEXT), $3, $4, $5, $6, $7, $8, \
                 '{pending}', $9, $10, r.id FROM task_runs r \
                 WHERE r.task_id = $11 AND r.run_key = $12 AND r.inbound_id IS NULL \
                 ON CONFLICT (platform, account, event_id) DO NOTHING RETURNING id",
                pending = InboundStatus::Pending,
            ),
            vec![
                task.platform.as_str().into(),
                task.account.as_str().into(),
                task.run_session().into(),
                task.chat_id.as_str().into(),
                task.thread_id.as_ref().map(ThreadId::as_str).into(),
                task.sender_id.as_str().into(),
                task.sender_name.as_deref().into(),
                run.text.as_str().into(),
                now.into(),
                task.principal_id.into(),
                task.id.get().into(),
                run.run_key.as_str().into(),
            ],
        );
        batch.push(
            "UPDATE task_runs SET inbound_id = (SELECT i.id FROM inbound i \
             WHERE i.task_run_id = task_runs.id) WHERE task_id = $1 AND run_key = $2 \
             AND inbound_id IS NULL",
            vec![task.id.get().into(), run.run_key.as_str().into()],
        );
        if run.trigger == RunTrigger::Schedule {
            push_next(&mut batch, task, run.due_at, run.next_run_at, now);
        }
        let rows = self.store.write(batch).await?;
        first_id(&rows)
    }

    /// Records the run due at `due_at` as missed (it came due while no
    /// instance ran, too long ago to catch up) and moves the task on to
    /// `next_run_at`.
    ///
    /// # Errors
    /// A database failure.
    pub async fn miss(
        self,
        task: &TaskRow,
        due_at: i64,
        next_run_at: Option<i64>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO task_runs (task_id, run_key, due_at, trigger, status, claimed_at, \
             finished_at) VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (task_id, run_key) DO NOTHING",
            vec![
                task.id.get().into(),
                format!("due:{due_at}").into(),
                due_at.into(),
                RunTrigger::Schedule.as_str().into(),
                RunStatus::Missed.as_str().into(),
                now.into(),
            ],
        );
        push_next(&mut batch, task, due_at, next_run_at, now);
        self.store.write(batch).await?;
        Ok(())
    }

    /// A task's runs, newest first, at most `limit`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn runs(self, task: TaskId, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM task_runs WHERE task_id = $1 ORDER BY id DESC LIMIT $2"
        ))
        .bind(task)
        .bind(limit)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// A page of a task's runs, newest first, each with its turn's model
    /// calls and their cost.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn runs_with_usage(
        self,
        task: TaskId,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<RunUsage>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS}, \
             (SELECT COUNT(*) FROM usage u WHERE u.task_id = task_runs.inbound_id) AS calls, \
             (SELECT CAST(SUM(u.cost_nanousd) AS BIGINT) FROM usage u \
             WHERE u.task_id = task_runs.inbound_id) AS cost \
             FROM task_runs WHERE task_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(task)
        .bind(limit)
        .bind(offset)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(RunUsage {
                    run: super::read(row)?,
                    calls: row.try_get("calls")?,
                    cost_nanousd: row.try_get("cost")?,
                })
            })
            .collect()
    }

    /// Stores the nonce task `id`'s hook secret derives from.
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_hook_nonce(self, id: TaskId, nonce: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE tasks SET hook_nonce = $1 WHERE id = $2")
            .bind(nonce)
            .bind(id)
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(())
    }

    /// The nonce of task `id`'s hook secret; `None`: it has no hook.
    ///
    /// # Errors
    /// A database failure.
    pub async fn hook_nonce(self, id: TaskId) -> Result<Option<String>, StoreError> {
        let nonce =
            sqlx::query_scalar::<_, Option<String>>("SELECT hook_nonce FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *self.store.read_conn().await?)
                .await?;
        Ok(nonce.flatten())
    }

    /// A principal's time zone, if they set one (`/timezone`).
    ///
    /// # Errors
    /// A database failure.
    pub async fn timezone_of(self, principal: PrincipalId) -> Result<Option<String>, StoreError> {
        let zone = sqlx::query_scalar::<_, Option<String>>(
            "SELECT timezone FROM principal_settings WHERE principal_id = $1",
        )
        .bind(principal)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(zone.flatten())
    }

    /// Sets a principal's time zone.
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_timezone(self, principal: PrincipalId, zone: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO principal_settings (principal_id, timezone) VALUES ($1, $2) \
             ON CONFLICT (principal_id) DO UPDATE SET timezone = excluded.timezone",
        )
        .bind(principal)
        .bind(zone)
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(())
    }
}

/// How a finished run leaves its task.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd {
    pub run_id: i64,
    pub outcome: Outcome,
    /// Its answer was delivered (it counts towards `count`).
    pub delivered: bool,
    /// Failing runs in a row that pause the task.
    pub max_failures: i64,
}

impl Batch {
    /// Records how the run ended, in the batch that ends its turn: the
    /// run's status, the task's count of delivered runs and of failures in
    /// a row, and the task done (its count reached, or nothing more due) or
    /// paused (too many failures in a row).
    pub fn finish_task_run(&mut self, end: &RunEnd) {
        let status = if end.delivered {
            RunStatus::Done
        } else {
            RunStatus::Failed
        };
        let now = now_ms();
        self.push(
            "UPDATE task_runs SET status = $1, outcome = $2, finished_at = $3 WHERE id = $4",
            vec![
                status.as_str().into(),
                end.outcome.as_str().into(),
                now.into(),
                end.run_id.into(),
            ],
        );
        let (delivered, failed) = (i64::from(end.delivered), i64::from(!end.delivered));
        self.push(
            format!(
                "UPDATE tasks SET runs = runs + $1, \
                 failures = CASE WHEN $2 = 1 THEN failures + 1 ELSE 0 END, \
                 last_outcome = $3, updated_at = $4, \
                 status = CASE WHEN status <> '{active}' THEN status \
                 WHEN $2 = 1 AND failures + 1 >= $5 THEN '{paused}' \
                 WHEN max_runs IS NOT NULL AND runs + $1 >= max_runs THEN '{done}' \
                 WHEN next_run_at IS NULL THEN '{done}' ELSE status END \
                 WHERE id = (SELECT task_id FROM task_runs WHERE id = $6)",
                active = TaskStatus::Active,
                paused = TaskStatus::Paused,
                done = TaskStatus::Done,
            ),
            vec![
                delivered.into(),
                failed.into(),
                end.outcome.as_str().into(),
                now.into(),
                end.max_failures.into(),
                end.run_id.into(),
            ],
        );
    }

    /// Queues the relay of a background run's answer to the conversation
    /// its task reports to: a message whose turn records `answer` there and
    /// delivers it, with no model call.
    pub fn relay_task_answer(&mut self, task: &TaskRow, run_id: i64, answer: &str) {
        self.push(
            format!(
                "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, \
                 thread_id, sender_id, sender_name, text, status, received_at, principal_id, \
                 task_run_id, relay) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '{pending}', $10, $11, $12, $13) \
                 ON CONFLICT (platform, account, event_id) DO NOTHING",
                pending = InboundStatus::Pending,
            ),
            vec![
                task.platform.as_str().into(),
                task.account.as_str().into(),
                format!("task-relay:{run_id}").into(),
                (&task.session_id).into(),
                task.chat_id.as_str().into(),
                task.thread_id.as_ref().map(ThreadId::as_str).into(),
                task.sender_id.as_str().into(),
                task.sender_name.as_deref().into(),
                format!("[background task {} finished]", task.id).into(),
                now_ms().into(),
                task.principal_id.into(),
                run_id.into(),
                answer.into(),
            ],
        );
    }
}

/// Moves `task`'s next due time from `due_at` to `next` (none past its
/// `until`); a task with no more runs due keeps `NULL`.
fn push_next(batch: &mut Batch, task: &TaskRow, due_at: i64, next: Option<i64>, now: i64) {
    let next = next.filter(|at| task.until_at.is_none_or(|until| *at <= until));
    batch.push(
        "UPDATE tasks SET next_run_at = $1, last_run_at = $2, updated_at = $3 \
         WHERE id = $4 AND next_run_at = $2",
        vec![next.into(), due_at.into(), now.into(), task.id.get().into()],
    );
}

fn first_id(rows: &[AnyRow]) -> Result<Option<InboundId>, StoreError> {
    rows.first()
        .map(|row| sqlx::Row::try_get::<i64, _>(row, 0).map(InboundId::new))
        .transpose()
        .map_err(StoreError::from)
}

impl From<Option<&SessionId>> for Arg {
    fn from(value: Option<&SessionId>) -> Self {
        Self::Text(value.map(|id| id.as_str().to_owned()))
    }
}
