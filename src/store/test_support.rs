//! Scratch stores for the store's unit tests, and hand-written rows that the
//! store's own methods would never write.

use super::{Store, StoreOptions};

/// A fresh SQLite store in a temporary folder (kept while the folder is).
pub(super) async fn scratch_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/scratch.db", dir.path().display());
    let store = Store::connect(&StoreOptions::new(url))
        .await
        .expect("store");
    (store, dir)
}

/// Runs hand-written statements on the writer with foreign keys off: the
/// way to plant a row no code path would write (an id that does not parse,
/// say), with nothing backing it.
pub(super) async fn write_unchecked(store: &Store, statements: &[&str]) {
    let mut conn = store.conn().await.expect("conn");
    sqlx::query("PRAGMA foreign_keys = OFF")
        .execute(&mut *conn)
        .await
        .expect("pragma");
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut *conn)
            .await
            .expect("written");
    }
}
