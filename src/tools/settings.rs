//! The built-in tools' settings: `[tools]` (each tool's own table) and
//! long-term memory (`[memory]`).

use std::num::NonZeroU32;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::domain::setting::{self, InvalidSetting};
use crate::tools::bound::{DEFAULT_MAX_RESULT_CHARS, MIN_MAX_RESULT_CHARS};
use crate::tools::http_get::HttpGetConfig;

/// The longest `memory.max_entry_chars` allowed: facts are short, and every
/// one of them is in each of the person's new system prompts.
pub const MAX_MEMORY_ENTRY_CHARS: u32 = 4000;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ToolSettings {
    pub http_get: HttpGetConfig,
    /// The most characters one tool result may put into the conversation
    /// (every tool: built-in, MCP, a sub-agent's answer); a longer one keeps
    /// its beginning and a note saying how much was left out. An MCP server
    /// may set its own (`[mcp.servers.NAME] max_result_chars`).
    pub max_result_chars: usize,
    /// Which tool calls a person decides on first (`[tools.approval]`).
    pub approval: crate::tools::approval::ApprovalSettings,
}

impl Default for ToolSettings {
    fn default() -> Self {
        Self {
            http_get: HttpGetConfig::default(),
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            approval: crate::tools::approval::ApprovalSettings::default(),
        }
    }
}

impl ToolSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A result cap below [`MIN_MAX_RESULT_CHARS`].
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.max_result_chars < MIN_MAX_RESULT_CHARS {
            return Err(InvalidSetting::new(
                "tools.max_result_chars",
                format!("must be at least {MIN_MAX_RESULT_CHARS}"),
            ));
        }
        Ok(())
    }
}

/// Long-term memory: short facts per person (principal), written by the
/// `memory` tool and frozen into the system prompt of the person's new
/// direct-chat sessions.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySettings {
    /// Whether the `memory` tool is offered (when `agent.tools` names it),
    /// new sessions read the person's facts, and `/memory` works.
    pub enabled: bool,
    /// Most facts kept per person; the tool refuses more.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "u32")]
    pub max_entries: NonZeroU32,
    /// Longest fact, in characters; the tool refuses longer ones.
    pub max_entry_chars: u32,
    /// Whether a compaction of a direct-chat session also asks the model
    /// for the person's facts in the turns it summarises (one more model
    /// call per compaction) and keeps the new ones.
    pub extract_at_compaction: bool,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_entries: NonZeroU32::new(50).expect("50 is not 0"),
            max_entry_chars: 500,
            extract_at_compaction: false,
        }
    }
}

impl MemorySettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A fact length outside 1 to [`MAX_MEMORY_ENTRY_CHARS`].
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(1..=MAX_MEMORY_ENTRY_CHARS).contains(&self.max_entry_chars) {
            return Err(InvalidSetting::new(
                "memory.max_entry_chars",
                format!("must be from 1 to {MAX_MEMORY_ENTRY_CHARS}"),
            ));
        }
        Ok(())
    }
}
