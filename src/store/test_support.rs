//! Scratch stores for the store's unit tests, and hand-written rows that the
//! store's own methods would never write.

use super::{Instance, Store, StoreOptions};

/// A fresh SQLite store in a temporary folder (kept while the folder is).
pub(crate) async fn scratch_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::connect(&StoreOptions::new(scratch_url(&dir)))
        .await
        .expect("store");
    (store, dir)
}

fn scratch_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}/scratch.db", dir.path().display())
}

/// Another connection to the scratch store in `dir`, writing its claims as
/// instance `id`: two of them on one file stand for two instances.
pub(super) async fn scratch_instance(
    dir: &tempfile::TempDir,
    id: &str,
    lease_ttl_ms: i64,
) -> Store {
    Store::connect(&StoreOptions::new(scratch_url(dir)))
        .await
        .expect("another connection")
        .with_instance(Instance {
            id: id.to_owned(),
            lease_ttl: std::time::Duration::from_millis(u64::try_from(lease_ttl_ms).unwrap_or(0)),
        })
}

/// A new, empty database on the PostgreSQL server that `TEST_DATABASE_URL`
/// names (dropped with the guard, whose `url()` names it); `None`, with a
/// note, when it names none.
pub(crate) async fn fresh_postgres() -> Option<switchboard_test_support::postgres::TestDatabase> {
    let Some(base) = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|url| url.starts_with("postgres"))
    else {
        println!("TEST_DATABASE_URL is not a PostgreSQL URL: PostgreSQL not tested");
        return None;
    };
    Some(switchboard_test_support::postgres::TestDatabase::create(&base).await)
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

/// The stores to run a test on: a scratch SQLite file, and a fresh
/// PostgreSQL database when `TEST_DATABASE_URL` is set. Each store comes
/// with what keeps its database (the SQLite file's folder, the PostgreSQL
/// database's guard).
pub(crate) async fn every_backend() -> Vec<(Store, Box<dyn std::any::Any>)> {
    let (sqlite, dir) = scratch_store().await;
    let mut stores: Vec<(Store, Box<dyn std::any::Any>)> = vec![(sqlite, Box::new(dir))];
    if let Some(database) = fresh_postgres().await {
        let store = Store::connect(&StoreOptions::new(database.url()))
            .await
            .expect("store");
        stores.push((store, Box::new(database)));
    }
    stores
}
