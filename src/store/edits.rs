//! Edits that chat commands make to a session: its title, and hiding the
//! last exchange from the wire view (`/undo`, `/retry`). Hidden entries stay
//! stored, marked `hidden = 1`; only [`Transcript::wire_history`] leaves them out.

use super::StoreError;
use super::inbound::Inbound;
use super::messages::Transcript;
use super::sessions::Sessions;
use crate::domain::{InboundId, SessionId, now_ms};

/// The exchange [`Transcript::hide_last_exchange`] hid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenExchange {
    /// The user message that opened it.
    pub user_text: String,
    /// How many entries were hidden (the user message included).
    pub entries: u64,
}

impl Inbound<'_> {
    /// Turns a recorded command message into a queued task with `text` (how
    /// `/retry` asks again).
    ///
    /// # Errors
    /// A database failure.
    pub async fn requeue(self, inbound_id: InboundId, text: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE inbound SET text = $1, status = 'pending' WHERE id = $2")
            .bind(text)
            .bind(inbound_id)
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(())
    }
}

impl Sessions<'_> {
    /// Sets a session's title.
    ///
    /// # Errors
    /// A database failure.
    pub async fn set_title(self, id: &SessionId, title: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET title = $1, updated_at = $2 WHERE id = $3")
            .bind(title)
            .bind(now_ms())
            .bind(id.as_str())
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(())
    }
}

impl Transcript<'_> {
    /// Hides the session's last visible user message and everything after
    /// it (the assistant's answer, tool calls and results) from the wire
    /// view. `None` when there is nothing to hide.
    ///
    /// # Errors
    /// A database failure.
    pub async fn hide_last_exchange(
        self,
        session_id: &SessionId,
    ) -> Result<Option<HiddenExchange>, StoreError> {
        let mut conn = self.store.conn().await?;
        let last = sqlx::query_as::<_, (i64, Option<String>)>(
            "SELECT id, content FROM messages WHERE session_id = $1 AND scope = '' \
             AND role = 'user' AND hidden = 0 ORDER BY id DESC LIMIT 1",
        )
        .bind(session_id.as_str())
        .fetch_optional(&mut *conn)
        .await?;
        let Some((id, content)) = last else {
            return Ok(None);
        };
        let hidden = sqlx::query(
            "UPDATE messages SET hidden = 1 WHERE session_id = $1 AND scope = '' AND id >= $2 \
             AND hidden = 0 AND NOT EXISTS \
             (SELECT 1 FROM inbound WHERE session_id = $1 AND status = 'running')",
        )
        .bind(session_id.as_str())
        .bind(id)
        .execute(&mut *conn)
        .await?;
        if hidden.rows_affected() == 0 {
            // A turn started meanwhile (on any instance): it owns the tail.
            return Ok(None);
        }
        Ok(Some(HiddenExchange {
            user_text: content.unwrap_or_default(),
            entries: hidden.rows_affected(),
        }))
    }
}
