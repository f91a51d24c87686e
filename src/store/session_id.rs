//! Reading a [`SessionId`] back from a row: one that does not parse is
//! corrupt data.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::StoreError;
use crate::domain::SessionId;

/// A session id read from `column` of a row; one that does not parse is
/// corrupt data.
pub(super) fn session_id_from_row(row: &AnyRow, column: &str) -> Result<SessionId, StoreError> {
    let text: String = row.try_get(column)?;
    parse_stored(&text)
}

/// A session id read back from the database.
pub(super) fn parse_stored(text: &str) -> Result<SessionId, StoreError> {
    SessionId::parse(text).map_err(|err| StoreError::Corrupt(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{scratch_store, write_unchecked};
    use super::*;

    #[tokio::test]
    async fn a_stored_id_that_does_not_parse_is_corrupt_data() {
        let (store, _dir) = scratch_store().await;
        // Only a hand-written row can hold such an id; no session backs it.
        write_unchecked(
            &store,
            &["INSERT INTO routes (route_key, session_id, updated_at) VALUES ('r', 'not an id', 0)"],
        )
        .await;

        let read = store.sessions().route("r").await;

        assert!(matches!(read, Err(StoreError::Corrupt(_))), "{read:?}");
    }
}
