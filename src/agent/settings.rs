//! The agent's settings: who it is and what it may do (`[agent]`), how
//! many agent instances are cached (`[agent_cache]`), when history is
//! compacted (`[context]`) and the limits on one task (`[limits]`).

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use std::str::FromStr;

use crate::domain::closest;
use crate::domain::setting::{self, InvalidSetting};
use crate::tools::builtin::BuiltIn;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSettings {
    /// Who the agent is; the first part of every new session's system prompt.
    pub persona: String,
    /// House rules appended to the persona.
    pub rules: String,
    /// A memory/context file read when a session starts (later edits reach
    /// new sessions only).
    pub memory_file: Option<PathBuf>,
    /// Tools offered to new sessions.
    pub tools: Vec<String>,
    /// Model calls one task (one user message) may make, sub-agents included.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "u32")]
    pub max_iterations: NonZeroU32,
    /// How deep `delegate` may nest (the top agent is depth 0).
    pub max_delegation_depth: u32,
    /// Model calls a parent keeps for itself while children run.
    pub parent_reserve: u32,
    /// Longest a single tool call may run.
    #[serde(
        rename = "tool_timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub tool_timeout: Duration,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            persona: "You are Switchboard, a helpful assistant reachable from several chat \
                      platforms. Answer clearly and concisely."
                .to_owned(),
            rules: "Use tools when they help; say so when you are unsure. Format answers in \
                    Markdown."
                .to_owned(),
            memory_file: None,
            tools: [
                "calculator",
                "current_time",
                "delegate",
                "http_get",
                "memory",
                "schedule_task",
                "list_tasks",
                "cancel_task",
            ]
            .map(str::to_owned)
            .to_vec(),
            max_iterations: NonZeroU32::new(90).expect("90 is not 0"),
            max_delegation_depth: 2,
            parent_reserve: 2,
            tool_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentCacheSettings {
    /// Most agent instances kept.
    pub max_capacity: u64,
    /// An instance unused this long is dropped.
    #[serde(
        rename = "idle_ttl_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub idle_ttl: Duration,
}

impl Default for AgentCacheSettings {
    fn default() -> Self {
        Self {
            max_capacity: 1000,
            idle_ttl: Duration::from_secs(1800),
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContextSettings {
    /// Context window in tokens for models not listed in `windows`.
    pub window_tokens: u64,
    /// Context windows by model name.
    pub windows: std::collections::BTreeMap<String, u64>,
    /// Compact when the history would pass this share of the window.
    pub compact_threshold: f64,
    /// Turns kept verbatim after a compaction.
    pub keep_recent_turns: usize,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self {
            window_tokens: 128_000,
            windows: std::collections::BTreeMap::new(),
            compact_threshold: 0.75,
            keep_recent_turns: 4,
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Longest one task (one user message) may run, in seconds.
    #[serde(
        rename = "task_timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub task_timeout: Duration,
    /// Input plus output tokens one task may use over all its model calls;
    /// 0 for no limit.
    pub task_max_tokens: u64,
    /// The same tool call giving the same result this many times in a row
    /// stops the task; 0 never stops.
    pub repeat_limit: u32,
    /// A model tried once when the session's model keeps failing (429/5xx).
    pub fallback_model: Option<String>,
    /// US dollars one principal may spend per UTC day, estimated from
    /// `[prices]`; 0 for no limit.
    pub principal_daily_usd: f64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            task_timeout: Duration::from_secs(900),
            task_max_tokens: 2_000_000,
            repeat_limit: 3,
            fallback_model: None,
            principal_daily_usd: 0.0,
        }
    }
}

impl AgentSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A tool that is not built in.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let known = || BuiltIn::names();
        if let Some(unknown) = self
            .tools
            .iter()
            .find(|tool| BuiltIn::from_str(tool).is_err())
        {
            let hint = closest(unknown, known())
                .map(|best| format!(" (did you mean `{best}`?)"))
                .unwrap_or_default();
            return Err(InvalidSetting::new(
                "agent.tools",
                format!(
                    "unknown tool `{unknown}`{hint}; known tools: {}",
                    known().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The built-in tools new sessions are offered, as named in `tools`
    /// (checked by [`AgentSettings::validate`]; an unknown name, which only
    /// settings that skipped it can hold, is left out).
    pub fn built_in_tools(&self) -> impl Iterator<Item = BuiltIn> + '_ {
        self.tools
            .iter()
            .filter_map(|name| BuiltIn::from_str(name).ok())
    }
}

impl ContextSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A compaction threshold outside (0, 1].
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(self.compact_threshold > 0.0 && self.compact_threshold <= 1.0) {
            return Err(InvalidSetting::new(
                "context.compact_threshold",
                "must be more than 0 and at most 1",
            ));
        }
        Ok(())
    }
}
