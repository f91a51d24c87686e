//! Counts of what the store sends to the database, for `switchboard bench`.
//!
//! A turn's cost on a networked database is mostly its round trips, so the
//! benchmark reports them per turn next to the latency. The counters are
//! relaxed atomics bumped once per batch or connection checkout: a few
//! nanoseconds against the tens of microseconds of the round trip they count.
//!
//! What is counted, and the one approximation:
//!
//! - A batch ([`Store::write`](super::Store::write)) counts its statements
//!   and one round trip when sent, and one commit when it commits.
//! - Any other use of a connection ([`Store::conn`](super::Store::conn),
//!   [`Store::read_conn`](super::Store::read_conn)) counts one statement and
//!   one round trip: the store's methods outside batches run one query per
//!   checkout. The exceptions (the transactions of pairing, principals,
//!   routed session creation and pruning) are off the turn path and count
//!   low. Such a single statement may write and commit on its own; it is not
//!   counted as a commit.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the counters since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Statements run: each statement of a batch, and one per other checkout.
    pub statements: u64,
    /// Requests sent to the database and waited for.
    pub round_trips: u64,
    /// Batches committed (each is one transaction).
    pub commits: u64,
}

impl StoreStats {
    /// The counts between `earlier` and this snapshot.
    pub fn since(self, earlier: StoreStats) -> StoreStats {
        StoreStats {
            statements: self.statements.saturating_sub(earlier.statements),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            commits: self.commits.saturating_sub(earlier.commits),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    statements: AtomicU64,
    round_trips: AtomicU64,
    commits: AtomicU64,
}

impl Counters {
    /// A connection checked out for a single statement.
    pub(super) fn checkout(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch of `statements` sent in one round trip.
    pub(super) fn batch_sent(&self, statements: usize) {
        let statements = u64::try_from(statements).unwrap_or(u64::MAX);
        self.statements.fetch_add(statements, Ordering::Relaxed);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch committed.
    pub(super) fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> StoreStats {
        StoreStats {
            statements: self.statements.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }
}
