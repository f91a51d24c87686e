//! The shared cache of tool results (`tool_cache`): rows keyed by
//! the tool cache's keys (`tools::cache::CacheKey`), each holding the exact result text the
//! model saw from a live call, until its expiry. Every instance on the
//! database reads and writes the same rows; housekeeping deletes expired ones.

use super::{Batch, Store, StoreError};

use crate::domain::now_ms;

/// The tool result cache.
#[derive(Clone, Copy)]
pub struct ToolCache<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The tool result cache.
    pub fn tool_cache(&self) -> ToolCache<'_> {
        ToolCache { store: self }
    }
}

impl Batch {
    /// Marks a tool call as answered from the cache (`tool_calls.cache_hit`).
    pub fn mark_cache_hit(&mut self, request_id: &str) {
        self.push(
            "UPDATE tool_calls SET cache_hit = 1 WHERE request_id = $1",
            vec![request_id.into()],
        );
    }
}

impl ToolCache<'_> {
    /// The stored result for `key`, unless it expired.
    ///
    /// # Errors
    /// A database failure.
    pub async fn get(self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar::<_, String>(
            "SELECT result FROM tool_cache WHERE cache_key = $1 AND expires_at > $2",
        )
        .bind(key)
        .bind(now_ms())
        .fetch_optional(&mut *self.store.conn().await?)
        .await?)
    }

    /// Stores `result` for `key` until `ttl_ms` from now, replacing an older
    /// row.
    ///
    /// # Errors
    /// A database failure.
    pub async fn put(
        self,
        key: &str,
        tool: &str,
        result: &str,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO tool_cache (cache_key, tool, result, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (cache_key) DO UPDATE SET \
             result = excluded.result, created_at = excluded.created_at, \
             expires_at = excluded.expires_at",
            vec![
                key.into(),
                tool.into(),
                result.into(),
                now.into(),
                now.saturating_add(ttl_ms).into(),
            ],
        );
        self.store.write(batch).await?;
        Ok(())
    }

    /// Deletes the expired cached tool results; returns how many went.
    ///
    /// # Errors
    /// A database failure.
    pub async fn prune(self) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM tool_cache WHERE expires_at <= $1")
            .bind(now_ms())
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(result.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::scratch_store;

    #[tokio::test]
    async fn a_stored_result_is_read_until_it_expires_then_pruned() {
        let (store, _dir) = scratch_store().await;
        store
            .tool_cache()
            .put("live", "calculator", "{\"result\":4}", 60_000)
            .await
            .expect("stored");
        store
            .tool_cache()
            .put("gone", "calculator", "{\"result\":5}", -1)
            .await
            .expect("stored");

        assert_eq!(
            store.tool_cache().get("live").await.expect("read"),
            Some("{\"result\":4}".to_owned())
        );
        assert_eq!(store.tool_cache().get("gone").await.expect("read"), None);
        assert_eq!(store.tool_cache().prune().await.expect("pruned"), 1);
        assert_eq!(store.tool_cache().prune().await.expect("pruned"), 0);
        // Storing again replaces the row.
        store
            .tool_cache()
            .put("live", "calculator", "{\"result\":6}", 60_000)
            .await
            .expect("replaced");
        assert_eq!(
            store.tool_cache().get("live").await.expect("read"),
            Some("{\"result\":6}".to_owned())
        );
    }
}
