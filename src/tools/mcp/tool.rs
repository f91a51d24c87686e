//! An MCP server's tool as a [`Tool`]: the spec as the server gave it (name
//! prefixed with the server's), calls forwarded over the server's current
//! connection, and the cache policy its settings give.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::server::Link;
use super::settings::McpServerSettings;
use crate::domain::ToolSpec;
use crate::tools::{CachePolicy, Tool, ToolContext, ToolError, ToolOutput, ToolSource};

/// One tool of one MCP server.
pub struct McpTool {
    link: Arc<Link>,
    /// Its name on the server.
    remote: String,
    /// `SERVER__tool`, the server's description and schema, verbatim.
    spec: ToolSpec,
    cache: Option<CachePolicy>,
    /// The server's `max_result_chars`, when set.
    max_result_chars: Option<usize>,
}

impl McpTool {
    pub(super) fn new(
        link: Arc<Link>,
        settings: &McpServerSettings,
        full_name: String,
        remote: String,
        description: String,
        parameters: Value,
    ) -> Self {
        let spec = ToolSpec {
            name: full_name,
            description,
            parameters,
        };
        Self::with_spec(link, settings, remote, spec)
    }

    /// The tool with a spec a session stored (which may differ from what
    /// the server lists now).
    pub(super) fn with_spec(
        link: Arc<Link>,
        settings: &McpServerSettings,
        remote: String,
        spec: ToolSpec,
    ) -> Self {
        let ttl = settings.cache_ttl_of(&remote);
        let cache = (ttl > 0).then(|| CachePolicy {
            ttl: Duration::from_secs(ttl),
            per_user: settings.per_user,
        });
        Self {
            link,
            remote,
            spec,
            cache,
            max_result_chars: settings.max_result_chars,
        }
    }

    /// `SERVER__tool`.
    pub fn full_name(&self) -> &str {
        &self.spec.name
    }

    pub(super) fn spec_ref(&self) -> &ToolSpec {
        &self.spec
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn parameters(&self) -> Value {
        self.spec.parameters.clone()
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn cache_policy(&self) -> Option<CachePolicy> {
        self.cache
    }

    fn source(&self) -> ToolSource {
        ToolSource::Mcp(self.link.server.clone())
    }

    fn max_result_chars(&self) -> Option<usize> {
        self.max_result_chars
    }

    /// The result object alone: its files are left out (the agent loop
    /// calls [`Tool::call_with_files`]).
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        Ok(self.link.call(ctx, &self.remote, args).await?.value)
    }

    async fn call_with_files(
        &self,
        ctx: &ToolContext,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        self.link.call(ctx, &self.remote, args).await
    }
}
