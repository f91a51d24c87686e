//! Compactions: a summary standing in for a range of older messages in the
//! wire view. Nothing is deleted; the latest compaction of a session decides
//! its wire view.

use super::{Arg, Batch, Store, StoreError, now_ms, to_u64};

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

impl Store {
    /// The session's latest compaction, if any.
    ///
    /// # Errors
    /// A database failure.
    pub async fn latest_compaction(
        &self,
        session_id: &str,
    ) -> Result<Option<Compaction>, StoreError> {
        let row = sqlx::query_as::<_, (i64, i64, Option<i64>, String)>(
            "SELECT pinned_id, through_id, kept_id, summary FROM compactions \
             WHERE session_id = $1 ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&mut *self.read_conn().await?)
        .await?;
        Ok(
            row.map(|(pinned_id, through_id, kept_id, summary)| Compaction {
                pinned_id,
                through_id,
                kept_id,
                summary,
            }),
        )
    }

    /// Input tokens per request character in the session's latest model
    /// call, when both were recorded.
    ///
    /// # Errors
    /// A database failure.
    pub async fn tokens_per_char(&self, session_id: &str) -> Result<Option<f64>, StoreError> {
        let row = sqlx::query_as::<_, (i64, Option<i64>)>(
            "SELECT input_tokens, request_chars FROM usage WHERE session_id = $1 \
             AND request_chars IS NOT NULL AND status = 'done' ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id)
        .fetch_optional(&mut *self.read_conn().await?)
        .await?;
        Ok(row.and_then(|(tokens, chars)| tokens_per_char(to_u64(tokens), chars?)))
    }
}

/// Input tokens per request character of one model call, when both counts
/// are known and positive.
pub fn tokens_per_char(input_tokens: u64, request_chars: i64) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    (input_tokens > 0 && request_chars > 0).then(|| input_tokens as f64 / request_chars as f64)
}

impl Batch {
    /// Records a compaction.
    pub fn record_compaction(&mut self, session_id: &str, compaction: &Compaction) {
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
