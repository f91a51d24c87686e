//! Session leases: at most one turn runs per session, across processes.
//!
//! A lease row names its owner (one gateway process) and an expiry. A process
//! takes a free or expired lease, renews it while the turn runs, and releases
//! it after; if the holder dies, the lease expires and another process takes
//! over. The upsert below is atomic on both backends.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Arg, Batch, SessionId, Store, StoreError, now_ms};

impl Store {
    /// Takes the session's lease for `ttl_ms` if it is free, expired, or
    /// already ours. Returns whether we hold it.
    ///
    /// # Errors
    /// A database failure.
    pub async fn try_acquire_lease(
        &self,
        session_id: &SessionId,
        owner: &str,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut batch = Batch::new();
        batch.acquire_lease(session_id, owner, ttl_ms);
        lease_held(self.write(batch).await?.first())
    }

    /// Gives the lease up, if we hold it.
    ///
    /// # Errors
    /// A database failure.
    pub async fn release_lease(
        &self,
        session_id: &SessionId,
        owner: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM session_leases WHERE session_id = $1 AND owner = $2")
            .bind(session_id.as_str())
            .bind(owner)
            .execute(&mut *self.conn().await?)
            .await?;
        Ok(())
    }
}

impl Batch {
    /// Takes the session's lease for `ttl_ms` if it is free, expired, or
    /// already ours; gives one row, which [`lease_held`] reads.
    pub fn acquire_lease(&mut self, session_id: &SessionId, owner: &str, ttl_ms: i64) {
        let now = now_ms();
        self.push(
            "INSERT INTO session_leases (session_id, owner, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, \
             expires_at = excluded.expires_at \
             WHERE session_leases.owner = excluded.owner OR session_leases.expires_at < $4",
            vec![
                session_id.into(),
                owner.into(),
                Arg::from(now.saturating_add(ttl_ms)),
                Arg::from(now),
            ],
        );
        self.push_returning(
            "SELECT COUNT(*) FROM session_leases WHERE session_id = $1 AND owner = $2",
            vec![session_id.into(), owner.into()],
        );
    }
}

/// Whether the row [`Batch::acquire_lease`] gave says the lease is ours.
pub(super) fn lease_held(row: Option<&AnyRow>) -> Result<bool, StoreError> {
    let held: i64 = row
        .ok_or_else(|| StoreError::Corrupt("no lease row count".to_owned()))?
        .try_get(0)?;
    Ok(held > 0)
}
