//! Sessions (one conversation each, with its stored system prompt, model and
//! toolset) and routes (which session a chat currently talks to).

use sqlx::any::AnyRow;

use sqlx::Connection;

use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId};

use super::codec::ToolsetJson;
use super::compactions::{Compaction, conversation_columns, conversation_from_row};
use super::session_id::parse_stored;
use super::{Store, StoreError, WireEntry};
use crate::domain::{PrincipalId, SessionId, StoredTool, now_ms};

/// Sessions: their rows, routes from chats to sessions, and their settings (model, title).
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Sessions: their rows, routes from chats to sessions, and their settings (model, title).
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { store: self }
    }
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionRow {
    pub id: SessionId,
    /// The escaped origin key of the chat where the session started.
    pub origin_key: String,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    /// Built once when the session started; read back verbatim every turn.
    pub system_prompt: String,
    pub model: String,
    #[sqlx(try_from = "ToolsetJson")]
    pub toolset: Vec<StoredTool>,
    pub title: Option<String>,
    /// The principal owning a direct-chat session; `None` for group chats.
    #[sqlx(rename = "principal_id")]
    pub principal: Option<PrincipalId>,
    #[sqlx(flatten)]
    pub totals: SessionTotals,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A session with what its next turn's wire view is built from.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub session: SessionRow,
    /// The main conversation's entries, raw (no compaction applied).
    pub entries: Vec<WireEntry>,
    pub compaction: Option<Compaction>,
}

/// Token and cost totals of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionTotals {
    #[sqlx(try_from = "i64")]
    pub input_tokens: u64,
    #[sqlx(try_from = "i64")]
    pub output_tokens: u64,
    #[sqlx(try_from = "i64")]
    pub cache_read_tokens: u64,
    #[sqlx(try_from = "i64")]
    pub cache_write_tokens: u64,
    #[sqlx(try_from = "i64")]
    pub cost_micros: u64,
}

/// What a new session starts with.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: SessionId,
    pub origin_key: String,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub system_prompt: String,
    pub model: String,
    pub toolset: Vec<StoredTool>,
    /// The principal owning a direct-chat session; `None` for group chats.
    pub principal: Option<PrincipalId>,
}

const SESSION_COLUMNS: &str = "id, origin_key, platform, account, chat_id, thread_id, \
    system_prompt, model, toolset, title, input_tokens, output_tokens, cache_read_tokens, \
    cache_write_tokens, cost_micros, created_at, updated_at, principal_id";

async fn insert_session(
    conn: &mut sqlx::AnyConnection,
    session: &NewSession,
) -> Result<(), StoreError> {
    let now = now_ms();
    let toolset = serde_json::to_string(&session.toolset)
        .map_err(|err| StoreError::Corrupt(err.to_string()))?;
    sqlx::query(
        "INSERT INTO sessions (id, origin_key, platform, account, chat_id, thread_id, \
         system_prompt, model, toolset, created_at, updated_at, principal_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(session.id.as_str())
    .bind(&session.origin_key)
    .bind(session.platform.as_str())
    .bind(session.account.as_str())
    .bind(session.chat_id.as_str())
    .bind(session.thread_id.as_ref().map(ThreadId::as_str))
    .bind(&session.system_prompt)
    .bind(&session.model)
    .bind(toolset)
    .bind(now)
    .bind(now)
    .bind(session.principal.map(PrincipalId::get))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn session_from_row(row: &AnyRow) -> Result<SessionRow, StoreError> {
    super::read(row)
}

impl Sessions<'_> {
    /// The session with this id.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn get(self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"
        ))
        .bind(id.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        row.map(|row| session_from_row(&row)).transpose()
    }

    /// The session with its wire view and latest compaction: all a turn
    /// reads before its first model call, in one query.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn view(self, id: &SessionId) -> Result<Option<SessionView>, StoreError> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS}, {} FROM sessions WHERE id = $1",
            conversation_columns(self.store.backend)
        );
        let Some(row) = sqlx::query(&sql)
            .bind(id.as_str())
            .fetch_optional(&mut *self.store.read_conn().await?)
            .await?
        else {
            return Ok(None);
        };
        let (entries, compaction) = conversation_from_row(&row)?;
        Ok(Some(SessionView {
            session: session_from_row(&row)?,
            entries,
            compaction,
        }))
    }

    /// The session a route currently points at.
    ///
    /// # Errors
    /// A database failure.
    pub async fn route(self, route_key: &str) -> Result<Option<SessionId>, StoreError> {
        let session =
            sqlx::query_scalar::<_, String>("SELECT session_id FROM routes WHERE route_key = $1")
                .bind(route_key)
                .fetch_optional(&mut *self.store.read_conn().await?)
                .await?;
        session.as_deref().map(parse_stored).transpose()
    }

    /// Points a route at a session (used by `/new`, `/resume`, and the
    /// terminal chat's `--session`).
    ///
    /// # Errors
    /// A database failure, or an unknown session (foreign key).
    pub async fn bind_route(
        self,
        route_key: &str,
        session_id: &SessionId,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO routes (route_key, session_id, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (route_key) DO UPDATE SET session_id = excluded.session_id, \
             updated_at = excluded.updated_at",
        )
        .bind(route_key)
        .bind(session_id.as_str())
        .bind(now_ms())
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(())
    }

    /// Creates a session and points the route at it, unless the route already
    /// points somewhere (a concurrent first message won the race): then the
    /// new session is not created and the existing id is returned.
    ///
    /// # Errors
    /// A database failure.
    pub async fn create_routed(
        self,
        route_key: &str,
        session: &NewSession,
    ) -> Result<SessionId, StoreError> {
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        insert_session(&mut tx, session).await?;
        let bound = sqlx::query_scalar::<_, String>(
            "INSERT INTO routes (route_key, session_id, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (route_key) DO NOTHING RETURNING session_id",
        )
        .bind(route_key)
        .bind(session.id.as_str())
        .bind(now_ms())
        .fetch_optional(&mut *tx)
        .await?;
        if bound.is_some() {
            tx.commit().await?;
            return Ok(session.id.clone());
        }
        tx.rollback().await?;
        self.route(route_key)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("route {route_key} vanished")))
    }

    /// Creates a session without a route (sub-sessions, tests).
    ///
    /// # Errors
    /// A database failure.
    pub async fn create(self, session: &NewSession) -> Result<(), StoreError> {
        let mut conn = self.store.conn().await?;
        insert_session(&mut conn, session).await
    }

    /// Switches a session's model (a new cache signature; the stored system
    /// prompt is kept).
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_model(self, id: &SessionId, model: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET model = $1, updated_at = $2 WHERE id = $3")
            .bind(model)
            .bind(now_ms())
            .bind(id.as_str())
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(())
    }

    /// The client's instructions in effect for the session (migration
    /// 0063), and whether any model call of the session was made: its
    /// system prompt has been sent.
    ///
    /// # Errors
    /// A database failure.
    pub async fn client_instructions(
        self,
        id: &SessionId,
    ) -> Result<(Option<String>, bool), StoreError> {
        let mut conn = self.store.read_conn().await?;
        let instructions: Option<Option<String>> =
            sqlx::query_scalar("SELECT client_instructions FROM sessions WHERE id = $1")
                .bind(id.as_str())
                .fetch_optional(&mut *conn)
                .await?;
        let called: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM usage WHERE session_id = $1 LIMIT 1")
                .bind(id.as_str())
                .fetch_optional(&mut *conn)
                .await?;
        Ok((instructions.flatten(), called.is_some()))
    }
}

impl super::Batch {
    /// Records the client's instructions now in effect for a session, and
    /// when `prompt` is given, its system prompt holding them.
    pub fn set_client_instructions(
        &mut self,
        id: &SessionId,
        instructions: &str,
        prompt: Option<&str>,
    ) {
        match prompt {
            Some(prompt) => self.push(
                "UPDATE sessions SET client_instructions = $1, system_prompt = $2 WHERE id = $3",
                vec![instructions.into(), prompt.into(), id.into()],
            ),
            None => self.push(
                "UPDATE sessions SET client_instructions = $1 WHERE id = $2",
                vec![instructions.into(), id.into()],
            ),
        }
    }
}
