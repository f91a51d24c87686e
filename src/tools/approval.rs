//! Which tool calls a person decides on first: `[tools.approval]` (the
//! `ask` and `deny` lists, who decides, how long a question stays open,
//! what becomes of a call a crash left in doubt) and each MCP server's
//! default (`[mcp.servers.NAME] approval`), read into one [`ApprovalPolicy`].
//!
//! A denied tool is never offered; an `ask` tool's calls wait for a
//! decision (the agent loop parks the turn, see `agent::round`); every
//! other tool runs as it always did. `ask_user`, the agent's own question,
//! always waits for its answer.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolSource;
use super::mcp::settings::glob_match;
use crate::domain::setting;

/// What a tool's calls need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// They run (the default).
    #[default]
    Allow,
    /// Each call waits for a person's decision.
    Ask,
    /// The tool is not offered.
    Deny,
}

impl Policy {
    /// The name `switchboard tools` shows.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

/// Who decides a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    /// The person whose message started the turn.
    #[default]
    Requester,
    /// The admins (`access.admins`), in their direct chats; the requester
    /// is told the call waits for them.
    Admins,
}

impl Approver {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requester => "requester",
            Self::Admins => "admins",
        }
    }
}

/// What becomes of a call a crash cut off while it ran (its outcome is
/// unknown) when its tool is not safe to run twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InDoubt {
    /// The person is asked whether to run it again or skip it.
    #[default]
    Ask,
    /// It is skipped; the model is told its outcome is unknown.
    Skip,
}

/// `[tools.approval]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Tools whose calls wait for a decision: names, or patterns where `*`
    /// stands for any run of characters (`"fs__write_*"`, `"payments__*"`).
    pub ask: Vec<String>,
    /// Tools never offered (same form); `deny` wins over `ask`.
    pub deny: Vec<String>,
    /// Who decides: `"requester"` or `"admins"`.
    pub approver: Approver,
    /// How long a request stays open; unanswered, the call is not run and
    /// the model is told so (`timeout_secs`, default 3600).
    #[serde(
        rename = "timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub timeout: Duration,
    /// A call a crash left in doubt: `"ask"` the person, or `"skip"` it.
    pub in_doubt: InDoubt,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        Self {
            ask: Vec::new(),
            deny: Vec::new(),
            approver: Approver::Requester,
            timeout: Duration::from_secs(3600),
            in_doubt: InDoubt::Ask,
        }
    }
}

/// The settings read for lookups: the lists, and each MCP server's default.
#[derive(Debug, Clone, Default)]
pub struct ApprovalPolicy {
    pub settings: ApprovalSettings,
    /// `[mcp.servers.NAME] approval`, where set.
    servers: BTreeMap<String, Policy>,
}

impl ApprovalPolicy {
    #[must_use]
    pub fn new(settings: ApprovalSettings, servers: BTreeMap<String, Policy>) -> Self {
        Self { settings, servers }
    }

    /// What calls of `tool` need: `deny` first, then `ask`, then its MCP
    /// server's default, else they run.
    #[must_use]
    pub fn of(&self, tool: &str, source: &ToolSource) -> Policy {
        let listed = |patterns: &[String]| {
            patterns
                .iter()
                .any(|pattern| glob_match(pattern.trim(), tool))
        };
        if listed(&self.settings.deny) {
            return Policy::Deny;
        }
        if listed(&self.settings.ask) {
            return Policy::Ask;
        }
        match source {
            ToolSource::Mcp(server) => self.servers.get(server).copied().unwrap_or_default(),
            ToolSource::BuiltIn => Policy::Allow,
        }
    }

    /// How long a request stays open, in milliseconds.
    #[must_use]
    pub fn timeout_ms(&self) -> i64 {
        i64::try_from(self.settings.timeout.as_millis()).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ask: &[&str], deny: &[&str], server: Option<Policy>) -> ApprovalPolicy {
        let settings = ApprovalSettings {
            ask: ask.iter().map(ToString::to_string).collect(),
            deny: deny.iter().map(ToString::to_string).collect(),
            ..ApprovalSettings::default()
        };
        let servers = server
            .map(|policy| BTreeMap::from([("fs".to_owned(), policy)]))
            .unwrap_or_default();
        ApprovalPolicy::new(settings, servers)
    }

    #[test]
    fn deny_wins_over_ask_which_wins_over_the_server_default() {
        let fs = ToolSource::Mcp("fs".to_owned());
        let p = policy(&["fs__write_*"], &["fs__delete*"], Some(Policy::Ask));
        assert_eq!(p.of("fs__write_file", &fs), Policy::Ask);
        assert_eq!(p.of("fs__delete_file", &fs), Policy::Deny);
        assert_eq!(
            p.of("fs__read_file", &fs),
            Policy::Ask,
            "the server's default"
        );
        let p = policy(&["http_get"], &[], None);
        assert_eq!(p.of("http_get", &ToolSource::BuiltIn), Policy::Ask);
        assert_eq!(p.of("calculator", &ToolSource::BuiltIn), Policy::Allow);
        assert_eq!(p.of("fs__read_file", &fs), Policy::Allow);
    }
}
