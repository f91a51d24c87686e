//! Platform leases: one holder, across instances, for a platform connection
//! that must not be opened twice (the Telegram long poll, a Discord gateway
//! connection).
//!
//! A row names the lease (`telegram:<bot id>`, `discord:<bot id>`), its
//! holder (an instance id), an expiry and a fencing token. A grant to a new
//! holder, or to the old one after its grant expired or was released, adds
//! one to the token; a renewal keeps it, so the token names one unbroken
//! holding. Releasing moves the expiry into the past and keeps the row, so
//! the token only ever grows. Expiry is read and written on the database's
//! clock ([`Store::clock_sql`]): instances whose clocks disagree still agree
//! on when a lease lapses. Each operation is one statement, atomic on both
//! backends.

use super::StoreError;
use super::leases::Leases;

impl Leases<'_> {
    /// Takes the lease `name` for `owner` for `ttl_ms` when it is free,
    /// expired, or already held by `owner`. Returns the fencing token of the
    /// holding, or `None` while another owner holds it.
    ///
    /// Taking a lease already held (and unexpired) by `owner` extends it and
    /// keeps its token, so a retried acquire whose answer was lost is
    /// harmless.
    ///
    /// # Errors
    /// A database failure.
    pub async fn acquire_platform(
        self,
        name: &str,
        owner: &str,
        ttl_ms: i64,
    ) -> Result<Option<i64>, StoreError> {
        // The clock is read once, in VALUES; the update recovers it as
        // `excluded.expires_at - ttl` (PostgreSQL's clock moves within a
        // statement, and "expired" must mean one instant).
        let sql = format!(
            "INSERT INTO platform_leases (name, owner, expires_at, token) \
             VALUES ($1, $2, {clock} + $3, 1) \
             ON CONFLICT (name) DO UPDATE SET \
               owner = excluded.owner, \
               expires_at = excluded.expires_at, \
               token = CASE \
                 WHEN platform_leases.owner = excluded.owner \
                  AND platform_leases.expires_at >= excluded.expires_at - $3 \
                 THEN platform_leases.token \
                 ELSE platform_leases.token + 1 END \
             WHERE platform_leases.owner = excluded.owner \
                OR platform_leases.expires_at < excluded.expires_at - $3 \
             RETURNING token",
            clock = self.store.clock_sql(),
        );
        let token = sqlx::query_scalar::<_, i64>(&sql)
            .bind(name)
            .bind(owner)
            .bind(ttl_ms)
            .fetch_optional(&mut *self.store.conn().await?)
            .await?;
        Ok(token)
    }

    /// Extends the holding `token` of `name` by `owner` to `ttl_ms` from
    /// now. Returns `false` when it is no longer current: expired, released,
    /// or granted again since.
    ///
    /// # Errors
    /// A database failure.
    pub async fn renew_platform(
        self,
        name: &str,
        owner: &str,
        token: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE platform_leases SET expires_at = {clock} + $4 \
             WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at >= {clock}",
            clock = self.store.clock_sql(),
        );
        let renewed = sqlx::query(&sql)
            .bind(name)
            .bind(owner)
            .bind(token)
            .bind(ttl_ms)
            .execute(&mut *self.store.conn().await?)
            .await?
            .rows_affected();
        Ok(renewed > 0)
    }

    /// Ends the holding `token` of `name` by `owner` now, so another
    /// instance may take the lease at once. Does nothing when that holding
    /// is no longer current. The row and its token stay.
    ///
    /// # Errors
    /// A database failure.
    pub async fn release_platform(
        self,
        name: &str,
        owner: &str,
        token: i64,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE platform_leases SET expires_at = {clock} - 1 \
             WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at >= {clock}",
            clock = self.store.clock_sql(),
        );
        sqlx::query(&sql)
            .bind(name)
            .bind(owner)
            .bind(token)
            .execute(&mut *self.store.conn().await?)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::super::test_support::every_backend;

    const MINUTE: i64 = 60_000;

    /// Moves the lease's expiry `by_ms` into the past, as if its holder had
    /// stalled that long.
    async fn age(store: &Store, name: &str, by_ms: i64) {
        sqlx::query(&format!(
            "UPDATE platform_leases SET expires_at = {} - $2 WHERE name = $1",
            store.clock_sql()
        ))
        .bind(name)
        .bind(by_ms)
        .execute(&mut *store.conn().await.expect("conn"))
        .await
        .expect("aged");
    }

    async fn row(store: &Store, name: &str) -> (String, i64, i64) {
        sqlx::query_as::<_, (String, i64, i64)>(&format!(
            "SELECT owner, token, expires_at - {} FROM platform_leases WHERE name = $1",
            store.clock_sql()
        ))
        .bind(name)
        .fetch_one(&mut *store.read_conn().await.expect("conn"))
        .await
        .expect("row")
    }

    #[tokio::test]
    async fn a_free_lease_is_taken_and_refused_to_others_while_it_runs() {
        for (store, _dir) in every_backend().await {
            let first = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(first, Some(1));
            let other = store
                .leases()
                .acquire_platform("telegram:1", "b", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(other, None, "held by a");
            let (owner, token, left) = row(&store, "telegram:1").await;
            assert_eq!((owner.as_str(), token), ("a", 1));
            assert!((MINUTE - 5_000..=MINUTE).contains(&left), "{left}");
            // Another name is another lease.
            let discord = store
                .leases()
                .acquire_platform("discord:1", "b", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(discord, Some(1));
        }
    }

    #[tokio::test]
    async fn the_holder_acquiring_again_or_renewing_keeps_its_token() {
        for (store, _dir) in every_backend().await {
            let token = store
                .leases()
                .acquire_platform("telegram:1", "a", 1_000)
                .await
                .expect("acquire")
                .expect("free");
            let again = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(again, Some(token));
            let renewed = store
                .leases()
                .renew_platform("telegram:1", "a", token, 2 * MINUTE)
                .await
                .expect("renew");
            assert!(renewed);
            let (owner, kept, left) = row(&store, "telegram:1").await;
            assert_eq!((owner.as_str(), kept), ("a", token));
            assert!(left > MINUTE, "extended to two minutes: {left}");
        }
    }

    #[tokio::test]
    async fn an_expired_lease_goes_to_the_next_taker_with_a_new_token() {
        for (store, _dir) in every_backend().await {
            let first = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire")
                .expect("free");
            age(&store, "telegram:1", 10).await;
            let second = store
                .leases()
                .acquire_platform("telegram:1", "b", MINUTE)
                .await
                .expect("acquire")
                .expect("expired");
            assert_eq!(second, first + 1);
            // The stalled holder finds out when it renews, and cannot take
            // it back while b holds it.
            let renewed = store
                .leases()
                .renew_platform("telegram:1", "a", first, MINUTE)
                .await
                .expect("renew");
            assert!(!renewed);
            let back = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(back, None);
            assert_eq!(row(&store, "telegram:1").await.0, "b");
        }
    }

    #[tokio::test]
    async fn an_expired_lease_is_a_new_grant_even_for_its_old_holder() {
        for (store, _dir) in every_backend().await {
            let first = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire")
                .expect("free");
            age(&store, "telegram:1", 10).await;
            let renewed = store
                .leases()
                .renew_platform("telegram:1", "a", first, MINUTE)
                .await
                .expect("renew");
            assert!(!renewed, "an expired holding is not renewed");
            let again = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(again, Some(first + 1));
        }
    }

    #[tokio::test]
    async fn a_released_lease_is_free_at_once_and_keeps_its_token() {
        for (store, _dir) in every_backend().await {
            let first = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire")
                .expect("free");
            // A release naming a stale token or another owner changes nothing.
            store
                .leases()
                .release_platform("telegram:1", "a", first + 7)
                .await
                .expect("release");
            store
                .leases()
                .release_platform("telegram:1", "b", first)
                .await
                .expect("release");
            assert!(row(&store, "telegram:1").await.2 > 0, "still held");

            store
                .leases()
                .release_platform("telegram:1", "a", first)
                .await
                .expect("release");
            let (owner, token, left) = row(&store, "telegram:1").await;
            assert_eq!((owner.as_str(), token), ("a", first), "the row stays");
            assert!(left < 0, "expired: {left}");
            let renewed = store
                .leases()
                .renew_platform("telegram:1", "a", first, MINUTE)
                .await
                .expect("renew");
            assert!(!renewed, "a released holding is over");
            let next = store
                .leases()
                .acquire_platform("telegram:1", "b", MINUTE)
                .await
                .expect("acquire");
            assert_eq!(next, Some(first + 1));
        }
    }

    #[tokio::test]
    async fn renewing_a_token_of_an_earlier_holding_fails() {
        for (store, _dir) in every_backend().await {
            let first = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire")
                .expect("free");
            store
                .leases()
                .release_platform("telegram:1", "a", first)
                .await
                .expect("release");
            let second = store
                .leases()
                .acquire_platform("telegram:1", "a", MINUTE)
                .await
                .expect("acquire")
                .expect("free again");
            assert_eq!(second, first + 1);
            let stale = store
                .leases()
                .renew_platform("telegram:1", "a", first, MINUTE)
                .await
                .expect("renew");
            assert!(!stale, "the earlier holding ended with its release");
            let current = store
                .leases()
                .renew_platform("telegram:1", "a", second, MINUTE)
                .await
                .expect("renew");
            assert!(current);
        }
    }

    #[tokio::test]
    async fn concurrent_takers_of_a_free_lease_get_one_grant() {
        for (store, _dir) in every_backend().await {
            let takers = (0..8).map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .leases()
                        .acquire_platform("discord:7", &format!("owner-{i}"), MINUTE)
                        .await
                        .expect("acquire")
                })
            });
            let mut granted = Vec::new();
            for taker in takers {
                if let Some(token) = taker.await.expect("joined") {
                    granted.push(token);
                }
            }
            assert_eq!(granted, [1], "exactly one taker holds it");
        }
    }
}
