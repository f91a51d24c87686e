//! What the HTTP API reads back for its callers: their sessions, a
//! session's stored conversation with each turn's status, and one turn with
//! its reply. Every read is scoped to the API identities of one caller: a
//! session is the caller's when its owning principal has an `api` identity
//! in the caller's account (among the caller's users, when it has a list).
//! Sessions without an owner (group chats) are never anyone's here.

use super::api_transcripts::ApiViews;
use crate::domain::{InboundId, InboundStatus, Outcome, SessionId};
use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_contract::PlatformName;

use super::messages::{MESSAGE_COLUMNS, message_from_row};
use super::platform_ids::id_from_row;
use super::session_id::session_id_from_row;
use super::tasks::{TASK_COLUMNS, TaskRow};
use super::{StoreError, StoredMessage};
use crate::domain::{TaskId, TaskStatus};

/// Whose sessions a read may return: the API identities in `account`,
/// limited to `users` when given.
#[derive(Debug, Clone, Copy)]
pub struct ApiScope<'a> {
    pub account: &'a str,
    pub users: Option<&'a [String]>,
}

/// One line of a caller's session list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSession {
    pub id: SessionId,
    pub title: Option<String>,
    /// The first user message, when there is one.
    pub first_text: Option<String>,
    /// The platform where the session started.
    pub platform: PlatformName,
    pub model: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Where a session list page starts: after this (`updated_at`, id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    pub updated_at: i64,
    pub id: String,
}

/// A stored transcript entry with the state of the turn that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnMessage {
    pub message: StoredMessage,
    /// The turn's message status and outcome; `None` when the entry has no
    /// turn or the turn's record was pruned (it finished long ago).
    pub turn: Option<(InboundStatus, Option<Outcome>)>,
}

/// One turn: an inbound message, where it is, and its reply once stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub id: InboundId,
    pub session_id: SessionId,
    pub text: String,
    pub status: InboundStatus,
    pub outcome: Option<Outcome>,
    pub received_at: i64,
    /// The reply as stored in the outbox.
    pub reply: Option<String>,
}

impl ApiScope<'_> {
    /// `principal_id IN (…)` over the scope's identities, with parameters
    /// numbered from `first`; returns the SQL and the values to bind.
    fn principals_sql(&self, column: &str, first: usize) -> (String, Vec<String>) {
        let mut binds = vec![self.account.to_owned()];
        let mut sql = format!(
            "{column} IN (SELECT principal_id FROM identities WHERE platform = 'api' \
             AND account = ${first}"
        );
        if let Some(users) = self.users {
            let placeholders: Vec<String> = (0..users.len())
                .map(|n| format!("${}", first + 1 + n))
                .collect();
            if placeholders.is_empty() {
                // Nobody: a list that names no user reaches nothing.
                sql.push_str(" AND 1 = 0");
            } else {
                sql.push_str(&format!(" AND user_id IN ({})", placeholders.join(", ")));
            }
            binds.extend(users.iter().cloned());
        }
        sql.push(')');
        (sql, binds)
    }
}

const TURN_SELECT: &str = "SELECT i.id, i.session_id, i.text, i.status, i.outcome, \
    i.received_at, o.text AS reply FROM inbound i LEFT JOIN outbox o ON o.inbound_id = i.id";

fn turn_from_row(row: &AnyRow) -> Result<TurnRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(TurnRecord {
        id: row.try_get("id")?,
        session_id: session_id_from_row(row, "session_id")?,
        text: row.try_get("text")?,
        status: super::stored("inbound status", &status)?,
        outcome: super::optional_stored("outcome", row.try_get("outcome")?)?,
        received_at: row.try_get("received_at")?,
        reply: row.try_get("reply")?,
    })
}

impl ApiViews<'_> {
    /// The caller's sessions, most recently active first, after `cursor`;
    /// at most `limit`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn sessions(
        self,
        scope: ApiScope<'_>,
        cursor: Option<&SessionCursor>,
        limit: i64,
    ) -> Result<Vec<ApiSession>, StoreError> {
        let (owned, binds) = scope.principals_sql("s.principal_id", 1);
        let mut next = binds.len() + 1;
        let mut sql = format!(
            "SELECT s.id, s.title, s.platform, s.model, s.created_at, s.updated_at, \
             (SELECT m.content FROM messages m WHERE m.session_id = s.id AND m.scope = '' \
              AND m.role = 'user' ORDER BY m.id LIMIT 1) AS first_text \
             FROM sessions s WHERE {owned}"
        );
        if cursor.is_some() {
            sql.push_str(&format!(
                " AND (s.updated_at < ${next} OR (s.updated_at = ${next} AND s.id < ${}))",
                next + 1
            ));
            next += 2;
        }
        sql.push_str(&format!(
            " ORDER BY s.updated_at DESC, s.id DESC LIMIT ${next}"
        ));
        let mut query = binds
            .iter()
            .fold(sqlx::query(&sql), |query, value| query.bind(value.as_str()));
        if let Some(cursor) = cursor {
            query = query.bind(cursor.updated_at).bind(cursor.id.as_str());
        }
        let rows = query
            .bind(limit)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ApiSession {
                    id: session_id_from_row(row, "id")?,
                    title: row.try_get("title")?,
                    first_text: row.try_get("first_text")?,
                    platform: id_from_row(row, "platform", PlatformName::parse)?,
                    model: row.try_get("model")?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .collect()
    }

    /// The caller's tasks, newest first: those with `status`, or (none)
    /// the live ones (active, paused); at most `limit`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn tasks(
        self,
        scope: ApiScope<'_>,
        status: Option<TaskStatus>,
        limit: i64,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let (owned, binds) = scope.principals_sql("principal_id", 1);
        let next = binds.len() + 1;
        let filter = match status {
            Some(status) => format!("status = '{status}'"),
            None => format!(
                "status IN ('{}', '{}')",
                TaskStatus::Active,
                TaskStatus::Paused
            ),
        };
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE {owned} AND {filter} \
             ORDER BY id DESC LIMIT ${next}"
        );
        let rows = binds
            .iter()
            .fold(sqlx::query(&sql), |query, value| query.bind(value.as_str()))
            .bind(limit)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        rows.iter().map(super::read).collect()
    }

    /// The caller's task `id`, if it is theirs.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn task(
        self,
        scope: ApiScope<'_>,
        id: TaskId,
    ) -> Result<Option<TaskRow>, StoreError> {
        let (owned, binds) = scope.principals_sql("principal_id", 2);
        let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1 AND {owned}");
        let row = binds
            .iter()
            .fold(sqlx::query(&sql).bind(id), |query, value| {
                query.bind(value.as_str())
            })
            .fetch_optional(&mut *self.store.read_conn().await?)
            .await?;
        row.as_ref().map(super::read).transpose()
    }

    /// Whether the session exists and is the caller's.
    ///
    /// # Errors
    /// A database failure.
    pub async fn session_reachable(
        self,
        scope: ApiScope<'_>,
        session_id: &SessionId,
    ) -> Result<bool, StoreError> {
        let (owned, binds) = scope.principals_sql("principal_id", 2);
        let sql = format!("SELECT COUNT(*) FROM sessions WHERE id = $1 AND {owned}");
        let count = binds
            .iter()
            .fold(
                sqlx::query_scalar::<_, i64>(&sql).bind(session_id.as_str()),
                |query, value| query.bind(value.as_str()),
            )
            .fetch_one(&mut *self.store.read_conn().await?)
            .await?;
        Ok(count > 0)
    }

    /// A session's conversation (its own scope; entries hidden by `/undo`
    /// left out), oldest first, after message `after`; at most `limit`,
    /// each with its turn's state.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn messages(
        self,
        session_id: &SessionId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TurnMessage>, StoreError> {
        let columns: Vec<String> = MESSAGE_COLUMNS
            .split(", ")
            .map(|column| format!("m.{}", column.trim()))
            .collect();
        let sql = format!(
            "SELECT {}, i.status AS turn_status, i.outcome AS turn_outcome FROM messages m \
             LEFT JOIN inbound i ON i.id = m.task_id \
             WHERE m.session_id = $1 AND m.scope = '' AND m.hidden = 0 AND m.id > $2 \
             ORDER BY m.id LIMIT $3",
            columns.join(", ")
        );
        let rows = sqlx::query(&sql)
            .bind(session_id.as_str())
            .bind(after)
            .bind(limit)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        rows.iter()
            .map(|row| {
                let status: Option<String> = row.try_get("turn_status")?;
                let turn = status
                    .map(|status| {
                        Ok::<_, StoreError>((
                            super::stored("inbound status", &status)?,
                            super::optional_stored("outcome", row.try_get("turn_outcome")?)?,
                        ))
                    })
                    .transpose()?;
                Ok(TurnMessage {
                    message: message_from_row(row)?,
                    turn,
                })
            })
            .collect()
    }

    /// The session's turns that have no stored entry yet (waiting, just
    /// started, or ended before their message was written), oldest first.
    /// Commands are not turns of the conversation and are left out.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn unwritten_turns(
        self,
        session_id: &SessionId,
    ) -> Result<Vec<TurnRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "{TURN_SELECT} WHERE i.session_id = $1 AND i.status <> 'command' \
             AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = i.session_id \
             AND m.task_id = i.id) ORDER BY i.id LIMIT 1000"
        ))
        .bind(session_id.as_str())
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(turn_from_row).collect()
    }

    /// One turn of the session, with its stored reply.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn turn(
        self,
        session_id: &SessionId,
        turn: InboundId,
    ) -> Result<Option<TurnRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "{TURN_SELECT} WHERE i.id = $1 AND i.session_id = $2"
        ))
        .bind(turn)
        .bind(session_id.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.as_ref().map(turn_from_row).transpose()
    }
}
