//! The stored transcript (append-only messages with every internal field) and
//! the tool-call checkpoints.
//!
//! The stored transcript keeps what the wire never carries: reasoning, token
//! usage, latency, model, finish reason, request ids. [`Transcript::wire_history`]
//! reads only the wire columns, so none of it reaches a model.

use crate::domain::{
    ChatMessage, InboundId, MediaRef, Role, Scope, SessionId, ToolCall, ToolCallStatus, Usage,
    now_ms,
};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::inbound::{media_json, parse_media};
use super::session_id::session_id_from_row;
use super::{Arg, Backend, Batch, Store, StoreError, to_i64, to_u64};

/// The stored transcript: entries, the wire view, tool-call checkpoints, compactions and hidden exchanges.
#[derive(Clone, Copy)]
pub struct Transcript<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The stored transcript: entries, the wire view, tool-call checkpoints, compactions and hidden exchanges.
    pub fn transcript(&self) -> Transcript<'_> {
        Transcript { store: self }
    }
}

/// The internal fields of an entry, never sent to a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageMeta {
    pub reasoning: Option<String>,
    pub model: Option<String>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub latency_ms: Option<i64>,
    pub request_id: Option<String>,
}

/// An entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub session_id: SessionId,
    /// The inbound message whose task produced this entry.
    pub task_id: Option<InboundId>,
    /// `""` for the session's own conversation; a sub-agent's path otherwise.
    pub scope: Scope,
    pub role: Role,
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub is_error: bool,
    /// A user entry's files, or a tool result's, by blob hash.
    pub media: Vec<MediaRef>,
    pub meta: MessageMeta,
}

impl NewMessage {
    /// Builds the entry that a wire message came from.
    pub fn from_wire(
        session_id: &SessionId,
        task_id: Option<InboundId>,
        scope: &Scope,
        wire: ChatMessage,
    ) -> Self {
        let mut files = Vec::new();
        let (role, content, tool_calls, tool_call_id, is_error) = match wire {
            ChatMessage::User { content, media } => {
                files = media;
                (Role::User, Some(content), Vec::new(), None, false)
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => (Role::Assistant, content, tool_calls, None, false),
            ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
                media,
            } => {
                files = media;
                (
                    Role::Tool,
                    Some(content),
                    Vec::new(),
                    Some(tool_call_id),
                    is_error,
                )
            }
        };
        Self {
            session_id: session_id.clone(),
            task_id,
            scope: scope.clone(),
            role,
            content,
            tool_calls,
            tool_call_id,
            is_error,
            media: files,
            meta: MessageMeta::default(),
        }
    }

    #[must_use]
    pub fn with_meta(mut self, meta: MessageMeta) -> Self {
        self.meta = meta;
        self
    }
}

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub id: i64,
    pub message: NewMessage,
    pub created_at: i64,
}

pub(super) const MESSAGE_COLUMNS: &str = "id, session_id, task_id, scope, role, content, tool_calls, \
    tool_call_id, is_error, reasoning, model, finish_reason, input_tokens, output_tokens, \
    cache_read_tokens, cache_write_tokens, latency_ms, request_id, created_at, media";

/// The aggregate that gives a wire view as one JSON array of rows (id, task
/// id, role, content, tool calls, tool call id, is-error flag) over the
/// `messages` rows selected: sqlx hands rows over one at a time between
/// threads, and a long history would otherwise cost a wake-up per row on
/// every turn.
pub(super) fn wire_view_aggregate(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "json_group_array(json_array(id, task_id, role, content, tool_calls, \
             tool_call_id, is_error, media) ORDER BY id)"
        }
        Backend::Postgres => {
            "CAST(COALESCE(json_agg(json_build_array(id, task_id, role, content, \
             tool_calls, tool_call_id, is_error, media) ORDER BY id), '[]') AS TEXT)"
        }
    }
}

/// Reads what [`wire_view_aggregate`] gives.
pub(super) fn parse_wire_view(raw: &str) -> Result<Vec<WireEntry>, StoreError> {
    let rows: Vec<WireRow> = serde_json::from_str(raw)
        .map_err(|err| StoreError::Corrupt(format!("wire history: {err}")))?;
    rows.into_iter()
        .map(
            |(id, task_id, role, content, tool_calls, tool_call_id, is_error, media)| {
                let message = match super::stored("message role", &role)? {
                    Role::User => ChatMessage::User {
                        content: content.unwrap_or_default(),
                        media: parse_media(media)?,
                    },
                    Role::Assistant => ChatMessage::Assistant {
                        content,
                        tool_calls: parse_tool_calls(tool_calls)?,
                    },
                    Role::Tool => ChatMessage::Tool {
                        tool_call_id: tool_call_id.unwrap_or_default(),
                        content: content.unwrap_or_default(),
                        is_error: is_error != 0,
                        media: parse_media(media)?,
                    },
                };
                Ok(WireEntry {
                    id,
                    task_id: task_id.map(InboundId::new),
                    message,
                })
            },
        )
        .collect()
}

/// A wire-view row as the aggregate query gives it: id, task id, role,
/// content, tool calls (JSON text), tool call id, is-error flag, files
/// (JSON text).
type WireRow = (
    i64,
    Option<i64>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
);

/// One entry of the wire view, with the task that produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireEntry {
    pub id: i64,
    pub task_id: Option<InboundId>,
    pub message: ChatMessage,
}

/// The request id of call `index` of the round whose assistant entry is
/// `assistant_id`: what a tool receives, and what recovery looks up.
pub fn round_request_id(assistant_id: i64, index: usize) -> String {
    format!("{assistant_id}-{index}")
}

/// A round of tool calls about to run, named by the assistant entry written
/// with it.
#[derive(Debug, Clone, Copy)]
pub struct RoundStart<'a> {
    pub session_id: &'a SessionId,
    pub task_id: Option<InboundId>,
    pub scope: &'a Scope,
    pub calls: &'a [ToolCall],
    /// Indices of the calls that wait for a person's decision instead of
    /// running (checkpointed `awaiting`).
    pub awaiting: &'a [usize],
    /// Indices of the calls of the API client's own tools, handed to the
    /// client (checkpointed `client`).
    pub client: &'a [usize],
}

/// A tool call about to run.
#[derive(Debug, Clone, Copy)]
pub struct ToolCheckpoint<'a> {
    pub request_id: &'a str,
    pub session_id: &'a SessionId,
    pub task_id: Option<InboundId>,
    pub scope: &'a Scope,
    pub call_id: &'a str,
    pub name: &'a str,
    pub arguments: &'a str,
}

impl Batch {
    /// Appends a transcript entry; its id is among the batch's rows.
    ///
    /// # Errors
    /// Tool calls that cannot be serialised (never, for parsed calls).
    pub fn append_message(&mut self, message: &NewMessage) -> Result<(), StoreError> {
        let tool_calls = if message.tool_calls.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&message.tool_calls)
                    .map_err(|err| StoreError::Corrupt(err.to_string()))?,
            )
        };
        let usage = message.meta.usage;
        let media = media_json(&message.media)?;
        self.push_returning(
            "INSERT INTO messages (session_id, task_id, scope, role, content, tool_calls, \
             tool_call_id, is_error, reasoning, model, finish_reason, input_tokens, output_tokens, \
             cache_read_tokens, cache_write_tokens, latency_ms, request_id, created_at, media) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
             $19) \
             RETURNING id",
            vec![
                (&message.session_id).into(),
                message.task_id.into(),
                message.scope.as_str().into(),
                message.role.as_str().into(),
                message.content.as_deref().into(),
                tool_calls.into(),
                message.tool_call_id.as_deref().into(),
                i64::from(message.is_error).into(),
                message.meta.reasoning.as_deref().into(),
                message.meta.model.as_deref().into(),
                message.meta.finish_reason.as_deref().into(),
                usage.map(|u| to_i64(u.input_tokens)).into(),
                usage.map(|u| to_i64(u.output_tokens)).into(),
                usage.map(|u| to_i64(u.cache_read_tokens)).into(),
                usage.map(|u| to_i64(u.cache_write_tokens)).into(),
                message.meta.latency_ms.into(),
                message.meta.request_id.as_deref().into(),
                Arg::from(now_ms()),
                media.into(),
            ],
        );
        Ok(())
    }

    /// Records a tool call's result (status `done`, or `failed` when the
    /// result is an error).
    pub fn finish_tool_call(&mut self, request_id: &str, result: &str, failed: bool) {
        self.finish_tool_call_with_files(request_id, result, failed, None);
    }

    /// Records a tool call's result with the files it returned (`media`,
    /// their [`MediaRef`]s as JSON, see [`tool_media_json`]), so that a
    /// result reused after a restart still carries them.
    pub fn finish_tool_call_with_files(
        &mut self,
        request_id: &str,
        result: &str,
        failed: bool,
        media: Option<String>,
    ) {
        self.push(
            "UPDATE tool_calls SET status = $1, result = $2, finished_at = $3, media = $5 \
             WHERE request_id = $4",
            vec![
                if failed { "failed" } else { "done" }.into(),
                result.into(),
                Arg::from(now_ms()),
                request_id.into(),
                media.as_deref().into(),
            ],
        );
    }

    /// Records a round's tool calls as about to run (status `running`), in
    /// the write that appends the round's assistant entry: each request id
    /// is [`round_request_id`] of that entry, read back inside the
    /// transaction as the newest entry of the session's scope (one agent
    /// loop writes a scope at a time), so the round costs no extra commit.
    /// Push it after the assistant entry.
    pub fn start_round(&mut self, round: &RoundStart<'_>) {
        for (index, call) in round.calls.iter().enumerate() {
            let status = if round.awaiting.contains(&index) {
                ToolCallStatus::Awaiting
            } else if round.client.contains(&index) {
                ToolCallStatus::Client
            } else {
                ToolCallStatus::Running
            };
            self.push(
                "INSERT INTO tool_calls (request_id, session_id, task_id, scope, call_id, name, \
                 arguments, status, started_at) \
                 SELECT CAST(MAX(id) AS TEXT) || $1, $2, $3, $4, $5, $6, $7, $9, $8 \
                 FROM messages WHERE session_id = $2 AND scope = $4",
                vec![
                    format!("-{index}").into(),
                    round.session_id.into(),
                    round.task_id.into(),
                    round.scope.as_str().into(),
                    call.id.as_str().into(),
                    call.name.as_str().into(),
                    call.arguments.as_str().into(),
                    Arg::from(now_ms()),
                    status.as_str().into(),
                ],
            );
        }
    }

    /// Marks a checkpointed call as waiting for a person's decision (a
    /// call in doubt after a crash).
    pub fn await_tool_call(&mut self, request_id: &str) {
        self.push(
            format!(
                "UPDATE tool_calls SET status = '{}' WHERE request_id = $1",
                ToolCallStatus::Awaiting
            ),
            vec![request_id.into()],
        );
    }

    /// Records that a tool call is about to run (status `running`).
    pub fn start_tool_call(&mut self, checkpoint: &ToolCheckpoint<'_>) {
        self.push(
            "INSERT INTO tool_calls (request_id, session_id, task_id, scope, call_id, name, \
             arguments, status, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8) \
             ON CONFLICT (request_id) DO UPDATE SET status = 'running', started_at = excluded.started_at",
            vec![
                checkpoint.request_id.into(),
                checkpoint.session_id.into(),
                checkpoint.task_id.into(),
                checkpoint.scope.as_str().into(),
                checkpoint.call_id.into(),
                checkpoint.name.into(),
                checkpoint.arguments.into(),
                Arg::from(now_ms()),
            ],
        );
    }
}

fn parse_tool_calls(raw: Option<String>) -> Result<Vec<ToolCall>, StoreError> {
    match raw {
        Some(raw) => serde_json::from_str(&raw)
            .map_err(|err| StoreError::Corrupt(format!("message tool calls: {err}"))),
        None => Ok(Vec::new()),
    }
}

pub(super) fn message_from_row(row: &AnyRow) -> Result<StoredMessage, StoreError> {
    let role: String = row.try_get("role")?;
    let tool_calls = parse_tool_calls(row.try_get("tool_calls")?)?;
    let input: Option<i64> = row.try_get("input_tokens")?;
    let usage = match input {
        Some(input) => Some(Usage {
            input_tokens: to_u64(input),
            output_tokens: to_u64(row.try_get::<Option<i64>, _>("output_tokens")?.unwrap_or(0)),
            cache_read_tokens: to_u64(
                row.try_get::<Option<i64>, _>("cache_read_tokens")?
                    .unwrap_or(0),
            ),
            cache_write_tokens: to_u64(
                row.try_get::<Option<i64>, _>("cache_write_tokens")?
                    .unwrap_or(0),
            ),
            cache_write_1h_tokens: 0,
        }),
        None => None,
    };
    let is_error: i64 = row.try_get("is_error")?;
    Ok(StoredMessage {
        id: row.try_get("id")?,
        message: NewMessage {
            session_id: session_id_from_row(row, "session_id")?,
            task_id: row.try_get("task_id")?,
            scope: Scope::stored(row.try_get("scope")?),
            role: super::stored("message role", &role)?,
            content: row.try_get("content")?,
            tool_calls,
            tool_call_id: row.try_get("tool_call_id")?,
            is_error: is_error != 0,
            media: parse_media(row.try_get("media")?)?,
            meta: MessageMeta {
                reasoning: row.try_get("reasoning")?,
                model: row.try_get("model")?,
                finish_reason: row.try_get("finish_reason")?,
                usage,
                latency_ms: row.try_get("latency_ms")?,
                request_id: row.try_get("request_id")?,
            },
        },
        created_at: row.try_get("created_at")?,
    })
}

impl Transcript<'_> {
    /// A session's transcript in one scope, oldest first.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn history(
        self,
        session_id: &SessionId,
        scope: &Scope,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND scope = $2 ORDER BY id"
        ))
        .bind(session_id.as_str())
        .bind(scope)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    /// A session's conversation in one scope as the model sees it, oldest
    /// first, with each entry's task id; entries hidden by `/undo` or
    /// `/retry` are left out. Reads only the wire columns: this
    /// runs on every turn.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn wire_history(
        self,
        session_id: &SessionId,
        scope: &Scope,
    ) -> Result<Vec<WireEntry>, StoreError> {
        let sql = format!(
            "SELECT {} FROM messages WHERE session_id = $1 AND scope = $2 AND hidden = 0",
            wire_view_aggregate(self.store.backend)
        );
        let raw = sqlx::query_scalar::<_, String>(&sql)
            .bind(session_id.as_str())
            .bind(scope)
            .fetch_one(&mut *self.store.read_conn().await?)
            .await?;
        parse_wire_view(&raw)
    }

    /// Records that a tool call is about to run (status `running`).
    ///
    /// # Errors
    /// A database failure.
    pub async fn start_tool_call(self, checkpoint: &ToolCheckpoint<'_>) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.start_tool_call(checkpoint);
        self.store.write(batch).await?;
        Ok(())
    }

    /// Records a tool call's result (status `done`, or `failed` when the
    /// result is an error).
    ///
    /// # Errors
    /// A database failure.
    pub async fn finish_tool_call(
        self,
        request_id: &str,
        result: &str,
        failed: bool,
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.finish_tool_call(request_id, result, failed);
        self.store.write(batch).await?;
        Ok(())
    }

    /// A tool call checkpoint's status, result and the files the result
    /// carries, if recorded.
    ///
    /// # Errors
    /// A database failure, or files that do not parse.
    pub async fn tool_call_outcome(
        self,
        request_id: &str,
    ) -> Result<Option<ToolCallOutcome>, StoreError> {
        let row = sqlx::query_as::<_, (String, Option<String>, Option<String>)>(
            "SELECT status, result, media FROM tool_calls WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&mut *self.store.conn().await?)
        .await?;
        row.map(|(status, result, media)| {
            Ok(ToolCallOutcome {
                status,
                result,
                media: parse_media(media)?,
            })
        })
        .transpose()
    }

    /// The calls of the API client's own tools that the session's
    /// conversation handed to the client and has no result for yet, in
    /// call order.
    ///
    /// # Errors
    /// A database failure.
    pub async fn client_calls(self, session_id: &SessionId) -> Result<Vec<ToolCall>, StoreError> {
        let rows = sqlx::query_as::<_, (String, String, String, String)>(
            "SELECT request_id, call_id, name, arguments FROM tool_calls \
             WHERE session_id = $1 AND scope = '' AND status = $2",
        )
        .bind(session_id.as_str())
        .bind(ToolCallStatus::Client.as_str())
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        let mut calls: Vec<((i64, i64), ToolCall)> = rows
            .into_iter()
            .map(|(request_id, id, name, arguments)| {
                (
                    round_position(&request_id),
                    ToolCall {
                        id,
                        name,
                        arguments,
                    },
                )
            })
            .collect();
        calls.sort_by_key(|(position, _)| *position);
        Ok(calls.into_iter().map(|(_, call)| call).collect())
    }
}

/// Where a round request id (`<entry id>-<index>`) stands: its entry, then
/// its index.
fn round_position(request_id: &str) -> (i64, i64) {
    let (entry, index) = request_id.rsplit_once('-').unwrap_or((request_id, ""));
    (entry.parse().unwrap_or(0), index.parse().unwrap_or(0))
}

/// A checkpointed tool call as recovery reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallOutcome {
    /// `running`, `done`, `failed`, `awaiting`, …
    pub status: String,
    /// The result text, once finished.
    pub result: Option<String>,
    /// The files the result carries.
    pub media: Vec<MediaRef>,
}

/// The files of a tool result as a checkpoint keeps them (`NULL` for none).
///
/// # Errors
/// A file that cannot be serialised (never).
pub fn tool_media_json(media: &[MediaRef]) -> Result<Option<String>, StoreError> {
    media_json(media)
}
