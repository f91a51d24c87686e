//! Platform ids in rows (platform, account, chat, thread, user, event): bound
//! as their text, read back through the contract crate's checks, so a row
//! holds typed ids and a stored id that no longer parses is corrupt data.

use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_contract::IdError;

use super::StoreError;

/// The id in `column` of a row, checked by `parse`.
pub(super) fn id_from_row<T>(
    row: &AnyRow,
    column: &str,
    parse: fn(String) -> Result<T, IdError>,
) -> Result<T, StoreError> {
    let text: String = row.try_get(column)?;
    parse(text).map_err(|err| corrupt(column, &err))
}

/// The id in nullable `column` of a row, checked by `parse`.
pub(super) fn optional_id_from_row<T>(
    row: &AnyRow,
    column: &str,
    parse: fn(String) -> Result<T, IdError>,
) -> Result<Option<T>, StoreError> {
    let text: Option<String> = row.try_get(column)?;
    text.map(parse)
        .transpose()
        .map_err(|err| corrupt(column, &err))
}

fn corrupt(column: &str, err: &IdError) -> StoreError {
    StoreError::Corrupt(format!("{column}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::super::{Store, StoreOptions};
    use super::*;

    #[tokio::test]
    async fn a_stored_platform_id_that_does_not_parse_is_corrupt_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}/ids.db", dir.path().display());
        let store = Store::connect(&StoreOptions::new(url))
            .await
            .expect("store");
        let mut conn = store.conn().await.expect("conn");
        // Only a hand-written row can hold such an id; nothing backs it.
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut *conn)
            .await
            .expect("pragma");
        sqlx::query(
            "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, text, \
             status, created_at) VALUES ('s1', 1, 'telegram', 'bot', '', 'hi', 'pending', 0)",
        )
        .execute(&mut *conn)
        .await
        .expect("inserted");
        drop(conn);

        let read = store.pending_outbox(10).await;

        assert!(matches!(read, Err(StoreError::Corrupt(_))), "{read:?}");
    }
}
