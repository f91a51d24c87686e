//! `switchboard tools`: every tool a new session is offered, with its
//! source and cache policy, and each MCP server's state.

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::store::{Store, StoreOptions};
use crate::telemetry;

/// Starts the MCP servers, prints the listing, and stops them.
///
/// # Errors
/// The tools cannot be built.
pub async fn run(settings: &Settings) -> anyhow::Result<()> {
    telemetry::init(&settings.log, Some("error"));
    let shutdown = CancellationToken::new();
    // The listing reads names, descriptions and cache policies and calls
    // no tool, so the memory tool needs no real database: an in-memory one
    // keeps this command from creating or touching the gateway's.
    let scratch = Store::connect(&StoreOptions::new("sqlite::memory:"))
        .await
        .context("preparing the tool listing")?;
    let tasks = crate::tools::tasks::TaskTools {
        store: scratch,
        clock: crate::domain::Clock::system(),
        settings: settings.tasks.clone(),
        wake: std::sync::Arc::default(),
    };
    let registry = crate::gateway::build_registry(settings, &tasks, &shutdown)
        .await
        .context("building the tools")?;
    if let Some(mcp) = registry.mcp() {
        mcp.wait_started(settings.mcp.startup_timeout).await;
    }
    print!("{}", registry.listing());
    shutdown.cancel();
    Ok(())
}
