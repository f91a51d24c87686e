//! Waiting for a turn's reply from API reads (`GET
//! /v1/sessions/{id}/turns/{turn}?wait=SECONDS`), through the runner's
//! waiters: a reply is found when any instance signals that it was stored
//! (PostgreSQL `NOTIFY`) or by the runner's polling, so the turn may run
//! anywhere.
//!
//! The runner keeps one waiter per turn. One forwarding task per turn here
//! holds it for every reader waiting in this process, and takes over (and
//! answers) a waiter registered before, such as the completion request that
//! sent the message, or its retry with the same `Idempotency-Key`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{oneshot, watch};

use crate::session::runner::{Runner, TurnReply};

/// The turns read requests wait for, each with its forwarding task's
/// signal.
#[derive(Default)]
pub struct TurnWatches {
    turns: Mutex<HashMap<i64, Arc<watch::Sender<bool>>>>,
}

impl TurnWatches {
    /// A receiver whose value becomes `true` once the turn's reply is
    /// stored. Read the turn after subscribing, so that a reply stored in
    /// between is not missed.
    pub fn watch(self: &Arc<Self>, runner: &Runner, turn: i64) -> watch::Receiver<bool> {
        let mut turns = lock(&self.turns);
        if let Some(signal) = turns.get(&turn) {
            return signal.subscribe();
        }
        let (signal, receiver) = watch::channel(false);
        let signal = Arc::new(signal);
        turns.insert(turn, Arc::clone(&signal));
        drop(turns);
        tokio::spawn(Arc::clone(self).forward(runner.clone(), turn, signal));
        receiver
    }

    /// Holds the runner's waiter for `turn` until the reply comes (then
    /// signals it, and answers the waiters it took over) or nobody waits
    /// any more (then the waiter is forgotten).
    async fn forward(self: Arc<Self>, runner: Runner, turn: i64, signal: Arc<watch::Sender<bool>>) {
        let mut earlier: Vec<oneshot::Sender<TurnReply>> = Vec::new();
        loop {
            // A waiter registered since (a completion, or its retry) is
            // answered from here: the runner holds one waiter per turn.
            earlier.retain(|waiter| !waiter.is_closed());
            earlier.extend(runner.take_waiter(turn));
            let reply = runner.wait_for(turn);
            // A reply stored before the waiter was registered is found now.
            if let Err(err) = runner.reply_stored(Some(&[turn])).await {
                tracing::warn!(error = %err, turn, "looking for a stored reply failed");
            }
            let outcome = tokio::select! {
                received = reply => Some(received),
                () = abandoned(&signal, &mut earlier) => None,
            };
            match outcome {
                Some(Ok(reply)) => {
                    for waiter in earlier.drain(..) {
                        let _ = waiter.send(reply.clone());
                    }
                    // Removed first: a reader subscribing from now on starts
                    // a new watch, and finds the reply stored.
                    lock(&self.turns).remove(&turn);
                    signal.send_replace(true);
                    return;
                }
                // The waiter was forgotten (a completion request gave up on
                // the turn) or replaced (a retry): register again.
                Some(Err(_)) => {}
                None => {
                    let mut turns = lock(&self.turns);
                    // Nobody subscribed meanwhile: done.
                    if signal.receiver_count() == 0 {
                        turns.remove(&turn);
                        drop(turns);
                        runner.forget(turn);
                        return;
                    }
                }
            }
        }
    }
}

/// Resolves when no reader and no taken-over waiter is waiting any more.
async fn abandoned(signal: &watch::Sender<bool>, earlier: &mut [oneshot::Sender<TurnReply>]) {
    signal.closed().await;
    for waiter in earlier {
        waiter.closed().await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is one map operation: a panic cannot leave the
    // map half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
