//! Media bookkeeping: the bytes of files each principal sent per UTC day
//! (`media_usage`, for `media.principal_daily_bytes`), and the blob hashes
//! that messages refer to (for housekeeping, which removes the others).

use std::collections::HashSet;

use super::inbound::parse_media;
use super::{Store, StoreError, to_u64};
use crate::domain::PrincipalId;

/// What the media pipeline records: bytes received per principal and day, and the blobs messages refer to.
#[derive(Clone, Copy)]
pub struct MediaRecords<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// What the media pipeline records: bytes received per principal and day, and the blobs messages refer to.
    pub fn media(&self) -> MediaRecords<'_> {
        MediaRecords { store: self }
    }
}

impl MediaRecords<'_> {
    /// The bytes of files `principal` sent on `day` (`YYYY-MM-DD`, UTC).
    ///
    /// # Errors
    /// A database failure.
    pub async fn bytes_on(self, principal: PrincipalId, day: &str) -> Result<u64, StoreError> {
        let bytes = sqlx::query_scalar::<_, i64>(
            "SELECT bytes FROM media_usage WHERE principal_id = $1 AND day = $2",
        )
        .bind(principal.get())
        .bind(day)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(bytes.map_or(0, to_u64))
    }

    /// Adds `bytes` to what `principal` sent on `day`, unless the sum would
    /// pass `limit`: one statement, so instances sharing the database never
    /// let two messages past the limit together. Returns whether they were
    /// added.
    ///
    /// # Errors
    /// A database failure.
    pub async fn add_bytes(
        self,
        principal: PrincipalId,
        day: &str,
        bytes: u64,
        limit: u64,
    ) -> Result<bool, StoreError> {
        if bytes > limit {
            return Ok(false);
        }
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let added = sqlx::query_scalar::<_, i64>(
            "INSERT INTO media_usage (principal_id, day, bytes) VALUES ($1, $2, $3) \
             ON CONFLICT (principal_id, day) DO UPDATE \
             SET bytes = media_usage.bytes + excluded.bytes \
             WHERE media_usage.bytes + excluded.bytes <= $4 \
             RETURNING bytes",
        )
        .bind(principal.get())
        .bind(day)
        .bind(bytes)
        .bind(limit)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        Ok(added.is_some())
    }

    /// Removes the daily counts of days before `day`. Returns how many.
    ///
    /// # Errors
    /// A database failure.
    pub async fn prune_usage(self, day: &str) -> Result<u64, StoreError> {
        let pruned = sqlx::query("DELETE FROM media_usage WHERE day < $1")
            .bind(day)
            .execute(&mut *self.store.conn().await?)
            .await?
            .rows_affected();
        Ok(pruned)
    }

    /// Every blob hash a stored message refers to: the files of inbound
    /// messages (`inbound.media`), of transcript entries (`messages.media`)
    /// and of tool results checkpointed (`tool_calls.media`).
    ///
    /// # Errors
    /// A database failure, or a file list that does not parse (then nothing
    /// can be known to be unreferenced).
    pub async fn referenced_blob_hashes(self) -> Result<HashSet<String>, StoreError> {
        let lists = sqlx::query_scalar::<_, String>(
            "SELECT media FROM inbound WHERE media IS NOT NULL \
             UNION ALL SELECT media FROM messages WHERE media IS NOT NULL \
             UNION ALL SELECT media FROM tool_calls WHERE media IS NOT NULL",
        )
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        let mut hashes = HashSet::new();
        for list in lists {
            for file in parse_media(Some(list))? {
                hashes.extend(file.derived.map(|derived| derived.hash));
                hashes.insert(file.hash);
            }
        }
        Ok(hashes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::every_backend;
    use super::*;

    #[tokio::test]
    async fn the_daily_count_stops_at_the_limit_and_past_days_are_pruned() {
        for (store, _keep) in every_backend().await {
            let ada = PrincipalId::new(1);
            let day = "2026-12-01";
            assert!(
                store
                    .media()
                    .add_bytes(ada, day, 60, 100)
                    .await
                    .expect("add")
            );
            assert!(
                store
                    .media()
                    .add_bytes(ada, day, 40, 100)
                    .await
                    .expect("add")
            );
            assert!(
                !store
                    .media()
                    .add_bytes(ada, day, 1, 100)
                    .await
                    .expect("add")
            );
            assert!(
                !store
                    .media()
                    .add_bytes(ada, "2026-12-02", 101, 100)
                    .await
                    .expect("add")
            );
            assert_eq!(store.media().bytes_on(ada, day).await.expect("read"), 100);
            let bob = PrincipalId::new(2);
            assert_eq!(store.media().bytes_on(bob, day).await.expect("read"), 0);
            assert!(
                store
                    .media()
                    .add_bytes(ada, "2026-12-02", 5, 100)
                    .await
                    .expect("add")
            );
            assert_eq!(
                store
                    .media()
                    .prune_usage("2026-12-02")
                    .await
                    .expect("prune"),
                1
            );
            assert_eq!(store.media().bytes_on(ada, day).await.expect("read"), 0);
            assert_eq!(
                store
                    .media()
                    .bytes_on(ada, "2026-12-02")
                    .await
                    .expect("read"),
                5
            );
        }
    }

    #[tokio::test]
    async fn concurrent_messages_never_pass_the_daily_limit_together() {
        for (store, _keep) in every_backend().await {
            let ada = PrincipalId::new(1);
            let adders = (0..8).map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .media()
                        .add_bytes(ada, "2026-12-01", 30, 100)
                        .await
                        .expect("add")
                })
            });
            let mut added = 0;
            for adder in adders {
                if adder.await.expect("joined") {
                    added += 1;
                }
            }
            assert_eq!(added, 3, "three of 30 bytes fit in 100");
            assert_eq!(
                store
                    .media()
                    .bytes_on(ada, "2026-12-01")
                    .await
                    .expect("read"),
                90
            );
        }
    }
}
