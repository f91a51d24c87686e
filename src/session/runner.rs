//! The per-session runner: one turn at a time per session, sessions in
//! parallel, replies delivered through the outbox.
//!
//! The queue lives in the database (`inbound` rows waiting as `pending`); the
//! runner only keeps, per active session, one worker task and a `dirty` flag.
//! [`Runner::notify`] marks a session dirty or starts its worker; a worker
//! drains its session's queue in arrival order and exits only when nothing
//! new arrived meanwhile (checked under the same lock that `notify` takes, so
//! no wake-up is lost). A database lease makes "one turn per session" hold
//! across processes too; a global semaphore caps turns running at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_contract::{ChatRef, OutboundMessage, PlatformSender, SendError};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::local::LocalPlatform;
use super::turn::{StopCause, TurnControl, TurnExecutor};
use crate::store::{
    Batch, Claim, InboundRow, InboundStatus, OutboxRow, SessionId, Store, StoreError,
};

/// How a turn ended, for whoever waits on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReply {
    pub inbound_id: i64,
    pub session_id: SessionId,
    pub text: String,
    pub status: InboundStatus,
}

/// How a session's drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    /// The queue was empty and the lease was given up in the same write.
    LeaseReleased,
    /// Shutting down; the lease is still held.
    Stopped,
}

/// Why a reply was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Undelivered {
    /// The platform refused it for good, or its stored ids are invalid: the
    /// row is given up.
    Permanent,
    /// Every attempt failed transiently: the next pump tries again.
    Transient,
}

/// Delivery attempts per outbox row before it waits for the next pump.
const SEND_ATTEMPTS: u32 = 5;

/// Between delivery attempts: from 500 ms, doubling, at most 30 s (a
/// platform's `retry_after` replaces it).
const SEND_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// Runs sessions' turns and delivers their replies.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    turns: TurnExecutor,
    /// Identifies this process in lease rows.
    owner: String,
    lease_ttl: Duration,
    permits: Semaphore,
    /// Active sessions and whether new work arrived since their worker last
    /// looked. A std mutex: held for a map operation only, never across an
    /// await.
    workers: Mutex<HashMap<SessionId, bool>>,
    /// The running turn of each session, to stop it.
    running: Mutex<HashMap<SessionId, Arc<TurnControl>>>,
    /// Callers waiting for a turn's reply, by inbound id.
    waiters: Mutex<HashMap<i64, oneshot::Sender<TurnReply>>>,
    senders: Mutex<HashMap<String, Arc<dyn PlatformSender>>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Runner {
    pub fn new(
        store: Store,
        turns: TurnExecutor,
        max_concurrent_turns: usize,
        lease_ttl: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                turns,
                owner: uuid::Uuid::new_v4().to_string(),
                lease_ttl,
                permits: Semaphore::new(max_concurrent_turns),
                workers: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                senders: Mutex::new(HashMap::new()),
                shutdown,
                tracker: TaskTracker::new(),
            }),
        }
    }

    /// Registers the sender that delivers replies for a platform.
    pub fn register_sender(&self, platform: &str, sender: Arc<dyn PlatformSender>) {
        lock(&self.inner.senders).insert(platform.to_owned(), sender);
    }

    /// Returns a receiver for the reply to an inbound message. Register
    /// before calling [`Runner::notify`] so the reply cannot be missed.
    pub fn wait_for(&self, inbound_id: i64) -> oneshot::Receiver<TurnReply> {
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.waiters).insert(inbound_id, tx);
        rx
    }

    /// Forgets a waiter (its caller gave up).
    pub fn forget(&self, inbound_id: i64) {
        lock(&self.inner.waiters).remove(&inbound_id);
    }

    /// Tells the runner a session has new work.
    pub fn notify(&self, session_id: &SessionId) {
        if self.inner.shutdown.is_cancelled() {
            return;
        }
        let mut workers = lock(&self.inner.workers);
        if let Some(dirty) = workers.get_mut(session_id) {
            *dirty = true;
            return;
        }
        workers.insert(session_id.clone(), false);
        drop(workers);
        let runner = self.clone();
        let session_id = session_id.clone();
        let span = tracing::info_span!("session", session_id = %session_id);
        self.inner
            .tracker
            .spawn(async move { runner.work(session_id).await }.instrument(span));
    }

    /// Picks up work left by a previous run: unfinished messages and
    /// undelivered replies.
    ///
    /// # Errors
    /// A database failure.
    pub async fn recover(&self) -> Result<(), StoreError> {
        let sessions = self.inner.store.sessions_with_unfinished_inbound().await?;
        if !sessions.is_empty() {
            tracing::info!(sessions = sessions.len(), "resuming unfinished turns");
        }
        for session_id in sessions {
            self.notify(&session_id);
        }
        for row in self.inner.store.pending_outbox(1000).await? {
            // Nobody waits for these any more; the status only feeds waiters.
            self.deliver(&row, InboundStatus::Done).await;
        }
        Ok(())
    }

    /// Retries replies whose delivery was given up after transient failures.
    ///
    /// # Errors
    /// A database failure.
    pub async fn retry_undelivered(&self) -> Result<usize, StoreError> {
        let rows = self.inner.store.retryable_outbox(100).await?;
        for row in &rows {
            self.deliver(row, InboundStatus::Done).await;
        }
        Ok(rows.len())
    }

    /// Stops taking work and waits (up to `grace`) for running turns.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("shutdown grace period over; unfinished turns resume on next start");
        }
    }

    /// Stops the session's running turn, if this process runs one. Returns
    /// whether there was one.
    pub fn stop(&self, session_id: &SessionId, cause: StopCause) -> bool {
        let control = lock(&self.inner.running).get(session_id).cloned();
        match control {
            Some(control) => {
                tracing::info!(
                    session_id = session_id.as_str(),
                    ?cause,
                    "stopping the running turn"
                );
                control.stop(cause);
                true
            }
            None => false,
        }
    }

    /// Model calls left to the session's running task, if this process runs
    /// one that has started.
    pub fn budget_left(&self, session_id: &SessionId) -> Option<u32> {
        lock(&self.inner.running)
            .get(session_id)
            .and_then(|control| control.budget_left())
    }

    /// Whether this process is running a turn of the session right now.
    pub fn is_running(&self, session_id: &SessionId) -> bool {
        lock(&self.inner.running).contains_key(session_id)
    }

    async fn work(self, session_id: SessionId) {
        loop {
            if let Some(dirty) = lock(&self.inner.workers).get_mut(&session_id) {
                *dirty = false;
            }
            if let Err(err) = self.drain(&session_id).await {
                tracing::error!(error = %err, "session worker failed; retrying shortly");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = self.inner.shutdown.cancelled() => {}
                }
                if !self.inner.shutdown.is_cancelled() {
                    continue;
                }
            }
            let mut workers = lock(&self.inner.workers);
            let dirty = workers.get(&session_id).copied().unwrap_or(false);
            if dirty && !self.inner.shutdown.is_cancelled() {
                continue;
            }
            workers.remove(&session_id);
            return;
        }
    }

    /// Runs every waiting message of the session, in order, under its lease.
    async fn drain(&self, session_id: &SessionId) -> Result<(), StoreError> {
        let store = &self.inner.store;
        let ttl_ms = i64::try_from(self.inner.lease_ttl.as_millis()).unwrap_or(i64::MAX);
        let first = loop {
            if self.inner.shutdown.is_cancelled() {
                return Ok(());
            }
            match store
                .lease_and_claim(session_id, &self.inner.owner, ttl_ms)
                .await?
            {
                Claim::Claimed(inbound) => break *inbound,
                Claim::Released => return Ok(()),
                // Another process runs this session; it drains the queue
                // too, but keep checking in case it dies before reaching
                // our message.
                Claim::Busy => tokio::select! {
                    () = tokio::time::sleep(self.inner.lease_ttl / 4) => {}
                    () = self.inner.shutdown.cancelled() => return Ok(()),
                },
            }
        };
        let result = self.drain_leased(session_id, ttl_ms, first).await;
        if !matches!(result, Ok(Drained::LeaseReleased)) {
            store.release_lease(session_id, &self.inner.owner).await?;
        }
        result.map(|_| ())
    }

    /// Runs `inbound`, claimed under the session's lease, and every message
    /// after it.
    async fn drain_leased(
        &self,
        session_id: &SessionId,
        ttl_ms: i64,
        mut inbound: InboundRow,
    ) -> Result<Drained, StoreError> {
        let store = &self.inner.store;
        loop {
            // The semaphore is never closed, so acquire cannot fail.
            let Ok(_permit) = self.inner.permits.acquire().await else {
                return Ok(Drained::Stopped);
            };
            let trace_id = uuid::Uuid::now_v7().to_string();
            let span = tracing::info_span!("turn", trace_id = %trace_id, inbound_id = inbound.id);
            // The reply goes back to the chat the message came from.
            let typing = self.typing_indicator(&chat_of(&inbound));
            let control = Arc::new(TurnControl::default());
            lock(&self.inner.running).insert(session_id.clone(), Arc::clone(&control));
            let turn = self
                .inner
                .turns
                .run(&inbound, &control)
                .instrument(span.clone());
            let result = self.with_lease_renewal(session_id, ttl_ms, turn).await;
            lock(&self.inner.running).remove(session_id);
            if let Some(typing) = typing {
                typing.abort();
            }
            let (row, status) = result?;
            // The reply's delivery status, committed with the next claim.
            let delivered = self
                .hand_out(&row, status)
                .instrument(span)
                .await
                .unwrap_or_default();
            if self.inner.shutdown.is_cancelled() {
                store.write(delivered).await?;
                return Ok(Drained::Stopped);
            }
            let Some(next) = store
                .claim_next_or_release(session_id, &self.inner.owner, delivered)
                .await?
            else {
                return Ok(Drained::LeaseReleased);
            };
            inbound = next;
        }
    }

    /// Repeats the platform's typing indicator while a turn runs; the caller
    /// aborts the returned task when the turn ends.
    fn typing_indicator(&self, chat: &ChatRef) -> Option<tokio::task::JoinHandle<()>> {
        let sender = lock(&self.inner.senders)
            .get(chat.platform.as_str())
            .cloned()?;
        let every = sender.typing_interval()?;
        let chat = chat.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                sender.typing(&chat).await;
            }
        }))
    }

    /// Runs `work` while renewing the session's lease.
    async fn with_lease_renewal<T>(
        &self,
        session_id: &SessionId,
        ttl_ms: i64,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let mut work = std::pin::pin!(work);
        // Not `interval`, whose first tick is due at once: the timer wheel
        // fires it on its next millisecond, and the turn would wait for it.
        let every = self.inner.lease_ttl / 3;
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                result = &mut work => return result,
                _ = renew.tick() => {
                    if let Err(err) = self.inner.store
                        .try_acquire_lease(session_id, &self.inner.owner, ttl_ms)
                        .await
                    {
                        tracing::warn!(error = %err, "lease renewal failed");
                    }
                }
            }
        }
    }

    /// Hands a reply to its waiter and to the chat its row names, then
    /// marks it sent.
    pub async fn deliver(&self, row: &OutboxRow, status: InboundStatus) {
        if let Some(marked) = self.hand_out(row, status).await
            && let Err(err) = self.inner.store.write(marked).await
        {
            tracing::error!(error = %err, outbox_id = row.id, "outbox status not recorded");
        }
    }

    /// Hands a reply to its waiter and its platform; returns the write that
    /// records the outcome (sent, or a failed attempt), or `None` when no
    /// adapter for its platform runs in this process.
    async fn hand_out(&self, row: &OutboxRow, status: InboundStatus) -> Option<Batch> {
        if let Some(waiter) = lock(&self.inner.waiters).remove(&row.inbound_id) {
            // The receiver may be gone (the client hung up); the reply stays
            // in the history either way.
            let _ = waiter.send(TurnReply {
                inbound_id: row.inbound_id,
                session_id: row.session_id.clone(),
                text: row.text.clone(),
                status,
            });
        }
        let sender = lock(&self.inner.senders)
            .get(row.platform.as_str())
            .cloned();
        let result = match sender {
            Some(sender) => {
                let message = outbound_of(row);
                self.send_with_retries(sender.as_ref(), row, &message).await
            }
            None if LocalPlatform::of(row.platform.as_str()).is_some() => Ok(None),
            // No adapter for this platform in this process: another instance
            // (or a later start) delivers it.
            None => return None,
        };
        let mut marked = Batch::new();
        match result {
            Ok(message_id) => marked.mark_outbox_sent(row.id, message_id.as_deref()),
            Err(failure) => {
                marked.mark_outbox_attempt_failed(row.id, failure == Undelivered::Permanent);
            }
        }
        Some(marked)
    }

    /// Sends with retries; returns the platform's id of the (first) message
    /// sent.
    async fn send_with_retries(
        &self,
        sender: &dyn PlatformSender,
        row: &OutboxRow,
        message: &OutboundMessage,
    ) -> Result<Option<String>, Undelivered> {
        let mut retries = SEND_BACKOFF.retries();
        loop {
            let attempt = retries.count() + 1;
            let retry_after = match sender.send(message).await {
                Ok(receipt) => return Ok(receipt.message_ids.first().cloned()),
                Err(SendError::Permanent(reason)) => {
                    tracing::error!(outbox_id = row.id, %reason, "reply cannot be delivered");
                    return Err(Undelivered::Permanent);
                }
                Err(SendError::RetryAfter(wait)) => {
                    tracing::warn!(outbox_id = row.id, attempt, ?wait, "platform rate limit");
                    Some(wait)
                }
                Err(SendError::Transient(reason)) => {
                    tracing::warn!(outbox_id = row.id, attempt, %reason, "send failed; retrying");
                    None
                }
            };
            // Attempts spent, or shutting down: the row stays pending for the
            // next pump (or the next start).
            if attempt >= SEND_ATTEMPTS {
                return Err(Undelivered::Transient);
            }
            let delay = retries.next_delay(retry_after);
            if backoff::wait(delay, &self.inner.shutdown).await == Wait::Cancelled {
                return Err(Undelivered::Transient);
            }
        }
    }
}

/// The chat an inbound message came from, which its reply goes back to.
fn chat_of(inbound: &InboundRow) -> ChatRef {
    ChatRef {
        platform: inbound.platform.clone(),
        account: inbound.account.clone(),
        chat: inbound.chat_id.clone(),
        thread: inbound.thread_id.clone(),
    }
}

/// The message that delivers an outbox row to the chat it names.
fn outbound_of(row: &OutboxRow) -> OutboundMessage {
    OutboundMessage {
        idempotency_key: row.idempotency_key(),
        platform: row.platform.clone(),
        account: row.account.clone(),
        chat: row.chat_id.clone(),
        thread: row.thread_id.clone(),
        reply_to: row.reply_to.clone(),
        text: row.text.clone(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single map operation; a panic cannot leave
    // the map half-updated, so a poisoned lock is safe to reuse.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
