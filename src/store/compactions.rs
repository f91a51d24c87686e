//! Compactions: a summary standing in for a range of older messages in the
//! wire view. Nothing is deleted; the latest compaction of a session decides
//! its wire view.

use super::messages::Transcript;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::messages::{parse_wire_view, wire_view_aggregate};
use super::{Arg, Backend, Batch, StoreError, WireEntry, to_u64};
use crate::domain::{SessionId, now_ms};

/// A summary and the range of messages it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub pinned_id: i64,
    pub through_id: i64,
    /// An entry inside the range shown verbatim anyway: the running task's
    /// goal, when a long task is compacted mid-way.
    pub kept_id: Option<i64>,
    pub summary: String,
}

/// Two columns, `view` and `compaction`, giving the main conversation of
/// session `$1` and its latest compaction (see [`conversation_from_row`]).
pub(super) fn conversation_columns(backend: Backend) -> String {
    let compaction = match backend {
        Backend::Sqlite => "json_array(pinned_id, through_id, kept_id, summary)",
        Backend::Postgres => {
            "CAST(json_build_array(pinned_id, through_id, kept_id, summary) AS TEXT)"
        }
    };
    format!(
        "(SELECT {} FROM messages WHERE session_id = $1 AND scope = '' AND hidden = 0) AS view, \
         (SELECT {compaction} FROM compactions WHERE session_id = $1 ORDER BY id DESC LIMIT 1) \
         AS compaction",
        wire_view_aggregate(backend)
    )
}

/// Reads the columns [`conversation_columns`] gives.
pub(super) fn conversation_from_row(
    row: &AnyRow,
) -> Result<(Vec<WireEntry>, Option<Compaction>), StoreError> {
    let view: String = row.try_get("view")?;
    let compaction = row
        .try_get::<Option<String>, _>("compaction")?
        .map(|raw| {
            serde_json::from_str::<(i64, i64, Option<i64>, String)>(&raw)
                .map_err(|err| StoreError::Corrupt(format!("compaction: {err}")))
        })
        .transpose()?
        .map(|(pinned_id, through_id, kept_id, summary)| Compaction {
            pinned_id,
            through_id,
            kept_id,
            summary,
        });
    Ok((parse_wire_view(&view)?, compaction))
}

/// Input tokens per request character of one model call, when both counts
/// are known and positive.
pub fn tokens_per_char(input_tokens: u64, request_chars: i64) -> Option<f64> {
    // Counts are far below 2^52: the casts are exact.
    (input_tokens > 0 && request_chars > 0).then(|| input_tokens as f64 / request_chars as f64)
}

impl Batch {
    /// Records a compaction.
    pub fn record_compaction(&mut self, session_id: &SessionId, compaction: &Compaction) {
        self.push(
            "INSERT INTO compactions (session_id, pinned_id, through_id, summary, created_at, \
             kept_id) VALUES ($1, $2, $3, $4, $5, $6)",
            vec![
                session_id.into(),
                Arg::from(compaction.pinned_id),
                Arg::from(compaction.through_id),
                compaction.summary.as_str().into(),
                Arg::from(now_ms()),
                compaction.kept_id.into(),
            ],
        );
    }
}

impl Transcript<'_> {
    /// The session's main conversation, raw (every entry, hidden ones
    /// aside), with its latest compaction: what its wire view is built from,
    /// in one query.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn conversation(
        self,
        session_id: &SessionId,
    ) -> Result<(Vec<WireEntry>, Option<Compaction>), StoreError> {
        let sql = format!("SELECT {}", conversation_columns(self.store.backend));
        let row = sqlx::query(&sql)
            .bind(session_id.as_str())
            .fetch_one(&mut *self.store.read_conn().await?)
            .await?;
        conversation_from_row(&row)
    }

    /// Input tokens per request character in the session's latest model
    /// call, when both were recorded.
    ///
    /// # Errors
    /// A database failure.
    pub async fn tokens_per_char(self, session_id: &SessionId) -> Result<Option<f64>, StoreError> {
        let row = sqlx::query_as::<_, (i64, Option<i64>)>(
            "SELECT input_tokens, request_chars FROM usage WHERE session_id = $1 \
             AND request_chars IS NOT NULL AND status = 'done' ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(row.and_then(|(tokens, chars)| tokens_per_char(to_u64(tokens), chars?)))
    }
}
