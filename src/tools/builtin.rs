//! The built-in tools, named once: [`BuiltIn`] is what `agent.tools` may
//! name, and building a registry matches on it, so a tool added here is
//! both accepted in the configuration and registered, or the build fails.

use std::sync::Arc;

use strum::IntoEnumIterator;

use super::Tool;
use super::ask_user::AskUser;
use super::calculator::Calculator;
use super::current_time::CurrentTime;
use super::delegate::Delegate;
use super::http_get::HttpGet;
use super::memory::Memory;
use super::settings::{MemorySettings, ToolSettings};
use super::tasks::{CancelTask, ListTasks, ScheduleTask, TaskTools};
use crate::store::Store;

/// A built-in tool, by the name the model calls it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::EnumIter,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
)]
#[strum(serialize_all = "snake_case")]
pub enum BuiltIn {
    Calculator,
    CurrentTime,
    Delegate,
    HttpGet,
    Memory,
    ScheduleTask,
    ListTasks,
    CancelTask,
    AskUser,
}

/// What building the built-in tools needs.
pub struct BuiltInContext<'a> {
    pub tools: &'a ToolSettings,
    pub memory: &'a MemorySettings,
    pub store: &'a Store,
    /// What the task tools share (the scheduler's clock and wake).
    pub tasks: &'a TaskTools,
}

impl BuiltIn {
    /// Every built-in tool's name, in order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::iter().map(<&'static str>::from)
    }

    /// The tool's name as the model calls it.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Builds the tool, once for the process; `None` when its settings turn
    /// it off (`memory.enabled = false`).
    ///
    /// # Errors
    /// `http_get`'s HTTP client could not be built.
    pub fn build(
        self,
        context: &BuiltInContext<'_>,
    ) -> Result<Option<Arc<dyn Tool>>, reqwest::Error> {
        Ok(Some(match self {
            Self::Calculator => Arc::new(Calculator),
            Self::CurrentTime => Arc::new(CurrentTime),
            Self::Delegate => Arc::new(Delegate),
            Self::HttpGet => Arc::new(HttpGet::new(context.tools.http_get.clone())?),
            Self::Memory if context.memory.enabled => {
                Arc::new(Memory::new(context.store.clone(), context.memory.clone()))
            }
            Self::Memory => return Ok(None),
            Self::ScheduleTask => Arc::new(ScheduleTask(context.tasks.clone())),
            Self::ListTasks => Arc::new(ListTasks(context.tasks.clone())),
            Self::CancelTask => Arc::new(CancelTask(context.tasks.clone())),
            Self::AskUser => Arc::new(AskUser),
        }))
    }
}
