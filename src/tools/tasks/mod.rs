//! The task tools: `schedule_task` (a reminder, a recurring job or work in
//! the background, reporting to the conversation it is asked in),
//! `list_tasks` and `cancel_task` (the person's own tasks only), and the
//! `[tasks]` settings they and the scheduler read.
//!
//! A bad argument (an unparseable time, an interval under the minimum, an
//! unknown time zone, a cron expression without five fields) is an ordinary
//! tool error the model can correct, and nothing is stored. Making a task
//! wakes the scheduler ([`TaskWake`]) so that a task due sooner than the
//! one it sleeps for is not late.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

mod control;

pub use control::{Changed, run_text};

use super::{Tool, ToolContext, ToolError, arguments_schema};
use crate::domain::setting::{self, InvalidSetting};
use crate::domain::{Clock, PrincipalId, Schedule, ScheduleRequest, SessionId, TaskId, schedule};
use crate::store::tasks::{NewTask, TaskRow};
use crate::store::{NewSession, OutboxRow, Store, StoreError};
use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId, UserId};

/// `[tasks]`: what people may schedule, and how runs are caught up.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSettings {
    /// The shortest `every` interval (`min_interval_secs`, at least 1).
    #[serde(
        rename = "min_interval_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub min_interval: Duration,
    /// A run that came due while no instance was up runs once on start if
    /// it is at most this late (`catch_up_secs`); later, it is recorded as
    /// missed and the next one is scheduled.
    #[serde(
        rename = "catch_up_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub catch_up: Duration,
    /// The time zone of people who set none with `/timezone`.
    pub default_timezone: String,
    /// The most live (active or paused) tasks one person may have.
    pub max_per_person: u32,
    /// A task whose runs fail this many times in a row is paused, and the
    /// person is told why.
    pub max_consecutive_failures: u32,
    /// The model calls a background run may make.
    pub background_max_iterations: u32,
    /// The environment variable holding the key that task hook secrets
    /// derive from (`POST /hooks/tasks/{id}`); unset or empty: hooks are
    /// off.
    pub hooks_key_env: String,
    /// The largest hook body handed to a run, in bytes.
    pub max_hook_body_bytes: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            min_interval: Duration::from_secs(300),
            catch_up: Duration::from_secs(3600),
            default_timezone: "UTC".to_owned(),
            max_per_person: 20,
            max_consecutive_failures: 3,
            background_max_iterations: 90,
            hooks_key_env: "SWITCHBOARD_TASK_HOOK_KEY".to_owned(),
            max_hook_body_bytes: 64 * 1024,
        }
    }
}

impl TaskSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// An interval or catch-up window under a second, an unknown default
    /// time zone, or a zero limit.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let second = Duration::from_secs(1);
        if self.min_interval < second {
            return Err(InvalidSetting::new(
                "tasks.min_interval_secs",
                "must be at least 1",
            ));
        }
        if self.catch_up < second {
            return Err(InvalidSetting::new(
                "tasks.catch_up_secs",
                "must be at least 1",
            ));
        }
        if !schedule::is_zone(&self.default_timezone) {
            return Err(InvalidSetting::new(
                "tasks.default_timezone",
                format!(
                    "`{}` is not a time zone; use an IANA name such as UTC or Europe/Paris",
                    self.default_timezone
                ),
            ));
        }
        for (key, value) in [
            (
                "tasks.max_consecutive_failures",
                self.max_consecutive_failures,
            ),
            (
                "tasks.background_max_iterations",
                self.background_max_iterations,
            ),
        ] {
            if value == 0 {
                return Err(InvalidSetting::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// Wakes the scheduler: a task was made or resumed, a session has a run
/// waiting (a task run by hand, a background run's answer relayed to its
/// conversation) whose runner the scheduler wakes, or a notice posted
/// during a turn (a tool's question) is to be sent now (this floor cannot
/// reach the runner).
#[derive(Debug, Default)]
pub struct TaskWake {
    notify: Notify,
    /// Sessions with a run waiting; bounded by the runs queued between two
    /// looks of the scheduler.
    sessions: std::sync::Mutex<Vec<SessionId>>,
    /// Notices to send, claimed by this instance.
    notices: std::sync::Mutex<Vec<OutboxRow>>,
}

impl TaskWake {
    /// Tells the scheduler to look again.
    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// Tells the scheduler that `session` has a run waiting.
    pub fn wake_session(&self, session: SessionId) {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(session);
        self.wake();
    }

    /// Tells the scheduler to have `notice` sent.
    pub fn send_notice(&self, notice: OutboxRow) {
        self.notices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(notice);
        self.wake();
    }

    /// The notices to send, since last asked.
    pub fn take_notices(&self) -> Vec<OutboxRow> {
        std::mem::take(
            &mut *self
                .notices
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The sessions with a run waiting, since last asked.
    pub fn take_sessions(&self) -> Vec<SessionId> {
        std::mem::take(
            &mut *self
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Until the next [`TaskWake::wake`] (one made while nobody waited
    /// counts).
    pub async fn woken(&self) {
        self.notify.notified().await;
    }
}

/// What the three tools share.
#[derive(Clone)]
pub struct TaskTools {
    pub store: Store,
    pub clock: Clock,
    pub settings: TaskSettings,
    pub wake: Arc<TaskWake>,
}

impl TaskTools {
    /// The person's time zone: theirs, else the default.
    async fn timezone(&self, principal: Option<PrincipalId>) -> Result<String, ToolError> {
        let set = match principal {
            Some(principal) => self
                .store
                .tasks()
                .timezone_of(principal)
                .await
                .map_err(failed)?,
            None => None,
        };
        Ok(set.unwrap_or_else(|| self.settings.default_timezone.clone()))
    }
}

/// Where a task is made, and so where its runs report: the conversation,
/// its chat, and the person asking.
#[derive(Debug, Clone)]
pub struct Origin {
    pub session_id: SessionId,
    pub principal: Option<PrincipalId>,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub sender_id: UserId,
    pub sender_name: Option<String>,
}

impl TaskTools {
    /// Makes the task `request` asks for, reporting to `origin`; returns
    /// its id and what the tool answers (its schedule and next run in
    /// words, in the person's time zone).
    ///
    /// # Errors
    /// A bad request (an ordinary error the model or client can correct;
    /// nothing is stored), too many tasks, or a database failure.
    pub async fn schedule(
        &self,
        origin: &Origin,
        request: &TaskRequest,
    ) -> Result<(TaskId, Value), ToolError> {
        if let Some(principal) = origin.principal {
            let live = self
                .store
                .tasks()
                .count_live(principal)
                .await
                .map_err(failed)?;
            if live >= i64::from(self.settings.max_per_person) {
                return Err(ToolError::Failed(format!(
                    "the person already has {live} tasks, the most allowed; cancel one first"
                )));
            }
        }
        let timezone = match &request.timezone {
            Some(zone) => zone.trim().to_owned(),
            None => self.timezone(origin.principal).await?,
        };
        let planned = plan(self, request, timezone)?;
        let id = create(self, origin, request, &planned).await?;
        self.wake.wake();
        let note = planned.background.then_some(
            "it runs now, in the background; its answer will be delivered to this chat when done",
        );
        Ok((
            id,
            json!({
                "task_id": id.get(),
                "schedule": planned.schedule.describe(&planned.timezone),
                "next_run": planned
                    .next_run_at
                    .map(|at| schedule::words(at, &planned.timezone)),
                "background": planned.background,
                "note": note,
            }),
        ))
    }
}

/// `schedule_task`.
pub struct ScheduleTask(pub TaskTools);
/// `list_tasks`.
pub struct ListTasks(pub TaskTools);
/// `cancel_task`.
pub struct CancelTask(pub TaskTools);

const SCHEDULE_DESCRIPTION: &str = "Schedule work for later: a reminder, a recurring job, or work \
to do in the background and report back on. `prompt` is an instruction to yourself for when it \
fires (\"Remind the person to call the dentist\", \"Summarise today's headlines\"). Give exactly \
one of `at` (RFC 3339, or a local date-time such as 2026-12-02T09:00 in `timezone`), `in` (a \
duration from now: 90s, 45m, 2h30m, 1d), `every` (a duration between runs) or `cron` (five \
fields: minute hour day-of-month month day-of-week). Optional: `timezone` (IANA; default the \
person's), `until` (RFC 3339 or local; no runs after it), `count` (stop after this many runs), \
`background` (true: run it now in its own session and report when done; the same as `in: \"0s\"`). \
Returns the task's id and its next run in words.";

const LIST_DESCRIPTION: &str = "List the person's scheduled and background tasks: id, schedule, \
next run, last outcome, status.";

const CANCEL_DESCRIPTION: &str = "Cancel one of the person's tasks by its id (from schedule_task \
or list_tasks).";

/// What a task is asked to be: `schedule_task`'s arguments, and the body
/// of `POST /v1/tasks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TaskRequest {
    /// What to do when it fires: an instruction to yourself.
    pub prompt: String,
    /// When, once: RFC 3339, or a local date-time in `timezone`.
    #[serde(default)]
    pub at: Option<String>,
    /// How long from now, once: 90s, 45m, 2h30m, 1d.
    #[serde(default, rename = "in")]
    pub after: Option<String>,
    /// How often: a duration between runs.
    #[serde(default)]
    pub every: Option<String>,
    /// A five-field cron expression.
    #[serde(default)]
    pub cron: Option<String>,
    /// An IANA time zone; default the person's.
    #[serde(default)]
    pub timezone: Option<String>,
    /// No runs after this time.
    #[serde(default)]
    pub until: Option<String>,
    /// Stop after this many runs.
    #[serde(default)]
    pub count: Option<u32>,
    /// Run in the background, now, and report when done.
    #[serde(default)]
    pub background: Option<bool>,
}

#[async_trait]
impl Tool for ScheduleTask {
    fn name(&self) -> &'static str {
        "schedule_task"
    }

    fn description(&self) -> &'static str {
        SCHEDULE_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<TaskRequest>()
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let args: TaskRequest = serde_json::from_value(args)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        let store = &self.0.store;
        let Some(message) = store.inbound().get(ctx.inbound_id).await.map_err(failed)? else {
            return Err(ToolError::Failed(
                "the message asking for it is gone".to_owned(),
            ));
        };
        let origin = Origin {
            session_id: ctx.session_id.clone(),
            principal: ctx.principal,
            platform: message.platform.clone(),
            account: message.account.clone(),
            chat_id: message.chat_id.clone(),
            thread_id: message.thread_id.clone(),
            sender_id: message.sender_id.clone(),
            sender_name: message.sender_name.clone(),
        };
        let (_, made) = self.0.schedule(&origin, &args).await?;
        Ok(made)
    }
}

/// A task as the arguments describe it, checked.
struct Planned {
    schedule: Schedule,
    timezone: String,
    next_run_at: Option<i64>,
    until_at: Option<i64>,
    background: bool,
}

fn plan(tools: &TaskTools, args: &TaskRequest, timezone: String) -> Result<Planned, ToolError> {
    let invalid = |err: crate::domain::ScheduleError| ToolError::InvalidArguments(err.to_string());
    if args.prompt.trim().is_empty() {
        return Err(ToolError::InvalidArguments(
            "`prompt` must not be empty".to_owned(),
        ));
    }
    let now = tools.clock.now_ms();
    let background = args.background.unwrap_or(false);
    let mut request = ScheduleRequest {
        at: args.at.clone(),
        after: args.after.clone(),
        every: args.every.clone(),
        cron: args.cron.clone(),
        timezone: timezone.clone(),
    };
    if background
        && [&request.at, &request.after, &request.every, &request.cron]
            .iter()
            .all(|form| form.is_none())
    {
        request.after = Some("0s".to_owned());
    }
    let schedule = request
        .parse(now, tools.settings.min_interval)
        .map_err(invalid)?;
    let background = background || matches!(schedule, Schedule::Once { at_ms } if at_ms <= now);
    let until_at = match &args.until {
        Some(until) => Some(
            ScheduleRequest {
                at: Some(until.clone()),
                timezone: timezone.clone(),
                ..ScheduleRequest::default()
            }
            .parse(now, tools.settings.min_interval)
            .map_err(|err| ToolError::InvalidArguments(format!("`until`: {err}")))
            .and_then(|until| match until {
                Schedule::Once { at_ms } => Ok(at_ms),
                _ => Err(ToolError::InvalidArguments(
                    "`until` must be a time".to_owned(),
                )),
            })?,
        ),
        None => None,
    };
    if args.count == Some(0) {
        return Err(ToolError::InvalidArguments(
            "`count` must be at least 1".to_owned(),
        ));
    }
    let next_run_at = match schedule {
        Schedule::Once { at_ms } => Some(at_ms),
        _ => schedule.next_after(now),
    }
    .filter(|at| until_at.is_none_or(|until| *at <= until));
    Ok(Planned {
        schedule,
        timezone,
        next_run_at,
        until_at,
        background,
    })
}

async fn create(
    tools: &TaskTools,
    origin: &Origin,
    args: &TaskRequest,
    planned: &Planned,
) -> Result<TaskId, ToolError> {
    let store = &tools.store;
    let run_session = if planned.background {
        Some(background_session(store, &origin.session_id).await?)
    } else {
        None
    };
    let task = NewTask {
        principal_id: origin.principal,
        session_id: origin.session_id.clone(),
        platform: origin.platform.clone(),
        account: origin.account.clone(),
        chat_id: origin.chat_id.clone(),
        thread_id: origin.thread_id.clone(),
        sender_id: origin.sender_id.clone(),
        sender_name: origin.sender_name.clone(),
        prompt: args.prompt.trim().to_owned(),
        schedule: planned.schedule.clone(),
        timezone: planned.timezone.clone(),
        until_at: planned.until_at,
        max_runs: args.count.map(i64::from),
        background: planned.background,
        run_session,
        next_run_at: planned.next_run_at,
    };
    store.tasks().create(&task).await.map_err(failed)
}

/// A session of its own for a background task, with its conversation's
/// prompt, model and tools.
async fn background_session(store: &Store, origin: &SessionId) -> Result<SessionId, ToolError> {
    let Some(session) = store.sessions().get(origin).await.map_err(failed)? else {
        return Err(ToolError::Failed("the conversation is gone".to_owned()));
    };
    let id = SessionId::generate();
    let new = NewSession {
        id: id.clone(),
        origin_key: format!("background:{id}"),
        platform: session.platform,
        account: session.account,
        chat_id: session.chat_id,
        thread_id: session.thread_id,
        system_prompt: session.system_prompt,
        model: session.model,
        toolset: session.toolset,
        principal: session.principal,
    };
    store.sessions().create(&new).await.map_err(failed)?;
    Ok(id)
}

#[async_trait]
impl Tool for ListTasks {
    fn name(&self) -> &'static str {
        "list_tasks"
    }

    fn description(&self) -> &'static str {
        LIST_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<NoArgs>()
    }

    async fn call(&self, ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        let Some(principal) = ctx.principal else {
            return Ok(json!({"tasks": []}));
        };
        let tools = &self.0;
        let timezone = tools.timezone(Some(principal)).await?;
        let tasks = tools
            .store
            .tasks()
            .of_principal(principal, false)
            .await
            .map_err(failed)?;
        let listed: Vec<Value> = tasks.iter().map(|task| summary(task, &timezone)).collect();
        Ok(json!({"tasks": listed}))
    }
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct NoArgs {}

/// `cancel_task`'s arguments.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct CancelArgs {
    /// The task's id.
    task_id: i64,
}

#[async_trait]
impl Tool for CancelTask {
    fn name(&self) -> &'static str {
        "cancel_task"
    }

    fn description(&self) -> &'static str {
        CANCEL_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<CancelArgs>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let CancelArgs { task_id } = serde_json::from_value(args)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        let cancelled = self
            .0
            .cancel(TaskId::new(task_id), ctx.principal)
            .await
            .map_err(failed)?;
        if cancelled == Changed::NoSuchTask {
            return Err(ToolError::Failed(format!(
                "no task {task_id} of this person is scheduled"
            )));
        }
        Ok(json!({"task_id": task_id, "status": "cancelled"}))
    }
}

/// A task as the tools and `/tasks` show it.
#[must_use]
pub fn summary(task: &TaskRow, timezone: &str) -> Value {
    let schedule = task.schedule().map_or_else(
        |_| task.kind.clone(),
        |schedule| schedule.describe(timezone),
    );
    json!({
        "task_id": task.id.get(),
        "prompt": task.prompt,
        "schedule": schedule,
        "next_run": task.next_run_at.map(|at| schedule::words(at, timezone)),
        "status": task.status.as_str(),
        "last_outcome": task.last_outcome.map(|outcome| outcome.as_str()),
        "runs": task.runs,
        "background": task.background.0,
    })
}

fn failed(err: StoreError) -> ToolError {
    ToolError::Failed(format!("the task could not be read or stored: {err}"))
}
