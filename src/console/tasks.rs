//! The console's Tasks pages: every person's scheduled and background
//! tasks (status, owner, chat, schedule in words, next run, runs, last
//! outcome), and one task with its run history (when each run was due,
//! what fired it, how it ended, how long it took, its model calls and
//! their cost). Read only: people manage their tasks from their chat
//! (`/tasks`), operators with `switchboard tasks` or the HTTP API.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleState;
use super::auth::Admin;
use super::pages::{PageError, PageResult, offset_of, page_of, render};
use super::templates::{Nav, duration, nanousd, pager, time};
use crate::domain::{TaskId, schedule};
use crate::store::tasks::{RunUsage, TaskRow};

/// Tasks per page.
const PAGE_TASKS: i64 = 50;

/// Runs per page of a task.
const PAGE_RUNS: i64 = 50;

/// Characters of a task's prompt the list shows.
const PROMPT_CHARS: usize = 80;

/// `?page=N&all=1`: a page, and whether finished and cancelled tasks are
/// listed too.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TasksQuery {
    page: Option<u32>,
    all: Option<String>,
}

impl TasksQuery {
    fn all(&self) -> bool {
        self.all
            .as_deref()
            .is_some_and(|all| !all.is_empty() && all != "0")
    }
}

/// `GET /console/tasks`: the live tasks (with `all`, every one), newest
/// first.
pub async fn tasks(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Query(query): Query<TasksQuery>,
) -> PageResult {
    let page = page_of(query.page);
    let all = query.all();
    let mut tasks = state
        .store
        .tasks()
        .list(all, PAGE_TASKS + 1, offset_of(page, PAGE_TASKS))
        .await?;
    let more = tasks.len() > usize::try_from(PAGE_TASKS).unwrap_or(usize::MAX);
    tasks.truncate(usize::try_from(PAGE_TASKS).unwrap_or(usize::MAX));
    Ok(render(
        "Tasks",
        Nav::Tasks,
        &admin,
        list(&tasks, all, page, more),
    ))
}

/// `GET /console/tasks/{id}`: one task and a page of its runs.
pub async fn task(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Path(id): Path<i64>,
    Query(query): Query<TasksQuery>,
) -> PageResult {
    let id = TaskId::new(id);
    let task = state
        .store
        .tasks()
        .get(id)
        .await?
        .ok_or(PageError::NotFound)?;
    let page = page_of(query.page);
    let mut runs = state
        .store
        .tasks()
        .runs_with_usage(id, PAGE_RUNS + 1, offset_of(page, PAGE_RUNS))
        .await?;
    let more = runs.len() > usize::try_from(PAGE_RUNS).unwrap_or(usize::MAX);
    runs.truncate(usize::try_from(PAGE_RUNS).unwrap_or(usize::MAX));
    Ok(render(
        &format!("Task {id}"),
        Nav::Tasks,
        &admin,
        detail(&task, &runs, page, more),
    ))
}

/// The task's schedule in words, in its timezone.
fn schedule_of(task: &TaskRow) -> String {
    task.schedule()
        .map_or_else(|_| task.kind.clone(), |s| s.describe(&task.timezone))
}

fn next_run(task: &TaskRow) -> String {
    task.next_run_at
        .map_or_else(|| "–".to_owned(), |at| schedule::words(at, &task.timezone))
}

fn owner(task: &TaskRow) -> String {
    task.principal_id
        .map_or_else(|| "–".to_owned(), |id| id.to_string())
}

fn list(tasks: &[TaskRow], all: bool, page: u32, more: bool) -> Markup {
    let link = move |page: u32| {
        if all {
            format!("?all=1&page={page}")
        } else {
            format!("?page={page}")
        }
    };
    html! {
        p {
            @if all {
                "Every task. " a href="/console/tasks" { "Only active and paused ones" }
            } @else {
                "Active and paused tasks. " a href="/console/tasks?all=1" { "Every task" }
            }
        }
        @if tasks.is_empty() {
            p.muted { "No tasks." }
        } @else {
            table {
                tr {
                    th { "task" } th { "status" } th.num { "principal" } th { "chat" }
                    th { "schedule" } th { "next run" } th.num { "runs" } th { "last outcome" }
                    th { "what it does" }
                }
                @for task in tasks {
                    tr data-task=(task.id) {
                        td { a href=(format!("/console/tasks/{}", task.id)) { (task.id) } }
                        td data-k="task-status" { (task.status) }
                        td.num { (owner(task)) }
                        td { (task.platform) ":" (task.chat_id) }
                        td { (schedule_of(task)) @if task.background.0 { " (background)" } }
                        td { (next_run(task)) }
                        td.num { (task.runs) }
                        td { (task.last_outcome.map_or("–", |outcome| outcome.as_str())) }
                        td { (task.prompt.chars().take(PROMPT_CHARS).collect::<String>()) }
                    }
                }
            }
        }
        (pager(page, more, link))
    }
}

fn detail(task: &TaskRow, runs: &[RunUsage], page: u32, more: bool) -> Markup {
    html! {
        table {
            tr { th { "status" } td data-k="task-status" { (task.status) } }
            tr { th { "principal" } td { (owner(task)) } }
            tr {
                th { "reports to" }
                td {
                    a href=(format!("/console/conversations/{}", task.session_id)) {
                        (task.platform) ":" (task.chat_id)
                    }
                    @if let Some(session) = &task.run_session {
                        " · runs in "
                        a href=(format!("/console/conversations/{session}")) { "its own conversation" }
                    }
                }
            }
            tr { th { "schedule" } td data-k="task-schedule" { (schedule_of(task)) " (" (task.timezone) ")" } }
            tr { th { "next run" } td { (next_run(task)) } }
            tr { th { "runs delivered" } td { (task.runs) @if let Some(max) = task.max_runs { " of " (max) } } }
            tr { th { "failures in a row" } td { (task.failures) } }
            tr { th { "made" } td { (time(task.created_at)) } }
            tr { th { "what it does" } td { pre { (task.prompt) } } }
        }
        h2 { "Runs" }
        @if runs.is_empty() {
            p.muted { "No runs yet." }
        } @else {
            table {
                tr {
                    th { "run" } th { "due (UTC)" } th { "fired by" } th { "status" }
                    th { "outcome" } th { "late" } th { "took" } th.num { "model calls" } th.num { "cost" }
                }
                @for usage in runs {
                    @let run = &usage.run;
                    tr data-run=(run.id) {
                        td { (run.id) }
                        td { (time(run.due_at)) }
                        td { (run.trigger) }
                        td data-k="run-status" { (run.status) }
                        td { (run.outcome.map_or("–", |outcome| outcome.as_str())) }
                        td { (duration((run.claimed_at - run.due_at).max(0))) }
                        td { (run.finished_at.map_or_else(|| "–".to_owned(), |end| duration(end - run.claimed_at))) }
                        td.num data-k="run-calls" { (usage.calls) }
                        td.num data-k="run-cost" { (usage.cost_nanousd.map_or_else(|| "–".to_owned(), nanousd)) }
                    }
                }
            }
        }
        (pager(page, more, |page| format!("?page={page}")))
    }
}
