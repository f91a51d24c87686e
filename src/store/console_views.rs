//! What the operators' web console reads: turn counts
//! and latencies, usage grouped by day, model or principal, limit hits,
//! conversations found by platform, principal, title or text, a
//! conversation's turns, messages, compactions and approvals (the audit of a
//! person in the loop), and the principals with their identities and
//! today's spend. Read only, every list paginated.

use crate::domain::{InboundId, InboundStatus, Outcome, PrincipalId, SessionId};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::session_id::parse_stored;
use super::usage::UsageSums;
use super::{ApprovalRow, Identity, Store, StoreError, UsageSummary};

/// What the web console reads.
#[derive(Clone, Copy)]
pub struct ConsoleViews<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// What the web console reads.
    pub fn console(&self) -> ConsoleViews<'_> {
        ConsoleViews { store: self }
    }
}

/// An approval's columns, in [`ApprovalRow`]'s order.
const APPROVAL_COLUMNS: &str = "id, nonce, session_id, inbound_id, request_id, call_id, kind, \
    tool, arguments, arguments_sha, choices, principal_id, platform, account, chat_id, thread_id, \
    sender_id, approver, status, answer, decided_by, decided_via, created_at, expires_at, \
    decided_at";

/// Most turn latencies read for the percentiles.
const MAX_LATENCIES: i64 = 100_000;

/// A finished turn: a message that got a turn (not a command, not merged
/// into an earlier one) and ended.
fn finished_turn(alias: &str) -> String {
    format!(
        "{alias}.status IN ('{done}', '{failed}') AND {alias}.finished_at IS NOT NULL \
         AND ({alias}.outcome IS NULL OR {alias}.outcome <> '{merged}')",
        done = InboundStatus::Done,
        failed = InboundStatus::Failed,
        merged = Outcome::Merged,
    )
}

/// What usage is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageKey {
    /// Days since the Unix epoch (UTC), as text.
    Day,
    /// The principal id as text, `-` for none.
    Principal,
    /// The model.
    Model,
}

/// Usage of one group with one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageGroup {
    pub key: String,
    pub model: String,
    pub summary: UsageSummary,
}

/// A conversation as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    pub id: SessionId,
    pub platform: String,
    pub chat_id: String,
    pub principal_id: Option<PrincipalId>,
    pub title: Option<String>,
    /// The first user message, for sessions without a title.
    pub first_text: Option<String>,
    pub model: String,
    pub updated_at: i64,
}

/// What the conversation list is narrowed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub platform: Option<String>,
    pub principal_id: Option<PrincipalId>,
    /// Found in the title or any message (case-insensitive).
    pub text: Option<String>,
}

/// One turn of a conversation: its message and what its model calls used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleTurn {
    /// The inbound message's id: `inbound_id` on the turn's log lines.
    pub id: InboundId,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub text: String,
    pub status: String,
    pub outcome: Option<Outcome>,
    pub received_at: i64,
    pub finished_at: Option<i64>,
    pub usage: UsageSummary,
    /// Estimated cost of its model calls in billionths of a dollar; `None`
    /// when none had a price.
    pub cost_nanousd: Option<i64>,
    /// The request id of its first model call (sent to the provider).
    pub request_id: Option<String>,
    /// The `trace_id` on the turn's log lines (`None` for a command, or a
    /// turn that ended before its task started).
    pub trace_id: Option<String>,
    /// Why its first model call that read less from the prompt cache than
    /// it could did so, in words; `None` when every call read what it
    /// could.
    pub cache_miss: Option<String>,
}

/// A stored transcript entry, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleMessage {
    pub id: i64,
    pub task_id: Option<InboundId>,
    /// `""` for the conversation itself, a sub-agent's path otherwise.
    pub scope: String,
    pub role: String,
    pub content: Option<String>,
    /// The tool calls requested, as stored (JSON).
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub is_error: bool,
    /// Dropped from the model's view by `/undo` or `/retry`.
    pub hidden: bool,
    pub created_at: i64,
}

/// A compaction: the summary that replaced a range of messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleCompaction {
    pub id: i64,
    pub pinned_id: i64,
    pub through_id: i64,
    pub kept_id: Option<i64>,
    pub summary: String,
    pub created_at: i64,
}

/// One platform identity of a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleIdentity {
    pub id: i64,
    pub platform: String,
    pub account: String,
    pub user_id: String,
}

/// A principal with its identities and what it spent since a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsolePrincipal {
    pub id: i64,
    pub approved: bool,
    pub created_at: i64,
    pub identities: Vec<ConsoleIdentity>,
    /// Billionths of a dollar (priced calls only).
    pub spent_nanousd: i64,
}

/// A case-insensitive `LIKE … ESCAPE '!'` pattern finding `text` anywhere.
fn like_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

fn turn_from_row(row: &AnyRow) -> Result<ConsoleTurn, StoreError> {
    let sums: UsageSums = (
        row.try_get("calls")?,
        row.try_get("input")?,
        row.try_get("output")?,
        row.try_get("cache_read")?,
        row.try_get("cache_write")?,
        row.try_get("cache_write_1h")?,
    );
    Ok(ConsoleTurn {
        id: row.try_get("id")?,
        sender_id: row.try_get("sender_id")?,
        sender_name: row.try_get("sender_name")?,
        text: row.try_get("text")?,
        status: row.try_get("status")?,
        outcome: super::optional_stored("outcome", row.try_get("outcome")?)?,
        received_at: row.try_get("received_at")?,
        finished_at: row.try_get("finished_at")?,
        usage: UsageSummary::from_sums(sums),
        cost_nanousd: row.try_get("cost")?,
        request_id: row.try_get("request_id")?,
        trace_id: row.try_get("trace_id")?,
        cache_miss: row.try_get("cache_miss")?,
    })
}

impl ConsoleViews<'_> {
    /// Finished turns per hour (hours since the Unix epoch) since
    /// `since_ms`, oldest first; hours without turns left out.
    ///
    /// # Errors
    /// A database failure.
    pub async fn turns_per_hour(self, since_ms: i64) -> Result<Vec<(i64, i64)>, StoreError> {
        let sql = format!(
            "SELECT CAST(i.finished_at / 3600000 AS BIGINT) AS hour, COUNT(*) FROM inbound i \
             WHERE {} AND i.finished_at >= $1 GROUP BY CAST(i.finished_at / 3600000 AS BIGINT) \
             ORDER BY hour",
            finished_turn("i")
        );
        Ok(sqlx::query_as::<_, (i64, i64)>(&sql)
            .bind(since_ms)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?)
    }

    /// How long the turns finished since `since_ms` took, from the
    /// message's arrival to the turn's end, in milliseconds, sorted (the
    /// latest 100 000 at most).
    ///
    /// # Errors
    /// A database failure.
    pub async fn turn_latencies(self, since_ms: i64) -> Result<Vec<i64>, StoreError> {
        let sql = format!(
            "SELECT i.finished_at - i.received_at FROM inbound i \
             WHERE {} AND i.finished_at >= $1 ORDER BY i.id DESC LIMIT $2",
            finished_turn("i")
        );
        let mut latencies = sqlx::query_scalar::<_, i64>(&sql)
            .bind(since_ms)
            .bind(MAX_LATENCIES)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        latencies.sort_unstable();
        Ok(latencies)
    }

    /// Model calls made since `since_ms`, added up per `key` and model,
    /// ordered by key then model.
    ///
    /// # Errors
    /// A database failure.
    pub async fn usage_by(
        self,
        key: UsageKey,
        since_ms: i64,
    ) -> Result<Vec<UsageGroup>, StoreError> {
        let key_sql = match key {
            UsageKey::Day => "CAST(CAST(u.created_at / 86400000 AS BIGINT) AS TEXT)",
            UsageKey::Principal => {
                "COALESCE(CAST(COALESCE(u.principal_id, s.principal_id) AS TEXT), '-')"
            }
            UsageKey::Model => "u.model",
        };
        let sql = format!(
            "SELECT {key_sql} AS k, u.model, {} \
             FROM usage u JOIN sessions s ON s.id = u.session_id WHERE u.created_at >= $1 \
             GROUP BY {key_sql}, u.model ORDER BY 1, 2",
            super::usage::usage_sums!()
        );
        let rows = sqlx::query_as::<_, (String, String, i64, i64, i64, i64, i64, i64)>(&sql)
            .bind(since_ms)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(key, model, calls, input, output, read, write, hour)| {
                let sums: UsageSums = (calls, input, output, read, write, hour);
                UsageGroup {
                    key,
                    model,
                    summary: UsageSummary::from_sums(sums),
                }
            })
            .collect())
    }

    /// Turns stopped by a limit since `since_ms`, per outcome.
    ///
    /// # Errors
    /// A database failure.
    pub async fn limit_hits(self, since_ms: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let listed = Outcome::LIMITS
            .iter()
            .map(|outcome| format!("'{outcome}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT outcome, COUNT(*) FROM inbound WHERE outcome IN ({listed}) \
             AND COALESCE(finished_at, received_at) >= $1 GROUP BY outcome ORDER BY outcome"
        );
        Ok(sqlx::query_as::<_, (String, i64)>(&sql)
            .bind(since_ms)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?)
    }

    /// Conversations matching `filter`, most recently active first: `limit`
    /// of them after skipping `offset`.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn sessions(
        self,
        filter: &SessionFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<ConsoleSession>, StoreError> {
        let mut sql = String::from(
            "SELECT s.id, s.platform, s.chat_id, s.principal_id, s.title, s.model, s.updated_at, \
             (SELECT m.content FROM messages m WHERE m.session_id = s.id AND m.scope = '' \
              AND m.role = 'user' ORDER BY m.id LIMIT 1) AS first_text \
             FROM sessions s WHERE 1 = 1",
        );
        let mut next = 1;
        if filter.platform.is_some() {
            sql.push_str(&format!(" AND s.platform = ${next}"));
            next += 1;
        }
        if filter.principal_id.is_some() {
            sql.push_str(&format!(" AND s.principal_id = ${next}"));
            next += 1;
        }
        if filter.text.is_some() {
            sql.push_str(&format!(
                " AND (LOWER(COALESCE(s.title, '')) LIKE ${next} ESCAPE '!' OR EXISTS \
                 (SELECT 1 FROM messages m WHERE m.session_id = s.id \
                  AND LOWER(m.content) LIKE ${next} ESCAPE '!'))"
            ));
            next += 1;
        }
        sql.push_str(&format!(
            " ORDER BY s.updated_at DESC, s.id DESC LIMIT ${next} OFFSET ${}",
            next + 1
        ));
        let mut query = sqlx::query(&sql);
        if let Some(platform) = &filter.platform {
            query = query.bind(platform.clone());
        }
        if let Some(principal) = filter.principal_id {
            query = query.bind(principal);
        }
        if let Some(text) = &filter.text {
            query = query.bind(like_pattern(text));
        }
        let rows = query
            .bind(limit)
            .bind(offset)
            .fetch_all(&mut *self.store.read_conn().await?)
            .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                Ok(ConsoleSession {
                    id: parse_stored(&id)?,
                    platform: row.try_get("platform")?,
                    chat_id: row.try_get("chat_id")?,
                    principal_id: row.try_get("principal_id")?,
                    title: row.try_get("title")?,
                    first_text: row.try_get("first_text")?,
                    model: row.try_get("model")?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .collect()
    }

    /// A conversation's turns, oldest first: `limit` of them after skipping
    /// `offset`, each with its model calls' usage.
    ///
    /// # Errors
    /// A database failure.
    pub async fn turns(
        self,
        session: &SessionId,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<ConsoleTurn>, StoreError> {
        let rows = sqlx::query(
            "SELECT i.id, i.sender_id, i.sender_name, i.text, i.status, i.outcome, \
             i.received_at, i.finished_at, i.trace_id, COUNT(u.id) AS calls, \
             CAST(COALESCE(SUM(u.input_tokens), 0) AS BIGINT) AS input, \
             CAST(COALESCE(SUM(u.output_tokens), 0) AS BIGINT) AS output, \
             CAST(COALESCE(SUM(u.cache_read_tokens), 0) AS BIGINT) AS cache_read, \
             CAST(COALESCE(SUM(u.cache_write_tokens), 0) AS BIGINT) AS cache_write, \
             CAST(COALESCE(SUM(u.cache_write_1h_tokens), 0) AS BIGINT) AS cache_write_1h, \
             CAST(SUM(u.cost_nanousd) AS BIGINT) AS cost, MIN(u.request_id) AS request_id, \
             (SELECT m.cache_miss FROM usage m WHERE m.task_id = i.id \
             AND m.cache_miss IS NOT NULL ORDER BY m.id LIMIT 1) AS cache_miss \
             FROM inbound i LEFT JOIN usage u ON u.task_id = i.id \
             WHERE i.session_id = $1 \
             GROUP BY i.id, i.sender_id, i.sender_name, i.text, i.status, i.outcome, \
             i.received_at, i.finished_at, i.trace_id ORDER BY i.id LIMIT $2 OFFSET $3",
        )
        .bind(session.as_str())
        .bind(limit)
        .bind(offset)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(turn_from_row).collect()
    }

    /// A conversation's stored entries (every scope, hidden ones included)
    /// made by the turns `first_task..=last_task`, oldest first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn messages(
        self,
        session: &SessionId,
        first_task: InboundId,
        last_task: InboundId,
    ) -> Result<Vec<ConsoleMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, task_id, scope, role, content, tool_calls, tool_call_id, is_error, \
             hidden, created_at FROM messages WHERE session_id = $1 \
             AND task_id >= $2 AND task_id <= $3 ORDER BY id",
        )
        .bind(session.as_str())
        .bind(first_task)
        .bind(last_task)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                let is_error: i64 = row.try_get("is_error")?;
                let hidden: i64 = row.try_get("hidden")?;
                Ok(ConsoleMessage {
                    id: row.try_get("id")?,
                    task_id: row.try_get("task_id")?,
                    scope: row.try_get("scope")?,
                    role: row.try_get("role")?,
                    content: row.try_get("content")?,
                    tool_calls: row.try_get("tool_calls")?,
                    tool_call_id: row.try_get("tool_call_id")?,
                    is_error: is_error != 0,
                    hidden: hidden != 0,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Every compaction of a conversation, oldest first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn compactions(
        self,
        session: &SessionId,
    ) -> Result<Vec<ConsoleCompaction>, StoreError> {
        let rows = sqlx::query_as::<_, (i64, i64, i64, Option<i64>, String, i64)>(
            "SELECT id, pinned_id, through_id, kept_id, summary, created_at FROM compactions \
             WHERE session_id = $1 ORDER BY id",
        )
        .bind(session.as_str())
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(id, pinned_id, through_id, kept_id, summary, created_at)| ConsoleCompaction {
                    id,
                    pinned_id,
                    through_id,
                    kept_id,
                    summary,
                    created_at,
                },
            )
            .collect())
    }

    /// The approvals and questions asked by the turns
    /// `first_task..=last_task` of a conversation, oldest first: the audit
    /// of each request and its decision.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn approvals(
        self,
        session: &SessionId,
        first_task: InboundId,
        last_task: InboundId,
    ) -> Result<Vec<ApprovalRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = $1 \
             AND inbound_id >= $2 AND inbound_id <= $3 ORDER BY id"
        ))
        .bind(session.as_str())
        .bind(first_task)
        .bind(last_task)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter().map(super::read).collect()
    }

    /// Principals, newest first (`limit` after skipping `offset`), with
    /// their identities and what their model calls since `since_ms` cost.
    ///
    /// # Errors
    /// A database failure.
    pub async fn principals(
        self,
        limit: i64,
        offset: i64,
        since_ms: i64,
    ) -> Result<Vec<ConsolePrincipal>, StoreError> {
        let mut conn = self.store.read_conn().await?;
        let heads = sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "SELECT p.id, p.approved, p.created_at, \
             CAST(COALESCE((SELECT SUM(u.cost_nanousd) FROM usage u \
              WHERE u.principal_id = p.id AND u.created_at >= $1), 0) AS BIGINT) \
             FROM principals p ORDER BY p.id DESC LIMIT $2 OFFSET $3",
        )
        .bind(since_ms)
        .bind(limit)
        .bind(offset)
        .fetch_all(&mut *conn)
        .await?;
        let (Some(newest), Some(oldest)) = (heads.first(), heads.last()) else {
            return Ok(Vec::new());
        };
        let identities = sqlx::query_as::<_, (i64, i64, String, String, String)>(
            "SELECT id, principal_id, platform, account, user_id FROM identities \
             WHERE principal_id >= $1 AND principal_id <= $2 ORDER BY platform, user_id",
        )
        .bind(oldest.0)
        .bind(newest.0)
        .fetch_all(&mut *conn)
        .await?;
        Ok(heads
            .iter()
            .map(|&(id, approved, created_at, spent)| ConsolePrincipal {
                id,
                approved: approved != 0,
                created_at,
                identities: identities
                    .iter()
                    .filter(|identity| identity.1 == id)
                    .map(
                        |(identity, _, platform, account, user_id)| ConsoleIdentity {
                            id: *identity,
                            platform: platform.clone(),
                            account: account.clone(),
                            user_id: user_id.clone(),
                        },
                    )
                    .collect(),
                spent_nanousd: spent,
            })
            .collect())
    }

    /// The identity with this id, if any.
    ///
    /// # Errors
    /// A database failure.
    pub async fn identity_by_id(self, id: i64) -> Result<Option<Identity>, StoreError> {
        let row = sqlx::query_as::<_, (i64, i64)>(
            "SELECT id, principal_id FROM identities WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(row.map(|(id, principal)| Identity {
            id,
            principal: PrincipalId::new(principal),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::like_pattern;

    #[test]
    fn search_text_is_matched_literally() {
        assert_eq!(like_pattern("50% Off_!"), "%50!% off!_!!%");
    }
}
