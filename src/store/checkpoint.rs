//! WAL checkpoints off the turn path, and the WAL's size bound (SQLite files).
//!
//! Left to itself, SQLite checkpoints inside the commit that takes the WAL
//! past 1000 pages: that commit copies the WAL back into the database file
//! and fsyncs it, milliseconds in which every session waits for the writer.
//! The store turns automatic checkpoints off on its writer and runs them
//! here instead, on a connection of their own.
//!
//! Most checkpoints are `PASSIVE`: they never wait for the writer or block
//! it or the readers. But a passive checkpoint only copies the WAL back; the
//! log starts again from its beginning only when a write finds *everything*
//! copied, and under sustained load a new commit always lands between a
//! checkpoint and the next write, so the WAL would grow without bound (1.3 GB
//! after 6,000 turns in 16 s, and a restart after a crash then replays it
//! all). So the task looks every [`POLL`] at the writer's count of writes
//! (a counter, no system call; an idle store costs nothing): when it was
//! written to, a passive checkpoint copies the new frames without
//! blocking anyone and says how long the log is; once that passes
//! [`WAL_LIMIT`], a `RESTART` checkpoint takes the write lock for the few
//! frames left, finds no reader on the old log, and so makes the next commit
//! start the log again, overwriting the file in place. The writer's
//! `journal_size_limit` ([`FILE_LIMIT`]) cuts back a file grown past that
//! in a burst.
//!
//! The restart holds the store's writer and reader connections (their async
//! mutexes) while it runs. Commits then queue on the mutex, as they do
//! behind one another, instead of meeting SQLite's lock and sleeping in its
//! busy handler (1, 2, 5, 10 ms… per retry); and with the reader held no
//! read pins the old log, so the restart never waits. It blocks commits for
//! the copy of the frames the passive checkpoint left (a millisecond or so).
//! Should the reader not come free at once (a caller holding it while it
//! waits for the writer), the restart lets go and tries again at the next
//! poll; its own busy timeout is short for the same reason.
//!
//! The task also counts the WAL frames written, for `switchboard bench`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::{AnyConnection, Connection, Executor, Row};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{SharedConn, Store, StoreError};

/// How often the WAL is checkpointed passively. When idle a checkpoint finds
/// nothing to do.
const EVERY: Duration = Duration::from_millis(250);

/// How often the WAL file is looked at (one `stat`).
const POLL: Duration = Duration::from_millis(10);

/// The size of the log past which it is restarted.
pub(super) const WAL_LIMIT: u64 = 4 * 1024 * 1024;

/// The size a WAL file grown in a burst is cut back to when the log
/// restarts (`journal_size_limit`). Larger than [`WAL_LIMIT`] so that under
/// steady load the file is overwritten in place: cutting it at every restart
/// made the next commit wait for the kernel to drop the cut pages (p99 of a
/// turn 10 → 20 ms in `switchboard bench`).
pub(super) const FILE_LIMIT: u64 = 4 * WAL_LIMIT;

/// The size past which a growing WAL file is checkpointed by the writer
/// itself ([`Checkpointer::before_write`]): room for the background task's
/// restart at [`WAL_LIMIT`] first, and for one large commit after it.
pub(super) const BACKSTOP: u64 = 3 * WAL_LIMIT;

/// How long the writer's backstop checkpoint is retried while another
/// checkpoint runs, and how often.
const BACKSTOP_PATIENCE: Duration = Duration::from_secs(10);
const BACKSTOP_RETRY: Duration = Duration::from_millis(2);

/// The writer looks at the WAL file's size (one `stat`) at every this many
/// writes, not at each: a turn is about seven commits of a few KiB, so the
/// file grows at most a few hundred KiB past [`BACKSTOP`] between looks,
/// far under [`FILE_LIMIT`].
const BACKSTOP_EVERY: u64 = 16;

/// How long a restarting checkpoint waits for the writer's batch in hand
/// and for readers to leave the old log before giving up until the next
/// poll. Commits wait behind it meanwhile, so it is short.
const RESTART_WAIT_MS: u32 = 50;

/// What the checkpointer has seen of the WAL since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Frames (one page each) appended to the WAL, counted at each
    /// checkpoint.
    pub frames: u64,
    /// Bytes per frame: the page size plus the frame header.
    pub frame_bytes: u64,
    /// The largest size of the WAL file seen at a poll.
    pub peak_file_bytes: u64,
    /// Checkpoints that restarted the log because it had passed the limit.
    pub restarts: u64,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    frame_bytes: AtomicU64,
    peak_file_bytes: AtomicU64,
    restarts: AtomicU64,
    /// The WAL file's size when the writer last looked (see
    /// [`Checkpointer::before_write`]).
    writer_seen_bytes: AtomicU64,
    /// Writes checked out on the writer since the store was opened: the
    /// background task checkpoints only when it moved, so an idle store
    /// makes no system call, and the writer looks at the file's size only
    /// at every [`BACKSTOP_EVERY`]-th write.
    writes: AtomicU64,
    /// Where the frame count stood at the last checkpoint, whoever ran it.
    /// A std mutex: held to add up one checkpoint, never across an await.
    tally: std::sync::Mutex<Tally>,
}

impl Counters {
    /// Counts the frames a checkpoint found in the log (`log` frames long,
    /// the WAL header's sequence number `sequence` read before it) that
    /// no earlier checkpoint counted.
    fn count(&self, sequence: Option<u32>, log: u64) {
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The log starts again only once everything in it was copied back
        // with no frame appended since, so no frame goes uncounted across a
        // restart.
        let restarted = sequence.is_some() && sequence != tally.sequence;
        let new = if restarted || log < tally.log {
            log
        } else {
            log - tally.log
        };
        self.frames.fetch_add(new, Ordering::Relaxed);
        tally.log = log;
        tally.sequence = sequence;
    }
}

/// The background checkpointing task of one store.
pub(super) struct Checkpointer {
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
    wal: PathBuf,
}

impl Checkpointer {
    /// Opens a connection to the database at `url` (whose WAL is the file
    /// `wal`) and checkpoints through it until [`Checkpointer::stop`];
    /// `writer` and `reader` are the store's connections, held during a
    /// restart.
    pub(super) async fn start(
        url: &str,
        wal: PathBuf,
        writer: SharedConn,
        reader: SharedConn,
    ) -> Result<Self, StoreError> {
        let mut conn = AnyConnection::connect(url).await?;
        conn.execute(format!("PRAGMA busy_timeout = {RESTART_WAIT_MS}").as_str())
            .await?;
        let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&mut conn)
            .await?;
        let counters = Arc::new(Counters::default());
        counters.frame_bytes.store(
            u64::try_from(page_size).unwrap_or(0) + 24,
            Ordering::Relaxed,
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            Task {
                conn,
                wal: wal.clone(),
                wal_file: None,
                writer,
                reader,
                counters: Arc::clone(&counters),
            },
            stop.clone(),
        ));
        Ok(Self {
            stop,
            task: Mutex::new(Some(task)),
            counters,
            wal,
        })
    }

    /// The writer's backstop, called with the writer connection before each
    /// write (one `stat`). Should the background task fall behind (a slow
    /// disk can make its passive checkpoint take longer than the writer
    /// needs to append megabytes, and while it runs no other checkpoint
    /// can), a WAL file that has grown past [`BACKSTOP`] since the writer
    /// last looked gets a `RESTART` checkpoint here, on the writer: it waits
    /// (within the writer's busy timeout) for a running checkpoint and for
    /// readers of the old log to finish, copies the whole log back, and
    /// makes the next commit start the log again. This write waits for it;
    /// the file stays within [`BACKSTOP`] and one commit, under
    /// [`FILE_LIMIT`], whatever the background task manages.
    pub(super) async fn before_write(&self, writer: &mut AnyConnection) {
        let writes = self.counters.writes.fetch_add(1, Ordering::Relaxed);
        if !writes.is_multiple_of(BACKSTOP_EVERY) {
            return;
        }
        let size = std::fs::metadata(&self.wal).map_or(0, |m| m.len());
        let seen = self
            .counters
            .writer_seen_bytes
            .swap(size, Ordering::Relaxed);
        if size <= BACKSTOP || size <= seen {
            return;
        }
        // A checkpoint already running (the background's, slowed by the
        // disk) makes this one return busy at once: hold the writer and try
        // again until the log is copied back, so the file cannot grow
        // meanwhile; the write waits, which is the backpressure wanted.
        let deadline = tokio::time::Instant::now() + BACKSTOP_PATIENCE;
        loop {
            let sequence = wal_sequence(&mut None, &self.wal);
            let finished = match sqlx::query("PRAGMA wal_checkpoint(RESTART)")
                .fetch_one(&mut *writer)
                .await
            {
                Ok(row) => {
                    let busy: i64 = row.try_get(0).unwrap_or(1);
                    let log = u64::try_from(row.try_get::<i64, _>(1).unwrap_or(-1)).unwrap_or(0);
                    self.counters.count(sequence, log);
                    busy == 0
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the writer's WAL checkpoint failed");
                    return;
                }
            };
            if finished {
                self.counters.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(size, "the writer checkpointed a WAL the background had not");
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(size, "the WAL could not be checkpointed; writing on");
                return;
            }
            tokio::time::sleep(BACKSTOP_RETRY).await;
        }
    }

    /// Ends the task and closes its connection (before the store's last
    /// connection closes, which then checkpoints and removes the WAL).
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }

    fn stats(&self) -> WalStats {
        WalStats {
            frames: self.counters.frames.load(Ordering::Relaxed),
            frame_bytes: self.counters.frame_bytes.load(Ordering::Relaxed),
            peak_file_bytes: self.counters.peak_file_bytes.load(Ordering::Relaxed),
            restarts: self.counters.restarts.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Store {
    /// What the background checkpointer has seen of the WAL; `None` unless
    /// the store is a SQLite file.
    pub fn wal_stats(&self) -> Option<WalStats> {
        match &self.connections {
            super::Connections::Shared {
                checkpointer: Some(checkpointer),
                ..
            } => Some(checkpointer.stats()),
            _ => None,
        }
    }
}

/// Where the frame count stood at the last checkpoint.
#[derive(Default)]
struct Tally {
    /// Frames in the log at the last checkpoint.
    log: u64,
    /// The WAL header's checkpoint sequence number then; it changes when
    /// the log starts again from its beginning.
    sequence: Option<u32>,
}

/// What the background task works with.
struct Task {
    conn: AnyConnection,
    wal: PathBuf,
    /// The WAL file, kept open to read its header at each checkpoint
    /// without opening it again; opened on first use.
    wal_file: Option<std::fs::File>,
    writer: SharedConn,
    reader: SharedConn,
    counters: Arc<Counters>,
}

/// How long a restart waits for the reader connection to come free.
const READER_WAIT: Duration = Duration::from_millis(5);

async fn run(mut task: Task, stop: CancellationToken) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + POLL, POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_writes = task.counters.writes.load(Ordering::Relaxed);
    let mut last_size = 0;
    let mut last_passive = tokio::time::Instant::now();
    // Whether a write was seen since the last checkpoint began: one more
    // passive checkpoint then copies what the last write committed after.
    let mut pending = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => break,
        }
        // Written to since the last poll (the writer counts its checkouts,
        // so an idle store costs no `stat`): then a passive checkpoint
        // copies the new frames and says how long the log is.
        let writes = task.counters.writes.load(Ordering::Relaxed);
        let busy = writes != last_writes;
        last_writes = writes;
        if !(busy || pending && last_passive.elapsed() >= EVERY) {
            continue;
        }
        pending = busy;
        let size = task.wal_file_size();
        task.counters
            .peak_file_bytes
            .fetch_max(size, Ordering::Relaxed);
        // A file growing past the limit holds a log at least that long (the
        // log is written from the start of the file): restart it at once,
        // rather than after a passive checkpoint that copies while the
        // writer goes on appending (under a loaded disk that race let the
        // file reach several times its bound).
        let growing_past_limit = size > WAL_LIMIT && size > last_size;
        last_size = size;
        if growing_past_limit && restart(&mut task).await {
            task.counters.restarts.fetch_add(1, Ordering::Relaxed);
            last_passive = tokio::time::Instant::now();
            continue;
        }
        last_passive = tokio::time::Instant::now();
        let log = checkpoint(&mut task, "PASSIVE")
            .await
            .map_or(0, |(_, log)| log);
        let frame_bytes = task.counters.frame_bytes.load(Ordering::Relaxed);
        if log.saturating_mul(frame_bytes) > WAL_LIMIT && restart(&mut task).await {
            task.counters.restarts.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Err(err) = task.conn.close().await {
        tracing::warn!(error = %err, "closing the checkpoint connection failed");
    }
}

impl Task {
    /// The WAL file's size (0 when it cannot be read), through the handle
    /// kept open when there is one.
    fn wal_file_size(&mut self) -> u64 {
        if self.wal_file.is_none() {
            self.wal_file = std::fs::File::open(&self.wal).ok();
        }
        match self.wal_file.as_ref().map(std::fs::File::metadata) {
            Some(Ok(meta)) => meta.len(),
            _ => {
                self.wal_file = None;
                0
            }
        }
    }
}

/// A `RESTART` checkpoint with the store's connections held (see the module
/// comment); true when the next commit starts the log again.
async fn restart(task: &mut Task) -> bool {
    let writer = Arc::clone(&task.writer);
    let reader = Arc::clone(&task.reader);
    let _writer = writer.lock().await;
    let Ok(_reader) = tokio::time::timeout(READER_WAIT, reader.lock()).await else {
        return false;
    };
    checkpoint(task, "RESTART")
        .await
        .is_some_and(|(finished, _)| finished)
}

/// Runs one checkpoint in `mode` and counts the frames written since the
/// last; returns whether it finished (for `RESTART`: the next commit starts
/// the log again) and how long the log is, or `None` when it failed.
async fn checkpoint(task: &mut Task, mode: &str) -> Option<(bool, u64)> {
    // Read before the checkpoint: a restart after it is counted next time.
    let sequence = wal_sequence(&mut task.wal_file, &task.wal);
    let row = match sqlx::query(&format!("PRAGMA wal_checkpoint({mode})"))
        .fetch_one(&mut task.conn)
        .await
    {
        Ok(row) => row,
        Err(err) => {
            tracing::warn!(error = %err, mode, "WAL checkpoint failed; retrying later");
            return None;
        }
    };
    let busy: i64 = row.try_get(0).unwrap_or(1);
    let log = u64::try_from(row.try_get::<i64, _>(1).unwrap_or(-1)).unwrap_or(0);
    task.counters.count(sequence, log);
    if busy != 0 && mode != "PASSIVE" {
        tracing::debug!(
            mode,
            "WAL checkpoint could not finish; retrying at the next poll"
        );
    }
    Some((busy == 0, log))
}

/// The checkpoint sequence number in the WAL file's header (bytes 12..16,
/// big-endian), which SQLite bumps each time the log starts again.
/// `file` is the WAL kept open (opened here when `None`).
fn wal_sequence(file: &mut Option<std::fs::File>, wal: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut header = [0_u8; 16];
    if file.is_none() {
        *file = std::fs::File::open(wal).ok();
    }
    if file.as_ref()?.read_exact_at(&mut header, 0).is_err() {
        // Cut short or gone: open it afresh next time.
        *file = None;
        return None;
    }
    let bytes: [u8; 4] = header.get(12..16)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::{Store, StoreOptions};
    use super::{FILE_LIMIT, WAL_LIMIT};

    /// Sustained writes with no pause (the load under which a passive
    /// checkpoint never finds a moment to start the log again) leave the WAL
    /// file under its bound. A size check: how fast does not matter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_bounded_under_sustained_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bounded.db");
        let wal = dir.path().join("bounded.db-wal");
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&StoreOptions::new(url))
            .await
            .expect("store");
        {
            let mut conn = store.conn().await.expect("conn");
            sqlx::query("CREATE TABLE t (k TEXT NOT NULL, v TEXT NOT NULL)")
                .execute(&mut *conn)
                .await
                .expect("table");
            sqlx::query("CREATE INDEX t_k ON t (k)")
                .execute(&mut *conn)
                .await
                .expect("index");
        }
        // Each commit writes about 5 pages: 3,000 of them are ~60 MB of WAL,
        // several times the bound.
        let mut largest = 0;
        for i in 0..3_000 {
            let mut conn = store.conn().await.expect("conn");
            sqlx::query("INSERT INTO t (k, v) VALUES ($1, printf('%.16000c', 'x'))")
                .bind(format!("key-{i}"))
                .execute(&mut *conn)
                .await
                .expect("insert");
            drop(conn);
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        // Let the checkpointer count the last frames.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        let stats = store.wal_stats().expect("a file database has WAL stats");
        let written = stats.frames * stats.frame_bytes;
        assert!(
            written > 3 * FILE_LIMIT,
            "the test wrote too little to show a bound: {written} bytes"
        );
        assert!(stats.restarts > 0, "the log was never restarted");
        let peak = largest.max(stats.peak_file_bytes);
        assert!(
            peak <= FILE_LIMIT,
            "the WAL reached {peak} bytes after {written} bytes written \
             (restart at {WAL_LIMIT}, file limit {FILE_LIMIT})"
        );
        store.close().await;
    }

    #[tokio::test]
    async fn commits_leave_checkpoints_to_the_background_task() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("wal.db");
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&StoreOptions::new(url))
            .await
            .expect("store");
        let mut conn = store.conn().await.expect("conn");
        let autocheckpoint: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
            .fetch_one(&mut *conn)
            .await
            .expect("pragma");
        assert_eq!(autocheckpoint, 0, "no checkpoint inside a commit");
        sqlx::query("CREATE TABLE t (v TEXT NOT NULL)")
            .execute(&mut *conn)
            .await
            .expect("table");
        // About 1 MB, under SQLite's own 1000-page threshold: only the
        // background task moves it into the database file.
        let before = std::fs::metadata(&path).expect("db file").len();
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 250) \
             INSERT INTO t SELECT printf('%.4000c', 'x') FROM n",
        )
        .execute(&mut *conn)
        .await
        .expect("rows");
        drop(conn);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::metadata(&path).expect("db file").len() < before + 1_000_000 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the WAL was never checkpointed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        store.close().await;
    }
}
