//! MCP tool servers: the long-lived registry of the servers configured in
//! `[mcp.servers.NAME]`, whose tools join the agent's toolset as
//! `NAME__tool`.
//!
//! The gateway starts the [`McpRegistry`] once, at start: one supervisor
//! task per server ([`server`]) keeps it connected (restarting it with
//! backoff when it crashes or hangs) and its tool list fresh. The registry
//! offers the tools the servers list now that the allow/deny lists
//! ([`settings::ToolFilter`]) let through, sorted by name with the schemas
//! exactly as the servers give them, so the prompt prefix and the agent
//! cache's signature stay stable. A session stores the specs it was offered
//! and rebuilds its tools from them ([`McpRegistry::tool_for`]) until
//! `/new`; new sessions see list changes.

pub mod elicit;
pub mod server;
pub mod settings;
pub mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use server::{McpServer, ServerStatus};
pub use settings::{McpServerSettings, McpSettings, ToolFilter};
pub use tool::McpTool;

use crate::domain::ToolSpec;
use crate::tools::Tool;
use settings::SEPARATOR;

/// The configured MCP servers, owned by the gateway.
pub struct McpRegistry {
    servers: BTreeMap<String, Arc<McpServer>>,
    filter: ToolFilter,
}

impl McpRegistry {
    /// Starts a supervisor per configured server; they run until
    /// `shutdown`. Returns at once: see [`McpRegistry::wait_started`].
    pub fn start(settings: &McpSettings, shutdown: &CancellationToken) -> Arc<Self> {
        // HTTPS servers: rmcp's HTTP client takes the process's rustls
        // provider. An error means one is installed already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let servers: BTreeMap<String, Arc<McpServer>> = settings
            .servers
            .iter()
            .map(|(name, server)| (name.clone(), McpServer::new(name, server)))
            .collect();
        for server in servers.values() {
            tokio::spawn(Arc::clone(server).supervise(settings.clone(), shutdown.clone()));
        }
        Arc::new(Self {
            servers,
            filter: ToolFilter::new(settings),
        })
    }

    /// Whether no server is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Waits until every server has started once or failed to, at most
    /// `timeout` (`switchboard tools`, before it lists them; `serve` does
    /// not wait).
    pub async fn wait_started(&self, timeout: Duration) {
        let all = self.servers.values().map(|server| {
            let mut status = server.watch();
            async move {
                let _ = status
                    .wait_for(|status| {
                        status.up || status.error.as_deref().is_some_and(|e| e != "starting")
                    })
                    .await;
            }
        });
        let _ = tokio::time::timeout(timeout, futures::future::join_all(all)).await;
    }

    /// Each server's state for `/readyz`, by name: `starting` until its
    /// first start succeeds or fails, then `up` or `down` (being restarted).
    pub fn states(&self) -> BTreeMap<String, &'static str> {
        self.servers
            .iter()
            .map(|(name, server)| (name.clone(), server.status().state()))
            .collect()
    }

    /// Every server's status, by name.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers
            .values()
            .map(|server| server.status())
            .collect()
    }

    /// The named server.
    pub fn server(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.get(name)
    }

    /// The tools offered now: every server's last listing, filtered by the
    /// allow/deny lists, sorted by full name.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for server in self.servers.values() {
            for tool in server.tools().iter() {
                if self.filter.allows(tool.full_name()) {
                    tools.push(Arc::clone(tool) as Arc<dyn Tool>);
                }
            }
        }
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// The tools the servers listed that are not offered, with why: the
    /// allow/deny lists, or a name providers would refuse. Sorted by name.
    pub fn left_out(&self) -> Vec<(String, &'static str)> {
        let mut left_out = Vec::new();
        for server in self.servers.values() {
            for tool in server.tools().iter() {
                if let Some(reason) = self.filter.refusal(tool.full_name()) {
                    left_out.push((tool.full_name().to_owned(), reason));
                }
            }
            for name in server.status().misnamed {
                left_out.push((name, server::MISNAMED));
            }
        }
        left_out.sort();
        left_out
    }

    /// The tool a session stored with `spec`, calling its server's current
    /// connection; `None` when the server is no longer configured or the
    /// tool is now denied.
    pub fn tool_for(&self, spec: &ToolSpec) -> Option<Arc<dyn Tool>> {
        let (server, remote) = spec.name.split_once(SEPARATOR)?;
        let server = self.servers.get(server)?;
        if !self.filter.allows(&spec.name) {
            return None;
        }
        Some(Arc::new(McpTool::with_spec(
            Arc::clone(&server.link),
            server.settings(),
            remote.to_owned(),
            spec.clone(),
        )))
    }
}
