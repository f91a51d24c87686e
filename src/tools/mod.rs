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
//! `{"success": false, "error": "…"}`.

pub mod calculator;
pub mod current_time;
pub mod delegate;
pub mod http_get;
pub mod memory;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::llm::ToolSpec;
use crate::store::{PrincipalId, SessionId};

/// What a tool call knows about its surroundings.
#[derive(Clone)]
pub struct ToolContext {
    /// Stable across a re-run of the same call after a crash, so a tool with
    /// side effects can deduplicate.
    pub request_id: String,
    pub session_id: SessionId,
    /// The person whose message the task answers (the speaker, in a group
    /// chat), when known.
    pub principal: Option<PrincipalId>,
    /// Present when the tool may start sub-agents (the `delegate` tool).
    pub subagents: Option<Arc<dyn SubAgents>>,
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

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;

    /// What the tool does and when to use it, written for the model.
    fn description(&self) -> &'static str;

    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;

    /// Whether running the same call twice is harmless (a read). A crashed
    /// call of an idempotent tool is re-run on recovery; others are not.
    fn idempotent(&self) -> bool {
        false
    }

    /// Runs the tool. The returned object is what the model sees, after the
    /// loop adds `"success": true`.
    ///
    /// # Errors
    /// Shown to the model as `{"success": false, "error": "…"}`.
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

/// All tools the gateway offers, built once at start. Each tool's spec is
/// built once, when it is registered (deriving a schema is not free, and
/// every turn picks its toolset from here).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Registered>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let spec = tool.spec();
        self.tools.insert(tool.name(), Registered { tool, spec });
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|registered| &registered.tool)
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }

    /// The toolset with those of the given names that are registered,
    /// sorted by name. A name no tool has (a tool that is not configured, or
    /// no longer, since a session started) is logged and left out, so a
    /// session still starts and runs.
    pub fn toolset<S: AsRef<str>>(&self, names: &[S]) -> Toolset {
        let mut tools = BTreeMap::new();
        let mut unknown = Vec::new();
        for name in names {
            match self.tools.get_key_value(name.as_ref()) {
                Some((name, registered)) => {
                    tools.insert(*name, registered.clone());
                }
                None => unknown.push(name.as_ref()),
            }
        }
        if !unknown.is_empty() {
            tracing::warn!(?unknown, "tools that are not registered are left out");
        }
        Toolset::from_map(tools)
    }
}

/// An ordered set of tools with their specs computed once.
#[derive(Clone, Default)]
pub struct Toolset {
    tools: BTreeMap<&'static str, Registered>,
    specs: Arc<[ToolSpec]>,
}

impl Toolset {
    fn from_map(tools: BTreeMap<&'static str, Registered>) -> Self {
        let specs = tools
            .values()
            .map(|registered| registered.spec.clone())
            .collect();
        Self { tools, specs }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|registered| &registered.tool)
    }

    /// Specs in name order: the fixed order the prompt prefix relies on.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.keys().map(|name| (*name).to_owned()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The same toolset without the named tool.
    pub fn without(&self, name: &str) -> Self {
        let mut tools = self.tools.clone();
        tools.remove(name);
        Self::from_map(tools)
    }

    /// The subset with the given names (unknown names are ignored).
    pub fn subset<S: AsRef<str>>(&self, names: &[S]) -> Self {
        let tools = self
            .tools
            .iter()
            .filter(|(name, _)| names.iter().any(|wanted| wanted.as_ref() == **name))
            .map(|(name, registered)| (*name, registered.clone()))
            .collect();
        Self::from_map(tools)
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
