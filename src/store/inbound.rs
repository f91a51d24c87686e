//! Inbound events: the deduplication record and the per-session queue.
//!
//! Every message for the agent is recorded here once, unique per platform,
//! account and event id, before it is acknowledged. A redelivered event finds
//! its row and is dropped. Rows wait as `pending` until the session's runner
//! takes them in id order, so a message that arrives during a turn is queued,
//! never lost, and survives a restart.

use crate::domain::{
    InboundId, InboundStatus, MediaRef, Outcome, PrincipalId, SessionId, StopCause, now_ms,
};
use sqlx::any::AnyRow;
use sqlx::{Connection, Row};

use switchboard_contract::{AccountId, ChatId, EventId, PlatformName, ThreadId, UserId};

use super::codec::MediaJson;
use super::leases::{Fence, granted_token};
use super::session_id::{parse_stored, session_id_from_row};
use super::{Arg, Batch, Store, StoreError};

/// Inbound messages: recording them once, the per-session queue, claims, stop requests and pruning.
#[derive(Clone, Copy)]
pub struct Inbound<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Inbound messages: recording them once, the per-session queue, claims, stop requests and pruning.
    pub fn inbound(&self) -> Inbound<'_> {
        Inbound { store: self }
    }
}

/// An inbound message to record; as stored, it is the body of an
/// [`InboundRow`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NewInbound {
    pub platform: PlatformName,
    pub account: AccountId,
    pub event_id: EventId,
    pub session_id: SessionId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub message_id: Option<String>,
    pub sender_id: UserId,
    pub sender_name: Option<String>,
    /// In a group chat, the sender as the model is told it (see
    /// `session::speaker`); `None` elsewhere.
    pub speaker: Option<String>,
    pub text: String,
    pub status: InboundStatus,
    /// The sender's principal (usage and spend limits are counted per
    /// principal).
    pub principal_id: Option<PrincipalId>,
    /// The files of the message, stored in the blob store (see migration
    /// 0015).
    #[sqlx(try_from = "MediaJson")]
    pub media: Vec<MediaRef>,
    /// What an HTTP API request asked of its turn beyond its text, as
    /// [`crate::domain::TurnOptions`] JSON (migration 0063); `None` for
    /// nothing asked.
    pub options: Option<String>,
}

/// An inbound message as stored: what was recorded ([`NewInbound`], which
/// it dereferences to) and what its turn made of it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct InboundRow {
    pub id: InboundId,
    #[sqlx(flatten)]
    pub message: NewInbound,
    pub outcome: Option<Outcome>,
    pub received_at: i64,
    /// A stop requested for this message's turn (`/stop`, an interrupting
    /// message), by any instance.
    pub stop_cause: Option<StopCause>,
    /// The first message of the burst this one was merged into (its turn
    /// answers both), if it was.
    pub burst_of: Option<InboundId>,
    /// The platform message showing this turn's reply as it is written, if
    /// a draft message was created (see migration 0011).
    pub draft_message_id: Option<String>,
    /// The task run this message is (see migration 0030).
    pub task_run_id: Option<i64>,
    /// A background run's answer, which this message's turn records in its
    /// conversation and delivers as it is, with no model call.
    pub relay: Option<String>,
}

impl std::ops::Deref for InboundRow {
    type Target = NewInbound;

    fn deref(&self) -> &NewInbound {
        &self.message
    }
}

impl std::ops::DerefMut for InboundRow {
    fn deref_mut(&mut self) -> &mut NewInbound {
        &mut self.message
    }
}

const INBOUND_COLUMNS: &str = "id, platform, account, event_id, session_id, chat_id, thread_id, \
    message_id, sender_id, sender_name, speaker, text, status, outcome, received_at, \
    principal_id, stop_cause, burst_of, draft_message_id, media, task_run_id, relay, options";

/// How a session's waiting messages are taken: those from one sender within
/// `window_ms` of the first become one turn, and the first waits until it is
/// `window_ms` old (on the clock of [`now_ms`], the one `received_at` is
/// recorded with). 0: one turn per message, taken at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Burst {
    pub window_ms: i64,
}

impl Burst {
    /// The newest `received_at` a message may have to be taken now.
    fn cutoff(self) -> i64 {
        if self.window_ms <= 0 {
            i64::MAX
        } else {
            now_ms().saturating_sub(self.window_ms)
        }
    }
}

/// The platforms whose messages are never held for a burst: the HTTP API
/// and the terminal send whole messages, and a caller waits on each (the
/// names of [`crate::domain::LocalPlatform`]).
const UNDEBOUNCED: &str = "'api', 'terminal'";

/// Claims the session's next message, if the lease is ours (`holder` is
/// the SQL condition on the lease row naming us, with `$2` bound to
/// `holder_arg`): a `running` one first, then `pending` ones in arrival
/// order, a pending one only once it is as old as `burst`'s window (a
/// command at once); or gives the lease up when there is none. Gives one
/// row (when the first message younger than the window was received, for
/// a claim that has to wait for it), then at most one (the claimed one).
///
/// With a window, the pending messages that follow the claimed one from
/// the same sender, within the window of it and with no other sender's
/// message or command between, are marked `done`, outcome
/// [`MERGED_OUTCOME`], `burst_of` the claimed one: in the same write, so a
/// crash leaves either all of the burst waiting or all of it claimed. A
/// resumed turn (its message claimed before) takes nothing more in.
fn push_claim(
    batch: &mut Batch,
    session_id: &SessionId,
    holder: &str,
    holder_arg: Arg,
    burst: Burst,
) {
    let cutoff = burst.cutoff();
    batch.push_returning(
        format!(
            "SELECT MIN(received_at) FROM inbound WHERE session_id = $1 AND status = 'pending' \
             AND received_at > $2 AND platform NOT IN ({UNDEBOUNCED})"
        ),
        vec![session_id.into(), Arg::from(cutoff)],
    );
    if burst.window_ms > 0 {
        // Before the claim, while the burst's first message is the
        // session's oldest waiting one, still `pending` (a resumed turn,
        // already `running`, takes nothing more in).
        let first = "(SELECT f.id FROM inbound f WHERE f.session_id = $1 \
                     AND f.status IN ('pending', 'running', 'waiting') ORDER BY f.id LIMIT 1)";
        batch.push(
            format!(
                "UPDATE inbound SET status = '{done}', outcome = '{merged}', \
                 burst_of = {first} \
                 WHERE session_id = $1 AND status = 'pending' AND text NOT LIKE '/%' \
                 AND EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND {holder}) \
                 AND EXISTS (SELECT 1 FROM inbound p WHERE p.id = {first} \
                 AND p.status = 'pending' AND p.received_at <= $4 AND p.text NOT LIKE '/%' \
                 AND p.platform NOT IN ({UNDEBOUNCED}) \
                 AND p.id < inbound.id AND p.platform = inbound.platform \
                 AND p.account = inbound.account AND p.sender_id = inbound.sender_id \
                 AND inbound.received_at <= p.received_at + $3 \
                 AND NOT EXISTS (SELECT 1 FROM inbound o WHERE o.session_id = $1 \
                 AND o.id > p.id AND o.id < inbound.id AND (o.platform <> p.platform \
                 OR o.account <> p.account OR o.sender_id <> p.sender_id \
                 OR o.text LIKE '/%')))",
                done = InboundStatus::Done,
                merged = Outcome::Merged,
            ),
            vec![
                session_id.into(),
                holder_arg.clone(),
                Arg::from(burst.window_ms),
                Arg::from(cutoff),
            ],
        );
    }
    batch.push_returning_optional(
        format!(
            "UPDATE inbound SET status = 'running' WHERE id = (SELECT id FROM inbound \
             WHERE session_id = $1 AND status IN ('pending', 'running', 'waiting') \
             ORDER BY id LIMIT 1) AND status <> 'waiting' \
             AND (status = 'running' OR received_at <= $3 OR text LIKE '/%' \
             OR platform IN ({UNDEBOUNCED})) \
             AND EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND {holder}) \
             RETURNING {INBOUND_COLUMNS}"
        ),
        vec![session_id.into(), holder_arg.clone(), Arg::from(cutoff)],
    );
    // A claimed message is `running` now, so the lease is kept then. The
    // row stays, expired, so its token keeps growing.
    batch.push(
        format!(
            "UPDATE session_leases SET expires_at = 0 WHERE session_id = $1 AND {holder} \
             AND NOT EXISTS (SELECT 1 FROM inbound WHERE session_id = $1 AND status = 'running')"
        ),
        vec![session_id.into(), holder_arg],
    );
}

/// Reads what [`push_claim`] gave, its rows from `at` on.
fn read_claim(rows: &[AnyRow], at: usize, burst: Burst) -> Result<Next, StoreError> {
    let young: Option<i64> = rows
        .get(at)
        .ok_or_else(|| StoreError::Corrupt("no claim row".to_owned()))?
        .try_get(0)?;
    if let Some(inbound) = rows.get(at + 1).map(inbound_from_row).transpose()? {
        return Ok(Next::Claimed(Box::new(inbound)));
    }
    // Nothing claimed while a message waits: it is younger than the window.
    // Looked at again once it is as old (at the latest after one window,
    // whatever the clocks say).
    let retry_in = young.map(|received_at| {
        let left = received_at
            .saturating_add(burst.window_ms)
            .saturating_sub(now_ms())
            .clamp(1, burst.window_ms.max(1));
        std::time::Duration::from_millis(u64::try_from(left).unwrap_or(1))
    });
    Ok(Next::Released { retry_in })
}

/// What [`Inbound::claim_next_or_release`] found.
#[derive(Debug)]
pub enum Next {
    /// The next message, now `running`.
    Claimed(Box<InboundRow>),
    /// Nothing to run now; the lease is given up. `retry_in`: messages wait
    /// that are younger than the burst window; look again after it.
    Released {
        retry_in: Option<std::time::Duration>,
    },
}

/// What [`Inbound::lease_and_claim`] found.
#[derive(Debug)]
pub enum Claim {
    /// Another process holds the session's lease.
    Busy,
    /// The lease was ours but nothing can run now; it is given up.
    /// `retry_in` as in [`Next::Released`].
    Released {
        retry_in: Option<std::time::Duration>,
    },
    /// The next message, now `running`, under our lease's new grant.
    Claimed {
        inbound: Box<InboundRow>,
        fence: Fence,
    },
}

pub(super) fn inbound_from_row(row: &AnyRow) -> Result<InboundRow, StoreError> {
    super::read(row)
}

impl Batch {
    /// Records the `trace_id` of the turn answering message `inbound_id`
    /// (what its log lines carry), for the web console.
    pub fn record_trace_id(&mut self, inbound_id: InboundId, trace_id: &str) {
        self.push(
            "UPDATE inbound SET trace_id = $1 WHERE id = $2",
            vec![trace_id.into(), Arg::from(inbound_id)],
        );
    }
}

/// The stored form of a message's files: a JSON array, or NULL for none.
pub(super) fn media_json(media: &[MediaRef]) -> Result<Option<String>, StoreError> {
    if media.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(media)
        .map(Some)
        .map_err(|err| StoreError::Corrupt(format!("media: {err}")))
}

/// Reads what [`media_json`] stored.
pub(super) fn parse_media(raw: Option<String>) -> Result<Vec<MediaRef>, StoreError> {
    match raw {
        None => Ok(Vec::new()),
        Some(raw) => {
            serde_json::from_str(&raw).map_err(|err| StoreError::Corrupt(format!("media: {err}")))
        }
    }
}

impl Inbound<'_> {
    /// Records an inbound message. Returns its id, or `None` when the same
    /// platform event was recorded before.
    ///
    /// # Errors
    /// A database failure.
    pub async fn record(self, inbound: &NewInbound) -> Result<Option<InboundId>, StoreError> {
        let id = sqlx::query_scalar::<_, InboundId>(
            "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, thread_id, \
             message_id, sender_id, sender_name, speaker, text, status, received_at, principal_id, \
             media, options) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
             ON CONFLICT (platform, account, event_id) DO NOTHING RETURNING id",
        )
        .bind(inbound.platform.as_str())
        .bind(inbound.account.as_str())
        .bind(inbound.event_id.as_str())
        .bind(inbound.session_id.as_str())
        .bind(inbound.chat_id.as_str())
        .bind(inbound.thread_id.as_ref().map(ThreadId::as_str))
        .bind(inbound.message_id.as_deref())
        .bind(inbound.sender_id.as_str())
        .bind(inbound.sender_name.as_deref())
        .bind(inbound.speaker.as_deref())
        .bind(&inbound.text)
        .bind(inbound.status.as_str())
        .bind(now_ms())
        .bind(inbound.principal_id)
        .bind(media_json(&inbound.media)?)
        .bind(inbound.options.as_deref())
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        Ok(id)
    }

    /// Takes the session's lease for `ttl_ms` as a new grant if it is free,
    /// expired or already `owner`'s, and in the same write claims the
    /// session's next message as [`Inbound::claim_next_or_release`] does.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn lease_and_claim(
        self,
        session_id: &SessionId,
        owner: &str,
        ttl_ms: i64,
        burst: Burst,
    ) -> Result<Claim, StoreError> {
        let mut batch = Batch::new();
        batch.acquire_lease(self.store.clock_sql(), session_id, owner, ttl_ms);
        // In the same transaction as the grant: `owner` holds it only if
        // the grant went through.
        push_claim(&mut batch, session_id, "owner = $2", owner.into(), burst);
        let rows = self.store.unfenced().write(batch).await?;
        let Some(token) = granted_token(rows.first())? else {
            return Ok(Claim::Busy);
        };
        Ok(match read_claim(&rows, 1, burst)? {
            Next::Claimed(inbound) => Claim::Claimed {
                inbound,
                fence: Fence {
                    session_id: session_id.clone(),
                    token,
                },
            },
            Next::Released { retry_in } => Claim::Released { retry_in },
        })
    }

    /// Commits `before` (say, the last reply's delivery status), then, if
    /// `fence` is still the session's current grant, takes the oldest
    /// unfinished message of the session and marks it `running` (a
    /// `running` one first: a turn interrupted by a crash; then `pending`
    /// ones in arrival order, each once it is as old as `burst`'s window,
    /// with the later messages of its burst marked merged into it), or,
    /// when there is none, gives the lease up; all in one write. A turn
    /// parked for a person's decision (`waiting`) holds the messages after
    /// it back until it is decided and resumed.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn claim_next_or_release(
        self,
        fence: &Fence,
        mut before: Batch,
        burst: Burst,
    ) -> Result<Next, StoreError> {
        let skip = before.returning_rows();
        push_claim(
            &mut before,
            &fence.session_id,
            "token = $2",
            Arg::from(fence.token),
            burst,
        );
        let rows = self.store.unfenced().write(before).await?;
        read_claim(&rows, skip, burst)
    }

    /// The session's newest message still waiting for its turn.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn newest_pending(
        self,
        session_id: &SessionId,
    ) -> Result<Option<InboundRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {INBOUND_COLUMNS} FROM inbound WHERE session_id = $1 AND status = 'pending' \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(session_id.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.as_ref().map(inbound_from_row).transpose()
    }

    /// A message by id.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn get(self, id: InboundId) -> Result<Option<InboundRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {INBOUND_COLUMNS} FROM inbound WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.as_ref().map(inbound_from_row).transpose()
    }

    /// The messages merged into the burst that `first_id` begins, in
    /// arrival order (empty when it is a message of its own).
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn burst_of(self, first_id: InboundId) -> Result<Vec<InboundRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {INBOUND_COLUMNS} FROM inbound WHERE burst_of = $1 ORDER BY id"
        ))
        .bind(first_id)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(inbound_from_row).collect()
    }

    /// Sessions with unfinished messages and no live lease: the instance
    /// that ran or received them died (or is draining). Expired leases are
    /// taken for `owner` on the way (on PostgreSQL skipping rows another
    /// sweeper is taking), so that only one instance resumes each; sessions
    /// never leased are listed for the caller's runner to claim as usual.
    ///
    /// # Errors
    /// A database failure.
    pub async fn sweep_orphans(
        self,
        owner: &str,
        ttl_ms: i64,
        limit: i64,
        include_own: bool,
    ) -> Result<Vec<SessionId>, StoreError> {
        // A restart takes its own earlier leases at once, expired or not.
        let own = if include_own { " OR l.owner = $1" } else { "" };
        let clock = self.store.clock_sql();
        let skip_locked = if self.store.is_shared() {
            " FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let mut conn = self.store.conn().await?;
        let mut ids = sqlx::query_scalar::<_, String>(&format!(
            "UPDATE session_leases SET owner = $1, expires_at = {clock} + $2, token = token + 1 \
             WHERE session_id IN (SELECT l.session_id FROM session_leases l \
             WHERE (l.expires_at < {clock}{own}) AND EXISTS (SELECT 1 FROM inbound i \
             WHERE i.session_id = l.session_id AND i.status IN ('pending', 'running')) \
             AND NOT EXISTS (SELECT 1 FROM inbound w WHERE w.session_id = l.session_id \
             AND w.status = 'waiting') \
             ORDER BY l.expires_at LIMIT $3{skip_locked}) RETURNING session_id"
        ))
        .bind(owner)
        .bind(ttl_ms)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
        ids.extend(
            sqlx::query_scalar::<_, String>(
                "SELECT DISTINCT session_id FROM inbound i \
                 WHERE status IN ('pending', 'running') AND NOT EXISTS \
                 (SELECT 1 FROM session_leases l WHERE l.session_id = i.session_id) \
                 AND NOT EXISTS (SELECT 1 FROM inbound w WHERE w.session_id = i.session_id \
                 AND w.status = 'waiting') LIMIT $1",
            )
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?,
        );
        ids.iter().map(|id| parse_stored(id)).collect()
    }

    /// Records a stop request for the session's running turn, wherever it
    /// runs (the instance running it reads it at its next lease renewal, or
    /// at once through a notification). Returns whether a turn was running.
    ///
    /// # Errors
    /// A database failure.
    pub async fn request_stop(
        self,
        session_id: &SessionId,
        cause: &str,
    ) -> Result<bool, StoreError> {
        let stopped = sqlx::query_scalar::<_, i64>(
            "UPDATE inbound SET stop_cause = COALESCE(stop_cause, $2) \
             WHERE session_id = $1 AND status = 'running' RETURNING id",
        )
        .bind(session_id.as_str())
        .bind(cause)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        Ok(!stopped.is_empty())
    }

    /// Records the platform message showing the draft of the turn of
    /// `inbound_id`, and hands it to the turn's reply if that is already
    /// written and not yet delivered (the turn may end while the draft's
    /// message is being created). Through a fenced store, an instance that
    /// lost the session's lease records nothing.
    ///
    /// # Errors
    /// A database failure, or [`StoreError::LeaseLost`].
    pub async fn record_draft(
        self,
        inbound_id: InboundId,
        message_id: &str,
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "UPDATE inbound SET draft_message_id = $1 WHERE id = $2",
            vec![message_id.into(), Arg::from(inbound_id)],
        );
        batch.push(
            "UPDATE outbox SET replaces = $1 \
             WHERE inbound_id = $2 AND status = 'pending' AND replaces IS NULL",
            vec![message_id.into(), Arg::from(inbound_id)],
        );
        self.store.write(batch).await.map(drop)
    }

    /// The stop request recorded for the session's running turn, if any.
    ///
    /// # Errors
    /// A database failure.
    pub async fn stop_request(self, session_id: &SessionId) -> Result<Option<String>, StoreError> {
        let cause = sqlx::query_scalar::<_, Option<String>>(
            "SELECT stop_cause FROM inbound WHERE session_id = $1 AND status = 'running' LIMIT 1",
        )
        .bind(session_id.as_str())
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        Ok(cause.flatten())
    }

    /// The message whose turn is running in the session (on any instance,
    /// or interrupted by a crash and about to resume), if any.
    ///
    /// # Errors
    /// A database failure.
    pub async fn running_turn(
        self,
        session_id: &SessionId,
    ) -> Result<Option<InboundId>, StoreError> {
        let id = sqlx::query_scalar::<_, InboundId>(
            "SELECT id FROM inbound WHERE session_id = $1 AND status = 'running' LIMIT 1",
        )
        .bind(session_id.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(id)
    }

    /// The id of the message recorded for a platform event, if it was.
    ///
    /// # Errors
    /// A database failure.
    pub async fn id_of_event(
        self,
        platform: &str,
        account: &str,
        event_id: &str,
    ) -> Result<Option<(InboundId, SessionId)>, StoreError> {
        let row = sqlx::query(
            "SELECT id, session_id FROM inbound \
             WHERE platform = $1 AND account = $2 AND event_id = $3",
        )
        .bind(platform)
        .bind(account)
        .bind(event_id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.map(|row| Ok((row.try_get("id")?, session_id_from_row(&row, "session_id")?)))
            .transpose()
    }

    /// Deletes what is older than `older_than_ms` and finished: delivered or
    /// given-up replies, then the deduplication records of finished messages
    /// (a redelivery after that long is no longer expected), and the API's
    /// transcript keys of that age. Transcripts are kept. Returns how many inbound records went.
    ///
    /// # Errors
    /// A database failure.
    pub async fn prune_finished(self, older_than_ms: i64) -> Result<u64, StoreError> {
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        sqlx::query("DELETE FROM outbox WHERE status IN ('sent', 'failed') AND created_at < $1")
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await?;
        // A stateless API client's turn whose reply is gone can no longer be
        // recognised (see `store::api_transcripts`).
        sqlx::query("DELETE FROM api_transcripts WHERE created_at < $1")
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM api_idempotency_keys WHERE created_at < $1")
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM api_answered WHERE answered_at < $1")
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await?;
        let result = sqlx::query(
            "DELETE FROM inbound WHERE received_at < $1 AND status IN ('done', 'failed', 'command') \
             AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.inbound_id = inbound.id)",
        )
        .bind(older_than_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    //! The burst claim on a SQLite file: what it takes, what it merges, and
    //! that a restart between the claim and the turn finds the same burst.

    use super::*;
    use crate::store::test_support::{scratch_instance, scratch_store, write_unchecked};

    const TTL_MS: i64 = 60_000;
    const WINDOW: Burst = Burst { window_ms: 1_000 };

    fn session() -> SessionId {
        SessionId::parse("s-1").expect("id")
    }

    #[test]
    fn the_undebounced_platforms_are_the_local_ones() {
        let names: Vec<String> = crate::domain::LocalPlatform::ALL
            .iter()
            .map(|local| format!("'{}'", local.name()))
            .collect();
        assert_eq!(UNDEBOUNCED, names.join(", "));
    }

    /// A pending message of the session (foreign keys off: no session row).
    async fn plant(store: &Store, n: usize, sender: &str, text: &str, received_at: i64) {
        write_unchecked(
            store,
            &[&format!(
                "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, \
                 sender_id, text, status, received_at) VALUES ('telegram', 'default', 'e{n}', \
                 's-1', 'c', '{sender}', '{text}', 'pending', {received_at})"
            )],
        )
        .await;
    }

    async fn claim(store: &Store, burst: Burst) -> Claim {
        let owner = store.instance().id.clone();
        store
            .inbound()
            .lease_and_claim(&session(), &owner, TTL_MS, burst)
            .await
            .expect("claim")
    }

    fn claimed(claim: Claim) -> InboundRow {
        match claim {
            Claim::Claimed { inbound, .. } => *inbound,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_claim_merges_one_senders_burst_and_a_restart_finds_it_again() {
        let (base, dir) = scratch_store().await;
        plant(&base, 1, "u", "a", 10).await;
        plant(&base, 2, "u", "b", 500).await;
        plant(&base, 3, "u", "/compact", 600).await;
        plant(&base, 4, "u", "c", 700).await;
        let a = scratch_instance(&dir, "a", TTL_MS).await;

        let first = claimed(claim(&a, WINDOW).await);
        assert_eq!(first.text, "a");
        let merged = a.inbound().burst_of(first.id).await.expect("burst");
        assert_eq!(
            merged.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["b"],
            "a command is never merged and ends the burst"
        );
        assert_eq!(merged[0].status, InboundStatus::Done);
        assert_eq!(merged[0].outcome, Some(Outcome::Merged));
        assert_eq!(merged[0].burst_of, Some(first.id));

        // The process dies before the turn: its restart resumes the same
        // message, with the same burst, and nothing is claimed twice.
        let restarted = scratch_instance(&dir, "a", TTL_MS).await;
        let again = claimed(claim(&restarted, WINDOW).await);
        assert_eq!(again.id, first.id);
        assert_eq!(again.status, InboundStatus::Running);
        assert_eq!(
            restarted.inbound().burst_of(first.id).await.expect("burst"),
            merged
        );
        let waiting: Vec<String> =
            sqlx::query_scalar("SELECT text FROM inbound WHERE status = 'pending' ORDER BY id")
                .fetch_all(&mut *base.conn().await.expect("conn"))
                .await
                .expect("rows");
        assert_eq!(waiting, ["/compact", "c"]);
    }

    #[tokio::test]
    async fn a_message_younger_than_the_window_waits_and_says_how_long() {
        let (base, dir) = scratch_store().await;
        plant(&base, 1, "u", "a", now_ms()).await;
        let a = scratch_instance(&dir, "a", TTL_MS).await;

        let burst = Burst { window_ms: 60_000 };
        match claim(&a, burst).await {
            Claim::Released {
                retry_in: Some(wait),
            } => assert!(wait <= std::time::Duration::from_secs(60), "{wait:?}"),
            other => panic!("expected a wait, got {other:?}"),
        }
        assert_eq!(claimed(claim(&a, Burst::default()).await).text, "a");
    }
}
