//! The commands that work on the database directly: `switchboard migrate`
//! and `switchboard usage`.

use anyhow::Context;

use super::open_existing;
use crate::check::shown_url;
use crate::config::Settings;
use crate::store::{Store, StoreOptions};
use crate::telemetry;

/// `switchboard migrate`: applies the migrations, creating the database if
/// need be.
///
/// # Errors
/// The database cannot be reached or a migration fails.
pub async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    telemetry::init(&settings.log, None);
    let url = &settings.database.url;
    let store = Store::connect(&StoreOptions::new(url))
        .await
        .with_context(|| format!("migrating the database {}", shown_url(url)))?;
    store.close().await;
    tracing::info!(database = %shown_url(url), "migrations applied");
    Ok(())
}

/// `switchboard usage`: the usage report, priced by `[prices]`.
///
/// # Errors
/// No database, or it cannot be read.
pub async fn usage(settings: &Settings) -> anyhow::Result<()> {
    telemetry::init(&settings.log, Some("warn"));
    let store = open_existing(settings).await?;
    let rows = store.usage().report().await.context("reading usage")?;
    store.close().await;
    println!("{}", crate::usage::render(&rows, &settings.prices));
    Ok(())
}
