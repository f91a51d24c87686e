//! Token usage per model call, and the running totals on each session.

use super::{Store, StoreError, now_ms, to_i64, to_u64};
use crate::llm::Usage;

/// One model call's usage.
#[derive(Debug, Clone)]
pub struct UsageRecord {
    pub session_id: String,
    pub task_id: Option<i64>,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    pub latency_ms: i64,
    /// Characters of the request's system prompt and messages.
    pub request_chars: Option<i64>,
}

/// Usage added up over some calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSummary {
    pub calls: u64,
    pub usage: Usage,
}

/// `COUNT(*)` and the four token `SUM`s, as a query returns them.
pub(crate) type UsageSums = (i64, i64, i64, i64, i64);

impl UsageSummary {
    pub(crate) fn from_sums((calls, input, output, read, write): UsageSums) -> Self {
        Self {
            calls: to_u64(calls),
            usage: Usage {
                input_tokens: to_u64(input),
                output_tokens: to_u64(output),
                cache_read_tokens: to_u64(read),
                cache_write_tokens: to_u64(write),
            },
        }
    }
}

impl Store {
    /// Records a model call's usage. The session's totals are brought up to
    /// date when the turn ends (`finish_turn`), in the same transaction.
    ///
    /// # Errors
    /// A database failure.
    pub async fn record_usage(&self, record: &UsageRecord) -> Result<(), StoreError> {
        let usage = record.usage;
        sqlx::query(
            "INSERT INTO usage (session_id, task_id, provider, model, input_tokens, output_tokens, \
             cache_read_tokens, cache_write_tokens, latency_ms, created_at, request_chars) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&record.session_id)
        .bind(record.task_id)
        .bind(&record.provider)
        .bind(&record.model)
        .bind(to_i64(usage.input_tokens))
        .bind(to_i64(usage.output_tokens))
        .bind(to_i64(usage.cache_read_tokens))
        .bind(to_i64(usage.cache_write_tokens))
        .bind(record.latency_ms)
        .bind(now_ms())
        .bind(record.request_chars)
        .execute(&mut *self.conn().await?)
        .await?;
        Ok(())
    }

    /// The usage of one task (all model calls made for one user message,
    /// sub-agents included).
    ///
    /// # Errors
    /// A database failure.
    pub async fn task_usage(&self, task_id: i64) -> Result<UsageSummary, StoreError> {
        let sums = sqlx::query_as::<_, UsageSums>(
            "SELECT COUNT(*), CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(cache_read_tokens), 0) AS BIGINT), \
             CAST(COALESCE(SUM(cache_write_tokens), 0) AS BIGINT) FROM usage WHERE task_id = $1",
        )
        .bind(task_id)
        .fetch_one(&mut *self.conn().await?)
        .await?;
        Ok(UsageSummary::from_sums(sums))
    }
}

/// Usage of one session on one day with one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    pub session_id: String,
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub model: String,
    pub summary: UsageSummary,
}

impl Store {
    /// Usage per session, day and model, oldest day first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn usage_report(&self) -> Result<Vec<UsageRow>, StoreError> {
        let rows = sqlx::query_as::<_, (String, i64, String, i64, i64, i64, i64, i64)>(
            "SELECT session_id, CAST(created_at / 86400000 AS BIGINT) AS day, model, COUNT(*), \
             CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
             CAST(SUM(cache_read_tokens) AS BIGINT), CAST(SUM(cache_write_tokens) AS BIGINT) \
             FROM usage GROUP BY session_id, CAST(created_at / 86400000 AS BIGINT), model \
             ORDER BY day, session_id, model",
        )
        .fetch_all(&mut *self.conn().await?)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(session_id, day, model, calls, input, output, read, write)| UsageRow {
                    session_id,
                    day,
                    model,
                    summary: UsageSummary::from_sums((calls, input, output, read, write)),
                },
            )
            .collect())
    }
}
