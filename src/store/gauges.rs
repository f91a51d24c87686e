//! What `/metrics` and `/readyz` read from the database when asked: the
//! queue depth, the outbox backlog per platform, and whether every
//! migration this build knows is applied. Database-wide values, the same
//! from every instance sharing the database.

use sqlx::Row;

use super::{Backend, POSTGRES_MIGRATOR, SQLITE_MIGRATOR, Store, StoreError};

/// States read when metrics are scraped: the queue, the outbox backlog, pending migrations.
#[derive(Clone, Copy)]
pub struct Gauges<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// States read when metrics are scraped: the queue, the outbox backlog, pending migrations.
    pub fn gauges(&self) -> Gauges<'_> {
        Gauges { store: self }
    }
}

impl Gauges<'_> {
    /// Messages whose turn has not ended, database-wide: those waiting in
    /// their session's queue, those claimed and waiting for a turn permit,
    /// and those running.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn queue_depth(self) -> Result<i64, StoreError> {
        let depth = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running')",
        )
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(depth)
    }

    /// Active tasks, database-wide.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn tasks_active(self) -> Result<i64, StoreError> {
        let count = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT COUNT(*) FROM tasks WHERE status = '{}'",
            crate::domain::TaskStatus::Active
        ))
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(count)
    }

    /// Replies waiting to be delivered, per platform (platforms with none
    /// left out), database-wide.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn outbox_backlog(self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT platform, COUNT(*) AS pending FROM outbox WHERE status = 'pending' \
             GROUP BY platform ORDER BY platform",
        )
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("platform")?, row.try_get("pending")?)))
            .collect()
    }

    /// The versions of this build's migrations the database has not
    /// applied successfully (empty when it is up to date).
    ///
    /// # Errors
    /// The database is unreachable, or has no migrations table.
    pub async fn pending_migrations(self) -> Result<Vec<i64>, StoreError> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&mut *self.store.read_conn().await?)
                .await?;
        let migrator = match self.store.backend {
            Backend::Sqlite => &SQLITE_MIGRATOR,
            Backend::Postgres => &POSTGRES_MIGRATOR,
        };
        Ok(migrator
            .iter()
            .filter(|migration| migration.migration_type.is_up_migration())
            .map(|migration| migration.version)
            .filter(|version| !applied.contains(version))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::scratch_store;

    #[tokio::test]
    async fn a_fresh_database_has_no_queue_no_backlog_and_every_migration() {
        let (store, _dir) = scratch_store().await;
        assert_eq!(store.gauges().queue_depth().await.expect("depth"), 0);
        assert!(
            store
                .gauges()
                .outbox_backlog()
                .await
                .expect("backlog")
                .is_empty()
        );
        assert!(
            store
                .gauges()
                .pending_migrations()
                .await
                .expect("read")
                .is_empty()
        );
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 7")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("forget a migration");
        assert_eq!(
            store.gauges().pending_migrations().await.expect("read"),
            vec![7]
        );
    }
}
