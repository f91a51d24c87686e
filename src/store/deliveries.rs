//! What became of the messages the bot sent, as the platforms reported it
//! after the send (`delivery_statuses`, migration 0040): WhatsApp's status
//! callbacks (sent, delivered, read, failed), each kept against the outbox
//! row whose reply the message carried.
//!
//! Reports repeat and come out of order, so a row keeps the furthest state
//! reported (sent < delivered < read < failed): a late "delivered" never
//! overwrites "read", and a repeat changes nothing.

use sqlx::Row;
use switchboard_contract::{DeliveryState, DeliveryStatus};

use super::{Store, StoreError};

use crate::domain::now_ms;

/// The platforms' reports on sent messages.
#[derive(Clone, Copy)]
pub struct Deliveries<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The platforms' reports on sent messages.
    pub fn deliveries(&self) -> Deliveries<'_> {
        Deliveries { store: self }
    }
}

/// One platform message's latest known state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The platform's id of the message.
    pub message_id: String,
    /// The outbox row whose reply it carried, when the outbox recorded that
    /// message id (the first part of a split reply).
    pub outbox_id: Option<i64>,
    /// `sent`, `delivered`, `read` or `failed`.
    pub state: String,
    /// The platform's error code of a failure.
    pub error_code: Option<i64>,
    /// Why it failed (no secret, no phone number).
    pub reason: Option<String>,
}

impl Deliveries<'_> {
    /// Records `status`, unless a state as far or further is known already.
    /// Returns whether the row changed.
    ///
    /// # Errors
    /// A database failure.
    pub async fn record(self, status: &DeliveryStatus) -> Result<bool, StoreError> {
        let (state, progress, code, reason) = match &status.state {
            DeliveryState::Sent => ("sent", 1, None, None),
            DeliveryState::Delivered => ("delivered", 2, None, None),
            DeliveryState::Read => ("read", 3, None, None),
            DeliveryState::Failed { code, reason } => ("failed", 4, *code, Some(reason.as_str())),
        };
        let done = sqlx::query(
            "INSERT INTO delivery_statuses (platform, account, message_id, chat_id, outbox_id, \
             state, progress, error_code, reason, updated_at) \
             VALUES ($1, $2, $3, $4, \
             (SELECT id FROM outbox WHERE platform = $1 AND account = $2 \
              AND platform_message_id = $3 ORDER BY id LIMIT 1), \
             $5, $6, $7, $8, $9) \
             ON CONFLICT (platform, account, message_id) DO UPDATE SET \
             state = excluded.state, progress = excluded.progress, \
             error_code = excluded.error_code, reason = excluded.reason, \
             updated_at = excluded.updated_at, \
             outbox_id = COALESCE(delivery_statuses.outbox_id, excluded.outbox_id) \
             WHERE excluded.progress > delivery_statuses.progress",
        )
        .bind(status.platform.as_str())
        .bind(status.account.as_str())
        .bind(status.message_id.as_str())
        .bind(status.chat.as_str())
        .bind(state)
        .bind(progress)
        .bind(code)
        .bind(reason)
        .bind(now_ms())
        .execute(&mut *self.store.conn().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The reports on the messages of outbox row `outbox_id`.
    ///
    /// # Errors
    /// A database failure.
    pub async fn of_outbox(self, outbox_id: i64) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT message_id, outbox_id, state, error_code, reason FROM delivery_statuses \
             WHERE outbox_id = $1 ORDER BY message_id",
        )
        .bind(outbox_id)
        .fetch_all(&mut *self.store.read_conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(DeliveryRecord {
                    message_id: row.try_get("message_id")?,
                    outbox_id: row.try_get("outbox_id")?,
                    state: row.try_get("state")?,
                    error_code: row.try_get("error_code")?,
                    reason: row.try_get("reason")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use switchboard_contract::{AccountId, ChatId, PlatformName};

    use super::*;
    use crate::store::test_support::{scratch_store, write_unchecked};

    fn status(message_id: &str, state: DeliveryState) -> DeliveryStatus {
        DeliveryStatus {
            platform: PlatformName::parse("whatsapp").expect("name"),
            account: AccountId::parse("1234").expect("account"),
            chat: ChatId::parse("15550001111").expect("chat"),
            message_id: message_id.to_owned(),
            state,
        }
    }

    #[tokio::test]
    async fn a_report_is_kept_against_its_outbox_row_and_never_goes_back() {
        let (store, _dir) = scratch_store().await;
        write_unchecked(
            &store,
            &[
                "INSERT INTO outbox (session_id, inbound_id, platform, account, chat_id, text, \
               status, platform_message_id, created_at) \
               VALUES ('s1', 1, 'whatsapp', '1234', '15550001111', 'hi', 'sent', 'wamid.A', 0)",
            ],
        )
        .await;
        let deliveries = store.deliveries();

        assert!(
            deliveries
                .record(&status("wamid.A", DeliveryState::Read))
                .await
                .expect("db")
        );
        let late = deliveries
            .record(&status("wamid.A", DeliveryState::Delivered))
            .await;
        let repeat = deliveries
            .record(&status("wamid.A", DeliveryState::Read))
            .await;

        assert!(!late.expect("db"), "a late report changes nothing");
        assert!(!repeat.expect("db"), "a repeat changes nothing");
        let outbox_id: i64 = sqlx::query_scalar("SELECT id FROM outbox")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("row");
        let kept = deliveries.of_outbox(outbox_id).await.expect("db");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].state, "read");
        assert_eq!(kept[0].outbox_id, Some(outbox_id));
    }

    #[tokio::test]
    async fn a_failure_is_kept_with_its_code_and_an_unknown_message_without_a_row() {
        let (store, _dir) = scratch_store().await;
        let failed = DeliveryState::Failed {
            code: Some(131_047),
            reason: "Re-engagement message".to_owned(),
        };

        store
            .deliveries()
            .record(&status("wamid.B", DeliveryState::Sent))
            .await
            .expect("db");
        store
            .deliveries()
            .record(&status("wamid.B", failed))
            .await
            .expect("db");

        let row = sqlx::query(
            "SELECT outbox_id, state, error_code, reason FROM delivery_statuses \
             WHERE message_id = 'wamid.B'",
        )
        .fetch_one(&mut *store.conn().await.expect("conn"))
        .await
        .expect("row");
        assert_eq!(
            row.try_get::<Option<i64>, _>("outbox_id").expect("col"),
            None
        );
        assert_eq!(row.try_get::<String, _>("state").expect("col"), "failed");
        assert_eq!(
            row.try_get::<Option<i64>, _>("error_code").expect("col"),
            Some(131_047)
        );
    }
}
