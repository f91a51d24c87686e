//! Running a platform connection in one instance at a time.
//!
//! Some platform connections must have a single holder across all the
//! instances sharing a database: Telegram answers a second long poll of one
//! bot with 409 Conflict, and a second Discord gateway connection handles
//! every event twice. [`LeasedConnection`] runs such a connection only while
//! this instance holds its platform lease (see `store::platform_leases`):
//!
//! - it takes the lease, or stands by and tries again every third of the
//!   TTL while another instance holds it;
//! - holding it, it runs the connection with a child cancellation token and
//!   renews the lease every third of the TTL;
//! - when a renewal says the lease went to another instance, or renewals
//!   fail until the lease may have expired, it cancels the connection at
//!   once and goes back to taking the lease, so two holders never overlap
//!   for longer than it takes the connection to notice its cancellation;
//! - when the connection ends on its own, and at shutdown, it releases the
//!   lease, so a standing-by instance takes over within a third of the TTL
//!   instead of a whole TTL.
//!
//! An instance that dies (SIGKILL) or stalls (SIGSTOP) stops renewing; its
//! lease expires on the database's clock and another instance connects.
//!
//! It is given the store, this instance's name and the TTL ([`Leases`]),
//! nothing of the gateway.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use switchboard_contract::backoff::{self, Backoff, Retries, Wait};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoreError};

/// Between failed attempts to take the lease (the database unreachable):
/// from 1 s, doubling, at most 30 s.
const ACQUIRE_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// How long a connection cancelled because its lease was lost may take to
/// close (Telegram confirms its offset, Discord closes its shards) before it
/// is dropped.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// How long releasing the lease may take at the end.
const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// Where and as whom this instance takes platform leases: present when the
/// database is shared (PostgreSQL), where several instances may run.
#[derive(Clone)]
pub struct Leases {
    pub store: Store,
    /// This instance's name in lease rows.
    pub owner: String,
    /// How long a lease lasts unless renewed.
    pub ttl: Duration,
}

impl Leases {
    /// The connection leased as `name` (`<platform>:<bot id>`).
    #[must_use]
    pub fn lease(&self, name: String) -> LeasedConnection {
        LeasedConnection::new(self.store.clone(), name, self.owner.clone(), self.ttl)
    }
}

/// A platform connection that runs only while this instance holds its
/// lease.
#[derive(Clone)]
pub struct LeasedConnection {
    store: Store,
    /// The lease name: `<platform>:<bot id>`, never a secret.
    name: String,
    /// This instance's name in lease rows.
    owner: String,
    ttl: Duration,
}

/// How a holding of the lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// The connection ended (on its own, or at shutdown).
    Ended,
    /// Another instance holds the lease now.
    Lost,
    /// Renewals failed until the lease may have expired.
    Expired,
}

impl LeasedConnection {
    /// The connection leased as `name` by `owner` for `ttl` at a time (at
    /// least 300 ms, so that renewals every third of it stay apart).
    pub fn new(store: Store, name: String, owner: String, ttl: Duration) -> Self {
        Self {
            store,
            name,
            owner,
            ttl: ttl.max(Duration::from_millis(300)),
        }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `connect(cancel)` whenever this instance holds the lease, until
    /// `shutdown` is cancelled or the connection ends on its own. `connect`
    /// must return when `cancel` is cancelled; it is called again after a
    /// lost lease is taken back.
    pub async fn run<F, Fut>(&self, shutdown: &CancellationToken, mut connect: F)
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        while let Some((token, expires_by)) = self.acquire(shutdown).await {
            tracing::info!(lease = %self.name, token, "platform lease taken; connecting");
            let cancel = shutdown.child_token();
            let connection = connect(cancel.clone());
            match self.hold(token, expires_by, connection, &cancel).await {
                Holding::Ended => {
                    self.release(token).await;
                    return;
                }
                Holding::Lost | Holding::Expired => {}
            }
        }
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// Takes the lease, waiting while another instance holds it. Returns
    /// the token and when, on this process's clock, the lease expires at
    /// the earliest; `None` at shutdown.
    async fn acquire(&self, shutdown: &CancellationToken) -> Option<(i64, Instant)> {
        let mut announced = false;
        let mut failures = ACQUIRE_RETRY.retries();
        loop {
            let sent = Instant::now();
            let attempt = tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                attempt = self.store.leases().acquire_platform(&self.name, &self.owner, self.ttl_ms()) => attempt,
            };
            let delay = match attempt {
                // The database counts the TTL from a moment after `sent`.
                Ok(Some(token)) => return Some((token, sent + self.ttl)),
                Ok(None) => {
                    failures.reset();
                    if announced {
                        tracing::debug!(lease = %self.name, "another instance holds the platform connection");
                    } else {
                        announced = true;
                        tracing::info!(
                            lease = %self.name,
                            "another instance holds the platform connection; standing by"
                        );
                    }
                    self.renew_every()
                }
                Err(err) => self.failed(&mut failures, &err, "could not take the platform lease"),
            };
            if backoff::wait(delay, shutdown).await == Wait::Cancelled {
                return None;
            }
        }
    }

    /// Runs the connection while renewing the lease; cancels it and waits
    /// (briefly) for it to close when the lease is lost.
    async fn hold(
        &self,
        token: i64,
        expires_by: Instant,
        connection: impl Future<Output = ()>,
        cancel: &CancellationToken,
    ) -> Holding {
        let expires = Expiry(Mutex::new(expires_by));
        let mut connection = std::pin::pin!(connection);
        let mut keep = std::pin::pin!(self.keep(token, &expires));
        let lost = std::future::poll_fn(|cx| {
            // The lease first: an instance resumed after a stall (SIGSTOP)
            // finds its lease expired and cancels the connection before the
            // connection acts on what arrived meanwhile (a poll of its own
            // would cut short the new holder's). Its renewal timer may not
            // have fired yet when the connection's socket wakes the task,
            // so the clock is read too.
            if let Poll::Ready(lost) = keep.as_mut().poll(cx) {
                return Poll::Ready(Some(lost));
            }
            if Instant::now() >= expires.get() {
                tracing::warn!(lease = %self.name, "platform lease not renewed in time; disconnecting");
                return Poll::Ready(Some(Holding::Expired));
            }
            connection.as_mut().poll(cx).map(|()| None)
        })
        .await;
        let Some(lost) = lost else {
            return Holding::Ended;
        };
        cancel.cancel();
        if tokio::time::timeout(CLOSE_LIMIT, connection).await.is_err() {
            tracing::warn!(lease = %self.name, "the platform connection did not close in time; dropped");
        }
        lost
    }

    /// Renews the lease every third of the TTL until it is lost or may have
    /// expired; never returns while it is held. A failed renewal is retried
    /// with a backoff as long as the lease is surely still ours. `expires`
    /// tracks when the lease expires at the earliest.
    async fn keep(&self, token: i64, expires: &Expiry) -> Holding {
        let every = self.renew_every();
        let mut failures = Backoff::new(Duration::from_millis(100), every).retries();
        let mut next = expires.get() - self.ttl + every;
        loop {
            let expires_by = expires.get();
            tokio::time::sleep_until(next.min(expires_by)).await;
            let sent = Instant::now();
            if sent >= expires_by {
                tracing::warn!(lease = %self.name, "platform lease not renewed in time; disconnecting");
                return Holding::Expired;
            }
            let renewal =
                self.store
                    .leases()
                    .renew_platform(&self.name, &self.owner, token, self.ttl_ms());
            match tokio::time::timeout_at(expires_by, renewal).await {
                Ok(Ok(true)) => {
                    failures.reset();
                    expires.set(sent + self.ttl);
                    next = sent + every;
                }
                Ok(Ok(false)) => {
                    tracing::warn!(
                        lease = %self.name,
                        token,
                        "platform lease lost to another instance; disconnecting"
                    );
                    return Holding::Lost;
                }
                Ok(Err(err)) => {
                    let delay =
                        self.failed(&mut failures, &err, "renewing the platform lease failed");
                    next = Instant::now() + delay;
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "platform lease not renewed in time; disconnecting");
                    return Holding::Expired;
                }
            }
        }
    }

    /// Logs a failed call to the database (`what`, at WARN); returns the
    /// wait before the next.
    fn failed(&self, failures: &mut Retries, err: &StoreError, what: &str) -> Duration {
        let delay = failures.next_delay(None);
        tracing::warn!(
            lease = %self.name,
            error = %err,
            retry_in_secs = delay.as_secs_f64(),
            "{what}"
        );
        delay
    }

    /// Gives the lease up so another instance can connect at once.
    async fn release(&self, token: i64) {
        let release = self
            .store
            .leases()
            .release_platform(&self.name, &self.owner, token);
        match tokio::time::timeout(RELEASE_LIMIT, release).await {
            Ok(Ok(())) => tracing::info!(lease = %self.name, token, "platform lease released"),
            Ok(Err(err)) => {
                tracing::warn!(lease = %self.name, error = %err, "releasing the platform lease failed; it will expire");
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "releasing the platform lease timed out; it will expire");
            }
        }
    }
}

/// When a held lease expires at the earliest, on this process's clock:
/// moved on by each renewal, read before the connection runs.
struct Expiry(Mutex<Instant>);

impl Expiry {
    fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    // Long enough that a loaded machine still renews in time.
    const TTL: Duration = Duration::from_millis(1500);

    fn lease(store: &Store, owner: &str) -> LeasedConnection {
        LeasedConnection::new(
            store.clone(),
            "telegram:42".to_owned(),
            owner.to_owned(),
            TTL,
        )
    }

    /// The lease row: its owner, its token, and whether it is unexpired.
    async fn holder(store: &Store) -> Option<(String, i64, bool)> {
        let row = sqlx::query_as::<_, (String, i64, i64)>(&format!(
            "SELECT owner, token, expires_at - {} FROM platform_leases WHERE name = 'telegram:42'",
            store.clock_sql()
        ))
        .fetch_optional(&mut *store.read_conn().await.expect("conn"))
        .await
        .expect("row");
        row.map(|(owner, token, left)| (owner, token, left >= 0))
    }

    /// Changes the lease row as another instance would: runs `sql`, with
    /// `{clock}` standing for the database's clock.
    async fn rewrite(store: &Store, sql: &str) {
        sqlx::query(&sql.replace("{clock}", store.clock_sql()))
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("the lease row changed");
    }

    /// A connection that counts how many are open and stays open until
    /// cancelled.
    fn counted(
        open: &Arc<AtomicUsize>,
        opened: &Arc<AtomicUsize>,
    ) -> impl FnMut(CancellationToken) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + use<>
    {
        let open = Arc::clone(open);
        let opened = Arc::clone(opened);
        move |cancel| {
            let open = Arc::clone(&open);
            opened.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(now, 1, "two connections open at once");
                cancel.cancelled().await;
                open.fetch_sub(1, Ordering::SeqCst);
            })
        }
    }

    /// `owner`'s instance, running a [`counted`] connection under the lease
    /// until `stop`.
    fn spawn_counted(
        store: &Store,
        owner: &str,
        stop: &CancellationToken,
        open: &Arc<AtomicUsize>,
        opened: &Arc<AtomicUsize>,
    ) -> tokio::task::JoinHandle<()> {
        let (lease, stop, connect) = (lease(store, owner), stop.clone(), counted(open, opened));
        tokio::spawn(async move { lease.run(&stop, connect).await })
    }

    /// Instance `a`, connected under the lease: how many of its
    /// connections are open and were opened, its stop token and its task.
    async fn connected(
        store: &Store,
    ) -> (
        Arc<AtomicUsize>,
        Arc<AtomicUsize>,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let open = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let a = spawn_counted(store, "a", &stop, &open, &opened);
        until("a to connect", || open.load(Ordering::SeqCst) == 1).await;
        (open, opened, stop, a)
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(20), async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    #[tokio::test]
    async fn one_of_two_instances_connects_and_the_other_takes_over_at_shutdown() {
        let (store, _dir) = crate::store::test_support::scratch_store().await;
        let open = Arc::new(AtomicUsize::new(0));
        let (a_opened, b_opened) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a_stop, b_stop) = (CancellationToken::new(), CancellationToken::new());

        let a = spawn_counted(&store, "a", &a_stop, &open, &a_opened);
        until("a to connect", || a_opened.load(Ordering::SeqCst) == 1).await;
        let b = spawn_counted(&store, "b", &b_stop, &open, &b_opened);
        // Several renewal periods: a keeps the lease, b stands by.
        tokio::time::sleep(TTL * 3).await;
        assert_eq!(a_opened.load(Ordering::SeqCst), 1, "a connected once");
        assert_eq!(b_opened.load(Ordering::SeqCst), 0, "b stood by");
        assert_eq!(holder(&store).await, Some(("a".to_owned(), 1, true)));

        // a shuts down: it closes its connection and releases the lease;
        // b connects under a new token.
        a_stop.cancel();
        a.await.expect("a stops");
        until("b to connect", || b_opened.load(Ordering::SeqCst) == 1).await;
        assert_eq!(holder(&store).await, Some(("b".to_owned(), 2, true)));

        b_stop.cancel();
        b.await.expect("b stops");
        assert_eq!(open.load(Ordering::SeqCst), 0);
        let (owner, token, live) = holder(&store).await.expect("the row stays");
        assert_eq!((owner.as_str(), token, live), ("b", 2, false), "released");
    }

    #[tokio::test]
    async fn a_holder_that_loses_its_lease_disconnects_and_stands_by() {
        let (store, _dir) = crate::store::test_support::scratch_store().await;
        let (open, opened, stop, a) = connected(&store).await;

        // Another instance took the lease over (as after a's stall): a's
        // next renewal fails and it closes its connection.
        rewrite(
            &store,
            "UPDATE platform_leases SET owner = 'b', token = token + 1, expires_at = {clock} + 60000",
        )
        .await;
        until("a to disconnect", || open.load(Ordering::SeqCst) == 0).await;
        assert_eq!(opened.load(Ordering::SeqCst), 1, "a stands by");

        // When b's lease lapses, a connects again under a new token.
        rewrite(
            &store,
            "UPDATE platform_leases SET expires_at = {clock} - 1",
        )
        .await;
        until("a to reconnect", || open.load(Ordering::SeqCst) == 1).await;
        assert_eq!(holder(&store).await, Some(("a".to_owned(), 3, true)));
        stop.cancel();
        a.await.expect("a stops");
    }

    #[tokio::test]
    async fn a_connection_that_ends_on_its_own_releases_the_lease() {
        let (store, _dir) = crate::store::test_support::scratch_store().await;
        let stop = CancellationToken::new();
        lease(&store, "a").run(&stop, |_| async {}).await;
        let (owner, token, live) = holder(&store).await.expect("the row stays");
        assert_eq!((owner.as_str(), token, live), ("a", 1, false));
    }

    #[tokio::test]
    async fn renewals_failing_until_expiry_disconnect() {
        let (store, _dir) = crate::store::test_support::scratch_store().await;
        let (open, opened, stop, a) = connected(&store).await;
        // The database goes away: renewals fail, and the connection is
        // cancelled before the lease could have expired for others.
        store.close().await;
        until("a to disconnect", || open.load(Ordering::SeqCst) == 0).await;
        stop.cancel();
        a.await.expect("a stops");
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }
}
