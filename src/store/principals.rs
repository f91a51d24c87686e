//! Principals (one person) and the platform identities that belong to them,
//! one-time link codes that join an identity to another principal, and the
//! failed redemptions that rate-limit guessing.
//!
//! Every identity (platform, account, user id) gets a principal of its own on
//! first contact; `/link CODE` moves it to the code owner's principal and
//! `/unlink` moves it to a fresh one. A principal owns its direct-chat
//! sessions (`sessions.principal_id`) and its long-term memory (`memories`).
//!
//! Link codes are credentials: only their SHA-256 is stored
//! (`link_codes.code_sha256`), and a code is looked up by it.

use crate::domain::{LocalPlatform, PrincipalId, SessionId, now_ms};

use sha2::{Digest, Sha256};
use sqlx::{Connection, Row};
use switchboard_contract::{AccountId, ChatId, PlatformName};

use super::platform_ids::id_from_row;
use super::session_id::{parse_stored, session_id_from_row};
use super::{Store, StoreError, UsageSummary, to_u64};

/// Principals and their identities: resolving senders, link codes, unlinking, and their sessions and usage.
#[derive(Clone, Copy)]
pub struct Principals<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Principals and their identities: resolving senders, link codes, unlinking, and their sessions and usage.
    pub fn principals(&self) -> Principals<'_> {
        Principals { store: self }
    }
}

/// A platform identity and the principal it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub id: i64,
    pub principal: PrincipalId,
}

/// What redeeming a link code did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redemption {
    /// The identity now belongs to the code owner's principal.
    Linked { from: PrincipalId, to: PrincipalId },
    /// The identity already belonged to the code owner's principal.
    AlreadyLinked,
    /// No such code, expired, or used before.
    Invalid,
}

/// One line of a principal's session list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    pub id: SessionId,
    pub title: Option<String>,
    /// The first user message, when there is one.
    pub first_text: Option<String>,
    /// The platform where the session started.
    pub platform: PlatformName,
    pub updated_at: i64,
}

/// A direct chat a principal wrote to the agent from: where a message meant
/// for them reaches them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectChat {
    /// The session the chat's messages go to.
    pub session_id: SessionId,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
}

/// What the database keeps of a link code: the hex SHA-256 of its bytes.
fn code_digest(code: &str) -> String {
    hex::encode(Sha256::digest(code.as_bytes()))
}

impl Principals<'_> {
    /// The identity of a sender, created with a principal of its own on first
    /// contact. Concurrent first messages agree on one identity.
    ///
    /// # Errors
    /// A database failure.
    pub async fn resolve_identity(
        self,
        platform: &str,
        account: &str,
        user_id: &str,
    ) -> Result<Identity, StoreError> {
        if let Some(identity) = self.find_identity(platform, account, user_id).await? {
            return Ok(identity);
        }
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        let now = now_ms();
        let principal = sqlx::query_scalar::<_, i64>(
            "INSERT INTO principals (created_at) VALUES ($1) RETURNING id",
        )
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let inserted = sqlx::query_scalar::<_, i64>(
            "INSERT INTO identities (platform, account, user_id, principal_id, created_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (platform, account, user_id) DO NOTHING RETURNING id",
        )
        .bind(platform)
        .bind(account)
        .bind(user_id)
        .bind(principal)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = inserted {
            tx.commit().await?;
            tracing::info!(principal_id = principal, platform, "new principal");
            return Ok(Identity {
                id,
                principal: PrincipalId::new(principal),
            });
        }
        // A concurrent first message created it.
        tx.rollback().await?;
        drop(conn);
        self.find_identity(platform, account, user_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("identity vanished".to_owned()))
    }

    /// Stores a new link code (its hash) for an identity's principal,
    /// replacing the identity's unused earlier codes. `code` is the code as
    /// issued (upper case).
    ///
    /// # Errors
    /// A database failure (including the rare clash with an existing code).
    pub async fn create_link_code(
        self,
        identity: &Identity,
        code: &str,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        sqlx::query("DELETE FROM link_codes WHERE identity_id = $1 AND used_at IS NULL")
            .bind(identity.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO link_codes (code_sha256, principal_id, identity_id, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(code_digest(code))
        .bind(identity.principal.get())
        .bind(identity.id)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Failed redemptions by an identity since `since_ms`.
    ///
    /// # Errors
    /// A database failure.
    pub async fn link_failures_since(
        self,
        identity: &Identity,
        since_ms: i64,
    ) -> Result<u64, StoreError> {
        let count = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM link_failures WHERE identity_id = $1 AND failed_at >= $2",
        )
        .bind(identity.id)
        .bind(since_ms)
        .fetch_one(&mut *self.store.conn().await?)
        .await?;
        Ok(to_u64(count))
    }

    /// Redeems a link code (upper case, as issued) for `identity`: the code
    /// is used up (single use, unexpired) and the identity joins the code
    /// owner's principal. A
    /// principal left with no identity hands its sessions and its remembered
    /// facts (`memories`) to the new one.
    /// A failed redemption is recorded for rate limiting.
    ///
    /// # Errors
    /// A database failure.
    pub async fn redeem_link_code(
        self,
        identity: &Identity,
        code: &str,
    ) -> Result<Redemption, StoreError> {
        let now = now_ms();
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        let target = sqlx::query_scalar::<_, i64>(
            "UPDATE link_codes SET used_at = $1 \
             WHERE code_sha256 = $2 AND used_at IS NULL AND expires_at > $1 \
             RETURNING principal_id",
        )
        .bind(now)
        .bind(code_digest(code))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(target) = target else {
            sqlx::query("INSERT INTO link_failures (identity_id, failed_at) VALUES ($1, $2)")
                .bind(identity.id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(Redemption::Invalid);
        };
        let from: i64 =
            sqlx::query_scalar::<_, i64>("SELECT principal_id FROM identities WHERE id = $1")
                .bind(identity.id)
                .fetch_one(&mut *tx)
                .await?;
        if from == target {
            tx.commit().await?;
            return Ok(Redemption::AlreadyLinked);
        }
        sqlx::query("UPDATE identities SET principal_id = $1 WHERE id = $2")
            .bind(target)
            .bind(identity.id)
            .execute(&mut *tx)
            .await?;
        let left =
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM identities WHERE principal_id = $1")
                .bind(from)
                .fetch_one(&mut *tx)
                .await?;
        if left == 0 {
            sqlx::query("UPDATE sessions SET principal_id = $1 WHERE principal_id = $2")
                .bind(target)
                .bind(from)
                .execute(&mut *tx)
                .await?;
            // The person's long-term memory goes where their sessions go.
            sqlx::query("UPDATE memories SET principal_id = $1 WHERE principal_id = $2")
                .bind(target)
                .bind(from)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Redemption::Linked {
            from: PrincipalId::new(from),
            to: PrincipalId::new(target),
        })
    }

    /// Detaches an identity into a fresh principal. Returns the new
    /// principal, or `None` when the identity is its principal's only one
    /// (nothing to detach from). Sessions and remembered facts stay with the
    /// old principal.
    ///
    /// # Errors
    /// A database failure.
    pub async fn unlink_identity(
        self,
        identity: &Identity,
    ) -> Result<Option<PrincipalId>, StoreError> {
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        let others = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM identities WHERE principal_id = \
             (SELECT principal_id FROM identities WHERE id = $1) AND id <> $1",
        )
        .bind(identity.id)
        .fetch_one(&mut *tx)
        .await?;
        if others == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let principal = sqlx::query_scalar::<_, i64>(
            "INSERT INTO principals (created_at) VALUES ($1) RETURNING id",
        )
        .bind(now_ms())
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("UPDATE identities SET principal_id = $1 WHERE id = $2")
            .bind(principal)
            .bind(identity.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(PrincipalId::new(principal)))
    }

    /// A principal's sessions, most recently active first.
    ///
    /// # Errors
    /// A database failure.
    pub async fn sessions(
        self,
        principal: PrincipalId,
        limit: i64,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.id, s.title, s.platform, s.updated_at, \
             (SELECT m.content FROM messages m WHERE m.session_id = s.id AND m.scope = '' \
              AND m.role = 'user' ORDER BY m.id LIMIT 1) AS first_text \
             FROM sessions s WHERE s.principal_id = $1 \
             ORDER BY s.updated_at DESC, s.created_at DESC LIMIT $2",
        )
        .bind(principal.get())
        .bind(limit)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(SessionSummary {
                    id: session_id_from_row(row, "id")?,
                    title: row.try_get("title")?,
                    first_text: row.try_get("first_text")?,
                    platform: id_from_row(row, "platform", PlatformName::parse)?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .collect()
    }

    /// The principals an access list's `entries` name (`principal:N`, or
    /// `platform:user_id` for an identity that has written to the agent),
    /// each once, in the list's order.
    ///
    /// # Errors
    /// A database failure.
    pub async fn named(self, entries: &[String]) -> Result<Vec<PrincipalId>, StoreError> {
        let mut found = Vec::new();
        let mut conn = self.store.conn().await?;
        for entry in entries {
            let Some((kind, value)) = entry.split_once(':') else {
                continue;
            };
            let principal = if kind == "principal" {
                value.parse().ok().map(PrincipalId::new)
            } else {
                sqlx::query_scalar::<_, i64>(
                    "SELECT principal_id FROM identities WHERE platform = $1 AND user_id = $2 \
                     ORDER BY id LIMIT 1",
                )
                .bind(kind)
                .bind(value)
                .fetch_optional(&mut *conn)
                .await?
                .map(PrincipalId::new)
            };
            if let Some(principal) = principal.filter(|p| !found.contains(p)) {
                found.push(principal);
            }
        }
        Ok(found)
    }

    /// The direct chats `principal` wrote from, on the chat platforms (not
    /// the API or the terminal): the most recent one per platform account,
    /// most recent first. A linked person has one on each platform they
    /// used.
    ///
    /// # Errors
    /// A database failure.
    pub async fn direct_chats(self, principal: PrincipalId) -> Result<Vec<DirectChat>, StoreError> {
        let rows = sqlx::query(
            "SELECT i.session_id, i.platform, i.account, i.chat_id, MAX(i.id) AS last \
             FROM inbound i JOIN sessions s ON s.id = i.session_id \
             WHERE s.principal_id = $1 AND i.sender_id <> 'switchboard' \
             GROUP BY i.session_id, i.platform, i.account, i.chat_id ORDER BY last DESC",
        )
        .bind(principal.get())
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        let mut chats: Vec<DirectChat> = Vec::new();
        for row in &rows {
            let chat = DirectChat {
                session_id: session_id_from_row(row, "session_id")?,
                platform: id_from_row(row, "platform", PlatformName::parse)?,
                account: id_from_row(row, "account", AccountId::parse)?,
                chat_id: id_from_row(row, "chat_id", ChatId::parse)?,
            };
            let seen = chats
                .iter()
                .any(|c| c.platform == chat.platform && c.account == chat.account);
            if !seen && LocalPlatform::of(chat.platform.as_str()).is_none() {
                chats.push(chat);
            }
        }
        Ok(chats)
    }

    /// The ids of a principal's sessions starting with `prefix` (at most two:
    /// enough to tell a unique match from an ambiguous one).
    ///
    /// # Errors
    /// A database failure.
    pub async fn sessions_by_prefix(
        self,
        principal: PrincipalId,
        prefix: &str,
    ) -> Result<Vec<SessionId>, StoreError> {
        // The caller passes only hex digits and dashes, so no LIKE wildcard
        // can be smuggled in.
        let ids = sqlx::query_scalar::<_, String>(
            "SELECT id FROM sessions WHERE principal_id = $1 AND id LIKE $2 ORDER BY id LIMIT 2",
        )
        .bind(principal.get())
        .bind(format!("{prefix}%"))
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        ids.iter().map(|id| parse_stored(id)).collect()
    }

    /// The model calls made for a principal's messages (on any platform, in
    /// any chat) since `since_ms`, added up, with their estimated cost in
    /// billionths of a dollar (`None` when none of them had a price).
    ///
    /// # Errors
    /// A database failure.
    pub async fn usage_since(
        self,
        principal: PrincipalId,
        since_ms: i64,
    ) -> Result<(UsageSummary, Option<i64>), StoreError> {
        let (calls, input, output, read, write, hour, cost) =
            sqlx::query_as::<_, (i64, i64, i64, i64, i64, i64, Option<i64>)>(concat!(
                "SELECT ",
                super::usage::usage_sums!(),
                ", CAST(SUM(u.cost_nanousd) AS BIGINT) \
                 FROM usage u JOIN inbound i ON i.id = u.task_id \
                 JOIN identities d ON d.platform = i.platform AND d.account = i.account \
                 AND d.user_id = i.sender_id \
                 WHERE d.principal_id = $1 AND u.created_at >= $2"
            ))
            .bind(principal.get())
            .bind(since_ms)
            .fetch_one(&mut *self.store.read_conn().await?)
            .await?;
        Ok((
            UsageSummary::from_sums((calls, input, output, read, write, hour)),
            cost,
        ))
    }

    async fn find_identity(
        self,
        platform: &str,
        account: &str,
        user_id: &str,
    ) -> Result<Option<Identity>, StoreError> {
        let row = sqlx::query_as::<_, (i64, i64)>(
            "SELECT id, principal_id FROM identities \
             WHERE platform = $1 AND account = $2 AND user_id = $3",
        )
        .bind(platform)
        .bind(account)
        .bind(user_id)
        .fetch_optional(&mut *self.store.read_conn().await?)
        .await?;
        Ok(row.map(|(id, principal)| Identity {
            id,
            principal: PrincipalId::new(principal),
        }))
    }
}
