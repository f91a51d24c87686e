//! Long-term memory: short facts about a person, kept per principal
//! (`memories`), oldest first.
//!
//! Facts are written by the `memory` tool (see `tools::memory`) and read
//! into the system prompt of the principal's new direct-chat sessions (see
//! `agent::prompt`). Every method takes the principal whose facts it reads
//! or changes, and touches no one else's: a fact id of another principal is
//! answered like a missing one.

use sqlx::{Connection, Row};

use super::{Store, StoreError, to_u64};

use crate::domain::{PrincipalId, SessionId, now_ms};

/// Long-term memory: each principal's remembered facts.
#[derive(Clone, Copy)]
pub struct Memories<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Long-term memory: each principal's remembered facts.
    pub fn memories(&self) -> Memories<'_> {
        Memories { store: self }
    }
}

/// One remembered fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEntry {
    /// Stable across changes of the list (the tool forgets by it).
    pub id: i64,
    pub text: String,
    pub created_at: i64,
}

/// What asking to remember a fact did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remembered {
    /// Stored; `count` facts are kept now.
    Added { entry: MemoryEntry, count: u64 },
    /// The same text was already kept, as fact `id`; nothing was added.
    Known { id: i64 },
    /// The principal already has `count` facts, the most allowed.
    Full { count: u64 },
}

impl Memories<'_> {
    /// A principal's facts, oldest first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn list(self, principal: PrincipalId) -> Result<Vec<MemoryEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, text, created_at FROM memories WHERE principal_id = $1 ORDER BY id",
        )
        .bind(principal.get())
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(MemoryEntry {
                    id: row.try_get("id")?,
                    text: row.try_get("text")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Keeps `text` as a fact about `principal`, remembered in `session`,
    /// unless the principal already has `max_entries` facts or this very
    /// text. The count and the insert are one transaction, with the
    /// principal's row locked, so concurrent calls cannot pass the limit.
    ///
    /// # Errors
    /// A database failure (including an unknown principal).
    pub async fn remember(
        self,
        principal: PrincipalId,
        text: &str,
        session: Option<&SessionId>,
        max_entries: u64,
    ) -> Result<Remembered, StoreError> {
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        // Takes the principal's row lock on PostgreSQL (SQLite's writer is
        // one connection anyway): concurrent calls for one person queue here.
        sqlx::query("UPDATE principals SET approved = approved WHERE id = $1")
            .bind(principal.get())
            .execute(&mut *tx)
            .await?;
        let known = sqlx::query_scalar::<_, i64>(
            "SELECT id FROM memories WHERE principal_id = $1 AND text = $2 ORDER BY id LIMIT 1",
        )
        .bind(principal.get())
        .bind(text)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = known {
            tx.rollback().await?;
            return Ok(Remembered::Known { id });
        }
        let count = to_u64(
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM memories WHERE principal_id = $1")
                .bind(principal.get())
                .fetch_one(&mut *tx)
                .await?,
        );
        if count >= max_entries {
            tx.rollback().await?;
            return Ok(Remembered::Full { count });
        }
        let created_at = now_ms();
        let id = sqlx::query_scalar::<_, i64>(
            "INSERT INTO memories (principal_id, text, session_id, created_at) \
             VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(principal.get())
        .bind(text)
        .bind(session.map(SessionId::as_str))
        .bind(created_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Remembered::Added {
            entry: MemoryEntry {
                id,
                text: text.to_owned(),
                created_at,
            },
            count: count + 1,
        })
    }

    /// Removes fact `id` of `principal`; `false` when the principal has no
    /// such fact (another principal's fact stays untouched).
    ///
    /// # Errors
    /// A database failure.
    pub async fn forget(self, principal: PrincipalId, id: i64) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM memories WHERE id = $1 AND principal_id = $2")
            .bind(id)
            .bind(principal.get())
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Removes all of a principal's facts; returns how many there were.
    ///
    /// # Errors
    /// A database failure.
    pub async fn clear(self, principal: PrincipalId) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM memories WHERE principal_id = $1")
            .bind(principal.get())
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::scratch_store;

    async fn principal(store: &Store, user: &str) -> PrincipalId {
        store
            .principals()
            .resolve_identity("test", "main", user)
            .await
            .expect("identity")
            .principal
    }

    #[tokio::test]
    async fn facts_are_kept_per_principal_oldest_first() {
        let (store, _dir) = scratch_store().await;
        let ada = principal(&store, "ada").await;
        let bob = principal(&store, "bob").await;

        let first = store
            .memories()
            .remember(ada, "likes tea", None, 10)
            .await
            .expect("db");
        let Remembered::Added { entry, count: 1 } = first else {
            panic!("{first:?}")
        };
        store
            .memories()
            .remember(ada, "lives in Lyon", None, 10)
            .await
            .expect("db");
        store
            .memories()
            .remember(bob, "likes coffee", None, 10)
            .await
            .expect("db");

        let texts = |entries: Vec<MemoryEntry>| -> Vec<String> {
            entries.into_iter().map(|entry| entry.text).collect()
        };
        assert_eq!(
            texts(store.memories().list(ada).await.expect("db")),
            ["likes tea", "lives in Lyon"]
        );
        assert_eq!(
            texts(store.memories().list(bob).await.expect("db")),
            ["likes coffee"]
        );
        assert!(
            !store.memories().forget(bob, entry.id).await.expect("db"),
            "another principal's fact is not found"
        );
        assert!(store.memories().forget(ada, entry.id).await.expect("db"));
        assert!(!store.memories().forget(ada, entry.id).await.expect("db"));
        assert_eq!(
            texts(store.memories().list(ada).await.expect("db")),
            ["lives in Lyon"]
        );
        assert_eq!(store.memories().clear(ada).await.expect("db"), 1);
        assert!(store.memories().list(ada).await.expect("db").is_empty());
        assert_eq!(store.memories().list(bob).await.expect("db").len(), 1);
    }

    #[tokio::test]
    async fn the_limit_and_duplicates_add_nothing() {
        let (store, _dir) = scratch_store().await;
        let ada = principal(&store, "ada").await;

        store
            .memories()
            .remember(ada, "one", None, 2)
            .await
            .expect("db");
        let again = store
            .memories()
            .remember(ada, "one", None, 2)
            .await
            .expect("db");
        assert!(matches!(again, Remembered::Known { .. }), "{again:?}");
        store
            .memories()
            .remember(ada, "two", None, 2)
            .await
            .expect("db");
        let full = store
            .memories()
            .remember(ada, "three", None, 2)
            .await
            .expect("db");
        assert_eq!(full, Remembered::Full { count: 2 });
        assert_eq!(store.memories().list(ada).await.expect("db").len(), 2);
    }
}
