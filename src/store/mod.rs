//! The database: connection, migrations, and typed access to every table.
//!
//! One code path serves SQLite (the default: a file in WAL mode, created with
//! its folder on first run) and PostgreSQL (for several gateway instances),
//! through sqlx's `Any` driver with runtime-checked queries. Queries use `$N`
//! placeholders, which both backends accept. Timestamps are Unix milliseconds.
//!
//! Each table has its own module adding methods to [`Store`] (and, for the
//! writes of a turn's steps, to [`Batch`], which commits several statements
//! in one round trip).
//!
//! # How the SQLite plumbing works, and why
//!
//! A turn is a handful of short writes separated by model calls. On SQLite
//! the cost of a write is dominated not by SQLite but by getting the
//! statement to sqlx's worker thread and the answer back, and by waiting for
//! the one writer SQLite allows. Three choices follow; each is measured by
//! `switchboard bench` (see the README for the figures).
//!
//! - **One shared writer connection** behind an async mutex, not a pool.
//!   SQLite admits one writer at a time anyway, so a pool only adds
//!   `SQLITE_BUSY` retries and a checkout that cost more CPU than the
//!   statement. Hot reads go through a second, read-only connection
//!   ([`Store::read_conn`]) so they never queue behind writes; WAL lets it
//!   read while the writer writes. A third connection checkpoints the WAL in
//!   the background (`checkpoint`), so no turn's commit pays for it.
//! - **A batch is one multi-statement string.** [`Store::write`] joins a
//!   [`Batch`]'s statements into `BEGIN IMMEDIATE; …; COMMIT;` and sends it
//!   with one argument list: one round trip to the worker per step of a
//!   turn instead of one per statement. sqlx's SQLite driver binds a `$N`
//!   placeholder to the N-th argument *of the whole query*, across
//!   statements, so each statement's `$1…$n` is shifted past the arguments
//!   of the statements before it (`batch::renumber`).
//! - **An abandoned batch is rolled back on next use.** sqlx runs the
//!   statements of one query one after another on its worker thread; when the
//!   future awaiting them is dropped (a timeout, a cancelled turn, shutdown),
//!   the worker stops after the statement in hand. The `COMMIT` then never
//!   runs and the shared connection is left inside an open transaction.
//!   `write` sets the `unfinished_batch` flag before sending and clears it
//!   when the answer arrives; [`Store::conn`] finds it still set and issues
//!   `ROLLBACK` before handing the connection out. A failed batch is rolled
//!   back at once.
//!
//! On PostgreSQL a batch is one simple-protocol query string, arguments
//! written in as literals, which PostgreSQL runs as one implicit transaction
//! (see `batch`): one round trip per step there too. Connections come from a
//! pool, and a batch cut short is all or nothing on the server's side, so the
//! rollback-on-next-use guard is SQLite's alone.
//!
//! ## Invariants
//!
//! - Every write that must be atomic with another goes through one [`Batch`]
//!   (guarded by `batch::tests::a_failing_statement_leaves_nothing_of_its_batch`).
//! - A batch cut short leaves nothing behind, and the next write commits
//!   (`batch::tests::a_batch_abandoned_half_way_is_rolled_back_before_the_next_write`).
//! - Placeholders renumber exactly
//!   (`batch::tests::placeholders_are_shifted_past_earlier_statements`), and
//!   on PostgreSQL values written in as literals read back byte for byte
//!   (`batch::tests::awkward_values_round_trip_byte_for_byte`).
//!
//! ## What a contributor must not do
//!
//! - Hold a [`Conn`] across anything slow (a model call, a network request,
//!   a sleep): on SQLite every other session waits for it.
//! - Open a transaction on the writer by hand outside [`Store::write`]: the
//!   rollback-on-next-use guard only knows about batches.
//! - Put a `$` inside a string literal of a batched statement: `renumber`
//!   would shift it, and on PostgreSQL a value would be written into it. A
//!   placeholder numbered past the argument list is not an error in sqlx's
//!   SQLite driver but a silent `NULL`, so an argument count that does not
//!   match a statement's placeholders corrupts data quietly; keep each
//!   statement's arguments next to its SQL. (On PostgreSQL a batch with a
//!   placeholder or an argument left over is refused.)
//! - Use placeholders other than `$N`: PostgreSQL takes only those, and
//!   `renumber` shifts only those.
//! - Put more than one statement in one [`Batch`] entry: on PostgreSQL the
//!   rows of the answer are matched to the entries by counting statements.
//! - Read through [`Store::read_conn`] what the same task has just written in
//!   a batch that has not returned yet; it sees only committed data.

mod api_transcripts;
mod api_views;
mod approvals;
mod batch;
mod checkpoint;
mod codec;
mod compactions;
mod console_views;
mod deliveries;
mod edits;
mod gauges;
mod inbound;
mod leases;
mod literal;
mod media;
mod memories;
mod messages;
mod outbox;
mod pairing;
mod platform_ids;
mod platform_leases;
mod principals;
mod session_id;
mod sessions;
pub mod settings;
mod stats;
pub mod tasks;
#[cfg(test)]
pub(crate) mod test_support;
mod tool_cache;
mod usage;

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow, install_default_drivers};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Executor};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use self::checkpoint::Checkpointer;

pub use crate::domain::{InvalidSessionId, SessionId};
pub use api_transcripts::{Attempt, KeyClaim, TranscriptCandidate, TranscriptOwner};
pub use api_views::{
    ApiScope, ApiSession, SessionCursor, TurnMessage, TurnRecord, VISIBLE_SEPARATOR,
};
pub use approvals::{ApprovalRow, Decided, Decision, NewApproval, Notice};
pub use batch::{Arg, Batch};
pub use checkpoint::WalStats;
pub use compactions::{Compaction, tokens_per_char};
pub use console_views::{
    ConsoleCompaction, ConsoleIdentity, ConsoleMessage, ConsolePrincipal, ConsoleSession,
    ConsoleTurn, SessionFilter, UsageGroup, UsageKey,
};
pub use deliveries::DeliveryRecord;
pub use edits::HiddenExchange;
pub use inbound::{Burst, Claim, InboundRow, NewInbound, Next};
pub use leases::{Fence, Renewal};
pub use literal::LiteralError;
pub use memories::{MemoryEntry, Remembered};
pub use messages::{MessageMeta, NewMessage, StoredMessage};
pub use messages::{
    RoundStart, ToolCallOutcome, ToolCheckpoint, WireEntry, round_request_id, tool_media_json,
};
pub use outbox::{OutboxRow, StoredReply, TurnEnd};
pub use pairing::{Applicant, PairingRequest};
pub use principals::{DirectChat, Identity, Redemption, SessionSummary};
pub use sessions::{NewSession, SessionRow, SessionTotals, SessionView};
pub use stats::StoreStats;
pub use usage::{EstimatedInput, ModelCallEnd, ModelCallStart, UsageRow, UsageSummary};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// How long a pooled PostgreSQL connection may sit idle before it is pinged
/// on checkout (it was pinged when it went back to the pool).
const RETEST_IDLE_CONNECTIONS: Duration = Duration::from_secs(1);

/// PostgreSQL ends a transaction left open this long between statements.
/// The store's own transactions span a few statements sent back to back; one
/// that idles is held by a frozen or partitioned instance, and its row locks
/// would otherwise block every other instance's takeover of those rows.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "SET idle_in_transaction_session_timeout = '5s'";

/// Which database engine a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// SQL giving the database's clock in Unix milliseconds. Leases are
    /// timed by it, so instances whose own clocks disagree still agree on
    /// when a lease expires.
    pub(crate) const fn clock_sql(self) -> &'static str {
        match self {
            Self::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
            Self::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }
}

/// Why a database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported database URL (use sqlite:// or postgres://)")]
    UnsupportedUrl,
    #[error("could not create the database folder {path}: {cause}")]
    CreateDir { path: String, cause: std::io::Error },
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// A fenced write found the session's lease granted to another
    /// instance since: nothing was written.
    #[error("the session's lease has passed to another instance")]
    LeaseLost,
}

// By hand rather than `#[from]`, which would also make the cause the error's
// `source()`: the message already includes it, and a report that walks the
// chain would print it twice.
impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(err)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(err)
    }
}

/// Who this process is in lease and claim rows, and how long its claims
/// last without renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub lease_ttl: Duration,
}

impl Instance {
    /// A one-off identity (a random id), for stores that never claim work
    /// across restarts: tests and command-line tools.
    pub fn ephemeral() -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            lease_ttl: Duration::from_secs(30),
        }
    }

    /// How long its claims last, in milliseconds (as the rows keep it).
    pub fn lease_ttl_ms(&self) -> i64 {
        crate::domain::millis(self.lease_ttl)
    }
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub url: String,
    /// PostgreSQL pool size. SQLite always uses one shared connection (see
    /// [`Store`]).
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Whether a commit returns only once it is flushed to disk: `None`
    /// keeps each engine's default (SQLite in WAL mode with `synchronous =
    /// NORMAL` does not flush, PostgreSQL's `synchronous_commit = on` does).
    pub flush_commits: Option<bool>,
}

impl StoreOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            flush_commits: None,
        }
    }
}

/// The page size of a SQLite file this version creates, in bytes.
/// Every commit appends each page it changed to the WAL, whole, and a turn's
/// commits change a few rows in many B-trees (a table and its indexes each
/// one page): with SQLite's default 4 KiB a turn appended ~54 frames and
/// 218 KiB, with 1 KiB ~66 frames and 67 KiB, for the same CPU per turn
/// (`switchboard bench`, history 20 and 100 turns). A file created earlier
/// keeps its page size.
pub const SQLITE_PAGE_SIZE: u32 = 1024;

/// A handle to the database; cheap to clone.
///
/// SQLite writes go through one shared connection behind an async mutex.
/// SQLite allows one writer at a time anyway, so a single connection avoids
/// "database is locked" under concurrent sessions; and taking a mutex costs
/// far less than a pool checkout (which measured ~110 µs of CPU per
/// statement, against ~35 µs for the statement itself). Statements are
/// microseconds and no connection is ever held across a model call. The hot
/// reads (history, session rows, routes, identities) go through a second,
/// read-only connection ([`Store::read_conn`]), so they do not queue behind
/// other sessions' writes. PostgreSQL uses a pool.
#[derive(Clone)]
pub struct Store {
    connections: Connections,
    backend: Backend,
    /// Set while a multi-statement batch runs on the SQLite writer (see
    /// [`Store::write`]). If the future running it is dropped half-way,
    /// sqlx's worker stops after the statement in hand and the batch's
    /// `COMMIT` never runs; the flag stays set, and the next checkout of the
    /// writer rolls the open transaction back first.
    unfinished_batch: Arc<AtomicBool>,
    /// The lease grant every batch is conditional on (see
    /// [`Store::fenced`]); `None` for unfenced writes.
    fence: Option<Arc<Fence>>,
    /// This process, in the claims it writes.
    instance: Arc<Instance>,
    /// What was sent to the database (see `stats`).
    stats: Arc<stats::Counters>,
    /// The database's random id, once read (see [`Store::database_id`]).
    database_id: Arc<tokio::sync::OnceCell<Option<String>>>,
}

#[derive(Clone)]
enum Connections {
    /// SQLite: the writer (`None` once closed), and a second, read-only
    /// connection for the hot reads (history, session rows, routes) so they
    /// need not wait behind other sessions' writes; WAL lets it read while
    /// the writer writes. `None` for an in-memory database, which a second
    /// connection would not see.
    Shared {
        writer: SharedConn,
        reader: Option<SharedConn>,
        /// WAL checkpoints off the turn path; `None` in memory.
        checkpointer: Option<Arc<Checkpointer>>,
    },
    Pool(AnyPool),
}

pub(super) type SharedConn = Arc<Mutex<Option<AnyConnection>>>;

/// A connection checked out of the [`Store`] for a few statements.
pub enum Conn<'a> {
    Shared(MappedMutexGuard<'a, AnyConnection>),
    Pooled(PoolConnection<Any>),
}

impl Deref for Conn<'_> {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        match self {
            Self::Shared(conn) => conn,
            Self::Pooled(conn) => conn,
        }
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            Self::Shared(conn) => conn,
            Self::Pooled(conn) => conn,
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Store {
    /// Connects (creating a SQLite file and its folder when needed) and runs
    /// the migrations.
    ///
    /// # Errors
    /// An unsupported URL, an unreachable database, or a failed migration.
    pub async fn connect(options: &StoreOptions) -> Result<Self, StoreError> {
        let store = Self::connect_without_migrating(options).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Connects without running migrations.
    ///
    /// # Errors
    /// An unsupported URL or an unreachable database.
    pub async fn connect_without_migrating(options: &StoreOptions) -> Result<Self, StoreError> {
        install_default_drivers();
        let backend = backend_of(&options.url)?;
        let connections = match backend {
            Backend::Sqlite => {
                let url = prepare_sqlite_url(&options.url)?;
                let mut conn = AnyConnection::connect(&url).await?;
                // WAL: readers never block the writer; NORMAL survives a
                // process crash without an fsync per commit, FULL a power
                // cut too.
                // Before WAL mode, the one moment a new file takes it.
                conn.execute(format!("PRAGMA page_size = {SQLITE_PAGE_SIZE}").as_str())
                    .await?;
                conn.execute("PRAGMA journal_mode = WAL").await?;
                conn.execute(if options.flush_commits == Some(true) {
                    "PRAGMA synchronous = FULL"
                } else {
                    "PRAGMA synchronous = NORMAL"
                })
                .await?;
                conn.execute("PRAGMA busy_timeout = 10000").await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                // Checkpoints run in the background (see `checkpoint`), not
                // inside whichever turn's commit fills the WAL.
                conn.execute("PRAGMA wal_autocheckpoint = 0").await?;
                // When the log starts again, a file grown past this size in
                // a burst is cut back to it (see `checkpoint`).
                conn.execute(
                    format!("PRAGMA journal_size_limit = {}", checkpoint::FILE_LIMIT).as_str(),
                )
                .await?;
                let writer = Arc::new(Mutex::new(Some(conn)));
                // An in-memory database is one connection's alone: no
                // second connection would see it, and it has no WAL.
                let (reader, checkpointer) = if is_in_memory(&options.url) {
                    (None, None)
                } else {
                    let mut reader = AnyConnection::connect(&url).await?;
                    reader.execute("PRAGMA busy_timeout = 10000").await?;
                    reader.execute("PRAGMA query_only = ON").await?;
                    let reader = Arc::new(Mutex::new(Some(reader)));
                    let checkpointer = Checkpointer::start(
                        &url,
                        sqlite_wal_path(&url),
                        Arc::clone(&writer),
                        Arc::clone(&reader),
                    )
                    .await?;
                    (Some(reader), Some(Arc::new(checkpointer)))
                };
                Connections::Shared {
                    writer,
                    reader,
                    checkpointer,
                }
            }
            Backend::Postgres => Connections::Pool({
                let flush_commits = options.flush_commits;
                AnyPoolOptions::new()
                    .max_connections(options.max_connections.max(1))
                    .acquire_timeout(options.acquire_timeout)
                    // sqlx pings every connection as it goes back to the
                    // pool, and by default again as it comes out: a round
                    // trip per checkout, as many as a turn's own. Only a
                    // connection idle for a while is tested again.
                    .test_before_acquire(false)
                    .after_connect(move |conn, _meta| {
                        Box::pin(async move {
                            conn.execute(IDLE_IN_TRANSACTION_TIMEOUT).await?;
                            // Off: a commit returns once its WAL record is
                            // written to PostgreSQL's buffers; a crash of
                            // the server (not of this instance) can lose
                            // the last fraction of a second of commits.
                            match flush_commits {
                                Some(true) => conn.execute("SET synchronous_commit = on").await?,
                                Some(false) => conn.execute("SET synchronous_commit = off").await?,
                                None => return Ok(()),
                            };
                            Ok(())
                        })
                    })
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= RETEST_IDLE_CONNECTIONS {
                                conn.ping().await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect(&options.url)
                    .await?
            }),
        };
        Ok(Self {
            connections,
            backend,
            unfinished_batch: Arc::new(AtomicBool::new(false)),
            fence: None,
            instance: Arc::new(Instance::ephemeral()),
            stats: Arc::default(),
            database_id: Arc::default(),
        })
    }

    /// This store, writing its claims as `instance`.
    pub fn with_instance(self, instance: Instance) -> Store {
        Store {
            instance: Arc::new(instance),
            ..self
        }
    }

    /// Who this store writes claims as.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// SQL giving the database's clock in Unix milliseconds, for statements
    /// that time leases and claims (see [`Backend::clock_sql`]).
    pub fn clock_sql(&self) -> &'static str {
        self.backend.clock_sql()
    }

    /// Whether several instances may share this database (PostgreSQL), so
    /// that cross-instance signals are needed.
    pub fn is_shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// Checks a connection out for a few statements. Never hold it across
    /// anything slow: on SQLite every other session waits for it.
    ///
    /// # Errors
    /// The store was closed, or no pooled connection could be had.
    pub async fn conn(&self) -> Result<Conn<'_>, StoreError> {
        self.stats.checkout();
        self.writer().await
    }

    /// The writer (SQLite) or a pooled connection, uncounted: for
    /// [`Store::write`], which counts its batch itself.
    async fn writer(&self) -> Result<Conn<'_>, StoreError> {
        match &self.connections {
            Connections::Shared {
                writer,
                checkpointer,
                ..
            } => {
                let mut conn = lock_shared(writer).await?;
                if self.unfinished_batch.swap(false, Ordering::SeqCst) {
                    tracing::warn!("rolling back a batch that was abandoned half-way");
                    // Fails harmlessly when the batch had committed.
                    let _ = conn.execute("ROLLBACK").await;
                }
                if let Some(checkpointer) = checkpointer {
                    checkpointer.before_write(&mut conn).await;
                }
                Ok(conn)
            }
            Connections::Pool(pool) => Ok(Conn::Pooled(pool.acquire().await?)),
        }
    }

    /// A connection for reads only. On SQLite it is a second connection, so
    /// a read waits for no write (it sees everything committed before it
    /// starts); on PostgreSQL it is any pooled connection.
    ///
    /// # Errors
    /// The store was closed, or no pooled connection could be had.
    pub async fn read_conn(&self) -> Result<Conn<'_>, StoreError> {
        match &self.connections {
            Connections::Shared {
                reader: Some(reader),
                ..
            } => {
                self.stats.checkout();
                lock_shared(reader).await
            }
            _ => self.conn().await,
        }
    }

    /// What the store has sent to the database since it was opened.
    pub fn stats(&self) -> StoreStats {
        self.stats.snapshot()
    }

    /// Applies pending migrations for this backend.
    ///
    /// # Errors
    /// A migration that fails or was changed after it was applied.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        match self.backend {
            Backend::Sqlite => SQLITE_MIGRATOR.run(&mut *conn).await?,
            Backend::Postgres => POSTGRES_MIGRATOR.run(&mut *conn).await?,
        }
        Ok(())
    }

    /// The database's clock in Unix milliseconds.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn database_now_ms(&self) -> Result<i64, StoreError> {
        let now = sqlx::query_scalar::<_, i64>(&format!("SELECT {}", self.clock_sql()))
            .fetch_one(&mut *self.read_conn().await?)
            .await?;
        Ok(now)
    }

    /// Checks the database answers.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.conn().await?)
            .await?;
        Ok(())
    }

    /// Closes the database (checkpointing SQLite's WAL); later calls fail.
    pub async fn close(&self) {
        match &self.connections {
            Connections::Shared {
                writer,
                reader,
                checkpointer,
            } => {
                if let Some(checkpointer) = checkpointer {
                    checkpointer.stop().await;
                }
                // The reader first, so the writer's close can checkpoint.
                for shared in reader.iter().chain([writer]) {
                    if let Some(conn) = shared.lock().await.take()
                        && let Err(err) = conn.close().await
                    {
                        tracing::warn!(error = %err, "closing the database failed");
                    }
                }
            }
            Connections::Pool(pool) => pool.close().await,
        }
    }
}

async fn lock_shared(shared: &SharedConn) -> Result<Conn<'_>, StoreError> {
    let guard = shared.lock().await;
    MutexGuard::try_map(guard, Option::as_mut)
        .map(Conn::Shared)
        .map_err(|_| StoreError::Database(sqlx::Error::PoolClosed))
}

fn is_in_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    rest.is_empty() || rest.starts_with(":memory:") || rest.contains("mode=memory")
}

fn backend_of(url: &str) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        Err(StoreError::UnsupportedUrl)
    }
}

/// The WAL file of the SQLite database at `url` (as `prepare_sqlite_url`
/// returns it): the database file's path with `-wal` appended.
fn sqlite_wal_path(url: &str) -> std::path::PathBuf {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let path = rest.split_once('?').map_or(rest, |(path, _)| path);
    std::path::PathBuf::from(format!("{path}-wal"))
}

/// Creates the database file's folder and asks SQLite to create the file.
fn prepare_sqlite_url(url: &str) -> Result<String, StoreError> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" {
        return Ok(url.to_owned());
    }
    if let Some(parent) = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|cause| StoreError::CreateDir {
            path: parent.display().to_string(),
            cause,
        })?;
    }
    let mut query = query.to_owned();
    if !query.split('&').any(|pair| pair.starts_with("mode=")) {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str("mode=rwc");
    }
    Ok(format!("sqlite://{path}?{query}"))
}

/// A row read as `T` (`#[derive(sqlx::FromRow)]`); a value that decodes
/// to no valid `T` is corrupt data.
pub(crate) fn read<T>(row: &AnyRow) -> Result<T, StoreError>
where
    T: for<'r> sqlx::FromRow<'r, AnyRow>,
{
    T::from_row(row).map_err(|err| match err {
        sqlx::Error::ColumnDecode { index, source } => {
            StoreError::Corrupt(format!("column {index}: {source}"))
        }
        other => StoreError::Database(other),
    })
}

/// A stored name read back as the enum `T` it is the name of; `what` says
/// which column, for the error.
pub(crate) fn stored<T: std::str::FromStr>(what: &str, value: &str) -> Result<T, StoreError> {
    value
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("{what} {value:?}")))
}

/// An optional stored name read back as the enum `T` (see [`stored`]).
pub(crate) fn optional_stored<T: std::str::FromStr>(
    what: &str,
    value: Option<String>,
) -> Result<Option<T>, StoreError> {
    value.map(|value| stored(what, &value)).transpose()
}

/// Converts an unsigned counter for storage (saturating: counters never get
/// near `i64::MAX`, but a hostile provider response must not wrap around).
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Converts a stored counter back (negative values, which the code never
/// writes, read as zero).
pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::now_ms;

    #[test]
    fn sqlite_urls_gain_create_mode_and_keep_their_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/deeper/db.sqlite");
        let url = format!("sqlite://{}", path.display());
        let prepared = prepare_sqlite_url(&url).expect("prepared");
        assert_eq!(prepared, format!("sqlite://{}?mode=rwc", path.display()));
        assert!(path.parent().is_some_and(Path::exists));
    }

    #[tokio::test]
    async fn a_new_sqlite_file_has_small_pages_and_an_old_one_keeps_its_own() {
        let (store, dir) = test_support::scratch_store().await;
        let page_size = |store: Store| async move {
            sqlx::query_scalar::<_, i64>("PRAGMA page_size")
                .fetch_one(&mut *store.conn().await.expect("conn"))
                .await
                .expect("page size")
        };
        assert_eq!(page_size(store).await, i64::from(SQLITE_PAGE_SIZE));

        // A file made with SQLite's default (as earlier versions did) is
        // opened as it is.
        let old = dir.path().join("old.db");
        let url = format!("sqlite://{}", old.display());
        let mut conn = AnyConnection::connect(&prepare_sqlite_url(&url).expect("url"))
            .await
            .expect("connect");
        conn.execute("PRAGMA journal_mode = WAL")
            .await
            .expect("wal");
        conn.execute("CREATE TABLE t (x INTEGER)")
            .await
            .expect("table");
        conn.close().await.expect("closed");
        let reopened = Store::connect(&StoreOptions::new(url))
            .await
            .expect("store");
        assert_eq!(page_size(reopened).await, 4096);
    }

    #[tokio::test]
    async fn the_database_clock_reads_unix_milliseconds() {
        let (store, _dir) = test_support::scratch_store().await;
        let before = now_ms();
        let database = store.database_now_ms().await.expect("clock");
        let after = now_ms();
        // The same machine's clock, read through SQL: equal to within the
        // rounding of SQLite's Julian day arithmetic.
        assert!(
            (before - 5..=after + 5).contains(&database),
            "{before} <= {database} <= {after}"
        );
    }

    #[tokio::test]
    async fn postgres_ends_transactions_a_frozen_instance_left_open() {
        let Some(database) = test_support::fresh_postgres().await else {
            return;
        };
        let store = Store::connect(&StoreOptions::new(database.url()))
            .await
            .expect("store");
        let timeout: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("shown");
        assert_eq!(timeout, "5s");
    }

    #[test]
    fn other_schemes_are_rejected() {
        assert!(matches!(
            backend_of("mysql://localhost/x"),
            Err(StoreError::UnsupportedUrl)
        ));
    }
}
