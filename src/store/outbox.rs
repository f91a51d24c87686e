//! The outbox: replies written in the transaction that ends a turn, then
//! delivered and marked sent with the platform's message id.
//!
//! Each pending row is delivered by one instance at a time: the one that
//! wrote it claims it in the same transaction, and the delivery pumps
//! (recovery, retries, the orphan sweep) claim rows whose claim is free or
//! expired, on the database's clock. A delivery that retries renews its
//! claim before each attempt; one that lost it stops.

use crate::domain::{InboundId, InboundStatus, OutboxStatus, Outcome, SessionId, now_ms};
use std::time::Duration;

use sqlx::Row;
use sqlx::any::AnyRow;

use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId};

use super::session_id::session_id_from_row;
use super::{Arg, Batch, NewMessage, Store, StoreError};

/// The outbox: ending a turn with its reply, claims on pending replies, and stored replies.
#[derive(Clone, Copy)]
pub struct Outbox<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The outbox: ending a turn with its reply, claims on pending replies, and stored replies.
    pub fn outbox(&self) -> Outbox<'_> {
        Outbox { store: self }
    }
}

/// A reply as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub session_id: SessionId,
    pub inbound_id: InboundId,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub reply_to: Option<String>,
    pub text: String,
    pub status: OutboxStatus,
    pub platform_message_id: Option<String>,
    pub attempts: i64,
    /// The database's random id (`database_id.random_id`, made by migration
    /// 0007); `None` only if that row was deleted by hand.
    pub database_id: Option<String>,
    /// The platform message showing this reply's draft, which the reply's
    /// first part replaces (see migration 0011).
    pub replaces: Option<String>,
    /// The buttons under the message, as the contract's `Button`s in JSON
    /// (a question's; see migration 0060).
    pub buttons: Option<String>,
    /// The approval a notice asks about.
    pub approval_id: Option<i64>,
}

impl OutboxRow {
    /// The idempotency key platforms get for this reply:
    /// `sb-<database id>-<row id>`. Derived from the row, so a re-send after
    /// a crash, or by another instance sharing the database, carries the same
    /// key; the database's random id keeps a recreated database (whose row
    /// ids start at 1 again) or another deployment from repeating an earlier
    /// key inside a platform's dedup window. 15 characters plus the row id:
    /// Discord's nonces (25 characters) keep it readable up to row id 10^9.
    pub fn idempotency_key(&self) -> String {
        match &self.database_id {
            Some(database) => format!("sb-{database}-{}", self.id),
            None => format!("sb-{}", self.id),
        }
    }
}

/// A finished turn's reply, as a waiting caller reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReply {
    pub inbound_id: InboundId,
    pub session_id: SessionId,
    pub text: String,
    pub status: InboundStatus,
}

/// How a turn ended, written atomically with its reply.
#[derive(Debug, Clone)]
pub struct TurnEnd<'a> {
    pub inbound_id: InboundId,
    /// The final assistant entry, if the turn produced one.
    pub final_message: Option<&'a NewMessage>,
    pub reply: &'a str,
    pub status: InboundStatus,
    /// Why the turn ended (`done`, or the limit that stopped it).
    pub outcome: Outcome,
    /// The reply is not sent from here: a background run's, relayed to its
    /// conversation (its row is kept as `relayed`).
    pub relayed: bool,
}

pub(super) const OUTBOX_COLUMNS: &str = "id, session_id, inbound_id, platform, account, chat_id, \
    thread_id, reply_to, text, status, platform_message_id, attempts, replaces, buttons, approval_id, \
    (SELECT random_id FROM database_id) AS database_id";

impl Store {
    /// The database's random id (made by migration 0007), which keys
    /// sent to platforms carry so that they never repeat across databases;
    /// `None` only if that row was deleted by hand. Read once, then kept.
    ///
    /// # Errors
    /// A database failure.
    pub async fn database_id(&self) -> Result<Option<String>, StoreError> {
        self.database_id
            .get_or_try_init(|| async {
                let id = sqlx::query_scalar::<_, String>("SELECT random_id FROM database_id")
                    .fetch_optional(&mut *self.read_conn().await?)
                    .await?;
                Ok(id)
            })
            .await
            .cloned()
    }
}

impl Batch {
    /// Marks a reply delivered, after `attempts` sends.
    pub fn mark_outbox_sent(&mut self, id: i64, attempts: u32, platform_message_id: Option<&str>) {
        self.push(
            "UPDATE outbox SET status = 'sent', platform_message_id = $1, sent_at = $2, \
             attempts = attempts + $3 WHERE id = $4",
            vec![
                platform_message_id.into(),
                Arg::from(now_ms()),
                Arg::from(i64::from(attempts)),
                Arg::from(id),
            ],
        );
    }

    /// Gives this instance's claim on a reply up (no adapter for its
    /// platform runs here), so that another instance delivers it.
    pub fn release_outbox_claim(&mut self, id: i64) {
        self.push(
            "UPDATE outbox SET claimed_by = NULL, claim_expires_at = NULL WHERE id = $1",
            vec![Arg::from(id)],
        );
    }

    /// Records `attempts` failed sends; `permanent` gives the row up.
    pub fn mark_outbox_attempts_failed(&mut self, id: i64, attempts: u32, permanent: bool) {
        self.push(
            "UPDATE outbox SET attempts = attempts + $1, status = $2 WHERE id = $3",
            vec![
                Arg::from(i64::from(attempts)),
                if permanent { "failed" } else { "pending" }.into(),
                Arg::from(id),
            ],
        );
    }

    /// Records `attempts` sends the platform refused for now, asking for
    /// `wait`: the row stays claimed by this instance until then, so no
    /// sweep (this instance's or another's) sends it earlier. `clock` is
    /// the store's [`Store::clock_sql`].
    pub fn defer_outbox(&mut self, clock: &str, id: i64, attempts: u32, wait: Duration) {
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
        self.push(
            format!(
                "UPDATE outbox SET attempts = attempts + $1, claim_expires_at = {clock} + $2 \
                 WHERE id = $3"
            ),
            vec![
                Arg::from(i64::from(attempts)),
                Arg::from(wait_ms),
                Arg::from(id),
            ],
        );
    }
}

fn outbox_from_row(row: &AnyRow) -> Result<OutboxRow, StoreError> {
    super::read(row)
}

impl Outbox<'_> {
    /// Ends a turn in one transaction: appends the final assistant entry,
    /// writes the reply as a pending outbox row, and marks the inbound
    /// message finished. Returns the outbox row.
    ///
    /// # Errors
    /// A database failure (nothing is written then).
    pub async fn finish_turn(self, end: &TurnEnd<'_>) -> Result<OutboxRow, StoreError> {
        self.finish_turn_with(end, Batch::new()).await
    }

    /// [`Outbox::finish_turn`], committing `before` (say, the last model
    /// call's outcome) in the same transaction, first.
    ///
    /// # Errors
    /// A database failure (nothing is written then).
    pub async fn finish_turn_with(
        self,
        end: &TurnEnd<'_>,
        mut batch: Batch,
    ) -> Result<OutboxRow, StoreError> {
        let now = now_ms();
        if let Some(message) = end.final_message {
            batch.append_message(message)?;
        }
        let skip = batch.returning_rows();
        batch.push_returning(
            format!(
                "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, \
                 thread_id, reply_to, text, status, created_at, claimed_by, claim_expires_at, \
                 replaces) \
                 SELECT session_id, id, platform, account, chat_id, thread_id, message_id, $1, \
                 $6, $2, $4, {} + $5, draft_message_id FROM inbound WHERE id = $3 RETURNING {OUTBOX_COLUMNS}",
                self.store.clock_sql()
            ),
            vec![
                end.reply.into(),
                Arg::from(now),
                Arg::from(end.inbound_id),
                self.store.instance.id.as_str().into(),
                Arg::from(self.store.instance.lease_ttl_ms()),
                if end.relayed {
                    OutboxStatus::Relayed
                } else {
                    OutboxStatus::Pending
                }
                .as_str()
                .into(),
            ],
        );
        batch.push(
            "UPDATE inbound SET status = $1, outcome = $2, finished_at = $3 WHERE id = $4",
            vec![
                end.status.as_str().into(),
                end.outcome.as_str().into(),
                Arg::from(now),
                Arg::from(end.inbound_id),
            ],
        );
        // The session's totals catch up with every model call of this task.
        batch.push(
            "UPDATE sessions SET \
             input_tokens = input_tokens + (SELECT COALESCE(SUM(input_tokens), 0) FROM usage WHERE task_id = $1), \
             output_tokens = output_tokens + (SELECT COALESCE(SUM(output_tokens), 0) FROM usage WHERE task_id = $1), \
             cache_read_tokens = cache_read_tokens + (SELECT COALESCE(SUM(cache_read_tokens), 0) FROM usage WHERE task_id = $1), \
             cache_write_tokens = cache_write_tokens + (SELECT COALESCE(SUM(cache_write_tokens), 0) FROM usage WHERE task_id = $1), \
             cost_micros = cost_micros + (SELECT COALESCE(SUM(cost_nanousd), 0) FROM usage WHERE task_id = $1) / 1000, \
             updated_at = $2 WHERE id = (SELECT session_id FROM inbound WHERE id = $1)",
            vec![Arg::from(end.inbound_id), Arg::from(now)],
        );
        let rows = self.store.write(batch).await?;
        let row = rows
            .get(skip)
            .ok_or_else(|| StoreError::Corrupt(format!("inbound {} missing", end.inbound_id)))?;
        outbox_from_row(row)
    }

    /// Records that the pending reply `id` replaces the draft message
    /// `message_id` (one the turn's draft writer created as the turn ended,
    /// too late for [`Outbox::finish_turn`] to copy it).
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_replaces(self, id: i64, message_id: &str) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "UPDATE outbox SET replaces = $1 WHERE id = $2 AND status = 'pending'",
            vec![message_id.into(), Arg::from(id)],
        );
        self.store.write(batch).await.map(drop)
    }

    /// Claims up to `limit` replies waiting for delivery, oldest first:
    /// rows no instance has claimed or whose claim expired, and with
    /// `reclaim_own` also those this instance claimed before (a restart
    /// picking up its own unfinished deliveries). On PostgreSQL rows another
    /// instance is claiming are skipped, not waited for. A row claimed before
    /// and never recorded as tried counts one attempt: its claimant may have
    /// sent it and stopped before recording that (a crash, a lost claim), so
    /// it goes out as a redelivery.
    ///
    /// # Errors
    /// A database failure.
    pub async fn claim_pending(
        self,
        limit: i64,
        reclaim_own: bool,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let clock = self.store.clock_sql();
        let own = if reclaim_own {
            " OR claimed_by = $1"
        } else {
            ""
        };
        let skip_locked = if self.store.is_shared() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "UPDATE outbox SET claimed_by = $1, claim_expires_at = {clock} + $2, \
             attempts = CASE WHEN claimed_by IS NOT NULL AND attempts = 0 THEN 1 \
             ELSE attempts END \
             WHERE id IN (SELECT id FROM outbox WHERE status = 'pending' \
             AND (claimed_by IS NULL OR claim_expires_at < {clock}{own}) \
             ORDER BY id LIMIT $3{skip_locked}) RETURNING {OUTBOX_COLUMNS}"
        ))
        .bind(self.store.instance.id.as_str())
        .bind(self.store.instance.lease_ttl_ms())
        .bind(limit)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        let mut pending = self.readable_pending(&rows).await?;
        pending.sort_by_key(|row| row.id);
        Ok(pending)
    }

    /// Extends this instance's claim on a reply before another delivery
    /// attempt; `false` when the claim is no longer ours (or the row no
    /// longer pending), and the attempt must not be made.
    ///
    /// # Errors
    /// A database failure.
    pub async fn renew_claim(self, id: i64) -> Result<bool, StoreError> {
        let renewed = sqlx::query_scalar::<_, i64>(&format!(
            "UPDATE outbox SET claim_expires_at = {} + $1 \
             WHERE id = $2 AND claimed_by = $3 AND status = 'pending' RETURNING id",
            self.store.clock_sql()
        ))
        .bind(self.store.instance.lease_ttl_ms())
        .bind(id)
        .bind(self.store.instance.id.as_str())
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        Ok(renewed.is_some())
    }

    /// The stored replies of these messages, for callers waiting on them:
    /// the outbox text and the message's final status (a message merged
    /// into a burst gets the burst's). Messages not finished yet are left
    /// out.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn stored_replies(
        self,
        inbound_ids: &[InboundId],
    ) -> Result<Vec<StoredReply>, StoreError> {
        if inbound_ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (1..=inbound_ids.len()).map(|n| format!("${n}")).collect();
        let ids = placeholders.join(", ");
        // A parked turn's reply, until it resumes, is its first question.
        let sql = format!(
            "SELECT i.id AS inbound_id, o.session_id, o.text, p.status, o.id AS outbox_id \
             FROM inbound i JOIN outbox o ON o.inbound_id = COALESCE(i.burst_of, i.id) \
             JOIN inbound p ON p.id = o.inbound_id WHERE i.id IN ({ids}) \
             UNION ALL \
             SELECT i.id, o.session_id, o.text, i.status, o.id FROM inbound i \
             JOIN approvals a ON a.inbound_id = i.id AND a.status = 'pending' \
             JOIN outbox o ON o.approval_id = a.id \
             WHERE i.status = 'waiting' AND i.id IN ({ids}) ORDER BY outbox_id"
        );
        let rows = inbound_ids
            .iter()
            .fold(sqlx::query(&sql), |query, id| query.bind(*id))
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok(StoredReply {
                    inbound_id: row.try_get("inbound_id")?,
                    session_id: session_id_from_row(row, "session_id")?,
                    text: row.try_get("text")?,
                    status: super::stored("inbound status", &status)?,
                })
            })
            .collect()
    }

    /// Reads pending outbox rows. A row that no longer reads (an id edited
    /// by hand, say) is logged and given up on its own: it must not keep
    /// every other pending reply from going out.
    async fn readable_pending(self, rows: &[AnyRow]) -> Result<Vec<OutboxRow>, StoreError> {
        let mut pending = Vec::with_capacity(rows.len());
        let mut unreadable = Batch::new();
        for row in rows {
            match outbox_from_row(row) {
                Ok(read) => pending.push(read),
                Err(err) => {
                    let id: i64 = row.try_get("id")?;
                    tracing::error!(outbox_id = id, error = %err, "outbox row is unreadable; given up");
                    unreadable.mark_outbox_attempts_failed(id, 0, true);
                }
            }
        }
        self.store.write(unreadable).await?;
        Ok(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{scratch_instance, scratch_store, write_unchecked};

    async fn instance(dir: &tempfile::TempDir, id: &str) -> Store {
        scratch_instance(dir, id, 60_000).await
    }

    /// A reply nobody has claimed yet (as a crash between the turn's end
    /// and its delivery, or a claim given up, leaves it).
    async fn plant_unclaimed_reply(store: &Store) {
        write_unchecked(
            store,
            &[
                "INSERT INTO inbound (id, platform, account, event_id, session_id, chat_id, \
                 sender_id, text, status, received_at) \
                 VALUES (1, 'telegram', 'default', 'e1', 's-1', 'c', 'u', 'hi', 'done', 1)",
                "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, text, \
                 status, created_at) VALUES ('s-1', 1, 'telegram', 'default', 'c', 'hello', \
                 'pending', 1)",
            ],
        )
        .await;
    }

    #[tokio::test]
    async fn each_pending_reply_is_claimed_by_one_instance_until_its_claim_expires() {
        let (base, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        let b = instance(&dir, "b").await;
        plant_unclaimed_reply(&base).await;

        let taken = a.outbox().claim_pending(10, false).await.expect("claim");
        let also = b.outbox().claim_pending(10, false).await.expect("claim");
        let own_again = a.outbox().claim_pending(10, false).await.expect("claim");

        assert_eq!(taken.len(), 1);
        assert!(also.is_empty(), "claimed by a: {also:?}");
        assert!(
            own_again.is_empty(),
            "a delivery in flight is not taken twice"
        );
        assert!(a.outbox().renew_claim(taken[0].id).await.expect("renew"));
        assert!(!b.outbox().renew_claim(taken[0].id).await.expect("renew"));

        write_unchecked(&base, &["UPDATE outbox SET claim_expires_at = 1"]).await;
        let after_expiry = b.outbox().claim_pending(10, false).await.expect("claim");

        assert_eq!(
            after_expiry.len(),
            1,
            "a dead claimant's reply is taken over"
        );
        assert!(
            !a.outbox().renew_claim(taken[0].id).await.expect("renew"),
            "the old claimant must not send again"
        );
    }

    #[tokio::test]
    async fn reply_keys_are_shared_by_instances_and_differ_between_databases() {
        let (first, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        plant_unclaimed_reply(&first).await;
        let from_a = a.outbox().claim_pending(10, false).await.expect("claim");
        write_unchecked(&first, &["UPDATE outbox SET claim_expires_at = 1"]).await;
        let b = instance(&dir, "b").await;
        let from_b = b.outbox().claim_pending(10, false).await.expect("claim");
        let (recreated, _other) = scratch_store().await;
        plant_unclaimed_reply(&recreated).await;
        let from_recreated = recreated
            .outbox()
            .claim_pending(10, false)
            .await
            .expect("claim");

        let key = from_a[0].idempotency_key();
        assert_eq!(from_a[0].id, from_recreated[0].id, "both start at row 1");
        assert_eq!(key, from_b[0].idempotency_key(), "same database, same key");
        assert_ne!(key, from_recreated[0].idempotency_key());
        let database = from_a[0].database_id.as_deref().expect("a database id");
        assert_eq!(database.len(), 10);
        assert!(database.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(key, format!("sb-{database}-{}", from_a[0].id));
    }

    #[tokio::test]
    async fn a_restart_reclaims_its_own_claims_and_a_released_claim_is_free() {
        let (base, dir) = scratch_store().await;
        let a = instance(&dir, "a").await;
        let b = instance(&dir, "b").await;
        plant_unclaimed_reply(&base).await;
        let taken = a.outbox().claim_pending(10, false).await.expect("claim");

        assert_eq!(taken[0].attempts, 0, "a first claim is a first delivery");

        let restarted = a.outbox().claim_pending(10, true).await.expect("claim");
        assert_eq!(restarted.len(), 1, "its own claim, at once");
        assert_eq!(
            restarted[0].attempts, 1,
            "the crashed process may have sent it: a redelivery"
        );

        let mut release = Batch::new();
        release.release_outbox_claim(taken[0].id);
        a.write(release).await.expect("released");
        let free = b.outbox().claim_pending(10, false).await.expect("claim");
        assert_eq!(free.len(), 1, "no adapter on a: b delivers");
    }
}
