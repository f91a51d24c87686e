//! `switchboard tasks [list [--all]|cancel ID|pause ID|resume ID]`: every
//! person's tasks, for the operator. A running gateway sees a change at its
//! scheduler's next look (at most 30 seconds later).

use std::sync::Arc;

use anyhow::Context;

use super::{TasksAction, open_existing};
use crate::config::Settings;
use crate::domain::{Clock, TaskId, schedule};
use crate::store::Store;
use crate::store::tasks::TaskRow;
use crate::tools::tasks::{Changed, TaskTools, TaskWake};

/// Characters of a task's prompt listed.
const PROMPT_CHARS: usize = 60;

/// `switchboard tasks …`.
pub async fn run(settings: &Settings, action: TasksAction) -> anyhow::Result<()> {
    let store = open_existing(settings).await?;
    let result = act(settings, &store, action).await;
    store.close().await;
    result
}

async fn act(settings: &Settings, store: &Store, action: TasksAction) -> anyhow::Result<()> {
    let tools = TaskTools {
        store: store.clone(),
        clock: Clock::system(),
        settings: settings.tasks.clone(),
        wake: Arc::new(TaskWake::default()),
    };
    let (id, verb) = match action {
        TasksAction::List { all } => {
            let tasks = store.tasks().all(all).await.context("reading tasks")?;
            if tasks.is_empty() {
                println!("No tasks.");
            }
            for task in &tasks {
                println!("{}", line(task));
            }
            return Ok(());
        }
        TasksAction::Cancel { id } => (id, "cancel"),
        TasksAction::Pause { id } => (id, "pause"),
        TasksAction::Resume { id } => (id, "resume"),
    };
    let id = TaskId::new(id);
    let task = store
        .tasks()
        .get(id)
        .await
        .context("reading the task")?
        .with_context(|| format!("no task {id}"))?;
    let owner = task.principal_id;
    let changed = match verb {
        "cancel" => tools.cancel(id, owner).await,
        "pause" => tools.pause(id, owner).await,
        _ => tools.resume(id, owner).await,
    }
    .context("changing the task")?;
    match changed {
        Changed::Yes => {
            println!("Task {id}: {verb} done.");
            Ok(())
        }
        Changed::NoSuchTask => anyhow::bail!("task {id} is {}: it cannot {verb}", task.status),
    }
}

/// One task: id, status, owner, chat, schedule, next run, runs, last
/// outcome, prompt.
fn line(task: &TaskRow) -> String {
    let zone = &task.timezone;
    let schedule = task
        .schedule()
        .map_or_else(|_| task.kind.clone(), |s| s.describe(zone));
    let next = task
        .next_run_at
        .map_or_else(|| "-".to_owned(), |at| schedule::words(at, zone));
    let owner = task
        .principal_id
        .map_or_else(|| "-".to_owned(), |p| p.to_string());
    let prompt: String = task.prompt.chars().take(PROMPT_CHARS).collect();
    format!(
        "{id}  {status}  principal {owner}  {platform}:{chat}  {schedule}  next {next}  \
         runs {runs}  last {last}  {prompt}",
        id = task.id,
        status = task.status,
        platform = task.platform,
        chat = task.chat_id,
        runs = task.runs,
        last = task.last_outcome.map_or("-", |outcome| outcome.as_str()),
    )
}
