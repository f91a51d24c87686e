//! Writes that belong together, committed as one unit.
//!
//! A step of a turn writes several rows at once: a model call's outcome with
//! the assistant entry it produced; a round's tool results with the next
//! call's `running` row; the final entry with the outbox row and the inbound
//! status. A [`Batch`] collects such statements and [`Store::write`] commits
//! them atomically.
//!
//! Either way a step costs one round trip, not one per statement:
//!
//! - On SQLite the batch reaches sqlx's worker thread as one multi-statement
//!   string wrapped in `BEGIN IMMEDIATE … COMMIT`, each statement's `$1…$n`
//!   renumbered into one argument list ([`renumber`]).
//! - On PostgreSQL it is one simple-protocol Query message: an
//!   `EXECUTE sb_…(…)` of each statement, joined by semicolons, its
//!   arguments written in as typed literals (`literal`), since that protocol
//!   takes no parameters. PostgreSQL runs the statements of one such message
//!   as one implicit transaction: all commit at the end, or a failing
//!   statement stops the rest and rolls back the ones before, and the
//!   connection goes back to the pool outside any transaction. (An explicit
//!   `BEGIN … COMMIT` inside the message would leave the connection in an
//!   aborted transaction when a statement fails, or when the caller gives up
//!   before the answer is read.) The answer is read to its end, so the
//!   connection has nothing pending either.
//!
//! Each statement is a prepared statement of the connection, named after
//! its SQL and argument types ([`prepared_name`]) and declared with the
//! types the extended protocol would bind (`bigint`, `text`), so
//! PostgreSQL parses and plans it once per connection rather than once per
//! batch (with the literals written into the SQL instead, planning was most
//! of a batch's time on the server). A connection that lacks one of a
//! batch's statements answers `26000` (no such prepared statement) before
//! anything commits; the batch is then sent again, led by a `PREPARE` of
//! each statement the connection lacks (`pg_prepared_statements` says
//! which). That costs two more round trips, once per connection and
//! statement.
//!
//! Statements pushed with [`Batch::push_returning`] end in a `RETURNING`
//! clause giving one row; `write` returns those rows in order. On
//! PostgreSQL the rows are sorted by statement as the answer arrives (each
//! statement's rows precede its completion), and a `push_returning`
//! statement that gives no row is an error, as `fetch_one` would make it;
//! but the batch has committed by then, so such statements must be ones that
//! cannot give none (an `INSERT … VALUES`, a `COUNT`), and others go through
//! [`Batch::push_returning_optional`].

use crate::domain::{InboundId, PrincipalId, SessionId};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::hash::{Hash as _, Hasher as _};
use std::sync::atomic::Ordering;

use futures::TryStreamExt;
use sqlx::any::{AnyQueryResult, AnyRow};
use sqlx::{Either, Executor, Row};

use super::literal::{LiteralError, push_literal};
use super::{Backend, Store, StoreError, leases};

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

impl From<InboundId> for Arg {
    fn from(value: InboundId) -> Self {
        Self::Int(Some(value.get()))
    }
}

impl From<Option<InboundId>> for Arg {
    fn from(value: Option<InboundId>) -> Self {
        Self::Int(value.map(InboundId::get))
    }
}

impl From<Option<PrincipalId>> for Arg {
    fn from(value: Option<PrincipalId>) -> Self {
        Self::Int(value.map(PrincipalId::get))
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

/// Copies `sql` into `out`, letting `placeholder` write what stands in
/// for each `$N` (given N). The one scanner of placeholders: SQLite batches
/// shift them ([`renumber`]), PostgreSQL batches check them against the
/// arguments before preparing ([`check_placeholders`]). A `$` not followed
/// by digits is copied as it is. Statements here never hold a `$` inside a
/// string literal of their own SQL.
fn rewrite_placeholders<E>(
    sql: &str,
    out: &mut String,
    mut placeholder: impl FnMut(usize, &mut String) -> Result<(), E>,
) -> Result<(), E> {
    let bytes = sql.as_bytes();
    let mut copied = 0;
    let mut index = 0;
    while let Some(found) = bytes[index..].iter().position(|&b| b == b'$') {
        let dollar = index + found;
        let digits = bytes[dollar + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = dollar + 1 + digits;
        // `$` and digits are ASCII, so these are character boundaries.
        if let Ok(n) = sql[dollar + 1..end].parse::<usize>() {
            out.push_str(&sql[copied..dollar]);
            placeholder(n, out)?;
            copied = end;
        }
        index = end;
    }
    out.push_str(&sql[copied..]);
    Ok(())
}

/// Shifts every `$N` placeholder in `sql` by `offset`.
fn renumber(sql: &str, offset: usize) -> String {
    if offset == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let shifted = rewrite_placeholders(sql, &mut out, |n, out| {
        // Writing to a String cannot fail.
        let _ = write!(out, "${}", n + offset);
        Ok::<(), Infallible>(())
    });
    match shifted {
        Ok(()) => out,
        Err(never) => match never {},
    }
}

/// Checks that `sql`'s placeholders and `args` match as the extended
/// protocol requires: every `$N` has an argument and every argument a `$N`.
///
/// # Errors
/// A placeholder without an argument, or an argument no placeholder uses.
fn check_placeholders(sql: &str, args: &[Arg]) -> Result<(), LiteralError> {
    let mut used = vec![false; args.len()];
    let mut scratch = String::new();
    rewrite_placeholders(sql, &mut scratch, |n, _| {
        let index = n.checked_sub(1).filter(|&index| index < args.len()).ok_or(
            LiteralError::MissingArgument {
                placeholder: n,
                arguments: args.len(),
            },
        )?;
        used[index] = true;
        Ok(())
    })?;
    match used.iter().position(|&used| !used) {
        Some(unused) => Err(LiteralError::UnusedArgument {
            argument: unused + 1,
        }),
        None => Ok(()),
    }
}

/// The name a statement is prepared under on a PostgreSQL connection: its
/// SQL and its arguments' types, hashed, so the same statement bound to
/// other types is another prepared statement.
fn prepared_name(statement: &Statement) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    statement.sql.hash(&mut hasher);
    for arg in &statement.args {
        matches!(arg, Arg::Int(_)).hash(&mut hasher);
    }
    format!("{PREPARED_PREFIX}{:016x}", hasher.finish())
}

/// The prefix of the names of the batches' prepared statements (sqlx names
/// its own `sqlx_s_…`).
const PREPARED_PREFIX: &str = "sb_";

/// Appends the `PREPARE` of `statement` under `name` to `out`.
///
/// # Errors
/// Its placeholders and arguments do not match.
fn push_prepare(out: &mut String, name: &str, statement: &Statement) -> Result<(), LiteralError> {
    check_placeholders(&statement.sql, &statement.args)?;
    out.push_str("PREPARE ");
    out.push_str(name);
    push_args(out, &statement.args, |out, arg| {
        out.push_str(match arg {
            Arg::Int(_) => "BIGINT",
            Arg::Text(_) => "TEXT",
        });
        Ok(())
    })?;
    out.push_str(" AS ");
    out.push_str(&statement.sql);
    out.push_str(";\n");
    Ok(())
}

/// Appends the `EXECUTE` of `statement`, prepared under `name`, to `out`,
/// its arguments written in as literals.
///
/// # Errors
/// Text holding a NUL byte.
fn push_execute(out: &mut String, name: &str, statement: &Statement) -> Result<(), LiteralError> {
    out.push_str("EXECUTE ");
    out.push_str(name);
    push_args(out, &statement.args, push_literal)?;
    out.push_str(";\n");
    Ok(())
}

/// Appends `(…, …)`, each of `args` written by `each`, to `out`; nothing
/// when there are none.
fn push_args(
    out: &mut String,
    args: &[Arg],
    mut each: impl FnMut(&mut String, &Arg) -> Result<(), LiteralError>,
) -> Result<(), LiteralError> {
    if args.is_empty() {
        return Ok(());
    }
    out.push('(');
    for (index, arg) in args.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        each(out, arg)?;
    }
    out.push(')');
    Ok(())
}

/// A PostgreSQL batch as one simple-protocol query string: a `PREPARE` of
/// each statement `prepare` says the connection lacks (once each), then the
/// `EXECUTE` of each statement. Also returns how many `PREPARE`s lead it.
fn postgres_sql(
    statements: &[Statement],
    names: &[String],
    mut prepare: impl FnMut(&str) -> bool,
) -> Result<(String, usize), LiteralError> {
    let size = statements
        .iter()
        .map(|statement| 40 + 24 * statement.args.len())
        .sum();
    let mut sql = String::with_capacity(size);
    let mut prepared: Vec<&str> = Vec::new();
    for (statement, name) in statements.iter().zip(names) {
        if prepare(name) && !prepared.contains(&name.as_str()) {
            push_prepare(&mut sql, name, statement)?;
            prepared.push(name);
        }
    }
    for (statement, name) in statements.iter().zip(names) {
        push_execute(&mut sql, name, statement)?;
    }
    Ok((sql, prepared.len()))
}

/// Whether `err` is PostgreSQL's "prepared statement does not exist".
fn is_unprepared(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Database(sqlx::Error::Database(db)) if db.code().as_deref() == Some("26000")
    )
}

/// Sorts the answer to a PostgreSQL batch into the rows its `RETURNING`
/// statements give, as running each statement on its own with `fetch_one`,
/// `fetch_optional` or `execute` would: every statement's rows come before
/// the completion that ends it, so the completions mark where each
/// statement's rows end. A successful answer is read to its end; after an
/// error sqlx reads what is left before the connection's next use.
async fn collect_rows(
    mut answer: impl futures::Stream<Item = Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>> + Unpin,
    statements: &[Statement],
    prepares: usize,
) -> Result<Vec<AnyRow>, StoreError> {
    let mut rows = Vec::with_capacity(statements.len());
    let total = prepares + statements.len();
    let mut expected = std::iter::repeat_n(Returns::Nothing, prepares)
        .chain(statements.iter().map(|statement| statement.returns));
    let mut current = expected.next();
    let mut given = 0usize;
    let mut missing = false;
    let mut completed = 0usize;
    while let Some(item) = answer.try_next().await? {
        match item {
            Either::Right(row) => {
                // The first row of a statement that returns one; others
                // are dropped, as `fetch_one` and `fetch_optional` would.
                if given == 0 && matches!(current, Some(Returns::One | Returns::AtMostOne)) {
                    rows.push(row);
                }
                given += 1;
            }
            Either::Left(_) => {
                missing |= current == Some(Returns::One) && given == 0;
                completed += 1;
                current = expected.next();
                given = 0;
            }
        }
    }
    if completed != total {
        return Err(sqlx::Error::Protocol(format!(
            "a batch of {total} statements completed {completed}"
        ))
        .into());
    }
    if missing {
        return Err(sqlx::Error::RowNotFound.into());
    }
    Ok(rows)
}

impl Store {
    /// Commits a batch atomically; returns the rows of its `RETURNING`
    /// statements, in order.
    ///
    /// # Errors
    /// A database failure; nothing of the batch is written then. On
    /// PostgreSQL also a `push_returning` statement that gave no row
    /// (`RowNotFound`, after the batch committed), or an argument that cannot
    /// be written in (`sqlx::Error::Encode` with a [`LiteralError`]).
    ///
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
        let mut conn = self.writer().await?;
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
                self.stats.batch_sent(batch.statements.len());
                self.unfinished_batch.store(!single, Ordering::SeqCst);
                let result = query.fetch_all(&mut *conn).await;
                // Not reached when this future is dropped mid-batch: then the
                // flag stays set for the next checkout to roll back.
                self.unfinished_batch.store(false, Ordering::SeqCst);
                match result {
                    Ok(rows) => {
                        self.stats.committed();
                        Ok(rows)
                    }
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
                let encode = |err| StoreError::Database(sqlx::Error::Encode(Box::new(err)));
                let names: Vec<String> = batch.statements.iter().map(prepared_name).collect();
                let (sql, _) =
                    postgres_sql(&batch.statements, &names, |_| false).map_err(encode)?;
                self.stats.batch_sent(batch.statements.len());
                // No arguments: sqlx sends it as one simple-protocol Query
                // message, which PostgreSQL runs as one implicit transaction.
                let rows =
                    match collect_rows(conn.fetch_many(sql.as_str()), &batch.statements, 0).await {
                        Err(err) if is_unprepared(&err) => {
                            // Nothing committed: prepare what this connection
                            // lacks and send the batch again.
                            let known: Vec<String> = sqlx::query_scalar(
                                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'sb\\_%'",
                            )
                            .fetch_all(&mut *conn)
                            .await?;
                            let (sql, prepares) = postgres_sql(&batch.statements, &names, |name| {
                                !known.iter().any(|known| known == name)
                            })
                            .map_err(encode)?;
                            self.stats.batch_sent(prepares + batch.statements.len());
                            collect_rows(conn.fetch_many(sql.as_str()), &batch.statements, prepares)
                                .await?
                        }
                        other => other?,
                    };
                self.stats.committed();
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
    use sqlx::error::ErrorKind;
    use sqlx::postgres::PgDatabaseError;

    use super::super::StoreOptions;
    use super::*;

    #[test]
    fn placeholders_are_shifted_past_earlier_statements() {
        assert_eq!(
            renumber("UPDATE t SET a = $1, b = $12 WHERE id = $2", 3),
            "UPDATE t SET a = $4, b = $15 WHERE id = $5"
        );
        assert_eq!(renumber("SELECT $1", 0), "SELECT $1");
        assert_eq!(renumber("a $ b", 2), "a $ b");
        assert_eq!(renumber("ü$1ü$", 1), "ü$2ü$");
    }

    fn statement(sql: &str, args: Vec<Arg>) -> Statement {
        Statement {
            sql: sql.to_owned(),
            args,
            returns: Returns::Nothing,
        }
    }

    #[test]
    fn a_postgres_batch_executes_prepared_statements_with_literal_arguments() {
        let statements = [
            statement(
                "UPDATE t SET a = $2, b = $1 WHERE a = $2 AND c = '$'",
                vec!["$2".into(), Arg::Int(Some(-7))],
            ),
            statement("DELETE FROM t", Vec::new()),
            statement(
                "UPDATE t SET a = $2, b = $1 WHERE a = $2 AND c = '$'",
                vec!["x".into(), Arg::Int(None)],
            ),
        ];
        let names: Vec<String> = statements.iter().map(prepared_name).collect();
        assert_eq!(names[0], names[2], "one statement, one name");
        assert_ne!(names[0], names[1]);
        let (sql, prepares) = postgres_sql(&statements, &names, |_| false).expect("sql");
        assert_eq!(prepares, 0);
        assert_eq!(
            sql,
            format!(
                "EXECUTE {a}(CAST(E'$2' AS TEXT), CAST(-7 AS BIGINT));\n\
                 EXECUTE {b};\n\
                 EXECUTE {a}(CAST(E'x' AS TEXT), CAST(NULL AS BIGINT));\n",
                a = names[0],
                b = names[1]
            )
        );
        // What the connection lacks is prepared first, once, with the
        // argument types the extended protocol would bind.
        let (sql, prepares) =
            postgres_sql(&statements, &names, |name| name == names[0]).expect("sql");
        assert_eq!(prepares, 1);
        assert!(sql.starts_with(&format!(
            "PREPARE {}(TEXT, BIGINT) AS UPDATE t SET a = $2, b = $1 WHERE a = $2 AND c = '$';\nEXECUTE ",
            names[0]
        )));
        // The same SQL bound to other types is another statement.
        let other = statement("SELECT $1", vec![1.into()]);
        let text = statement("SELECT $1", vec!["1".into()]);
        assert_ne!(prepared_name(&other), prepared_name(&text));
    }

    #[test]
    fn placeholders_and_arguments_must_match_to_be_prepared() {
        let prepare = |sql: &str, args: Vec<Arg>| {
            let statement = statement(sql, args);
            push_prepare(&mut String::new(), "sb_test", &statement)
        };
        assert_eq!(
            prepare("SELECT $1, $3", vec![1.into(), 2.into()]),
            Err(LiteralError::MissingArgument {
                placeholder: 3,
                arguments: 2
            })
        );
        assert_eq!(
            prepare("SELECT $0", vec![1.into()]),
            Err(LiteralError::MissingArgument {
                placeholder: 0,
                arguments: 1
            })
        );
        assert_eq!(
            prepare("SELECT $2", vec![1.into(), 2.into()]),
            Err(LiteralError::UnusedArgument { argument: 1 })
        );
        assert_eq!(prepare("SELECT $2, $1", vec![1.into(), 2.into()]), Ok(()));
    }

    /// A scratch store: the SQLite file is kept while `_dir` is.
    struct Scratch {
        store: Store,
        _dir: Option<tempfile::TempDir>,
        _database: Option<switchboard_test_support::postgres::TestDatabase>,
    }

    impl Scratch {
        fn is_postgres(&self) -> bool {
            self.store.backend == Backend::Postgres
        }
    }

    /// A store in a database of its own on the PostgreSQL server that
    /// `TEST_DATABASE_URL` names, with a pool of one connection (so a test
    /// sees whatever state a batch leaves that connection in); `None`, with
    /// a note, when it is not set.
    async fn postgres_store() -> Option<Scratch> {
        let database = super::super::test_support::fresh_postgres().await?;
        let mut options = StoreOptions::new(database.url());
        options.max_connections = 1;
        let store = Store::connect(&options).await.expect("store");
        Some(Scratch {
            store,
            _dir: None,
            _database: Some(database),
        })
    }

    /// A scratch store on SQLite, and one on PostgreSQL when there is one,
    /// each with the tables the tests write: `t` (an id and a NOT NULL text)
    /// and `r` (a nullable integer and text).
    async fn stores() -> Vec<Scratch> {
        let (sqlite, dir) = super::super::test_support::scratch_store().await;
        let mut stores = vec![Scratch {
            store: sqlite,
            _dir: Some(dir),
            _database: None,
        }];
        stores.extend(postgres_store().await);
        for scratch in &stores {
            let id = if scratch.is_postgres() {
                "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
            } else {
                "INTEGER PRIMARY KEY"
            };
            let mut conn = scratch.store.conn().await.expect("conn");
            for table in [
                format!("CREATE TABLE t (id {id}, v TEXT NOT NULL)"),
                "CREATE TABLE r (n BIGINT, s TEXT)".to_owned(),
            ] {
                conn.execute(table.as_str()).await.expect("table");
            }
        }
        stores
    }

    async fn count(store: &Store) -> i64 {
        // On SQLite through the second connection: it sees only what is
        // committed. On PostgreSQL through the pool's one connection, which
        // must not be left inside a transaction.
        sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&mut *store.read_conn().await.expect("conn"))
            .await
            .expect("count")
    }

    #[tokio::test]
    async fn a_batch_commits_all_its_statements_and_returns_their_rows_in_order() {
        for Scratch { store, .. } in stores().await {
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
            let values: Vec<String> = sqlx::query_scalar("SELECT v FROM t ORDER BY id")
                .fetch_all(&mut *store.read_conn().await.expect("conn"))
                .await
                .expect("values");
            assert_eq!(values, ["b", "c"]);
        }
    }

    #[tokio::test]
    async fn rows_come_back_in_statement_order_whether_one_or_at_most_one() {
        for Scratch { store, .. } in stores().await {
            let mut seed = Batch::new();
            seed.push("INSERT INTO t (v) VALUES ($1)", vec!["old".into()]);
            store.write(seed).await.expect("seeded");

            let mut batch = Batch::new();
            batch.push_returning(
                "INSERT INTO t (v) VALUES ($1) RETURNING v",
                vec!["first".into()],
            );
            batch.push_returning_optional(
                "UPDATE t SET v = $1 WHERE v = $2 RETURNING v",
                vec!["never".into(), "missing".into()],
            );
            batch.push("UPDATE t SET v = v WHERE v = $1", vec!["first".into()]);
            batch.push_returning_optional(
                "UPDATE t SET v = $1 WHERE v = $2 RETURNING v",
                vec!["renamed".into(), "old".into()],
            );
            batch.push_returning("SELECT COUNT(*) FROM t WHERE v <> $1", vec!["never".into()]);
            batch.push_returning(
                "INSERT INTO t (v) VALUES ($1) RETURNING v",
                vec!["last".into()],
            );

            let rows = store.write(batch).await.expect("written");

            let first: String = rows[0].try_get(0).expect("first");
            let renamed: String = rows[1].try_get(0).expect("renamed");
            let counted: i64 = rows[2].try_get(0).expect("count");
            let last: String = rows[3].try_get(0).expect("last");
            assert_eq!(rows.len(), 4);
            assert_eq!(
                (first.as_str(), renamed.as_str(), counted, last.as_str()),
                ("first", "renamed", 2, "last")
            );
        }
    }

    #[tokio::test]
    async fn awkward_values_round_trip_byte_for_byte() {
        let texts = [
            "",
            "it's",
            "''",
            r"back\slash",
            r"\'",
            r"trailing\",
            "$1",
            "$2 and $10",
            "E'x'",
            "'; DROP TABLE r; --",
            "\"double\"",
            "line\nbreak\r\n\ttab",
            "ünïcödé ∑ 中文",
            "🙂👍🏽",
            "$$ dollar $tag$ quoted $tag$",
            "\\x00",
            "\u{7f}\u{1}",
        ];
        for Scratch { store, .. } in stores().await {
            let mut batch = Batch::new();
            let mut expected: Vec<(Option<i64>, Option<String>)> = Vec::new();
            for (index, text) in texts.iter().enumerate() {
                let n = i64::try_from(index).expect("small");
                expected.push((Some(n), Some((*text).to_owned())));
            }
            expected.push((Some(i64::MIN), None));
            expected.push((Some(i64::MAX), Some("max".to_owned())));
            expected.push((Some(0), Some("zero".to_owned())));
            expected.push((Some(-1), Some("minus one".to_owned())));
            expected.push((None, Some("no number".to_owned())));
            expected.push((None, None));
            for (n, s) in &expected {
                batch.push_returning(
                    "INSERT INTO r (n, s) VALUES ($1, $2) RETURNING n, s",
                    vec![Arg::Int(*n), Arg::Text(s.clone())],
                );
            }
            // The same placeholder twice, and a value used in SQL
            // arithmetic: a bigint, not a 32-bit integer.
            batch.push_returning(
                "SELECT $1 * 1000 + $1, $2 || $2",
                vec![Arg::Int(Some(5_000_000_000)), "'\\".into()],
            );

            let rows = store.write(batch).await.expect("written");

            let returned: Vec<(Option<i64>, Option<String>)> = rows[..expected.len()]
                .iter()
                .map(|row| {
                    (
                        row.try_get(0).expect("returned n"),
                        row.try_get(1).expect("returned s"),
                    )
                })
                .collect();
            assert_eq!(returned, expected, "as RETURNING gave them");
            let arithmetic: (i64, String) = (
                rows[expected.len()].try_get(0).expect("product"),
                rows[expected.len()].try_get(1).expect("concatenation"),
            );
            assert_eq!(arithmetic, (5_005_000_000_000, "'\\'\\".to_owned()));

            let mut stored: Vec<(Option<i64>, Option<String>)> =
                sqlx::query_as("SELECT n, s FROM r")
                    .fetch_all(&mut *store.read_conn().await.expect("conn"))
                    .await
                    .expect("stored");
            stored.sort();
            expected.sort();
            assert_eq!(stored, expected, "as stored");
        }
    }

    #[tokio::test]
    async fn a_failing_statement_leaves_nothing_of_its_batch() {
        for Scratch { store, .. } in stores().await {
            let mut batch = Batch::new();
            batch.push("INSERT INTO t (v) VALUES ($1)", vec!["a".into()]);
            batch.push("INSERT INTO t (v) VALUES ($1)", vec![Arg::Text(None)]);
            batch.push("INSERT INTO t (v) VALUES ($1)", vec!["z".into()]);

            let Err(err) = store.write(batch).await else {
                panic!("NOT NULL violated");
            };

            // The database's own error, for callers that tell constraint
            // violations apart.
            let StoreError::Database(sqlx::Error::Database(database)) = &err else {
                panic!("not a database error: {err:?}");
            };
            assert_eq!(database.kind(), ErrorKind::NotNullViolation);
            if let Some(postgres) = database.try_downcast_ref::<PgDatabaseError>() {
                assert_eq!(postgres.column(), Some("v"));
                assert_eq!(postgres.table(), Some("t"));
            }
            assert_eq!(count(&store).await, 0);
            let mut next = Batch::new();
            next.push("INSERT INTO t (v) VALUES ($1)", vec!["b".into()]);
            next.push("INSERT INTO t (v) VALUES ($1)", vec!["c".into()]);
            store.write(next).await.expect("the writer is usable again");
            assert_eq!(count(&store).await, 2);
        }
    }

    #[tokio::test]
    async fn text_with_a_nul_byte_is_refused_on_postgres_and_nothing_is_written() {
        let Some(Scratch {
            store, _database, ..
        }) = postgres_store().await
        else {
            return;
        };
        sqlx::raw_sql("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("table");
        let mut batch = Batch::new();
        batch.push("INSERT INTO t (v) VALUES ($1)", vec!["fine".into()]);
        batch.push("INSERT INTO t (v) VALUES ($1)", vec!["nul\0byte".into()]);

        let Err(err) = store.write(batch).await else {
            panic!("refused");
        };

        assert!(
            matches!(&err, StoreError::Database(sqlx::Error::Encode(cause))
                if cause.downcast_ref::<LiteralError>() == Some(&LiteralError::NulInText)),
            "{err:?}"
        );
        assert_eq!(count(&store).await, 0);
    }

    #[tokio::test]
    async fn a_returning_statement_that_gives_no_row_is_an_error_on_postgres() {
        let Some(Scratch {
            store, _database, ..
        }) = postgres_store().await
        else {
            return;
        };
        sqlx::raw_sql("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("table");
        let mut batch = Batch::new();
        batch.push_returning(
            "UPDATE t SET v = $1 WHERE v = $2 RETURNING id",
            vec!["x".into(), "missing".into()],
        );

        let Err(err) = store.write(batch).await else {
            panic!("no row");
        };

        assert!(
            matches!(err, StoreError::Database(sqlx::Error::RowNotFound)),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_batch_abandoned_half_way_is_rolled_back_before_the_next_write() {
        let (store, _dir) = super::super::test_support::scratch_store().await;
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("table");
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

    #[tokio::test]
    async fn a_batch_abandoned_on_postgres_is_all_or_nothing_and_the_pool_stays_usable() {
        let Some(Scratch {
            store, _database, ..
        }) = postgres_store().await
        else {
            return;
        };
        sqlx::raw_sql("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)")
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("table");
        let mut batch = Batch::new();
        for n in 0..2000 {
            batch.push(
                "INSERT INTO t (v) VALUES ($1)",
                vec![format!("n{n}").into()],
            );
        }
        // Polled a few times, so the query is likely on its way, then
        // dropped before the whole answer is read. Whether it got that far
        // or not, the batch must be all or nothing.
        let mut abandoned = Box::pin(store.write(batch));
        for _ in 0..20 {
            if futures::poll!(&mut abandoned).is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(abandoned);

        let mut next = Batch::new();
        next.push("INSERT INTO t (v) VALUES ($1)", vec!["after".into()]);
        store.write(next).await.expect("written");

        let written = count(&store).await;
        assert!(
            written == 1 || written == 2001,
            "all of the abandoned batch or nothing, and the next write: {written}"
        );
    }
}
