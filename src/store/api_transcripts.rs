//! The API's transcript keys (table `api_transcripts`): how a request that
//! resends its whole conversation, without `X-Session-Id`, finds the session
//! it continues (the rule is `api::transcript`'s), and the sessions such
//! clients start: seeded with the transcript they sent, or under an id they
//! chose.

use crate::domain::{ChatMessage, InboundId, InboundStatus, Scope, SessionId, now_ms};
use sqlx::Row;

use super::session_id::session_id_from_row;
use super::{Arg, Batch, NewMessage, NewSession, Store, StoreError};

/// What the HTTP API reads and records: transcripts clients resend, their sessions, messages and turns.
#[derive(Clone, Copy)]
pub struct ApiViews<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// What the HTTP API reads and records: transcripts clients resend, their sessions, messages and turns.
    pub fn api(&self) -> ApiViews<'_> {
        ApiViews { store: self }
    }
}

/// The caller a transcript key belongs to: the API key's namespace and the
/// API user (`user`, or the anonymous sender).
#[derive(Debug, Clone, Copy)]
pub struct TranscriptOwner<'a> {
    pub account: &'a str,
    pub sender: &'a str,
}

/// A turn whose transcript prefix has the hash looked up, and what the
/// session holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptCandidate {
    pub session_id: SessionId,
    /// The turn the key was written for.
    pub inbound_id: InboundId,
    /// Its reply, once stored.
    pub reply: Option<String>,
    /// The session's latest message (turn or command).
    pub latest_inbound: Option<InboundId>,
}

/// One attempt of a request: the message recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub event_id: String,
    pub status: InboundStatus,
    /// When its turn finished (ms), once it has.
    pub finished_at: Option<i64>,
    /// Whether its reply was handed to its caller ([`ApiViews::record_answered`]).
    pub answered: bool,
}

/// What a request's Idempotency-Key was first used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClaim {
    /// By this caller with this body (or never before): the request goes on.
    Same,
    /// By this caller with another body.
    OtherBody,
    /// By another caller of the namespace.
    OtherCaller,
}

/// Candidates examined per lookup, most recent first: equal prefixes of
/// different conversations (a common first message) are told apart by the
/// reply that follows.
const CANDIDATES: i64 = 20;

impl ApiViews<'_> {
    /// Records that the turn `inbound_id` of `session_id` was asked with a
    /// visible transcript hashing to `prefix_sha` (once: a retried request
    /// records nothing new).
    ///
    /// # Errors
    /// A database failure.
    pub async fn record_transcript(
        self,
        owner: TranscriptOwner<'_>,
        prefix_sha: &str,
        session_id: &SessionId,
        inbound_id: InboundId,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO api_transcripts (account, sender, prefix_sha, session_id, inbound_id, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (account, sender, prefix_sha, inbound_id) DO NOTHING",
        )
        .bind(owner.account)
        .bind(owner.sender)
        .bind(prefix_sha)
        .bind(session_id.as_str())
        .bind(inbound_id)
        .bind(now_ms())
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(())
    }

    /// The turns of `owner` asked with a transcript hashing to
    /// `prefix_sha`, most recent first, each with its reply and its
    /// session's latest message.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn transcript_candidates(
        self,
        owner: TranscriptOwner<'_>,
        prefix_sha: &str,
    ) -> Result<Vec<TranscriptCandidate>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.session_id, t.inbound_id, o.text AS reply, \
             (SELECT MAX(i.id) FROM inbound i WHERE i.session_id = t.session_id) AS latest \
             FROM api_transcripts t LEFT JOIN outbox o ON o.inbound_id = t.inbound_id \
             WHERE t.account = $1 AND t.sender = $2 AND t.prefix_sha = $3 \
             ORDER BY t.inbound_id DESC LIMIT $4",
        )
        .bind(owner.account)
        .bind(owner.sender)
        .bind(prefix_sha)
        .bind(CANDIDATES)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(TranscriptCandidate {
                    session_id: session_id_from_row(row, "session_id")?,
                    inbound_id: row.try_get("inbound_id")?,
                    reply: row.try_get("reply")?,
                    latest_inbound: row.try_get("latest")?,
                })
            })
            .collect()
    }

    /// Whether the message recorded under this event has not finished yet
    /// (`None`: no such message).
    ///
    /// # Errors
    /// A database failure.
    pub async fn event_unfinished(
        self,
        platform: &str,
        account: &str,
        event_id: &str,
    ) -> Result<Option<bool>, StoreError> {
        let status = sqlx::query_scalar::<_, String>(
            "SELECT status FROM inbound WHERE platform = $1 AND account = $2 AND event_id = $3",
        )
        .bind(platform)
        .bind(account)
        .bind(event_id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(status.map(|status| matches!(status.as_str(), "pending" | "running")))
    }

    /// The latest message recorded under one of `event_ids` (the attempts
    /// of one request, see `api::retries`): its event id, status, when its
    /// turn finished and whether its reply was handed out. Exact ids, so
    /// that the (platform, account, event_id) index serves the lookup on
    /// both backends whatever the collation.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn latest_attempt(
        self,
        platform: &str,
        account: &str,
        event_ids: &[String],
    ) -> Result<Option<Attempt>, StoreError> {
        if event_ids.is_empty() {
            return Ok(None);
        }
        let placeholders: Vec<String> = (3..event_ids.len() + 3).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT event_id, status, finished_at, \
             (SELECT COUNT(*) FROM api_answered a WHERE a.inbound_id = inbound.id) AS answered \
             FROM inbound WHERE platform = $1 AND account = $2 AND event_id IN ({}) \
             ORDER BY id DESC LIMIT 1",
            placeholders.join(", ")
        );
        let row = event_ids
            .iter()
            .fold(
                sqlx::query(&sql).bind(platform).bind(account),
                |query, id| query.bind(id.as_str()),
            )
            .fetch_optional(&mut *self.store.read_conn().await?)
            .await?;
        row.map(|row| {
            let status: String = row.try_get("status")?;
            Ok(Attempt {
                event_id: row.try_get("event_id")?,
                status: super::stored("inbound status", &status)?,
                finished_at: row.try_get("finished_at")?,
                answered: row.try_get::<i64, _>("answered")? > 0,
            })
        })
        .transpose()
    }

    /// Claims the Idempotency-Key `key` of `account` for a request of
    /// `sender` whose body has `fingerprint` (see migration 0051): the first
    /// use stores them, a later one is compared with what was stored.
    ///
    /// # Errors
    /// A database failure.
    pub async fn claim_idempotency_key(
        self,
        account: &str,
        key: &str,
        sender: &str,
        fingerprint: &str,
    ) -> Result<KeyClaim, StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO api_idempotency_keys \
             (account, idempotency_key, sender, fingerprint, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account, idempotency_key) DO NOTHING",
            vec![
                Arg::from(account),
                Arg::from(key),
                Arg::from(sender),
                Arg::from(fingerprint),
                Arg::from(now_ms()),
            ],
        );
        self.store.write(batch).await?;
        let row = sqlx::query(
            "SELECT sender, fingerprint FROM api_idempotency_keys \
             WHERE account = $1 AND idempotency_key = $2",
        )
        .bind(account)
        .bind(key)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        let Some(row) = row else {
            // Pruned between the two statements: as good as new.
            return Ok(KeyClaim::Same);
        };
        let (stored_sender, stored_fingerprint): (String, String) =
            (row.try_get("sender")?, row.try_get("fingerprint")?);
        Ok(if stored_sender != sender {
            KeyClaim::OtherCaller
        } else if stored_fingerprint != fingerprint {
            KeyClaim::OtherBody
        } else {
            KeyClaim::Same
        })
    }

    /// Records that the reply of turn `inbound_id` was handed to its API
    /// caller (see migration 0045).
    ///
    /// # Errors
    /// A database failure.
    pub async fn record_answered(self, inbound_id: InboundId) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO api_answered (inbound_id, answered_at) VALUES ($1, $2) \
             ON CONFLICT (inbound_id) DO NOTHING",
            vec![Arg::from(inbound_id), Arg::from(now_ms())],
        );
        self.store.write(batch).await.map(drop)
    }

    /// The session of the API turn `inbound_id`, unless the turn is
    /// unknown, not an API turn, or deleted as a response (migration 0046).
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn response_session(
        self,
        inbound_id: InboundId,
    ) -> Result<Option<SessionId>, StoreError> {
        let row = sqlx::query(
            "SELECT session_id FROM inbound WHERE id = $1 AND platform = 'api' \
             AND NOT EXISTS (SELECT 1 FROM api_deleted_responses d WHERE d.inbound_id = $1)",
        )
        .bind(inbound_id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.map(|row| session_id_from_row(&row, "session_id"))
            .transpose()
    }

    /// Marks the API turn `inbound_id` deleted as a response.
    ///
    /// # Errors
    /// A database failure.
    pub async fn delete_response(self, inbound_id: InboundId) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO api_deleted_responses (inbound_id, deleted_at) VALUES ($1, $2) \
             ON CONFLICT (inbound_id) DO NOTHING",
            vec![Arg::from(inbound_id), Arg::from(now_ms())],
        );
        self.store.write(batch).await.map(drop)
    }

    /// Creates `session` with `seed` as its conversation (history, not turns
    /// to run) and points `route_key` at it, in one transaction. Returns
    /// `false`, writing nothing, when a session with its id exists.
    ///
    /// # Errors
    /// A database failure.
    pub async fn create_seeded_session(
        self,
        route_key: &str,
        session: &NewSession,
        seed: &[ChatMessage],
    ) -> Result<bool, StoreError> {
        if self.store.sessions().get(&session.id).await?.is_some() {
            return Ok(false);
        }
        let now = now_ms();
        let toolset = serde_json::to_string(&session.toolset)
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let mut batch = Batch::new();
        batch.push(
            "INSERT INTO sessions (id, origin_key, platform, account, chat_id, thread_id, \
             system_prompt, model, toolset, created_at, updated_at, principal_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            vec![
                (&session.id).into(),
                session.origin_key.as_str().into(),
                session.platform.as_str().into(),
                session.account.as_str().into(),
                session.chat_id.as_str().into(),
                session
                    .thread_id
                    .as_ref()
                    .map(|thread| thread.as_str())
                    .into(),
                session.system_prompt.as_str().into(),
                session.model.as_str().into(),
                toolset.into(),
                Arg::from(now),
                Arg::from(now),
                session.principal.map(|principal| principal.get()).into(),
            ],
        );
        batch.push(
            "INSERT INTO routes (route_key, session_id, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (route_key) DO UPDATE SET session_id = excluded.session_id, \
             updated_at = excluded.updated_at",
            vec![route_key.into(), (&session.id).into(), Arg::from(now)],
        );
        for message in seed {
            batch.append_message(&NewMessage::from_wire(
                &session.id,
                None,
                &Scope::top(),
                message.clone(),
            ))?;
        }
        match self.store.write(batch).await {
            Ok(_) => Ok(true),
            // A concurrent request created the same id first.
            Err(err) => match self.store.sessions().get(&session.id).await {
                Ok(Some(_)) => Ok(false),
                _ => Err(err),
            },
        }
    }
}
