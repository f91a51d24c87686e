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

fn corrupt(column: &str, err: &IdError) -> StoreError {
    StoreError::Corrupt(format!("{column}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::super::test_support::{scratch_store, write_unchecked};
    use super::*;

    #[tokio::test]
    async fn a_stored_platform_id_that_does_not_parse_is_corrupt_data() {
        let (store, _dir) = store_with_outbox(&["'telegram', 'bot', ''"]).await;
        let row = sqlx::query("SELECT platform, chat_id FROM outbox")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("row");

        let chat = id_from_row(&row, "chat_id", switchboard_contract::ChatId::parse);

        assert!(matches!(chat, Err(StoreError::Corrupt(_))), "{chat:?}");
    }

    #[tokio::test]
    async fn an_unreadable_outbox_row_is_given_up_and_the_others_still_go_out() {
        let (store, _dir) =
            store_with_outbox(&["'telegram', 'bot', ''", "'telegram', 'bot', 'chat-2'"]).await;

        let pending = store.outbox().claim_pending(10, true).await.expect("read");

        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].chat_id.as_str(), "chat-2");
        let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM outbox ORDER BY id")
            .fetch_all(&mut *store.conn().await.expect("conn"))
            .await
            .expect("statuses");
        assert_eq!(statuses, ["failed", "pending"]);
    }

    /// A store whose outbox holds one pending row per `(platform, account,
    /// chat_id)` SQL triple, written by hand: only such a row can hold an id
    /// that does not parse.
    async fn store_with_outbox(targets: &[&str]) -> (Store, tempfile::TempDir) {
        let (store, dir) = scratch_store().await;
        let inserts: Vec<String> = targets
            .iter()
            .enumerate()
            .map(|(inbound_id, target)| {
                format!(
                    "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, \
                     text, status, created_at) \
                     VALUES ('s1', {inbound_id}, {target}, 'hi', 'pending', 0)"
                )
            })
            .collect();
        let inserts: Vec<&str> = inserts.iter().map(String::as_str).collect();
        write_unchecked(&store, &inserts).await;
        (store, dir)
    }
}
