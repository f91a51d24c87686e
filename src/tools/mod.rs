//! Tools the agent can call, and the long-lived registry that owns them.
//!
//! A [`Tool`] has a name, a description written for the model, a JSON schema
//! for its arguments, and an async `call`. Tools live in the gateway's
//! [`ToolRegistry`] for the life of the process, so whatever a tool keeps
//! between calls (an HTTP client and its connection pool) survives agent
//! eviction and the end of a turn. A [`Toolset`] is the ordered subset a
//! session offers; its specs serialise in a fixed order (sorted by name).
//!
//! Every result the model sees is a JSON object with a `success` field; the
//! agent loop adds `"success": true` to a tool's output and turns errors into
//! `{"success": false, "error": "…"}`. A tool may return files beside the
//! object ([`output`]: an MCP server's images), which go through the media
//! pipeline and are shown to the model like a user's files.
//!
//! Besides the built-ins, the registry offers the tools of the configured
//! MCP servers ([`mcp`]), named `SERVER__tool`. A session stores what it was
//! offered ([`StoredTool`]): built-ins by name, MCP tools with the spec the
//! server gave then, so a server changing its list does not change a running
//! session's prompt prefix.

pub mod approval;
pub mod ask_user;
pub mod bound;
pub mod builtin;
pub mod cache;
pub mod calculator;
pub mod current_time;
pub mod delegate;
pub mod http_get;
pub mod mcp;
pub mod memory;
pub mod output;
pub mod settings;
pub mod tasks;

use crate::domain::InboundId;
use crate::domain::{PrincipalId, SessionId, StoredTool, ToolSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde_json::Value;

pub use output::{ToolFile, ToolOutput};

/// What a tool call knows about its surroundings.
#[derive(Clone)]
pub struct ToolContext {
    /// Stable across a re-run of the same call after a crash, so a tool with
    /// side effects can deduplicate.
    pub request_id: String,
    pub session_id: SessionId,
    /// The message whose turn makes the call (its task).
    pub inbound_id: InboundId,
    /// The person whose message the task answers (the speaker, in a group
    /// chat), when known.
    pub principal: Option<PrincipalId>,
    /// Present when the tool may start sub-agents (the `delegate` tool).
    pub subagents: Option<Arc<dyn SubAgents>>,
    /// Puts a question to the person whose message the task answers (an
    /// MCP server's elicitation); `None` where nobody can be asked (a
    /// sub-agent).
    pub person: Option<Arc<dyn AskPerson>>,
}

/// Asks the person a turn answers, while a tool call waits for them;
/// implemented by the session layer (the question goes through the same
/// path as `ask_user`'s: buttons, the person's next message, the API).
#[async_trait]
pub trait AskPerson: Send + Sync + std::fmt::Debug {
    /// Puts `question` to the person for the call `request_id` of the tool
    /// `asker` (an MCP server's name), with `choices` as buttons when any,
    /// and waits until they answer, decline, or it expires (at the latest
    /// when the call would time out).
    ///
    /// # Errors
    /// The question could not be stored or posted.
    async fn ask(
        &self,
        request_id: &str,
        asker: &str,
        question: &str,
        choices: &[String],
    ) -> Result<Asked, ToolError>;
}

/// What came of a question put to the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// Their answer: a choice's label, or their own words.
    Answer(String),
    /// They declined to answer.
    Declined,
    /// Nobody answered in time (or the turn was stopped).
    Unanswered,
}

/// Starts sub-agents for the `delegate` tool; implemented by the agent loop.
#[async_trait]
pub trait SubAgents: Send + Sync {
    /// Runs `task` in a fresh context with the named tools (a subset of the
    /// parent's; empty means the parent's tools minus `delegate` at the last
    /// depth) and returns the sub-agent's final answer.
    ///
    /// # Errors
    /// Delegation too deep, no budget left, unknown tools, or the sub-agent
    /// failing; the message is shown to the model.
    async fn run(&self, task: String, tools: Vec<String>) -> Result<String, SubAgentError>;
}

/// Why a sub-agent gave no answer; the message is shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubAgentError {
    #[error("delegation is limited to depth {max_depth}; do this task yourself")]
    TooDeep { max_depth: u32 },
    #[error("unknown tools for the sub-agent: {unknown}; available: {available}")]
    UnknownTools { unknown: String, available: String },
    #[error("not enough step budget left to delegate; finish the task yourself")]
    NoBudget,
    #[error("the sub-agent could not start")]
    NotStarted,
    /// The sub-agent's loop failed; holds that error's message.
    #[error("the sub-agent failed: {0}")]
    Failed(String),
    /// The answer could not be added to a write; holds why.
    #[error("the sub-agent's answer could not be stored: {0}")]
    AnswerRejected(String),
    /// The write of the answer failed (the cause is logged, not shown).
    #[error("the sub-agent's answer could not be stored")]
    AnswerNotStored,
}

/// Why a tool call failed; the message is shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
}

/// Whether and how long a tool's successful results may be reused for the
/// same call (tool name and canonical arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// How long a stored result is reused.
    pub ttl: Duration,
    /// The result depends on who asks: reused only for the same principal
    /// (or, without one, the same session). Otherwise shared by everyone.
    pub per_user: bool,
}

/// Where a tool comes from, as `switchboard tools` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    BuiltIn,
    /// The named MCP server (`[mcp.servers.NAME]`).
    Mcp(String),
}

impl std::fmt::Display for ToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BuiltIn => f.write_str("built-in"),
            Self::Mcp(server) => write!(f, "mcp:{server}"),
        }
    }
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;

    /// What the tool does and when to use it, written for the model.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;

    /// Whether running the same call twice is harmless (a read). A crashed
    /// call of an idempotent tool is re-run on recovery; others are not.
    fn idempotent(&self) -> bool {
        false
    }

    /// Whether a successful result may be reused ([`cache`]); `None` (the
    /// default) runs every call.
    fn cache_policy(&self) -> Option<CachePolicy> {
        None
    }

    /// Where the tool comes from.
    fn source(&self) -> ToolSource {
        ToolSource::BuiltIn
    }

    /// The most characters one of its results may put into the
    /// conversation, when it has a cap of its own (an MCP server's
    /// `max_result_chars`); `None` (the default): `tools.max_result_chars`.
    fn max_result_chars(&self) -> Option<usize> {
        None
    }

    /// Runs the tool. The returned object is what the model sees, after the
    /// loop adds `"success": true`.
    ///
    /// # Errors
    /// Shown to the model as `{"success": false, "error": "…"}`.
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;

    /// Runs the tool, with the files its result carries ([`output`]): what
    /// the agent loop calls. The default is [`Tool::call`]'s object alone;
    /// a tool that returns files (an MCP tool) overrides it.
    ///
    /// # Errors
    /// As [`Tool::call`].
    async fn call_with_files(
        &self,
        ctx: &ToolContext,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        self.call(ctx, args).await.map(ToolOutput::from)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

/// All tools the gateway offers, built once at start: the built-ins, and
/// the MCP servers' tools as the [`mcp::McpRegistry`] lists them now. Each
/// built-in's spec is built once, when it is registered (deriving a schema
/// is not free, and every turn picks its toolset from here).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    mcp: Option<Arc<mcp::McpRegistry>>,
    /// Which tools ask first, and which are never offered.
    policy: Arc<approval::ApprovalPolicy>,
    cap: ResultCap,
}

/// `tools.max_result_chars`: what a tool without a cap of its own may put
/// into the conversation per result ([`bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResultCap(usize);

impl Default for ResultCap {
    fn default() -> Self {
        Self(bound::DEFAULT_MAX_RESULT_CHARS)
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let spec = tool.spec();
        self.tools
            .insert(tool.name().to_owned(), Registered { tool, spec });
    }

    /// Caps every tool's results at `max_chars` characters, unless the tool
    /// has a cap of its own.
    #[must_use]
    pub fn with_max_result_chars(mut self, max_chars: usize) -> Self {
        self.cap = ResultCap(max_chars);
        self
    }

    /// Adds the MCP servers' tools.
    pub fn with_mcp(mut self, mcp: Arc<mcp::McpRegistry>) -> Self {
        self.mcp = Some(mcp);
        self
    }

    /// Sets which tools ask first and which are never offered.
    #[must_use]
    pub fn with_policy(mut self, policy: approval::ApprovalPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Which tools ask first.
    pub fn policy(&self) -> &Arc<approval::ApprovalPolicy> {
        &self.policy
    }

    /// What calls of `tool` need.
    pub fn policy_of(&self, tool: &dyn Tool) -> approval::Policy {
        self.policy.of(tool.name(), &tool.source())
    }

    /// The MCP servers, if any are configured.
    pub fn mcp(&self) -> Option<&Arc<mcp::McpRegistry>> {
        self.mcp.as_ref()
    }

    /// Whether a tool may ask the person something during a call (an MCP
    /// server's elicitation): an MCP server is configured.
    #[must_use]
    pub fn tools_may_ask(&self) -> bool {
        self.mcp.as_ref().is_some_and(|mcp| !mcp.is_empty())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|registered| &registered.tool)
    }

    /// The built-in tools' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tools.keys().map(String::as_str)
    }

    /// What a new session is offered: the built-ins, and every MCP tool the
    /// servers list now that the allow/deny lists let through.
    pub fn offered(&self) -> Toolset {
        let mut tools = self.tools.clone();
        if let Some(mcp) = &self.mcp {
            for tool in mcp.tools() {
                let spec = tool.spec();
                tools.insert(spec.name.clone(), Registered { tool, spec });
            }
        }
        tools.retain(|_, registered| {
            self.policy_of(registered.tool.as_ref()) != approval::Policy::Deny
        });
        Toolset::from_map(tools, self.cap)
    }

    /// What `switchboard tools` prints: every tool offered to a new session
    /// with its source and cache TTL, then each MCP server's state.
    pub fn listing(&self) -> String {
        use std::fmt::Write;
        let offered = self.offered();
        let width = offered
            .tools
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(4);
        let mut out = format!("{:width$}  POLICY  SOURCE\n", "TOOL");
        for (name, registered) in &offered.tools {
            let _ = write!(
                out,
                "{name:width$}  {:<6}  {}",
                self.policy_of(registered.tool.as_ref()).as_str(),
                registered.tool.source()
            );
            if let Some(policy) = registered.tool.cache_policy() {
                let _ = write!(out, "  (results cached {} s", policy.ttl.as_secs());
                out.push_str(if policy.per_user { ", per user)" } else { ")" });
            }
            out.push('\n');
        }
        let mcp_tools = self.mcp.iter().flat_map(|mcp| mcp.tools());
        let denied: Vec<String> = self
            .tools
            .values()
            .map(|registered| Arc::clone(&registered.tool))
            .chain(mcp_tools)
            .filter(|tool| self.policy_of(tool.as_ref()) == approval::Policy::Deny)
            .map(|tool| tool.name().to_owned())
            .collect();
        for name in denied {
            let _ = writeln!(
                out,
                "{name:width$}  deny    (not offered: tools.approval.deny)"
            );
        }
        for (name, reason) in self.mcp.iter().flat_map(|mcp| mcp.left_out()) {
            let _ = writeln!(out, "{name:width$}  -       (not offered: {reason})");
        }
        if let Some(mcp) = &self.mcp {
            out.push_str("\nMCP servers:\n");
            for status in mcp.statuses() {
                let state = match (&status.error, status.up) {
                    (_, true) => "up".to_owned(),
                    (Some(error), false) => format!("down: {error}"),
                    (None, false) => "down".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "{}: {state}; {} tools listed",
                    status.name, status.tools
                );
            }
        }
        out
    }

    /// The toolset a session stored, sorted by name: built-ins by name, MCP
    /// tools with their stored specs. A tool no longer there (a built-in not
    /// configured, an MCP server removed from the settings) is logged and
    /// left out, so a session still starts and runs.
    pub fn toolset(&self, stored: &[StoredTool]) -> Toolset {
        let mut tools = BTreeMap::new();
        let mut unknown = Vec::new();
        for entry in stored {
            let found = match entry {
                StoredTool::Name(name) => self.tools.get(name).cloned(),
                StoredTool::Spec(spec) => self.mcp.as_ref().and_then(|mcp| {
                    mcp.tool_for(spec).map(|tool| Registered {
                        tool,
                        spec: spec.clone(),
                    })
                }),
            };
            let found = found.filter(|registered| {
                self.policy_of(registered.tool.as_ref()) != approval::Policy::Deny
            });
            match found {
                Some(registered) => {
                    tools.insert(entry.name().to_owned(), registered);
                }
                None => unknown.push(entry.name()),
            }
        }
        if !unknown.is_empty() {
            tracing::warn!(?unknown, "tools that are not registered are left out");
        }
        Toolset::from_map(tools, self.cap)
    }
}

/// An ordered set of tools with their specs computed once.
#[derive(Clone, Default)]
pub struct Toolset {
    tools: BTreeMap<String, Registered>,
    specs: Arc<[ToolSpec]>,
    cap: ResultCap,
}

impl Toolset {
    fn from_map(tools: BTreeMap<String, Registered>, cap: ResultCap) -> Self {
        let specs = tools
            .values()
            .map(|registered| registered.spec.clone())
            .collect();
        Self { tools, specs, cap }
    }

    /// A result of the named tool as the conversation keeps it: cut to the
    /// tool's cap, or `tools.max_result_chars` ([`bound`]).
    #[must_use]
    pub fn bounded_result(&self, name: &str, content: String) -> String {
        let max_chars = self
            .get(name)
            .and_then(|tool| tool.max_result_chars())
            .unwrap_or(self.cap.0);
        bound::bounded(content, max_chars)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|registered| &registered.tool)
    }

    /// Specs in name order: the fixed order the prompt prefix relies on.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// What a session stores of this toolset: built-ins by name, MCP tools
    /// with their specs.
    pub fn stored(&self) -> Vec<StoredTool> {
        self.tools
            .iter()
            .map(|(name, registered)| match registered.tool.source() {
                ToolSource::BuiltIn => StoredTool::Name(name.clone()),
                ToolSource::Mcp(_) => StoredTool::Spec(registered.spec.clone()),
            })
            .collect()
    }

    /// Each tool with its source, in name order.
    pub fn sources(&self) -> Vec<(String, ToolSource)> {
        self.tools
            .iter()
            .map(|(name, registered)| (name.clone(), registered.tool.source()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The same toolset without the named tool.
    pub fn without(&self, name: &str) -> Self {
        let mut tools = self.tools.clone();
        tools.remove(name);
        Self::from_map(tools, self.cap)
    }

    /// The subset with the given names (unknown names are ignored).
    pub fn subset<S: AsRef<str>>(&self, names: &[S]) -> Self {
        let tools = self
            .tools
            .iter()
            .filter(|(name, _)| names.iter().any(|wanted| wanted.as_ref() == name.as_str()))
            .map(|(name, registered)| (name.clone(), registered.clone()))
            .collect();
        Self::from_map(tools, self.cap)
    }
}

/// The JSON schema of a tool's arguments type as the model sees it: derived
/// from the type, its fields' docs becoming their descriptions. The type's
/// own `title` and doc, the `$schema` keyword and `default` values are left
/// out: the schemas were written by hand before they were derived, and the
/// bytes of every cached prompt must stay the same (each tool's tests pin
/// them).
pub fn arguments_schema<T: JsonSchema>() -> Value {
    let mut schema = SchemaSettings::draft2020_12()
        .with(|settings| settings.meta_schema = None)
        .with_transform(RecursiveTransform(|schema: &mut Schema| {
            schema.remove("default");
        }))
        .into_generator()
        .into_root_schema_for::<T>();
    schema.remove("title");
    schema.remove("description");
    schema.to_value()
}

/// A registered tool and its spec.
#[derive(Clone)]
struct Registered {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::calculator::Calculator;
    use crate::tools::current_time::CurrentTime;

    fn registry() -> ToolRegistry {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(CurrentTime));
        registry.register(Arc::new(Calculator));
        registry
    }

    #[test]
    fn a_stored_toolset_of_names_reads_as_before() {
        let stored: Vec<StoredTool> =
            serde_json::from_str(r#"["calculator","current_time"]"#).expect("names");
        assert_eq!(
            stored,
            [StoredTool::from("calculator"), "current_time".into()]
        );
        let spec = StoredTool::Spec(ToolSpec {
            name: "fs__read".to_owned(),
            description: "Read.".to_owned(),
            parameters: serde_json::json!({"type": "object"}),
        });
        let text = serde_json::to_string(&spec).expect("serialised");
        assert_eq!(
            serde_json::from_str::<StoredTool>(&text).expect("read"),
            spec
        );
    }

    #[test]
    fn a_session_gets_its_stored_tools_sorted_and_unknown_ones_left_out() {
        let registry = registry();
        let stored = [
            StoredTool::from("current_time"),
            "calculator".into(),
            "gone".into(),
        ];
        let toolset = registry.toolset(&stored);
        assert_eq!(toolset.names(), ["calculator", "current_time"]);
        assert_eq!(
            toolset.stored(),
            [StoredTool::from("calculator"), "current_time".into()]
        );
        // Without MCP servers, a stored MCP spec has nothing to call.
        let mcp = StoredTool::Spec(ToolSpec {
            name: "fs__read".to_owned(),
            description: String::new(),
            parameters: serde_json::json!({}),
        });
        assert!(registry.toolset(&[mcp]).is_empty());
    }

    #[test]
    fn the_listing_names_each_tools_source_and_cache() {
        let listing = registry().listing();
        assert_eq!(
            listing,
            "TOOL          POLICY  SOURCE\n\
             calculator    allow   built-in  (results cached 86400 s)\n\
             current_time  allow   built-in\n"
        );
    }
}
