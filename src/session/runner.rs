//! The per-session runner: one turn at a time per session, sessions in
//! parallel, replies delivered through the outbox, across any number of
//! instances sharing the database.
//!
//! The queue lives in the database (`inbound` rows waiting as `pending`); the
//! runner only keeps, per active session, one worker task and a `dirty` flag.
//! [`Runner::notify`] marks a session dirty or starts its worker; a worker
//! drains its session's queue in arrival order and exits only when nothing
//! new arrived meanwhile (checked under the same lock that `notify` takes, so
//! no wake-up is lost).
//!
//! A fenced database lease (see `store::leases`) makes "one turn per
//! session" hold across processes: a worker claims under a new grant, renews
//! it while the turn runs (reading stop requests on the way), and a turn
//! whose grant passed to another instance stops and writes nothing more.
//! Nothing a caller waits on lives only here: a reply is found in the
//! database when [`Runner::reply_stored`] is signalled (PostgreSQL
//! `NOTIFY`) or by polling, and a stop is a row any instance can set.
//!
//! Bursts (`sessions.burst_window_ms`): the claim takes a waiting message
//! only once it is as old as the window, and marks the later messages of
//! the same sender's burst merged into it (see `store::inbound`); the turn
//! is asked their texts joined by newlines, and its reply, which answers
//! the burst's first message, reaches the callers waiting on any of them.

use crate::domain::{ApprovalStatus, OutboxStatus};
use crate::domain::{InboundId, InboundStatus, LocalPlatform, SessionId, StopCause};
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_contract::{ChatRef, OutboundMessage, PlatformSender, SendError};
use tokio::sync::{Notify, Semaphore, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::drafts::DraftWriter;
use super::notices;
use super::turn::{Ended, TurnControl, TurnExecutor};
use crate::agent::live::LiveHub;
use crate::store::{
    Batch, Burst, Claim, Fence, InboundRow, Next, Notice, OutboxRow, Renewal, Store, StoreError,
};

/// How a turn ended, for whoever waits on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReply {
    pub inbound_id: InboundId,
    pub session_id: SessionId,
    pub text: String,
    pub status: InboundStatus,
}

/// How a session's drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    /// The queue was empty and the lease was given up in the same write (or
    /// the lease had passed to another instance, which goes on).
    LeaseReleased,
    /// The lease was given up while messages wait that are younger than
    /// the burst window: look again after this long.
    Early(Duration),
    /// Shutting down; the lease is still held, to be handed back.
    Stopped,
}

/// Why a reply was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Undelivered {
    /// The platform refused it for good, or its stored ids are invalid: the
    /// row is given up.
    Permanent,
    /// Every attempt failed transiently: the next sweep tries again.
    Transient,
    /// The platform asked for a wait longer than [`INLINE_WAIT_MAX`]: the
    /// row stays claimed until then, and the sweep after it sends it.
    Deferred(Duration),
    /// Another instance claimed the row meanwhile; it goes on.
    ClaimLost,
}

/// What losing the lease does to the work it was renewed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnLost {
    /// Drop it: a turn whose lease passed on must write nothing more.
    Abort,
    /// Let it finish: a send in flight, guarded by its row's own claim.
    Finish,
}

/// What the delivery attempts of one hand-out came to.
struct Delivery {
    /// Sends made (each counts in the row's `attempts`).
    attempts: u32,
    /// The platform's id of the (first) message sent, or why none was.
    outcome: Result<Option<String>, Undelivered>,
}

/// Delivery attempts per outbox row before it waits for the next sweep.
const SEND_ATTEMPTS: u32 = 5;

/// The longest a platform's `retry_after` is waited for in line; a longer
/// one defers the row (claimed until then) and frees the worker.
const INLINE_WAIT_MAX: Duration = Duration::from_secs(10);

/// Between delivery attempts: from 500 ms, doubling, at most 30 s (a
/// platform's `retry_after` replaces it).
const SEND_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// How long a worker waits before trying again a session whose lease
/// another instance holds (it also tries at once when told the lease was
/// handed back).
const BUSY_RETRY_MAX: Duration = Duration::from_secs(2);

/// How often waiting callers' replies are looked for in the database, in
/// case the signal that they were stored was missed (or the turn finished
/// before the caller began to wait).
const REPLY_POLL: Duration = Duration::from_secs(1);

/// Runs sessions' turns and delivers their replies.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    /// Unfenced; knows this instance's id (the lease and claim owner).
    store: Store,
    turns: TurnExecutor,
    lease_ttl: Duration,
    /// How waiting messages are merged into turns.
    burst: Burst,
    /// The task budget, for `/status` about a turn another instance runs.
    max_iterations: u32,
    permits: Semaphore,
    /// The permits there are (`runner.max_concurrent_turns`).
    max_turns: usize,
    /// Active sessions and whether new work arrived since their worker last
    /// looked. A std mutex: held for a map operation only, never across an
    /// await.
    workers: Mutex<HashMap<SessionId, bool>>,
    /// The turns this process runs (or is about to), to stop them, and
    /// the lease grant each runs under.
    running: Mutex<HashMap<SessionId, (Arc<TurnControl>, Fence)>>,
    /// Callers waiting for a turn's reply, by inbound id: any number per
    /// turn (a completion, its retry, readers of the turn).
    waiters: Mutex<HashMap<InboundId, Vec<Waiter>>>,
    /// Subscribers following turns live; every turn run here publishes to
    /// it, and closes it before its reply is handed out.
    live: LiveHub,
    /// Woken when a session's lease is handed back, so that workers waiting
    /// on a busy session try again at once.
    handed_back: Notify,
    senders: Mutex<HashMap<String, Arc<dyn PlatformSender>>>,
    /// Cancelled when the instance drains: no new claims.
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// A caller waiting for a turn's reply.
#[derive(Debug)]
struct Waiter {
    /// When it began to wait (the polling fallback looks after a while).
    since: Instant,
    reply: oneshot::Sender<TurnReply>,
}

impl Runner {
    pub fn new(
        store: Store,
        turns: TurnExecutor,
        max_concurrent_turns: usize,
        burst_window: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let lease_ttl = store.instance().lease_ttl;
        Self {
            inner: Arc::new(Inner {
                max_iterations: turns.agent.max_iterations.into(),
                store,
                turns,
                lease_ttl,
                burst: Burst {
                    window_ms: i64::try_from(burst_window.as_millis()).unwrap_or(i64::MAX),
                },
                permits: Semaphore::new(max_concurrent_turns),
                max_turns: max_concurrent_turns,
                workers: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                live: LiveHub::default(),
                handed_back: Notify::new(),
                senders: Mutex::new(HashMap::new()),
                shutdown,
                tracker: TaskTracker::new(),
            }),
        }
    }

    fn owner(&self) -> &str {
        &self.inner.store.instance().id
    }

    fn ttl_ms(&self) -> i64 {
        self.inner.store.instance().lease_ttl_ms()
    }

    /// The live events of turns run here (subscribe before queuing a turn
    /// to hear all of it).
    pub fn live(&self) -> &LiveHub {
        &self.inner.live
    }

    /// Registers the sender that delivers replies for a platform.
    pub fn register_sender(&self, platform: &str, sender: Arc<dyn PlatformSender>) {
        lock(&self.inner.senders).insert(platform.to_owned(), sender);
    }

    /// Returns a receiver for the reply to an inbound message, wherever its
    /// turn runs. Register before calling [`Runner::notify`] so the reply
    /// cannot be missed. Every caller registered for a turn gets its reply.
    pub fn wait_for(&self, inbound_id: InboundId) -> oneshot::Receiver<TurnReply> {
        let (reply, receiver) = oneshot::channel();
        lock(&self.inner.waiters)
            .entry(inbound_id)
            .or_default()
            .push(Waiter {
                since: Instant::now(),
                reply,
            });
        receiver
    }

    /// Takes a turn's waiters out, for a caller that answers them itself.
    pub fn take_waiters(&self, inbound_id: InboundId) -> Vec<oneshot::Sender<TurnReply>> {
        lock(&self.inner.waiters)
            .remove(&inbound_id)
            .into_iter()
            .flatten()
            .map(|waiter| waiter.reply)
            .collect()
    }

    /// Forgets the waiters of a turn that gave up (dropped their receiver);
    /// the others keep waiting.
    pub fn forget(&self, inbound_id: InboundId) {
        let mut waiters = lock(&self.inner.waiters);
        if let Some(turn) = waiters.get_mut(&inbound_id) {
            turn.retain(|waiter| !waiter.reply.is_closed());
            if turn.is_empty() {
                waiters.remove(&inbound_id);
            }
        }
    }

    /// Hands stored replies to the callers waiting here for them: after a
    /// signal that `inbound_ids` were answered (any instance may have run
    /// them), or, with `None`, for every caller waiting for at least
    /// [`REPLY_POLL`] (the polling fallback; a reply handed out here in the
    /// meantime reaches a younger caller directly, in its delivered form).
    ///
    /// # Errors
    /// A database failure.
    pub async fn reply_stored(&self, inbound_ids: Option<&[InboundId]>) -> Result<(), StoreError> {
        let ids: Vec<InboundId> = {
            let waiters = lock(&self.inner.waiters);
            match inbound_ids {
                Some(ids) => ids
                    .iter()
                    .copied()
                    .filter(|id| waiters.contains_key(id))
                    .collect(),
                None => waiters
                    .iter()
                    .filter(|(_, turn)| turn.iter().any(|w| w.since.elapsed() >= REPLY_POLL))
                    .map(|(id, _)| *id)
                    .collect(),
            }
        };
        for chunk in ids.chunks(500) {
            for reply in self.inner.store.outbox().stored_replies(chunk).await? {
                self.answer_waiter(TurnReply {
                    inbound_id: reply.inbound_id,
                    session_id: reply.session_id,
                    text: reply.text,
                    status: reply.status,
                });
            }
        }
        Ok(())
    }

    /// Looks for waiting callers' replies in the database every
    /// [`REPLY_POLL`] until shutdown is complete. The caller owns the task.
    pub fn spawn_reply_poller(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let runner = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REPLY_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.cancelled() => return,
                }
                if lock(&runner.inner.waiters).is_empty() {
                    continue;
                }
                if let Err(err) = runner.reply_stored(None).await {
                    tracing::warn!(error = %err, "looking for stored replies failed");
                }
            }
        })
    }

    fn answer_waiter(&self, reply: TurnReply) {
        let waiters = lock(&self.inner.waiters).remove(&reply.inbound_id);
        for waiter in waiters.into_iter().flatten() {
            // The receiver may be gone (the client hung up); the reply stays
            // in the history either way.
            let _ = waiter.reply.send(reply.clone());
        }
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

    /// A session's lease was handed back by a draining instance: take its
    /// work over.
    pub fn handed_back(&self, session_id: &SessionId) {
        self.inner.handed_back.notify_waiters();
        self.notify(session_id);
    }

    /// Picks up work left by a previous run of this instance, and work
    /// orphaned by instances that died: unfinished messages and undelivered
    /// replies.
    ///
    /// # Errors
    /// A database failure.
    pub async fn recover(&self) -> Result<(), StoreError> {
        let sessions = self
            .inner
            .store
            .inbound()
            .sweep_orphans(self.owner(), self.ttl_ms(), 1000, true)
            .await?;
        if !sessions.is_empty() {
            tracing::info!(sessions = sessions.len(), "resuming unfinished turns");
        }
        for session_id in sessions {
            self.notify(&session_id);
        }
        let rows = self.inner.store.outbox().claim_pending(1000, true).await?;
        self.spawn_deliveries(rows);
        Ok(())
    }

    /// Takes over turns whose instance died (their lease expired) and
    /// replies nobody is delivering (their claim expired, or an earlier
    /// delivery gave up for now). Returns how many sessions and replies it
    /// took.
    ///
    /// # Errors
    /// A database failure.
    pub async fn sweep(&self) -> Result<(usize, usize), StoreError> {
        if self.inner.shutdown.is_cancelled() {
            return Ok((0, 0));
        }
        let sessions = self
            .inner
            .store
            .inbound()
            .sweep_orphans(self.owner(), self.ttl_ms(), 100, false)
            .await?;
        for session_id in &sessions {
            tracing::info!(
                session_id = session_id.as_str(),
                "taking over an orphaned session"
            );
            self.notify(session_id);
        }
        let rows = self.inner.store.outbox().claim_pending(100, false).await?;
        let replies = rows.len();
        self.spawn_deliveries(rows);
        Ok((sessions.len(), replies))
    }

    /// Delivers claimed replies in the background, so that one platform's
    /// retries hold up neither start-up nor the sweep: one task per
    /// session, sending its replies in the order they were written.
    pub fn spawn_deliveries(&self, rows: Vec<OutboxRow>) {
        // Rows come oldest first, so each queue keeps its session's order.
        let mut by_session: HashMap<SessionId, Vec<OutboxRow>> = HashMap::new();
        for row in rows {
            by_session
                .entry(row.session_id.clone())
                .or_default()
                .push(row);
        }
        for (session_id, queue) in by_session {
            let runner = self.clone();
            let span = tracing::info_span!("delivery", session_id = session_id.as_str());
            self.inner.tracker.spawn(
                async move {
                    for row in &queue {
                        // Nobody waits for these any more; the status only
                        // feeds waiters.
                        runner.deliver(row, InboundStatus::Done).await;
                    }
                }
                .instrument(span),
            );
        }
    }

    /// Stops claiming work, hands back what is queued, and waits (up to
    /// `grace`) for running turns. A turn still running then has its lease
    /// handed back, and resumes elsewhere (or on the next start) from its
    /// last checkpoint.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        if tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_ok()
        {
            return;
        }
        let unfinished: Vec<Fence> = lock(&self.inner.running)
            .values()
            .map(|(_, fence)| fence.clone())
            .collect();
        tracing::warn!(
            turns = unfinished.len(),
            "shutdown grace period over; unfinished turns are handed back"
        );
        for fence in &unfinished {
            if let Err(err) = self.inner.store.leases().release(fence, true).await {
                tracing::warn!(error = %err, "handing a session back failed");
            }
        }
    }

    /// Whether the runner has stopped claiming work.
    pub fn is_draining(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Stops the session's running turn, wherever it runs: the request is
    /// recorded for the instance running it (which may be this one, told at
    /// once). Returns whether a turn was running.
    ///
    /// # Errors
    /// A database failure.
    pub async fn stop(&self, session_id: &SessionId, cause: StopCause) -> Result<bool, StoreError> {
        let requested = self
            .inner
            .store
            .inbound()
            .request_stop(session_id, cause.as_str())
            .await?;
        let stopped_here = self.stop_local(session_id, cause);
        Ok(requested || stopped_here)
    }

    /// Stops the session's turn if this process runs it.
    fn stop_local(&self, session_id: &SessionId, cause: StopCause) -> bool {
        let control = lock(&self.inner.running)
            .get(session_id)
            .map(|(control, _)| Arc::clone(control));
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

    /// A stop was requested for the session (on any instance): stops its
    /// turn if it runs here.
    ///
    /// # Errors
    /// A database failure.
    pub async fn stop_requested(&self, session_id: &SessionId) -> Result<(), StoreError> {
        if !lock(&self.inner.running).contains_key(session_id) {
            return Ok(());
        }
        if let Some(cause) = self.inner.store.inbound().stop_request(session_id).await? {
            self.stop_local(session_id, StopCause::read(&cause));
        }
        Ok(())
    }

    /// Whether a turn of the session is running (on any instance), with the
    /// model calls its task has left once known.
    ///
    /// # Errors
    /// A database failure.
    pub async fn running(&self, session_id: &SessionId) -> Result<Option<Running>, StoreError> {
        let local = lock(&self.inner.running)
            .get(session_id)
            .map(|(control, _)| Arc::clone(control));
        if let Some(control) = local {
            return Ok(Some(Running {
                budget_left: control.budget_left(),
            }));
        }
        let Some(inbound_id) = self.inner.store.inbound().running_turn(session_id).await? else {
            return Ok(None);
        };
        let calls = self.inner.store.usage().task_usage(inbound_id).await?.calls;
        Ok(Some(Running {
            budget_left: Some(
                u32::try_from(u64::from(self.inner.max_iterations).saturating_sub(calls))
                    .unwrap_or(0),
            ),
        }))
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

    /// Runs every waiting message of the session, in order, under its lease;
    /// messages younger than the burst window are waited for.
    async fn drain(&self, session_id: &SessionId) -> Result<(), StoreError> {
        loop {
            let early = match self.drain_once(session_id).await? {
                Some(early) => early,
                None => return Ok(()),
            };
            tokio::select! {
                () = tokio::time::sleep(early) => {}
                () = self.inner.shutdown.cancelled() => return Ok(()),
            }
        }
    }

    /// Runs the session's waiting messages under one lease; `Some(wait)`
    /// when messages younger than the burst window are left to look at after
    /// `wait`.
    async fn drain_once(&self, session_id: &SessionId) -> Result<Option<Duration>, StoreError> {
        let store = &self.inner.store;
        let busy_retry = (self.inner.lease_ttl / 4).min(BUSY_RETRY_MAX);
        let (first, fence) = loop {
            if self.inner.shutdown.is_cancelled() {
                return Ok(None);
            }
            // Registered before the attempt, so a hand-back signalled
            // between the attempt and the wait is not missed.
            let handed_back = self.inner.handed_back.notified();
            match store
                .inbound()
                .lease_and_claim(session_id, self.owner(), self.ttl_ms(), self.inner.burst)
                .await?
            {
                Claim::Claimed { inbound, fence } => break (*inbound, fence),
                Claim::Released { retry_in } => {
                    if retry_in.is_none() {
                        self.remind_held_back(session_id).await;
                    }
                    return Ok(retry_in);
                }
                // Another instance runs this session; it drains the queue
                // too, but keep checking in case it dies before reaching
                // our message.
                Claim::Busy => tokio::select! {
                    () = tokio::time::sleep(busy_retry) => {}
                    () = handed_back => {}
                    () = self.inner.shutdown.cancelled() => return Ok(None),
                },
            }
        };
        match self.drain_leased(&fence, first).await {
            Ok(Drained::LeaseReleased) => Ok(None),
            Ok(Drained::Early(wait)) => Ok(Some(wait)),
            Ok(Drained::Stopped) => {
                tracing::info!("draining: the session is handed back");
                store.leases().release(&fence, true).await.map(|()| None)
            }
            Err(StoreError::LeaseLost) => {
                tracing::warn!(
                    "the session's lease passed to another instance; this turn stopped \
                     and wrote nothing more (the other instance resumes it)"
                );
                Ok(None)
            }
            Err(err) => {
                if let Err(release) = store.leases().release(&fence, true).await {
                    tracing::warn!(error = %release, "giving the lease up failed");
                }
                Err(err)
            }
        }
    }

    /// Nothing of the session could be claimed: if a turn of it waits for
    /// a person, the messages held back behind it get a reminder of what it
    /// waits for — once per request, in the chat of the newest.
    async fn remind_held_back(&self, session_id: &SessionId) {
        if let Err(err) = self.try_remind_held_back(session_id).await {
            tracing::warn!(error = %err, "the reminder of a pending approval was not posted");
        }
    }

    async fn try_remind_held_back(&self, session_id: &SessionId) -> Result<(), StoreError> {
        let store = &self.inner.store;
        let Some(approval) = store
            .approvals()
            .pending_in(session_id)
            .await?
            .into_iter()
            .next()
        else {
            return Ok(());
        };
        let Some(held) = store.inbound().newest_pending(session_id).await? else {
            return Ok(());
        };
        let key = format!("reminder:{}", approval.id);
        let text = notices::reminder(&approval);
        let instance = store.instance();
        let mut batch = Batch::new();
        batch.post_notice(
            &Notice {
                key: &key,
                session_id,
                platform: &held.platform,
                account: &held.account,
                chat_id: &held.chat_id,
                thread_id: held.thread_id.as_ref(),
                text: &text,
                buttons: None,
                approval_id: None,
            },
            &instance.id,
            store.clock_sql(),
            instance.lease_ttl_ms(),
        );
        for row in store.write(batch).await? {
            let notice = crate::store::read::<OutboxRow>(&row)?;
            self.deliver(&notice, InboundStatus::Command).await;
        }
        Ok(())
    }

    /// Runs `inbound`, claimed under `fence`, and every message after it.
    async fn drain_leased(
        &self,
        fence: &Fence,
        mut inbound: InboundRow,
    ) -> Result<Drained, StoreError> {
        let store = &self.inner.store;
        let session_id = &fence.session_id;
        loop {
            // The later messages of its burst, merged into it by the claim.
            let merged = store.inbound().burst_of(inbound.id).await?;
            let merged_ids: Vec<InboundId> = merged.iter().map(|row| row.id).collect();
            if !merged.is_empty() {
                tracing::info!(
                    inbound_id = inbound.id.get(),
                    merged = merged.len(),
                    "a burst of messages runs as one turn"
                );
                inbound.text = std::iter::once(inbound.text.as_str())
                    .chain(merged.iter().map(|row| row.text.as_str()))
                    .collect::<Vec<_>>()
                    .join("\n");
                inbound
                    .media
                    .extend(merged.iter().flat_map(|row| row.media.iter().cloned()));
            }
            let control = Arc::new(TurnControl::with_live(self.inner.live.open(inbound.id)));
            let drafts = self.draft_writer(fence, &inbound);
            // A stop requested before the turn (re)started applies to it.
            if let Some(cause) = &inbound.stop_cause {
                control.stop(*cause);
            }
            lock(&self.inner.running)
                .insert(session_id.clone(), (Arc::clone(&control), fence.clone()));
            let result = self.run_turn(fence, &inbound, &control).await;
            lock(&self.inner.running).remove(session_id);
            // Subscribers hear the end before the reply is handed out (those
            // following a merged message too: its turn is this one).
            self.inner.live.close(inbound.id);
            for id in &merged_ids {
                self.inner.live.close(*id);
            }
            let draft_message = match drafts {
                Some(drafts) => finish_drafts(drafts).await,
                None => None,
            };
            let Some((ended, span)) = result? else {
                return Ok(Drained::Stopped);
            };
            let Ended {
                mut row,
                status,
                more,
            } = ended;
            // The writer's word is the newest (it may have replaced a draft
            // message deleted meanwhile, or created the first one as the
            // turn ended, after the reply's row copied the turn's): the row
            // learns it before the reply goes out.
            if let Some(id) = draft_message
                && row.replaces.as_deref() != Some(id.as_str())
            {
                if let Err(err) = store.outbox().set_replaces(row.id, &id).await {
                    tracing::warn!(error = %err, outbox_id = row.id, "draft message not recorded");
                }
                row.replaces = Some(id);
            }
            for id in &merged_ids {
                self.answer_waiter(TurnReply {
                    inbound_id: *id,
                    session_id: row.session_id.clone(),
                    text: row.text.clone(),
                    status,
                });
            }
            if status == InboundStatus::Waiting {
                // Parked: the caller learns it waits; the question goes out.
                self.answer_waiter(TurnReply {
                    inbound_id: inbound.id,
                    session_id: row.session_id.clone(),
                    text: row.text.clone(),
                    status,
                });
                for notice in &more {
                    self.deliver(notice, status).await;
                }
            }
            // The reply's delivery status, committed with the next claim.
            // The lease is renewed while the platform is slow, but a send in
            // flight is never cut short: the row's own claim guards it.
            let hand_out = self.hand_out(&row, status).instrument(span);
            let delivered = self
                .with_lease_renewal(fence, inbound.id, &control, OnLost::Finish, async {
                    Ok(hand_out.await)
                })
                .await?
                .unwrap_or_default();
            if self.inner.shutdown.is_cancelled() {
                store.write(delivered).await?;
                return Ok(Drained::Stopped);
            }
            let next = match store
                .inbound()
                .claim_next_or_release(fence, delivered.clone(), self.inner.burst)
                .await
            {
                Ok(next) => next,
                // The session passed to another instance meanwhile; the
                // reply's status is this instance's to record all the same,
                // or the sweep would send it again.
                Err(StoreError::LeaseLost) => {
                    store.write(delivered).await?;
                    return Err(StoreError::LeaseLost);
                }
                Err(err) => return Err(err),
            };
            inbound = match next {
                Next::Claimed(next) => *next,
                Next::Released { retry_in: None } => return Ok(Drained::LeaseReleased),
                Next::Released {
                    retry_in: Some(wait),
                } => return Ok(Drained::Early(wait)),
            };
        }
    }

    /// Waits for a turn permit, then runs the turn, renewing the lease all
    /// along. `None` when the instance began draining before the turn
    /// started.
    async fn run_turn(
        &self,
        fence: &Fence,
        inbound: &InboundRow,
        control: &TurnControl,
    ) -> Result<Option<(Ended, tracing::Span)>, StoreError> {
        let permit = self
            .with_lease_renewal(fence, inbound.id, control, OnLost::Abort, async {
                Ok(self.inner.permits.acquire().await)
            })
            .await?;
        // The semaphore is never closed, so acquire cannot fail.
        let Ok(_permit) = permit else {
            return Ok(None);
        };
        if self.inner.shutdown.is_cancelled() {
            return Ok(None);
        }
        let trace_id = uuid::Uuid::now_v7().to_string();
        control.set_trace_id(trace_id.clone());
        // Every log line of the turn carries these (the JSON log flattens
        // them into each line).
        let span = tracing::info_span!(
            "turn",
            trace_id = %trace_id,
            session_id = %inbound.session_id,
            platform = %inbound.platform,
            inbound_id = inbound.id.get()
        );
        // The reply goes back to the chat the message came from.
        let typing = self.typing_indicator(&chat_of(inbound));
        let turn = self
            .inner
            .turns
            .run(inbound, control, fence.clone())
            .instrument(span.clone());
        let result = self
            .with_lease_renewal(fence, inbound.id, control, OnLost::Abort, turn)
            .await;
        if let Some(typing) = typing {
            typing.abort();
        }
        Ok(Some((result?, span)))
    }

    /// Starts showing the turn of `inbound` growing in its chat, when its
    /// platform shows drafts there.
    fn draft_writer(
        &self,
        fence: &Fence,
        inbound: &InboundRow,
    ) -> Option<tokio::task::JoinHandle<Option<String>>> {
        let sender = lock(&self.inner.senders)
            .get(inbound.platform.as_str())
            .cloned()?;
        let writer = DraftWriter::new(
            sender,
            self.inner.store.fenced(fence.clone()),
            inbound.id,
            chat_of(inbound),
            inbound.message_id.clone(),
            inbound.draft_message_id.clone(),
        )?;
        // Subscribed before the turn starts, so the model is called
        // streaming and every event is heard.
        let events = self.inner.live.subscribe(inbound.id);
        Some(tokio::spawn(writer.run(events).in_current_span()))
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

    /// Runs `work` while renewing the lease of `fence` and reading stop
    /// requests for the turn of `inbound_id`. When the lease has passed to
    /// another instance, `on_lost` says whether `work` is dropped at once
    /// (the error is then [`StoreError::LeaseLost`]) or runs to its end.
    async fn with_lease_renewal<T>(
        &self,
        fence: &Fence,
        inbound_id: InboundId,
        control: &TurnControl,
        on_lost: OnLost,
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
                    match self.inner.store.leases().renew(fence, inbound_id, self.ttl_ms()).await {
                        Ok(Renewal::Held { stop: Some(cause) }) => {
                            control.stop(StopCause::read(&cause));
                        }
                        Ok(Renewal::Held { stop: None }) => {}
                        Ok(Renewal::Lost) => match on_lost {
                            OnLost::Abort => return Err(StoreError::LeaseLost),
                            OnLost::Finish => {
                                tracing::warn!("lease lost while delivering a reply");
                                return work.await;
                            }
                        },
                        // The fence still guards every write; the next tick
                        // tries again.
                        Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
                    }
                }
            }
        }
    }

    /// Replaces the text of a sent message (a question once decided) and
    /// removes its buttons, where its platform's adapter runs here and can
    /// edit; a failure is logged and left.
    pub async fn edit(&self, row: &OutboxRow, text: &str) {
        let Some(message_id) = row.platform_message_id.as_deref() else {
            return;
        };
        let sender = lock(&self.inner.senders)
            .get(row.platform.as_str())
            .cloned();
        let Some(sender) = sender else { return };
        let chat = ChatRef {
            platform: row.platform.clone(),
            account: row.account.clone(),
            chat: row.chat_id.clone(),
            thread: row.thread_id.clone(),
        };
        if let Err(err) = sender.edit(&chat, message_id, text).await {
            tracing::warn!(outbox_id = row.id, error = %err, "the question could not be updated");
        }
    }

    /// Edits the copy `row` of approval `approval_id`'s question, just sent
    /// as the platform message `sent`, to its outcome if it is settled.
    async fn show_if_settled(&self, row: &OutboxRow, approval_id: i64, sent: String) {
        match self.inner.store.approvals().get(approval_id).await {
            Ok(Some(approval)) if approval.status != ApprovalStatus::Pending => {
                let mut copy = row.clone();
                copy.platform_message_id = Some(sent);
                self.edit(&copy, &notices::settled(&approval)).await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, approval_id, "the question's approval not read");
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

    /// Hands a reply (claimed by this instance) to its waiter and its
    /// platform; returns the write that records the outcome: sent, a failed
    /// attempt, or the claim given up when no adapter for its platform runs
    /// here.
    async fn hand_out(&self, row: &OutboxRow, status: InboundStatus) -> Option<Batch> {
        if row.status == OutboxStatus::Relayed {
            return None;
        }
        if row.status == OutboxStatus::Sent {
            // A question posted before a restart, shown again to its waiter.
            self.answer_waiter(TurnReply {
                inbound_id: row.inbound_id,
                session_id: row.session_id.clone(),
                text: row.text.clone(),
                status,
            });
            return None;
        }
        self.answer_waiter(TurnReply {
            inbound_id: row.inbound_id,
            session_id: row.session_id.clone(),
            text: row.text.clone(),
            status,
        });
        let sender = lock(&self.inner.senders)
            .get(row.platform.as_str())
            .cloned();
        let delivery = match sender {
            Some(sender) => {
                let message = outbound_of(row);
                self.send_with_retries(sender.as_ref(), row, &message).await
            }
            None if LocalPlatform::of(row.platform.as_str()).is_some() => Delivery {
                attempts: 0,
                outcome: Ok(None),
            },
            // No adapter for this platform in this process: another instance
            // (or a later start) delivers it.
            None => {
                let mut released = Batch::new();
                released.release_outbox_claim(row.id);
                return Some(released);
            }
        };
        let store = &self.inner.store;
        let mut marked = Batch::new();
        match delivery.outcome {
            Ok(message_id) => {
                marked.mark_outbox_sent(row.id, delivery.attempts, message_id.as_deref());
                if let (Some(approval_id), Some(sent)) = (row.approval_id, message_id) {
                    // A question's copy is recorded now, then its approval
                    // read: a decision made while it was in flight, whose
                    // edit of the copies could not see this one yet, is
                    // shown in it here.
                    if let Err(err) = store.write(marked).await {
                        tracing::error!(error = %err, outbox_id = row.id, "outbox status not recorded");
                        return None;
                    }
                    self.show_if_settled(row, approval_id, sent).await;
                    return None;
                }
            }
            Err(Undelivered::ClaimLost) => return None,
            Err(Undelivered::Deferred(wait)) => {
                tracing::info!(
                    outbox_id = row.id,
                    ?wait,
                    "reply deferred by the platform's rate limit"
                );
                marked.defer_outbox(store.clock_sql(), row.id, delivery.attempts, wait);
            }
            Err(failure) => marked.mark_outbox_attempts_failed(
                row.id,
                delivery.attempts,
                failure == Undelivered::Permanent,
            ),
        }
        Some(marked)
    }

    /// Sends with retries, renewing the row's claim before each retry.
    /// Waits in line for at most [`INLINE_WAIT_MAX`] at a time (and never
    /// past shutdown); a platform asking for longer defers the row.
    async fn send_with_retries(
        &self,
        sender: &dyn PlatformSender,
        row: &OutboxRow,
        message: &OutboundMessage,
    ) -> Delivery {
        let mut retries = SEND_BACKOFF.retries();
        let mut attempts = 0;
        let outcome = loop {
            if attempts > 0 {
                match self.inner.store.outbox().renew_claim(row.id).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(outbox_id = row.id, "another instance delivers this reply");
                        break Err(Undelivered::ClaimLost);
                    }
                    Err(err) => {
                        tracing::warn!(outbox_id = row.id, error = %err, "claim not renewed");
                        break Err(Undelivered::Transient);
                    }
                }
            }
            attempts += 1;
            let sent = sender.send(message).await;
            self.count_delivery(row.platform.as_str(), &sent);
            let retry_after = match sent {
                Ok(receipt) => break Ok(kept_message_id(message, receipt.message_ids)),
                Err(SendError::Permanent(reason)) => {
                    tracing::error!(outbox_id = row.id, %reason, "reply cannot be delivered");
                    break Err(Undelivered::Permanent);
                }
                Err(SendError::RetryAfter(wait)) => {
                    tracing::warn!(
                        outbox_id = row.id,
                        attempt = attempts,
                        ?wait,
                        "platform rate limit"
                    );
                    if wait > INLINE_WAIT_MAX {
                        break Err(Undelivered::Deferred(wait));
                    }
                    Some(wait)
                }
                Err(SendError::Transient(reason)) => {
                    tracing::warn!(outbox_id = row.id, attempt = attempts, %reason, "send failed; retrying");
                    None
                }
            };
            // Attempts spent, or shutting down: the row stays pending for the
            // next sweep (or the next start).
            if attempts >= SEND_ATTEMPTS {
                break Err(Undelivered::Transient);
            }
            let delay = retries.next_delay(retry_after);
            if backoff::wait(delay, &self.inner.shutdown).await == Wait::Cancelled {
                break Err(Undelivered::Transient);
            }
        };
        Delivery { attempts, outcome }
    }
}

/// The platform message id kept for a delivered reply: its first part's,
/// or for a reply with buttons (a question) the last part's, where the
/// adapter put the buttons, so that settling the question edits that part
/// (and a press of its buttons is known as a press of this reply's).
fn kept_message_id(message: &OutboundMessage, mut ids: Vec<String>) -> Option<String> {
    if message.buttons.is_empty() {
        ids.into_iter().next()
    } else {
        ids.pop()
    }
}

impl Runner {
    /// Where this gateway's turns, calls and deliveries are counted.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.turns.metrics
    }

    /// Counts one delivery attempt to `platform` in the metrics.
    fn count_delivery<T>(&self, platform: &str, sent: &Result<T, SendError>) {
        let metrics = &self.inner.turns.metrics;
        match sent {
            Ok(_) => metrics.delivered(platform),
            Err(SendError::Transient(_)) => metrics.delivery_failed(platform, "transient"),
            Err(SendError::RetryAfter(_)) => metrics.delivery_failed(platform, "rate_limited"),
            Err(SendError::Permanent(_)) => metrics.delivery_failed(platform, "permanent"),
        }
    }

    /// Turns running in this instance now (each holds a turn permit).
    pub fn turns_running(&self) -> usize {
        self.inner
            .max_turns
            .saturating_sub(self.inner.permits.available_permits())
    }
}

/// A turn running somewhere, as `/status` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    /// Model calls its task may still make, once it has started.
    pub budget_left: Option<u32>,
}

/// How long the reply waits for a draft being shown as its turn ended: the
/// reply must not go out before it (or the draft would overwrite it).
const DRAFT_SETTLE_MAX: Duration = Duration::from_secs(15);

/// Waits for a turn's draft writer to finish (its turn has ended, so it
/// ends after the draft it may be showing); the draft's message, if any.
async fn finish_drafts(writer: tokio::task::JoinHandle<Option<String>>) -> Option<String> {
    let abort = writer.abort_handle();
    match tokio::time::timeout(DRAFT_SETTLE_MAX, writer).await {
        Ok(Ok(message_id)) => message_id,
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "draft writer failed");
            None
        }
        Err(_) => {
            tracing::warn!("draft writer still busy; the reply goes out without it");
            abort.abort();
            None
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
        replaces: row.replaces.clone(),
        platform: row.platform.clone(),
        account: row.account.clone(),
        chat: row.chat_id.clone(),
        thread: row.thread_id.clone(),
        reply_to: row.reply_to.clone(),
        text: row.text.clone(),
        buttons: row
            .buttons
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default(),
        redelivery: row.attempts > 0,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single map operation; a panic cannot leave
    // the map half-updated, so a poisoned lock is safe to reuse.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
