//! The `[mcp]` settings: the servers (stdio or streamable HTTP), the
//! per-deployment allow/deny lists of their tools, caching per server or
//! tool, and the timings of the supervisor. Owns their validation and the
//! allow/deny matching ([`ToolFilter`]).

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::domain::setting;

/// Separates a server's name from its tool's name in the toolset.
pub const SEPARATOR: &str = "__";

/// MCP tool servers and which of their tools are offered.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// If non-empty, only MCP tools whose full name (`SERVER__tool`) matches
    /// one of these are offered. An entry is an exact name or a pattern in
    /// which `*` stands for any run of characters (`fs__read_*`, `github__*`).
    pub allow: Vec<String>,
    /// MCP tools matching one of these (same form as `allow`) are never
    /// offered; `deny` wins over `allow`.
    pub deny: Vec<String>,
    /// How often each server's tool list is read again, which also checks
    /// that the server still answers (at least 1).
    #[serde(
        rename = "refresh_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub refresh: Duration,
    /// Longest wait for a server to start and list its tools, and for a
    /// refresh to answer, before it counts as hung and is restarted.
    #[serde(
        rename = "startup_timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub startup_timeout: Duration,
    /// First delay before restarting a server that crashed, hung or failed
    /// to start; doubles per failure in a row (with jitter).
    #[serde(
        rename = "restart_base_ms",
        deserialize_with = "setting::millis::deserialize"
    )]
    #[schemars(with = "u64")]
    pub restart_base: Duration,
    /// Longest delay between restarts.
    #[serde(
        rename = "restart_max_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub restart_max: Duration,
    /// The servers, by name (letters, digits, `-`; the name prefixes their
    /// tools: `NAME__tool`).
    pub servers: BTreeMap<String, McpServerSettings>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            refresh: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(30),
            restart_base: Duration::from_millis(500),
            restart_max: Duration::from_secs(60),
            servers: BTreeMap::new(),
        }
    }
}

/// One MCP server: either `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerSettings {
    /// The program to start; it speaks MCP on its stdin and stdout.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Names of environment variables passed to the program (besides
    /// `PATH`, which always is); nothing else of the gateway's environment
    /// reaches it.
    pub env: Vec<String>,
    /// The server's streamable HTTP endpoint (`http://` or `https://`).
    pub url: Option<String>,
    /// HTTP headers sent with every request: header name → the name of the
    /// environment variable holding its value (read at start).
    pub headers: BTreeMap<String, String>,
    /// Results of this server's tools are reused for this long for the same
    /// call (0: not cached).
    pub cache_ttl_secs: u64,
    /// Per-tool TTLs (tool name as the server gives it → seconds),
    /// overriding `cache_ttl_secs`; 0 turns caching off for that tool.
    pub tool_cache_ttl_secs: BTreeMap<String, u64>,
    /// The tools' results depend on who asks: cached results are reused only
    /// for the same person, never across people.
    pub per_user: bool,
    /// What this server's tools need by default: `"allow"` (run), `"ask"`
    /// (a person decides each call) or `"deny"` (not offered);
    /// `tools.approval`'s lists win over it.
    pub approval: Option<crate::tools::approval::Policy>,
    /// The most characters one of this server's tool results may put into
    /// the conversation, instead of `tools.max_result_chars`.
    pub max_result_chars: Option<usize>,
}

impl McpServerSettings {
    /// The cache TTL of the named tool, in seconds (0: not cached).
    pub fn cache_ttl_of(&self, tool: &str) -> u64 {
        self.tool_cache_ttl_secs
            .get(tool)
            .copied()
            .unwrap_or(self.cache_ttl_secs)
    }
}

impl McpSettings {
    /// Checks the servers' settings; the message names the key.
    ///
    /// # Errors
    /// The first problem found, as a reason for the key `mcp.servers`,
    /// `mcp.allow` or `mcp.deny`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let second = Duration::from_secs(1);
        for (key, duration) in [
            ("mcp.refresh_secs", self.refresh),
            ("mcp.startup_timeout_secs", self.startup_timeout),
            ("mcp.restart_max_secs", self.restart_max),
        ] {
            if duration < second {
                return Err((key, "must be at least 1".to_owned()));
            }
        }
        if self.restart_base.is_zero() {
            return Err(("mcp.restart_base_ms", "must be at least 1".to_owned()));
        }
        for (key, patterns) in [("mcp.allow", &self.allow), ("mcp.deny", &self.deny)] {
            if let Some(bad) = patterns.iter().find(|pattern| pattern.trim().is_empty()) {
                return Err((key, format!("`{bad}` is empty")));
            }
        }
        for (name, server) in &self.servers {
            let reason = |why: &str| ("mcp.servers", format!("server `{name}`: {why}"));
            let well_formed = !name.is_empty()
                && name.len() <= 32
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !name.contains(SEPARATOR);
            if !well_formed {
                return Err(reason(
                    "the name must be 1 to 32 letters, digits or `-` (it prefixes the tools' \
                     names)",
                ));
            }
            match (&server.command, &server.url) {
                (Some(command), None) if !command.trim().is_empty() => {}
                (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                    if url::Url::parse(url).is_err() {
                        return Err(reason("`url` is not a valid URL"));
                    }
                }
                (None, Some(_)) => return Err(reason("`url` must be an http(s) URL")),
                (Some(_), Some(_)) => {
                    return Err(reason(
                        "set either `command` (stdio) or `url` (HTTP), not both",
                    ));
                }
                _ => return Err(reason("needs `command` (stdio) or `url` (streamable HTTP)")),
            }
            if server
                .max_result_chars
                .is_some_and(|max| max < crate::tools::bound::MIN_MAX_RESULT_CHARS)
            {
                return Err(reason(&format!(
                    "`max_result_chars` must be at least {}",
                    crate::tools::bound::MIN_MAX_RESULT_CHARS
                )));
            }
            if server.command.is_some() && !server.headers.is_empty() {
                return Err(reason("`headers` are for `url` servers"));
            }
            if server.url.is_some() && (!server.args.is_empty() || !server.env.is_empty()) {
                return Err(reason("`args` and `env` are for `command` servers"));
            }
            if let Some((header, _)) = server
                .headers
                .iter()
                .find(|(header, var)| header.trim().is_empty() || var.trim().is_empty())
            {
                return Err(reason(&format!(
                    "header `{header}` needs the name of an environment variable"
                )));
            }
        }
        Ok(())
    }
}

/// The allow/deny lists over MCP tools' full names.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    allow: Vec<String>,
    deny: Vec<String>,
}

impl ToolFilter {
    pub fn new(settings: &McpSettings) -> Self {
        Self {
            allow: settings.allow.clone(),
            deny: settings.deny.clone(),
        }
    }

    /// Whether the tool named `full_name` (`SERVER__tool`) is offered.
    pub fn allows(&self, full_name: &str) -> bool {
        self.refusal(full_name).is_none()
    }

    /// Why the tool named `full_name` is not offered, if it is not.
    pub fn refusal(&self, full_name: &str) -> Option<&'static str> {
        let matches = |pattern: &String| glob_match(pattern.trim(), full_name);
        if self.deny.iter().any(matches) {
            Some("mcp.deny")
        } else if self.allow.is_empty() || self.allow.iter().any(matches) {
            None
        } else {
            Some("not in mcp.allow")
        }
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters (none included) and everything else for itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return name.is_empty();
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: an exact name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_exact_names_and_star_runs() {
        assert!(glob_match("fs__read_file", "fs__read_file"));
        assert!(!glob_match("fs__read_file", "fs__read_file2"));
        assert!(glob_match("fs__read_*", "fs__read_file"));
        assert!(glob_match("fs__read_*", "fs__read_"));
        assert!(!glob_match("fs__read_*", "fs__write_file"));
        assert!(glob_match("*__delete*", "github__delete_repo"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*b*c", "aXbYc"));
        assert!(!glob_match("a*b*c", "aXcYb"));
        assert!(!glob_match("ab*ba", "aba"));
    }

    #[test]
    fn deny_wins_over_allow_and_an_empty_allow_list_allows_all() {
        let filter = ToolFilter::new(&McpSettings {
            allow: vec!["fs__*".to_owned()],
            deny: vec!["fs__write_*".to_owned()],
            ..McpSettings::default()
        });
        assert!(filter.allows("fs__read_file"));
        assert!(!filter.allows("fs__write_file"));
        assert!(!filter.allows("web__fetch"));
        let open = ToolFilter::new(&McpSettings {
            deny: vec!["web__fetch".to_owned()],
            ..McpSettings::default()
        });
        assert!(open.allows("fs__write_file"));
        assert!(!open.allows("web__fetch"));
    }

    #[test]
    fn a_server_needs_exactly_one_transport_and_a_usable_name() {
        let with = |name: &str, server: McpServerSettings| McpSettings {
            servers: BTreeMap::from([(name.to_owned(), server)]),
            ..McpSettings::default()
        };
        let stdio = McpServerSettings {
            command: Some("npx".to_owned()),
            ..McpServerSettings::default()
        };
        assert!(with("fs", stdio.clone()).validate().is_ok());
        assert!(with("my__fs", stdio.clone()).validate().is_err());
        assert!(with("f s", stdio.clone()).validate().is_err());
        assert!(with("fs", McpServerSettings::default()).validate().is_err());
        let both = McpServerSettings {
            url: Some("http://127.0.0.1:1/mcp".to_owned()),
            ..stdio
        };
        assert!(with("fs", both).validate().is_err());
        let http = McpServerSettings {
            url: Some("ftp://example.com".to_owned()),
            ..McpServerSettings::default()
        };
        assert!(with("web", http).validate().is_err());
    }
}
