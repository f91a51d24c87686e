//! Writes that belong together, committed as one unit.
//!
//! A step of a turn writes several rows at once: a model call's outcome with
//! the assistant entry it produced; a round's tool results with the next
//! call's `running` row; the final entry with the outbox row and the inbound
//! status. A [`Batch`] collects such statements and [`Store::write`] commits
//! them atomically.
//!
//! On SQLite the batch reaches sqlx's worker thread as one multi-statement
//! string wrapped in `BEGIN IMMEDIATE … COMMIT` (each statement's `$1…$n`
//! renumbered into one argument list), so a step costs one round trip to the
//! worker instead of one per statement. PostgreSQL's extended protocol takes
//! one statement at a time, so there the batch is a transaction of its
//! statements. Statements pushed with [`Batch::push_returning`] end in a
//! `RETURNING` clause giving one row; `write` returns those rows in order.

use std::sync::atomic::Ordering;

use sqlx::any::AnyRow;
use sqlx::{Connection, Executor, Row};

use super::{Backend, SessionId, Store, StoreError, leases};

/// One bound value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Arg {
    fn from(value: i64) -> Self {
        Self::Int(Some(value))
    }
}

impl From<Option<i64>> for Arg {
    fn from(value: Option<i64>) -> Self {
        Self::Int(value)
    }
}

impl From<&str> for Arg {
    fn from(value: &str) -> Self {
        Self::Text(Some(value.to_owned()))
    }
}

impl From<String> for Arg {
    fn from(value: String) -> Self {
        Self::Text(Some(value))
    }
}

impl From<Option<&str>> for Arg {
    fn from(value: Option<&str>) -> Self {
        Self::Text(value.map(str::to_owned))
    }
}

impl From<&SessionId> for Arg {
    fn from(value: &SessionId) -> Self {
        Self::Text(Some(value.as_str().to_owned()))
    }
}

impl From<Option<String>> for Arg {
    fn from(value: Option<String>) -> Self {
        Self::Text(value)
    }
}

#[derive(Debug, Clone)]
struct Statement {
    sql: String,
    args: Vec<Arg>,
    returns: Returns,
}

/// How many rows a statement's `RETURNING` clause gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Returns {
    Nothing,
    One,
    AtMostOne,
}

/// Statements to commit together.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    statements: Vec<Statement>,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a statement whose placeholders are `$1…$n` for `args`.
    pub fn push(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push(Statement {
            sql: sql.into(),
            args,
            returns: Returns::Nothing,
        });
    }

    /// Adds a statement ending in a `RETURNING` clause that gives exactly
    /// one row.
    pub fn push_returning(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push(Statement {
            sql: sql.into(),
            args,
            returns: Returns::One,
        });
    }

    /// Adds a statement ending in a `RETURNING` clause that gives at most
    /// one row (an `UPDATE … WHERE` that may match nothing). Put it last, or
    /// before statements that return nothing, so the rows stay in order.
    pub fn push_returning_optional(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push(Statement {
            sql: sql.into(),
            args,
            returns: Returns::AtMostOne,
        });
    }

    /// How many rows the batch's `RETURNING` statements will give (those
    /// that may give none not counted).
    pub fn returning_rows(&self) -> usize {
        self.statements
            .iter()
            .filter(|statement| statement.returns == Returns::One)
            .count()
    }

    /// Moves `other`'s statements to the end of this batch.
    pub fn extend(&mut self, other: Batch) {
        self.statements.extend(other.statements);
    }

    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

fn bind<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    arg: &'q Arg,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    match arg {
        Arg::Int(value) => query.bind(*value),
        Arg::Text(value) => query.bind(value.as_deref()),
    }
}

/// Shifts every `$N` placeholder in `sql` by `offset`. Statements here never
/// hold a `$` inside a string literal.
fn renumber(sql: &str, offset: usize) -> String {
    if offset == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    while let Some((index, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let start = index + 1;
        let mut end = start;
        while let Some((i, d)) = chars.peek().copied() {
            if !d.is_ascii_digit() {
                break;
            }
            end = i + d.len_utf8();
            chars.next();
        }
        match sql[start..end].parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&sql[start..end]),
        }
    }
    out
}

impl Store {
    /// Commits a batch atomically; returns the rows of its `RETURNING`
    /// statements, in order.
    ///
    /// # Errors
    /// A database failure; nothing of the batch is written then.
    ///
    /// A [fenced](Store::fenced) store first checks its lease grant is still
    /// current, in the same transaction: if not, nothing is written and the
    /// error is [`StoreError::LeaseLost`].
    pub async fn write(&self, batch: Batch) -> Result<Vec<AnyRow>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let Some(fence) = &self.fence else {
            return self.commit(batch).await;
        };
        let (sql, args) = leases::guard(self.backend, fence);
        let mut guarded = Batch::new();
        guarded.push(sql, args);
        guarded.extend(batch);
        self.commit(guarded).await.map_err(|err| match err {
            StoreError::Database(err) if leases::is_fence_violation(&err) => StoreError::LeaseLost,
            other => other,
        })
    }

    /// Commits a batch as it is (see [`Store::write`]).
    async fn commit(&self, batch: Batch) -> Result<Vec<AnyRow>, StoreError> {
        let mut conn = self.conn().await?;
        match self.backend {
            Backend::Sqlite => {
                let single = batch.statements.len() == 1;
                let mut sql = String::new();
                if !single {
                    sql.push_str("BEGIN IMMEDIATE;\n");
                }
                let mut offset = 0;
                for statement in &batch.statements {
                    sql.push_str(&renumber(&statement.sql, offset));
                    sql.push_str(";\n");
                    offset += statement.args.len();
                }
                if !single {
                    sql.push_str("COMMIT;");
                }
                let query = batch
                    .statements
                    .iter()
                    .flat_map(|statement| &statement.args)
                    .fold(sqlx::query(&sql), bind);
                self.unfinished_batch.store(!single, Ordering::SeqCst);
                let result = query.fetch_all(&mut *conn).await;
                // Not reached when this future is dropped mid-batch: then the
                // flag stays set for the next checkout to roll back.
                self.unfinished_batch.store(false, Ordering::SeqCst);
                match result {
                    Ok(rows) => Ok(rows),
                    Err(err) => {
                        if !single {
                            // The statements after the failing one did not
                            // run, COMMIT included: undo the ones before.
                            let _ = conn.execute("ROLLBACK").await;
                        }
                        Err(err.into())
                    }
                }
            }
            Backend::Postgres => {
                let mut tx = conn.begin().await?;
                let mut rows = Vec::new();
                for statement in &batch.statements {
                    let query = statement
                        .args
                        .iter()
                        .fold(sqlx::query(&statement.sql), bind);
                    match statement.returns {
                        Returns::One => rows.push(query.fetch_one(&mut *tx).await?),
                        Returns::AtMostOne => rows.extend(query.fetch_optional(&mut *tx).await?),
                        Returns::Nothing => {
                            query.execute(&mut *tx).await?;
                        }
                    }
                }
                tx.commit().await?;
                Ok(rows)
            }
        }
    }

    /// Commits a batch whose `RETURNING` statements give ids; returns them.
    ///
    /// # Errors
    /// A database failure.
    pub async fn write_ids(&self, batch: Batch) -> Result<Vec<i64>, StoreError> {
        self.write(batch)
            .await?
            .iter()
            .map(|row| row.try_get::<i64, _>(0).map_err(StoreError::from))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_shifted_past_earlier_statements() {
        assert_eq!(
            renumber("UPDATE t SET a = $1, b = $12 WHERE id = $2", 3),
            "UPDATE t SET a = $4, b = $15 WHERE id = $5"
        );
        assert_eq!(renumber("SELECT $1", 0), "SELECT $1");
        assert_eq!(renumber("a $ b", 2), "a $ b");
    }

    async fn store() -> (Store, tempfile::TempDir) {
        let (store, dir) = super::super::test_support::scratch_store().await;
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("table");
        (store, dir)
    }

    async fn count(store: &Store) -> i64 {
        // Through the second connection: it sees only what is committed.
        sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&mut *store.read_conn().await.expect("conn"))
            .await
            .expect("count")
    }

    #[tokio::test]
    async fn a_batch_commits_all_its_statements_and_returns_their_rows_in_order() {
        let (store, _dir) = store().await;
        let mut batch = Batch::new();
        batch.push_returning(
            "INSERT INTO t (v) VALUES ($1) RETURNING id",
            vec!["a".into()],
        );
        batch.push(
            "UPDATE t SET v = $1 WHERE v = $2",
            vec!["b".into(), "a".into()],
        );
        batch.push_returning(
            "INSERT INTO t (v) VALUES ($1) RETURNING id",
            vec!["c".into()],
        );

        let ids = store.write_ids(batch).await.expect("written");

        assert_eq!(ids, [1, 2]);
        assert_eq!(count(&store).await, 2);
    }

    #[tokio::test]
    async fn a_failing_statement_leaves_nothing_of_its_batch() {
        let (store, _dir) = store().await;
        let mut batch = Batch::new();
        batch.push("INSERT INTO t (v) VALUES ($1)", vec!["a".into()]);
        batch.push("INSERT INTO t (v) VALUES ($1)", vec![Arg::Text(None)]);

        assert!(store.write(batch).await.is_err(), "NOT NULL violated");

        assert_eq!(count(&store).await, 0);
        let mut next = Batch::new();
        next.push("INSERT INTO t (v) VALUES ($1)", vec!["b".into()]);
        next.push("INSERT INTO t (v) VALUES ($1)", vec!["c".into()]);
        store.write(next).await.expect("the writer is usable again");
        assert_eq!(count(&store).await, 2);
    }

    #[tokio::test]
    async fn a_batch_abandoned_half_way_is_rolled_back_before_the_next_write() {
        let (store, _dir) = store().await;
        let mut batch = Batch::new();
        for n in 0..2000 {
            batch.push(
                "INSERT INTO t (v) VALUES ($1)",
                vec![format!("n{n}").into()],
            );
        }
        // Polled once, then dropped: sqlx's worker stops part-way, inside the
        // batch's transaction.
        let abandoned = futures::FutureExt::now_or_never(store.write(batch));
        assert!(abandoned.is_none(), "the batch was cut short");

        let mut next = Batch::new();
        next.push("INSERT INTO t (v) VALUES ($1)", vec!["after".into()]);
        store.write(next).await.expect("written");

        assert_eq!(
            count(&store).await,
            1,
            "nothing of the abandoned batch, and the next write committed"
        );
    }
}
