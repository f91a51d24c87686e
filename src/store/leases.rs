//! Session leases: at most one turn runs per session, across processes, and
//! a holder that lost its lease writes nothing.
//!
//! A lease row names its owner (one gateway instance), an expiry on the
//! database's clock, and a fencing token. An instance takes a free or expired
//! lease (or one its own earlier run held: a restart reclaims at once), and
//! every grant adds one to the token; a renewal keeps it. The row is never
//! deleted, so the token only grows. A [`Fence`] names one grant; a store
//! [`fenced`](Store::fenced) by it makes every batch it writes conditional on
//! the grant still being current (see [`Batch`] and `lease_fence` in the
//! migrations): once another instance has taken the session over, the old
//! holder's writes fail with [`StoreError::LeaseLost`] and change nothing.

use crate::domain::{InboundId, SessionId};
use std::sync::Arc;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Arg, Backend, Batch, Store, StoreError};

/// Leases: session leases (renewal, release) and platform leases.
#[derive(Clone, Copy)]
pub struct Leases<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Leases: session leases (renewal, release) and platform leases.
    pub fn leases(&self) -> Leases<'_> {
        Leases { store: self }
    }
}

/// One grant of a session's lease: the writes of a turn run under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub session_id: SessionId,
    pub token: i64,
}

/// What a renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Still ours; `stop` is a stop request for the running turn, if any
    /// instance recorded one.
    Held { stop: Option<String> },
    /// Another instance has taken the session over.
    Lost,
}

impl Store {
    /// A store whose batches are written only while `fence` is the
    /// session's current grant.
    pub fn fenced(&self, fence: Fence) -> Store {
        Store {
            fence: Some(Arc::new(fence)),
            ..self.clone()
        }
    }

    /// This store without its fence.
    pub(super) fn unfenced(&self) -> Store {
        if self.fence.is_none() {
            return self.clone();
        }
        Store {
            fence: None,
            ..self.clone()
        }
    }
}

impl Batch {
    /// Takes the session's lease for `ttl_ms` (on the database's clock
    /// `clock`) if it is free, expired, or held by `owner` (an earlier run
    /// of this instance), as a new grant; gives one row, which
    /// [`granted_token`] reads.
    pub fn acquire_lease(&mut self, clock: &str, session_id: &SessionId, owner: &str, ttl_ms: i64) {
        self.push(
            format!(
                "INSERT INTO session_leases (session_id, owner, expires_at, token) \
                 VALUES ($1, $2, {clock} + $3, 1) \
                 ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, \
                 expires_at = excluded.expires_at, token = session_leases.token + 1 \
                 WHERE session_leases.owner = excluded.owner \
                 OR session_leases.expires_at < {clock}"
            ),
            vec![session_id.into(), owner.into(), Arg::from(ttl_ms)],
        );
        self.push_returning(
            "SELECT COALESCE(MAX(token), -1) FROM session_leases \
             WHERE session_id = $1 AND owner = $2",
            vec![session_id.into(), owner.into()],
        );
    }
}

/// The token [`Batch::acquire_lease`] granted, or `None` when another
/// instance holds the lease.
pub(super) fn granted_token(row: Option<&AnyRow>) -> Result<Option<i64>, StoreError> {
    let token: i64 = row
        .ok_or_else(|| StoreError::Corrupt("no lease row".to_owned()))?
        .try_get(0)?;
    Ok((token >= 0).then_some(token))
}

/// The statements that make a batch conditional on `fence`: the first
/// fails the whole batch (a NOT NULL violation on `lease_fence`) when the
/// grant is no longer current. On PostgreSQL the check also locks the lease
/// row until the batch commits, so no grant can slip in between.
pub(super) fn guard(backend: Backend, fence: &Fence) -> (String, Vec<Arg>) {
    let lock = match backend {
        Backend::Postgres => " FOR SHARE",
        Backend::Sqlite => "",
    };
    (
        format!(
            "INSERT INTO lease_fence (must_hold_lease) SELECT NULL WHERE NOT EXISTS \
             (SELECT 1 FROM session_leases WHERE session_id = $1 AND token = $2{lock})"
        ),
        vec![(&fence.session_id).into(), Arg::from(fence.token)],
    )
}

/// Whether `err` is the fence's guard failing.
pub(super) fn is_fence_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.message().contains("must_hold_lease"))
}

impl Leases<'_> {
    /// Extends the lease of `fence` by `ttl_ms` and reads the stop request
    /// of the turn `inbound_id` runs; [`Renewal::Lost`] when the grant is no
    /// longer current. An expired grant nobody else took is still ours.
    ///
    /// # Errors
    /// A database failure.
    pub async fn renew(
        self,
        fence: &Fence,
        inbound_id: InboundId,
        ttl_ms: i64,
    ) -> Result<Renewal, StoreError> {
        let mut batch = Batch::new();
        batch.push_returning(
            "SELECT stop_cause FROM inbound WHERE id = $1",
            vec![Arg::from(inbound_id)],
        );
        batch.push_returning_optional(
            format!(
                "UPDATE session_leases SET expires_at = {} + $1 \
                 WHERE session_id = $2 AND token = $3 RETURNING token",
                self.store.clock_sql()
            ),
            vec![
                Arg::from(ttl_ms),
                (&fence.session_id).into(),
                Arg::from(fence.token),
            ],
        );
        // Unfenced: a lost lease is an answer here, not an error.
        let rows = self.store.unfenced().write(batch).await?;
        if rows.len() < 2 {
            return Ok(Renewal::Lost);
        }
        let stop: Option<String> = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt(format!("inbound {inbound_id} missing")))?
            .try_get(0)?;
        Ok(Renewal::Held { stop })
    }

    /// Gives the lease of `fence` up, if it is still current. The row stays
    /// (with its token), expired. `handing_back` says work is left in the
    /// session (a draining instance, a failed turn): the lease is marked so
    /// (expiry -1) and, on PostgreSQL, the other instances are told to take
    /// it over at once.
    ///
    /// # Errors
    /// A database failure.
    pub async fn release(self, fence: &Fence, handing_back: bool) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "UPDATE session_leases SET expires_at = $3 WHERE session_id = $1 AND token = $2",
            vec![
                (&fence.session_id).into(),
                Arg::from(fence.token),
                Arg::from(if handing_back { -1 } else { 0 }),
            ],
        );
        self.store.unfenced().write(batch).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Two stores on one SQLite file stand for two instances: each writes
    //! its own claims, and the file is the only thing they share.

    use super::*;
    use crate::store::Claim;
    use crate::store::test_support::{scratch_instance, scratch_store, write_unchecked};

    const TTL_MS: i64 = 60_000;

    async fn instance(dir: &tempfile::TempDir, id: &str) -> Store {
        scratch_instance(dir, id, TTL_MS).await
    }

    fn session() -> SessionId {
        SessionId::parse("s-1").expect("id")
    }

    /// One session with `n` pending messages (foreign keys off: no session
    /// row is needed for the lease's sake).
    async fn plant_pending(store: &Store, n: usize) {
        for i in 0..n {
            write_unchecked(
                store,
                &[&format!(
                    "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, \
                     sender_id, text, status, received_at) \
                     VALUES ('api', 'default', 'e{i}', 's-1', 'c', 'u', 'hello {i}', 'pending', 1)"
                )],
            )
            .await;
        }
    }

    async fn claim(store: &Store) -> Claim {
        let owner = store.instance().id.clone();
        store
            .inbound()
            .lease_and_claim(&session(), &owner, TTL_MS, crate::store::Burst::default())
            .await
            .expect("claim")
    }

    fn fence_of(claim: Claim) -> Fence {
        match claim {
            Claim::Claimed { fence, .. } => fence,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    /// Lets every lease of the session expire, as time passing would.
    async fn expire(store: &Store) {
        write_unchecked(store, &["UPDATE session_leases SET expires_at = 1"]).await;
    }

    async fn text_of_first(store: &Store) -> String {
        sqlx::query_scalar("SELECT text FROM inbound ORDER BY id LIMIT 1")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("text")
    }

    fn edit_first(text: &str) -> Batch {
        let mut batch = Batch::new();
        batch.push(
            "UPDATE inbound SET text = $1 WHERE id = (SELECT MIN(id) FROM inbound)",
            vec![text.into()],
        );
        batch
    }

    #[tokio::test]
    async fn a_holder_whose_lease_was_taken_over_writes_nothing() {
        let (base, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        let b = instance(&dir, "b").await;
        plant_pending(&base, 1).await;

        let fence_a = fence_of(claim(&a).await);
        assert!(
            matches!(claim(&b).await, Claim::Busy),
            "a live lease is not shared"
        );
        a.fenced(fence_a.clone())
            .write(edit_first("written by a"))
            .await
            .expect("the holder writes");
        expire(&base).await;
        let fence_b = fence_of(claim(&b).await);

        assert!(fence_b.token > fence_a.token, "a new grant, a larger token");
        let stale = a.fenced(fence_a.clone()).write(edit_first("stale")).await;
        assert!(
            matches!(stale, Err(StoreError::LeaseLost)),
            "{:?}",
            stale.err()
        );
        assert_eq!(text_of_first(&base).await, "written by a");
        assert_eq!(
            a.leases()
                .renew(&fence_a, InboundId::new(1), TTL_MS)
                .await
                .expect("renew"),
            Renewal::Lost
        );
        a.leases().release(&fence_a, true).await.expect("release");
        b.fenced(fence_b.clone())
            .write(edit_first("written by b"))
            .await
            .expect("the new holder writes");
        assert_eq!(text_of_first(&base).await, "written by b");
        assert_eq!(
            b.leases()
                .renew(&fence_b, InboundId::new(1), TTL_MS)
                .await
                .expect("renew"),
            Renewal::Held { stop: None },
            "the old holder's release left the new grant alone"
        );
    }

    #[tokio::test]
    async fn a_restarted_instance_takes_its_own_live_lease_back_at_once() {
        let (base, dir) = scratch_store().await;
        let before_crash = instance(&dir, "a").await;
        plant_pending(&base, 1).await;
        let old = fence_of(claim(&before_crash).await);

        let restarted = instance(&dir, "a").await;
        let new = fence_of(claim(&restarted).await);

        assert!(new.token > old.token);
        let stale = before_crash.fenced(old).write(edit_first("stale")).await;
        assert!(
            matches!(stale, Err(StoreError::LeaseLost)),
            "{:?}",
            stale.err()
        );
    }

    #[tokio::test]
    async fn the_sweep_takes_over_expired_leases_with_unfinished_work_only() {
        let (base, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        let b = instance(&dir, "b").await;
        plant_pending(&base, 2).await;
        let fence_a = fence_of(claim(&a).await);

        let live = b
            .inbound()
            .sweep_orphans("b", TTL_MS, 10, false)
            .await
            .expect("sweep");
        assert!(live.is_empty(), "a live lease is left alone: {live:?}");
        expire(&base).await;
        let swept = b
            .inbound()
            .sweep_orphans("b", TTL_MS, 10, false)
            .await
            .expect("sweep");

        assert_eq!(swept, vec![session()]);
        let stale = a.fenced(fence_a).write(edit_first("stale")).await;
        assert!(
            matches!(stale, Err(StoreError::LeaseLost)),
            "{:?}",
            stale.err()
        );
        assert!(
            matches!(claim(&a).await, Claim::Busy),
            "the sweeper holds it now"
        );
        let again = a
            .inbound()
            .sweep_orphans("a", TTL_MS, 10, false)
            .await
            .expect("sweep");
        assert!(again.is_empty(), "one sweeper per orphan: {again:?}");
    }

    #[tokio::test]
    async fn a_stop_request_reaches_the_holder_at_its_next_renewal() {
        let (base, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        let b = instance(&dir, "b").await;
        plant_pending(&base, 1).await;
        let (inbound, fence) = match claim(&a).await {
            Claim::Claimed { inbound, fence } => (inbound, fence),
            other => panic!("expected a claim, got {other:?}"),
        };

        assert!(
            b.inbound()
                .request_stop(&session(), "user")
                .await
                .expect("stop")
        );

        assert_eq!(
            a.leases()
                .renew(&fence, inbound.id, TTL_MS)
                .await
                .expect("renew"),
            Renewal::Held {
                stop: Some("user".to_owned())
            }
        );
    }
}
