//! `/tasks`, `/timezone` and `/stop ID`: a person's tasks from the chat.
//!
//! In a direct chat `/tasks` lists and changes all of the sender's tasks;
//! in a group, only theirs that report to this group (a person's other
//! tasks, and their prompts, are not the group's to read).

use super::dispatch::{Commands, Context};
use crate::domain::{RunTrigger, StopCause, TaskId, schedule};
use crate::session::texts;
use crate::store::StoreError;
use crate::store::tasks::TaskRow;
use crate::tools::tasks::Changed;

/// Tasks `/tasks` lists.
const LISTED: usize = 20;

impl Commands<'_> {
    /// `/tasks [list|cancel ID|pause ID|resume ID|run ID]`.
    pub(super) async fn tasks(
        &self,
        context: &Context<'_>,
        action: Option<&str>,
    ) -> Result<String, StoreError> {
        let words: Vec<&str> = action.unwrap_or_default().split_whitespace().collect();
        let (verb, id) = match words.as_slice() {
            [] | ["list"] => return self.list_tasks(context).await,
            [verb, id] => (*verb, *id),
            _ => return Ok(texts::TASKS_USAGE.to_owned()),
        };
        let Some(task) = self.visible_task(context, id).await? else {
            return Ok(texts::no_such_task(id));
        };
        let tools = self.tasks;
        let owner = task.principal_id;
        let changed = match verb.to_ascii_lowercase().as_str() {
            "cancel" => {
                let changed = tools.cancel(task.id, owner).await?;
                if changed == Changed::Yes {
                    // A run in progress stops too (a background one, in its
                    // own session; a scheduled one waits in this chat's).
                    self.runner
                        .stop(task.run_session(), StopCause::User)
                        .await?;
                }
                changed
            }
            "pause" => tools.pause(task.id, owner).await?,
            "resume" => tools.resume(task.id, owner).await?,
            "run" => {
                let key = format!("manual:{}", tools.clock.now_ms());
                let fired = tools.fire(&task, RunTrigger::Manual, key, None).await?;
                return Ok(texts::task_fired(task.id, fired.is_some()));
            }
            _ => return Ok(texts::TASKS_USAGE.to_owned()),
        };
        Ok(match changed {
            Changed::Yes => texts::task_changed(task.id, verb),
            Changed::NoSuchTask => texts::task_not_live(task.id, verb),
        })
    }

    /// `/stop ID`: stops a background task's run in progress.
    pub(super) async fn stop_task(
        &self,
        context: &Context<'_>,
        id: &str,
    ) -> Result<String, StoreError> {
        let Some(task) = self.visible_task(context, id).await? else {
            return Ok(texts::no_such_task(id));
        };
        let stopped = self
            .runner
            .stop(task.run_session(), StopCause::User)
            .await?;
        Ok(if stopped {
            texts::STOPPING.to_owned()
        } else {
            texts::task_not_running(task.id)
        })
    }

    /// `/timezone`: the sender's time zone; `/timezone ZONE` sets it.
    pub(super) async fn timezone(
        &self,
        context: &Context<'_>,
        zone: Option<&str>,
    ) -> Result<String, StoreError> {
        let principal = context.identity.principal;
        let Some(zone) = zone.map(str::trim) else {
            let zone = self.tasks.store.tasks().timezone_of(principal).await?;
            return Ok(texts::timezone(
                zone.as_deref(),
                &self.tasks.settings.default_timezone,
            ));
        };
        if !schedule::is_zone(zone) {
            return Ok(texts::unknown_timezone(zone));
        }
        self.tasks
            .store
            .tasks()
            .set_timezone(principal, zone)
            .await?;
        let now = schedule::words(self.tasks.clock.now_ms(), zone);
        Ok(texts::timezone_set(zone, &now))
    }

    async fn list_tasks(&self, context: &Context<'_>) -> Result<String, StoreError> {
        let principal = context.identity.principal;
        let mut tasks = self
            .tasks
            .store
            .tasks()
            .of_principal(principal, false)
            .await?;
        if !context.place.direct {
            tasks.retain(|task| task.session_id == context.place.session_id);
        }
        tasks.truncate(LISTED);
        let zone = self
            .tasks
            .store
            .tasks()
            .timezone_of(principal)
            .await?
            .unwrap_or_else(|| self.tasks.settings.default_timezone.clone());
        let mut lines = Vec::with_capacity(tasks.len());
        for task in &tasks {
            let progress = self.progress(task).await?;
            lines.push(texts::task_line(task, &zone, progress.as_deref()));
        }
        Ok(texts::task_list(&lines))
    }

    /// A running background run's progress: model calls used of its
    /// budget.
    async fn progress(&self, task: &TaskRow) -> Result<Option<String>, StoreError> {
        if !task.background.0 {
            return Ok(None);
        }
        let Some(running) = self.runner.running(task.run_session()).await? else {
            return Ok(None);
        };
        let budget = self.tasks.settings.background_max_iterations;
        let used = running
            .budget_left
            .map_or(0, |left| budget.saturating_sub(left));
        Ok(Some(texts::task_progress(used, budget)))
    }

    /// The sender's task `id` (`7` or `#7`) if this chat may see it.
    async fn visible_task(
        &self,
        context: &Context<'_>,
        id: &str,
    ) -> Result<Option<TaskRow>, StoreError> {
        let Ok(id) = id.trim_start_matches('#').parse::<i64>() else {
            return Ok(None);
        };
        let principal = Some(context.identity.principal);
        Ok(self
            .tasks
            .owned(TaskId::new(id), principal)
            .await?
            .filter(|task| context.place.direct || task.session_id == context.place.session_id))
    }
}
