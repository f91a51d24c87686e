//! The `[database]` settings: which database, and how it is used.

use schemars::JsonSchema;
use serde::Deserialize;

use super::StoreOptions;
use crate::domain::InvalidSetting;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://path/to/file.db` (created on first run) or `postgres://…`.
    pub url: String,
    /// PostgreSQL pool size (SQLite always uses one connection).
    pub max_connections: u32,
    /// Whether each commit waits for its flush to disk. Unset keeps each
    /// engine's default: SQLite (WAL, `synchronous = NORMAL`) does not, so
    /// a power cut can lose the last commits but a crash of the process
    /// cannot; PostgreSQL (`synchronous_commit = on`) does. `true` makes
    /// SQLite flush too (`synchronous = FULL`); `false` lets PostgreSQL
    /// answer before the flush (`synchronous_commit = off`: a crash of the
    /// database server can lose its last ~0.6 s of commits).
    pub flush_commits: Option<bool>,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://data/switchboard.db".to_owned(),
            max_connections: 10,
            flush_commits: None,
        }
    }
}

impl DatabaseSettings {
    /// How the store connects.
    #[must_use]
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            max_connections: self.max_connections,
            flush_commits: self.flush_commits,
            ..StoreOptions::new(&self.url)
        }
    }

    /// Checks the URL names a backend the store speaks.
    ///
    /// # Errors
    /// A URL of another scheme.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if super::backend_of(&self.url).is_err() {
            return Err(InvalidSetting::new(
                "database.url",
                "use sqlite://PATH (a file) or postgres://USER@HOST/DATABASE",
            ));
        }
        Ok(())
    }
}
