//! WAL checkpoints off the turn path (SQLite files).
//!
//! Left to itself, SQLite checkpoints inside the commit that takes the WAL
//! past 1000 pages: that commit copies the WAL back into the database file
//! and fsyncs it, milliseconds in which every session waits for the writer.
//! The store turns automatic checkpoints off on its writer and runs them
//! here instead, on a connection of their own, as `PASSIVE` checkpoints,
//! which never wait for the writer or block it or the readers.

use std::time::Duration;

use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::StoreError;

/// How often the WAL is checkpointed. At hundreds of turns a second this
/// keeps it to a few megabytes; when idle a checkpoint finds nothing to do.
const EVERY: Duration = Duration::from_millis(250);

/// The background checkpointing task of one store.
pub(super) struct Checkpointer {
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Opens a connection to the database at `url` and checkpoints through
    /// it until [`Checkpointer::stop`].
    pub(super) async fn start(url: &str) -> Result<Self, StoreError> {
        let mut conn = AnyConnection::connect(url).await?;
        conn.execute("PRAGMA busy_timeout = 10000").await?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(conn, stop.clone()));
        Ok(Self {
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Ends the task and closes its connection (before the store's last
    /// connection closes, which then checkpoints and removes the WAL).
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn run(mut conn: AnyConnection, stop: CancellationToken) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + EVERY, EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => break,
        }
        if let Err(err) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").await {
            tracing::warn!(error = %err, "WAL checkpoint failed; retrying later");
        }
    }
    if let Err(err) = conn.close().await {
        tracing::warn!(error = %err, "closing the checkpoint connection failed");
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Store, StoreOptions};

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
