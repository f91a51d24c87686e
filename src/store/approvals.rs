//! Approvals (migration 0060): what a parked turn waits for, and the audit
//! of every request and decision.
//!
//! An approval is written in the transaction that records its tool call as
//! `awaiting` (with the round's assistant entry, or when a resumed turn
//! finds a call in doubt), so a call never waits without a question. The
//! turn then parks ([`Batch::park_turn`]): its message `waiting`, the
//! question posted as a notice (an inbound row of its own, already
//! answered, and its outbox row with buttons). A decision is one batch
//! ([`Approvals::decide`]): the row moves from `pending` once (whoever
//! comes second changes nothing), "allow for this conversation" is granted,
//! and the turn goes back to `pending` when nothing else of it waits, for
//! its session's runner to resume on any instance.

use sha2::{Digest, Sha256};
use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId, UserId};

use super::outbox::OUTBOX_COLUMNS;
use super::{Arg, Batch, OutboxRow, Store, StoreError};
use crate::domain::{
    ApprovalKind, ApprovalStatus, InboundId, InboundStatus, Outcome, PrincipalId, Scope, SessionId,
    now_ms,
};

/// Approvals: asking, deciding, expiring, and the audit.
#[derive(Clone, Copy)]
pub struct Approvals<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Approvals: asking, deciding, expiring, and the audit.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { store: self }
    }
}

/// A question to write with the call it is about.
#[derive(Debug, Clone)]
pub struct NewApproval<'a> {
    /// Random; buttons carry it, so a press names the question it answers.
    pub nonce: &'a str,
    pub session_id: &'a SessionId,
    /// The turn that waits.
    pub inbound_id: InboundId,
    pub call_id: &'a str,
    pub kind: ApprovalKind,
    pub tool: &'a str,
    pub arguments: &'a str,
    /// A question's offered answers.
    pub choices: &'a [String],
    /// Who asked for the turn; they (or an admin) decide.
    pub principal_id: Option<PrincipalId>,
    pub platform: &'a PlatformName,
    pub account: &'a AccountId,
    pub chat_id: &'a ChatId,
    pub thread_id: Option<&'a ThreadId>,
    pub sender_id: &'a UserId,
    /// `requester` or `admins`.
    pub approver: &'a str,
    pub expires_at: i64,
}

/// An approval as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ApprovalRow {
    pub id: i64,
    pub nonce: String,
    pub session_id: SessionId,
    pub inbound_id: InboundId,
    pub request_id: String,
    pub call_id: String,
    pub kind: ApprovalKind,
    pub tool: String,
    pub arguments: String,
    pub arguments_sha: String,
    pub choices: Option<String>,
    pub principal_id: Option<PrincipalId>,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub sender_id: UserId,
    pub approver: String,
    pub status: ApprovalStatus,
    pub answer: Option<String>,
    pub decided_by: Option<String>,
    pub decided_via: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
}

impl ApprovalRow {
    /// A question's offered answers (none for an approval).
    #[must_use]
    pub fn choices(&self) -> Vec<String> {
        self.choices
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default()
    }
}

/// A decision (or an answer) to record.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    pub status: ApprovalStatus,
    /// A question's answer.
    pub answer: Option<&'a str>,
    /// Who decided, as the audit shows them (`telegram:12345`, `api:key`).
    pub by: &'a str,
    /// Where: `button`, `command`, `message`, `api`, `timeout`, `stop`.
    pub via: &'a str,
}

/// What became of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// This decision was the first; the row as it is now.
    Now(ApprovalRow),
    /// Someone decided first (or it expired): the row as it stands.
    Already(ApprovalRow),
    /// No such approval.
    Unknown,
}

/// A message nobody asked for: a question (or a reminder) posted in a
/// chat, recorded as an answered inbound row of its own (event id `key`,
/// so posting it twice posts it once) with its outbox row.
#[derive(Debug, Clone)]
pub struct Notice<'a> {
    /// Unique per notice: `approval:<id>:<chat>`, `reminder:<inbound>`.
    pub key: &'a str,
    pub session_id: &'a SessionId,
    pub platform: &'a PlatformName,
    pub account: &'a AccountId,
    pub chat_id: &'a ChatId,
    pub thread_id: Option<&'a ThreadId>,
    pub text: &'a str,
    /// The contract's buttons as JSON, if any.
    pub buttons: Option<&'a str>,
    pub approval_id: Option<i64>,
}

const APPROVAL_COLUMNS: &str = "id, nonce, session_id, inbound_id, request_id, call_id, kind, \
    tool, arguments, arguments_sha, choices, principal_id, platform, account, chat_id, thread_id, \
    sender_id, approver, status, answer, decided_by, decided_via, created_at, expires_at, \
    decided_at";

/// The hash of a call's arguments the audit keeps beside them.
#[must_use]
pub fn arguments_sha(arguments: &str) -> String {
    hex::encode(Sha256::digest(arguments.as_bytes()))
}

impl Batch {
    /// Records an approval for the call at `index` of the round whose
    /// assistant entry this batch appends (its request id derived in the
    /// transaction, as [`Batch::start_round`] does). Returns its id.
    pub fn ask_in_round(&mut self, approval: &NewApproval<'_>, scope: &Scope, index: usize) {
        self.push_approval(
            approval,
            "(SELECT CAST(MAX(id) AS TEXT) FROM messages WHERE session_id = $2 AND scope = $18) \
             || $17",
            vec![Arg::from(format!("-{index}")), scope.as_str().into()],
        );
    }

    /// Records an approval for the call checkpointed as `request_id`.
    /// Returns its id.
    pub fn ask(&mut self, approval: &NewApproval<'_>, request_id: &str) {
        self.push_approval(approval, "$17", vec![request_id.into()]);
    }

    fn push_approval(&mut self, approval: &NewApproval<'_>, request_id: &str, extra: Vec<Arg>) {
        let choices = (!approval.choices.is_empty())
            .then(|| serde_json::to_string(approval.choices).unwrap_or_default());
        let mut args: Vec<Arg> = vec![
            approval.nonce.into(),
            approval.session_id.into(),
            Arg::from(approval.inbound_id),
            approval.call_id.into(),
            approval.kind.as_str().into(),
            approval.tool.into(),
            approval.arguments.into(),
            arguments_sha(approval.arguments).into(),
            Arg::from(choices),
            Arg::from(approval.principal_id),
            approval.platform.as_str().into(),
            approval.account.as_str().into(),
            approval.chat_id.as_str().into(),
            Arg::from(approval.thread_id.map(|thread| thread.as_str().to_owned())),
            approval.sender_id.as_str().into(),
            approval.approver.into(),
        ];
        args.extend(extra);
        args.push(Arg::from(now_ms()));
        let now = args.len();
        args.push(Arg::from(approval.expires_at));
        let expires = args.len();
        self.push_returning(
            format!(
                "INSERT INTO approvals (nonce, session_id, inbound_id, request_id, call_id, \
                 kind, tool, arguments, arguments_sha, choices, principal_id, platform, \
                 account, chat_id, thread_id, sender_id, approver, status, created_at, \
                 expires_at) VALUES ($1, $2, $3, {request_id}, $4, $5, $6, $7, $8, $9, $10, \
                 $11, $12, $13, $14, $15, $16, 'pending', ${now}, ${expires}) RETURNING id"
            ),
            args,
        );
    }

    /// Parks the turn of `inbound_id`: its message `waiting` (nothing else
    /// of its session runs until it is resumed) unless every approval of it
    /// was decided meanwhile.
    pub fn park_turn(&mut self, inbound_id: InboundId) {
        // The turn's row is locked first (as a decision does), so that a
        // decision committing meanwhile is seen by the update below: on
        // PostgreSQL its own statement's snapshot would miss it and park a
        // turn with nothing left to wait for.
        self.push(
            "UPDATE inbound SET status = status WHERE id = $1",
            vec![Arg::from(inbound_id)],
        );
        self.push(
            format!(
                "UPDATE inbound SET status = '{waiting}', outcome = '{outcome}' WHERE id = $1 \
                 AND EXISTS (SELECT 1 FROM approvals WHERE inbound_id = $1 AND status = 'pending')",
                waiting = InboundStatus::Waiting,
                outcome = Outcome::AwaitingPerson,
            ),
            vec![Arg::from(inbound_id)],
        );
    }

    /// Posts `notice` (once per key), claimed for delivery by `owner` for
    /// `ttl_ms` on the database's clock (`clock_sql`); returns its outbox
    /// row, or none when it was posted before.
    pub fn post_notice(&mut self, notice: &Notice<'_>, owner: &str, clock_sql: &str, ttl_ms: i64) {
        let now = now_ms();
        self.push(
            format!(
                "INSERT INTO inbound (platform, account, event_id, session_id, chat_id, \
                 thread_id, sender_id, text, status, outcome, received_at, finished_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'switchboard', '', '{command}', '{notice}', \
                 $7, $7) ON CONFLICT (platform, account, event_id) DO NOTHING",
                command = InboundStatus::Command,
                notice = Outcome::Notice,
            ),
            vec![
                notice.platform.as_str().into(),
                notice.account.as_str().into(),
                notice.key.into(),
                notice.session_id.into(),
                notice.chat_id.as_str().into(),
                Arg::from(notice.thread_id.map(|thread| thread.as_str().to_owned())),
                Arg::from(now),
            ],
        );
        self.push_returning_optional(
            format!(
                "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, \
                 thread_id, text, status, created_at, claimed_by, claim_expires_at, buttons, \
                 approval_id) \
                 SELECT session_id, id, platform, account, chat_id, thread_id, $4, 'pending', \
                 $5, $6, {clock_sql} + $9, $7, $8 FROM inbound i WHERE platform = $1 \
                 AND account = $2 AND event_id = $3 \
                 AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.inbound_id = i.id) \
                 RETURNING {OUTBOX_COLUMNS}"
            ),
            vec![
                notice.platform.as_str().into(),
                notice.account.as_str().into(),
                notice.key.into(),
                notice.text.into(),
                Arg::from(now),
                owner.into(),
                Arg::from(notice.buttons.map(str::to_owned)),
                Arg::from(notice.approval_id),
                Arg::from(ttl_ms),
            ],
        );
    }

    /// Puts every parked turn with nothing left to wait for back in its
    /// session's queue.
    pub fn requeue_decided_turns(&mut self) {
        self.push(
            format!(
                "UPDATE inbound SET status = '{pending}' WHERE status = '{waiting}' \
                 AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.inbound_id = inbound.id \
                 AND a.status = 'pending')",
                pending = InboundStatus::Pending,
                waiting = InboundStatus::Waiting,
            ),
            Vec::new(),
        );
    }
}

impl Approvals<'_> {
    /// An approval by id.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn get(self, id: i64) -> Result<Option<ApprovalRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        row.as_ref().map(super::read).transpose()
    }

    /// The newest approval of the call checkpointed as `request_id`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn of_request(self, request_id: &str) -> Result<Option<ApprovalRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE request_id = $1 \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(request_id)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        row.as_ref().map(super::read).transpose()
    }

    /// The approvals a turn asked for, oldest first.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn of_turn(self, inbound_id: InboundId) -> Result<Vec<ApprovalRow>, StoreError> {
        self.select("WHERE inbound_id = $1 ORDER BY id", Arg::from(inbound_id))
            .await
    }

    /// The pending approvals of a session, oldest first.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn pending_in(self, session_id: &SessionId) -> Result<Vec<ApprovalRow>, StoreError> {
        self.select(
            "WHERE session_id = $1 AND status = 'pending' ORDER BY id",
            session_id.into(),
        )
        .await
    }

    /// The pending approvals a requester (on one platform account) decides.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn pending_of(
        self,
        platform: &str,
        account: &str,
        sender_id: &str,
    ) -> Result<Vec<ApprovalRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'pending' \
             AND platform = $1 AND account = $2 AND sender_id = $3 ORDER BY id"
        ))
        .bind(platform)
        .bind(account)
        .bind(sender_id)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    async fn select(self, filter: &str, arg: Arg) -> Result<Vec<ApprovalRow>, StoreError> {
        let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals {filter}");
        let query = match arg {
            Arg::Int(value) => sqlx::query(&sql).bind(value),
            Arg::Text(value) => sqlx::query(&sql).bind(value),
        };
        let rows = query.fetch_all(&mut *self.store.conn().await?).await?;
        rows.iter().map(super::read).collect()
    }

    /// Whether "allow for this conversation" covers `tool` in the session.
    ///
    /// # Errors
    /// A database failure.
    pub async fn granted(self, session_id: &SessionId, tool: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT 1 FROM session_tool_grants WHERE session_id = $1 AND tool = $2",
        )
        .bind(session_id.as_str())
        .bind(tool)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?
        .is_some())
    }

    /// Records `decision` for approval `id` if it is still pending and not
    /// expired, exactly once across instances; grants the tool for the
    /// conversation when asked to, and puts the turn back in its session's
    /// queue once nothing else of it waits. An approval past its expiry is
    /// marked expired instead.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn decide(self, id: i64, decision: &Decision<'_>) -> Result<Decided, StoreError> {
        let now = now_ms();
        let mut batch = Batch::new();
        // The turn's row is locked first, so that two approvals of one turn
        // decided at once (on two instances, or two requests to one) are
        // decided one after the other: otherwise, on PostgreSQL, each
        // decision's requeue below sees the other approval still pending,
        // and the turn stays parked with nothing left to wait for.
        batch.push(
            "UPDATE inbound SET status = status \
             WHERE id = (SELECT inbound_id FROM approvals WHERE id = $1)",
            vec![Arg::from(id)],
        );
        batch.push_returning_optional(
            "UPDATE approvals SET status = $2, answer = $3, decided_by = $4, decided_via = $5, \
             decided_at = $6 WHERE id = $1 AND status = 'pending' AND expires_at > $6 \
             RETURNING id",
            vec![
                Arg::from(id),
                decision.status.as_str().into(),
                Arg::from(decision.answer.map(str::to_owned)),
                decision.by.into(),
                decision.via.into(),
                Arg::from(now),
            ],
        );
        batch.push(
            "INSERT INTO session_tool_grants (session_id, tool, approval_id, created_at) \
             SELECT session_id, tool, id, $2 FROM approvals WHERE id = $1 \
             AND status = 'allowed_session' ON CONFLICT (session_id, tool) DO NOTHING",
            vec![Arg::from(id), Arg::from(now)],
        );
        batch.requeue_decided_turns();
        let won = !self.store.write(batch).await?.is_empty();
        let Some(row) = self.get(id).await? else {
            return Ok(Decided::Unknown);
        };
        if won {
            return Ok(Decided::Now(row));
        }
        if row.status == ApprovalStatus::Pending {
            // Past its expiry: the sweep would mark it so; do it now.
            self.expire_due(now).await?;
            let row = self.get(id).await?.unwrap_or(row);
            return Ok(Decided::Already(row));
        }
        Ok(Decided::Already(row))
    }

    /// Marks every pending approval past its expiry `expired` (once) and
    /// puts their turns back in their queues. Returns the approvals this
    /// call expired.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn expire_due(self, now: i64) -> Result<Vec<ApprovalRow>, StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "UPDATE approvals SET status = 'expired', decided_at = $1, decided_via = 'timeout' \
             WHERE status = 'pending' AND expires_at <= $1",
            vec![Arg::from(now)],
        );
        batch.requeue_decided_turns();
        self.store.write(batch).await?;
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'expired' \
             AND decided_at = $1 ORDER BY id"
        ))
        .bind(now)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// When the next pending approval expires.
    ///
    /// # Errors
    /// A database failure.
    pub async fn next_expiry(self) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MIN(expires_at) FROM approvals WHERE status = 'pending'",
        )
        .fetch_one(&mut *self.store.conn().await?)
        .await?)
    }

    /// `/stop` for a session whose turn waits: its pending approvals end as
    /// `stopped` and the turn, marked stopped, goes back to the queue to
    /// end. Returns whether a turn waited.
    ///
    /// # Errors
    /// A database failure.
    pub async fn stop_waiting(self, session_id: &SessionId, by: &str) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut batch = Batch::new();
        batch.push_returning_optional(
            format!(
                "UPDATE inbound SET stop_cause = 'user' WHERE session_id = $1 \
                 AND status = '{waiting}' RETURNING id",
                waiting = InboundStatus::Waiting,
            ),
            vec![session_id.into()],
        );
        batch.push(
            format!(
                "UPDATE approvals SET status = 'stopped', decided_by = $2, decided_via = 'stop', \
                 decided_at = $3 WHERE status = 'pending' AND inbound_id IN \
                 (SELECT id FROM inbound WHERE session_id = $1 AND status = '{waiting}')",
                waiting = InboundStatus::Waiting,
            ),
            vec![session_id.into(), by.into(), Arg::from(now)],
        );
        batch.requeue_decided_turns();
        Ok(!self.store.write(batch).await?.is_empty())
    }

    /// The sent notices of an approval (to show the decision in each).
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn notices(self, approval_id: i64) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE approval_id = $1 ORDER BY id"
        ))
        .bind(approval_id)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }
}
