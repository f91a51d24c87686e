//! Token usage per model call, and the running totals on each session.

use crate::domain::{InboundId, PrincipalId, Scope, SessionId, TaskId, Usage, now_ms};

use super::session_id::parse_stored;
use super::{Arg, Batch, Store, StoreError, to_i64, to_u64};

/// The call count and token sums of the usage rows `u` of a query, in
/// [`UsageSums`]' order: one list for every query that adds usage up, so
/// none forgets a kind of token (an hour's cache writes are priced apart).
macro_rules! usage_sums {
    () => {
        "COUNT(u.id), CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(u.cache_read_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(u.cache_write_1h_tokens), 0) AS BIGINT)"
    };
}
pub(crate) use usage_sums;

/// The usage log: model calls as recorded, spend per principal, per task, and the usage report.
#[derive(Clone, Copy)]
pub struct UsageLog<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The usage log: model calls as recorded, spend per principal, per task, and the usage report.
    pub fn usage(&self) -> UsageLog<'_> {
        UsageLog { store: self }
    }
}

/// A model call about to be made: written `running` before the request goes
/// out, so a crash mid-call leaves a trace.
#[derive(Debug, Clone)]
pub struct ModelCallStart<'a> {
    /// Unique per call; also the key a retry after recovery would reuse.
    pub request_id: &'a str,
    pub session_id: &'a SessionId,
    pub task_id: Option<InboundId>,
    /// `""` for the session's own conversation; a sub-agent's path otherwise.
    pub scope: &'a Scope,
    pub principal_id: Option<PrincipalId>,
    pub provider: &'a str,
    pub model: &'a str,
    /// Characters of the request's system prompt and messages.
    pub request_chars: Option<i64>,
}

/// How a recorded model call ended.
#[derive(Debug, Clone)]
pub enum ModelCallEnd<'a> {
    Done {
        /// The model that answered (a provider may name a dated version).
        model: &'a str,
        usage: Usage,
        /// Estimated cost in billionths of a dollar, when the model has a
        /// price.
        cost_nanousd: Option<i64>,
        /// Why it read less from the prompt cache than it could, in words.
        cache_miss: Option<&'a str>,
        /// Its request's fingerprint, which the next call of its
        /// conversation is compared with.
        fingerprint: Option<&'a str>,
    },
    Failed {
        /// What went wrong, without secrets (provider errors are scrubbed).
        error: &'a str,
        /// For a call cut short after the request went out (`/stop`, a
        /// timeout): the input the provider billed, estimated from the
        /// request's size since no usage came back.
        billed: Option<EstimatedInput>,
    },
}

/// The input a call cut short was billed, estimated (the row is marked
/// `input_estimated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EstimatedInput {
    pub input_tokens: u64,
    /// Billionths of a dollar, when the model has a price.
    pub cost_nanousd: Option<i64>,
}

impl Batch {
    /// Records a model call as `running`; its row id is among the batch's
    /// rows.
    pub fn start_model_call(&mut self, call: &ModelCallStart<'_>) {
        let now = now_ms();
        self.push_returning(
            "INSERT INTO usage (session_id, task_id, provider, model, input_tokens, output_tokens, \
             cache_read_tokens, cache_write_tokens, latency_ms, created_at, request_chars, status, \
             request_id, scope, started_at, principal_id) \
             VALUES ($1, $2, $3, $4, 0, 0, 0, 0, 0, $5, $6, 'running', $7, $8, $5, $9) RETURNING id",
            vec![
                call.session_id.into(),
                call.task_id.into(),
                call.provider.into(),
                call.model.into(),
                Arg::from(now),
                call.request_chars.into(),
                call.request_id.into(),
                call.scope.as_str().into(),
                call.principal_id.into(),
            ],
        );
    }

    /// Records how a model call ended: its tokens, latency and cost, or its
    /// error. The session's totals catch up when the turn ends
    /// (`finish_turn`).
    pub fn finish_model_call(&mut self, id: i64, end: &ModelCallEnd<'_>) {
        let now = now_ms();
        match end {
            ModelCallEnd::Done {
                model,
                usage,
                cost_nanousd,
                cache_miss,
                fingerprint,
            } => self.push(
                "UPDATE usage SET status = 'done', model = $1, input_tokens = $2, \
                 output_tokens = $3, cache_read_tokens = $4, cache_write_tokens = $5, \
                 cost_nanousd = $6, finished_at = $7, latency_ms = $7 - started_at, \
                 cache_write_1h_tokens = $9, cache_miss = $10, prompt_fingerprint = $11 \
                 WHERE id = $8",
                vec![
                    (*model).into(),
                    Arg::from(to_i64(usage.input_tokens)),
                    Arg::from(to_i64(usage.output_tokens)),
                    Arg::from(to_i64(usage.cache_read_tokens)),
                    Arg::from(to_i64(usage.cache_write_tokens)),
                    (*cost_nanousd).into(),
                    Arg::from(now),
                    Arg::from(id),
                    Arg::from(to_i64(usage.cache_write_1h_tokens)),
                    (*cache_miss).into(),
                    (*fingerprint).into(),
                ],
            ),
            ModelCallEnd::Failed { error, billed } => self.push(
                "UPDATE usage SET status = 'failed', error = $1, finished_at = $2, \
                 latency_ms = $2 - started_at, input_tokens = $4, input_estimated = $5, \
                 cost_nanousd = $6 WHERE id = $3",
                vec![
                    (*error).into(),
                    Arg::from(now),
                    Arg::from(id),
                    Arg::from(to_i64(billed.map_or(0, |billed| billed.input_tokens))),
                    Arg::from(i64::from(billed.is_some())),
                    billed.and_then(|billed| billed.cost_nanousd).into(),
                ],
            ),
        }
    }
}

/// Usage added up over some calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageSummary {
    pub calls: u64,
    pub usage: Usage,
}

/// A row of the usage report as the query returns it: principal,
/// session, day, model, scheduled task, then [`UsageSums`].
type UsageReportRow = (
    Option<i64>,
    String,
    i64,
    String,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
);

/// The call count and the token sums ([`usage_sums`]), as a query returns
/// them.
pub(crate) type UsageSums = (i64, i64, i64, i64, i64, i64);

impl UsageSummary {
    pub(crate) fn from_sums((calls, input, output, read, write, write_1h): UsageSums) -> Self {
        Self {
            calls: to_u64(calls),
            usage: Usage {
                input_tokens: to_u64(input),
                output_tokens: to_u64(output),
                cache_read_tokens: to_u64(read),
                cache_write_tokens: to_u64(write),
                cache_write_1h_tokens: to_u64(write_1h),
            },
        }
    }
}

/// Usage of one principal in one session on one day with one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// Who sent the messages (`None` for usage recorded before principals).
    pub principal_id: Option<PrincipalId>,
    pub session_id: SessionId,
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub model: String,
    /// The scheduled task whose runs made the calls (`None`: messages
    /// people sent).
    pub task_id: Option<TaskId>,
    pub summary: UsageSummary,
}

impl UsageLog<'_> {
    /// Records how a model call ended.
    ///
    /// # Errors
    /// A database failure.
    pub async fn finish_model_call(
        self,
        id: i64,
        end: &ModelCallEnd<'_>,
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.finish_model_call(id, end);
        self.store.write(batch).await?;
        Ok(())
    }

    /// Marks the model calls a crash left `running` in one task as failed
    /// (called when the task resumes, under its session's lease), each with
    /// the input its provider billed as `estimate` gives it from the model
    /// and the request's characters (`None` when they were not counted).
    /// Returns how many there were.
    ///
    /// # Errors
    /// A database failure.
    pub async fn fail_interrupted_model_calls(
        self,
        task_id: InboundId,
        estimate: impl Fn(&str, Option<i64>) -> Option<EstimatedInput>,
    ) -> Result<u64, StoreError> {
        let running = sqlx::query_as::<_, (i64, String, Option<i64>)>(
            "SELECT id, model, request_chars FROM usage WHERE task_id = $1 AND status = 'running'",
        )
        .bind(task_id)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        // A batch, so that a fenced store writes it only under its lease.
        let mut batch = Batch::new();
        for (id, model, chars) in &running {
            let end = ModelCallEnd::Failed {
                error: "interrupted by a restart",
                billed: estimate(model, *chars),
            };
            batch.finish_model_call(*id, &end);
        }
        if !running.is_empty() {
            self.store.write(batch).await?;
        }
        Ok(to_u64(i64::try_from(running.len()).unwrap_or(i64::MAX)))
    }

    /// What a principal's model calls since `since_ms` cost, in billionths
    /// of a dollar (calls without a price count as free).
    ///
    /// # Errors
    /// A database failure.
    pub async fn spend_since(
        self,
        principal_id: PrincipalId,
        since_ms: i64,
    ) -> Result<i64, StoreError> {
        let spent = sqlx::query_scalar::<_, i64>(
            "SELECT CAST(COALESCE(SUM(cost_nanousd), 0) AS BIGINT) FROM usage \
             WHERE principal_id = $1 AND created_at >= $2",
        )
        .bind(principal_id)
        .bind(since_ms)
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(spent)
    }

    /// The usage of one task (all model calls made for one user message,
    /// sub-agents included).
    ///
    /// # Errors
    /// A database failure.
    pub async fn task_usage(self, task_id: InboundId) -> Result<UsageSummary, StoreError> {
        let sums = sqlx::query_as::<_, UsageSums>(concat!(
            "SELECT ",
            usage_sums!(),
            " FROM usage u WHERE u.task_id = $1"
        ))
        .bind(task_id)
        .fetch_one(&mut *self.store.read_conn().await?)
        .await?;
        Ok(UsageSummary::from_sums(sums))
    }
    /// The last answered call of the conversation `scope` of `session`
    /// that kept its request's fingerprint: the fingerprint, the input it
    /// was billed, and when it started (Unix milliseconds).
    ///
    /// # Errors
    /// A database failure.
    pub async fn last_fingerprint(
        self,
        session: &SessionId,
        scope: &Scope,
    ) -> Result<Option<(String, u64, i64)>, StoreError> {
        let row = sqlx::query_as::<_, (String, i64, i64)>(
            "SELECT prompt_fingerprint, input_tokens, started_at FROM usage \
             WHERE session_id = $1 AND scope = $2 AND status = 'done' \
             AND prompt_fingerprint IS NOT NULL ORDER BY id DESC LIMIT 1",
        )
        .bind(session.as_str())
        .bind(scope.as_str())
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(row.map(|(text, input, at)| (text, to_u64(input), at)))
    }

    /// Usage per principal, session, day and model, oldest day first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn report(self) -> Result<Vec<UsageRow>, StoreError> {
        self.store.usage().report_page(i64::MAX, 0).await
    }

    /// A page of [`UsageLog::report`]: `limit` rows after skipping
    /// `offset`.
    ///
    /// # Errors
    /// A database failure.
    pub async fn report_page(self, limit: i64, offset: i64) -> Result<Vec<UsageRow>, StoreError> {
        let rows = sqlx::query_as::<_, UsageReportRow>(concat!(
            "SELECT COALESCE(u.principal_id, s.principal_id), u.session_id, \
             CAST(u.created_at / 86400000 AS BIGINT) AS day, u.model, r.task_id, ",
            usage_sums!(),
            " FROM usage u JOIN sessions s ON s.id = u.session_id \
             LEFT JOIN inbound i ON i.id = u.task_id \
             LEFT JOIN task_runs r ON r.id = i.task_run_id \
             GROUP BY COALESCE(u.principal_id, s.principal_id), u.session_id, \
             CAST(u.created_at / 86400000 AS BIGINT), u.model, r.task_id \
             ORDER BY day, 1, u.session_id, u.model, r.task_id LIMIT $1 OFFSET $2"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.into_iter()
            .map(
                |(
                    principal_id,
                    session_id,
                    day,
                    model,
                    task_id,
                    calls,
                    input,
                    output,
                    read,
                    write,
                    hour,
                )| {
                    Ok(UsageRow {
                        principal_id: principal_id.map(PrincipalId::new),
                        session_id: parse_stored(&session_id)?,
                        day,
                        model,
                        task_id: task_id.map(TaskId::new),
                        summary: UsageSummary::from_sums((calls, input, output, read, write, hour)),
                    })
                },
            )
            .collect()
    }
}
