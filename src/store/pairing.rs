//! Access control's records: which identities a principal has (to match
//! `access.allowlist` entries), whether a principal was approved, and the
//! pairing requests of unknown direct-chat senders awaiting an operator's
//! decision.

use super::principals::Principals;
use crate::domain::{PairingStatus, PrincipalId, now_ms};
use sqlx::Row;
use sqlx::any::AnyRow;
use switchboard_contract::{AccountId, PlatformName, UserId};

use super::{Identity, Store, StoreError};

/// Pairing requests from unknown senders and their decisions.
#[derive(Clone, Copy)]
pub struct Pairing<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// Pairing requests from unknown senders and their decisions.
    pub fn pairing(&self) -> Pairing<'_> {
        Pairing { store: self }
    }
}

/// An unknown sender asking to talk to the agent.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PairingRequest {
    pub code: String,
    pub platform: PlatformName,
    pub account: AccountId,
    pub user_id: UserId,
    pub display_name: Option<String>,
    pub status: PairingStatus,
    pub created_at: i64,
}

/// Who an identity is, for a pairing request.
#[derive(Debug, Clone, Copy)]
pub struct Applicant<'a> {
    pub identity: &'a Identity,
    pub platform: &'a PlatformName,
    pub account: &'a AccountId,
    pub user_id: &'a UserId,
    pub display_name: Option<&'a str>,
}

/// How long a pairing request waits for a decision before it expires.
pub const PAIRING_TTL_MS: i64 = 3_600_000;

const PAIRING_COLUMNS: &str = "code, platform, account, user_id, display_name, status, created_at";

fn pairing_from_row(row: &AnyRow) -> Result<PairingRequest, StoreError> {
    super::read(row)
}

impl Principals<'_> {
    /// The (platform, user id) of each identity of a principal.
    ///
    /// # Errors
    /// A database failure.
    pub async fn identities(
        self,
        principal: PrincipalId,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as::<_, (String, String)>(
            "SELECT platform, user_id FROM identities WHERE principal_id = $1",
        )
        .bind(principal.get())
        .fetch_all(&mut *self.store.conn().await?)
        .await?)
    }

    /// Whether a principal was approved through pairing.
    ///
    /// # Errors
    /// A database failure.
    pub async fn approved(self, principal: PrincipalId) -> Result<bool, StoreError> {
        let approved =
            sqlx::query_scalar::<_, i64>("SELECT approved FROM principals WHERE id = $1")
                .bind(principal.get())
                .fetch_optional(&mut *self.store.conn().await?)
                .await?;
        Ok(approved.unwrap_or(0) != 0)
    }
}

impl Pairing<'_> {
    /// The identity's pairing request, created with `code` when it has none.
    ///
    /// # Errors
    /// A database failure.
    pub async fn request(
        self,
        applicant: &Applicant<'_>,
        code: &str,
    ) -> Result<PairingRequest, StoreError> {
        let mut conn = self.store.conn().await?;
        sqlx::query(
            "INSERT INTO pairing_requests (code, identity_id, platform, account, user_id, \
             display_name, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7) \
             ON CONFLICT (identity_id) DO NOTHING",
        )
        .bind(code)
        .bind(applicant.identity.id)
        .bind(applicant.platform.as_str())
        .bind(applicant.account.as_str())
        .bind(applicant.user_id.as_str())
        .bind(applicant.display_name)
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
        // An expired request is renewed with the new code: one live code per
        // sender per hour, however often they write.
        sqlx::query(
            "UPDATE pairing_requests SET code = $1, created_at = $2 \
             WHERE identity_id = $3 AND status = 'pending' AND created_at < $4",
        )
        .bind(code)
        .bind(now_ms())
        .bind(applicant.identity.id)
        .bind(now_ms() - PAIRING_TTL_MS)
        .execute(&mut *conn)
        .await?;
        let row = sqlx::query(&format!(
            "SELECT {PAIRING_COLUMNS} FROM pairing_requests WHERE identity_id = $1"
        ))
        .bind(applicant.identity.id)
        .fetch_one(&mut *conn)
        .await?;
        pairing_from_row(&row)
    }

    /// Pairing requests with this status, oldest first.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn requests(self, status: PairingStatus) -> Result<Vec<PairingRequest>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {PAIRING_COLUMNS} FROM pairing_requests WHERE status = $1 \
             AND (status <> 'pending' OR created_at >= $2) ORDER BY created_at, code"
        ))
        .bind(status.as_str())
        .bind(now_ms() - PAIRING_TTL_MS)
        .fetch_all(&mut *self.store.conn().await?)
        .await?;
        rows.iter().map(pairing_from_row).collect()
    }

    /// Approves or denies the undecided (or, to approve, denied) request
    /// with this code; approving approves the principal the identity
    /// belongs to now. `None` when no such request awaits a decision.
    ///
    /// # Errors
    /// A database failure or a corrupt row.
    pub async fn decide(
        self,
        code: &str,
        approve: bool,
    ) -> Result<Option<PairingRequest>, StoreError> {
        use sqlx::Connection;
        let (status, allowed_from) = if approve {
            (PairingStatus::Approved, "('pending', 'denied')")
        } else {
            (PairingStatus::Denied, "('pending')")
        };
        let mut conn = self.store.conn().await?;
        let mut tx = conn.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE pairing_requests SET status = $1, decided_at = $2 \
             WHERE code = $3 AND status IN {allowed_from} \
             AND (status <> 'pending' OR created_at >= $4) \
             RETURNING identity_id, {PAIRING_COLUMNS}"
        ))
        .bind(status.as_str())
        .bind(now_ms())
        .bind(code)
        .bind(now_ms() - PAIRING_TTL_MS)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(None);
        };
        if approve {
            let identity: i64 = row.try_get("identity_id")?;
            sqlx::query(
                "UPDATE principals SET approved = 1 \
                 WHERE id = (SELECT principal_id FROM identities WHERE id = $1)",
            )
            .bind(identity)
            .execute(&mut *tx)
            .await?;
        }
        let request = pairing_from_row(&row)?;
        tx.commit().await?;
        Ok(Some(request))
    }
}
