//! Housekeeping of the blob store: blobs that no stored message refers to
//! (`inbound.media`, `messages.media`) are removed once they are older than
//! `media.retention_days`, and the daily byte counts of past days are
//! dropped.
//!
//! A blob's age is the store's last-modified time, which a `put` of a blob
//! already stored renews (see [`super::blobs::RENEW_AFTER_MS`]): a blob just
//! written for a message not yet recorded is young, so it is never taken
//! for a forgotten one. Each candidate's age is read again just before it
//! is removed; a put landing between that read and the removal is the one
//! window left (that message's model requests would then carry the note
//! that the file is no longer stored).
//!
//! [`MediaHousekeeping`] runs from the gateway's maintenance task at most
//! once an hour, and on one instance at a time: the run takes the lease
//! `housekeeping:media` (a platform lease, see `store::platform_leases`)
//! for an hour and keeps it, so another instance sharing the database skips
//! its runs until the hour is over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::blobs::{BlobError, BlobStore};
use super::budget::utc_day;
use crate::domain::now_ms;
use crate::store::{Store, StoreError};

/// How often housekeeping of the blob store runs, across all instances.
pub const EVERY: Duration = Duration::from_secs(3600);
/// The lease a run holds.
pub const LEASE: &str = "housekeeping:media";
const DAY_MS: i64 = 86_400_000;

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Blobs removed.
    pub removed: usize,
    /// Bytes they held.
    pub bytes: u64,
    /// Old blobs kept because a message refers to them.
    pub referenced: usize,
}

/// A housekeeping failure.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Removes the blobs of `blobs` that no message in `store` refers to and
/// that are older than `retention_ms`.
///
/// # Errors
/// The store or the database failed; what was removed before stays removed.
pub async fn remove_unreferenced(
    store: &Store,
    blobs: &dyn BlobStore,
    retention_ms: i64,
) -> Result<Swept, CleanupError> {
    let cutoff = now_ms().saturating_sub(retention_ms);
    // Listed before the references are read: a blob put after this is not
    // a candidate, and one put before it is either old (and then renewed
    // by the put) or referenced by the time the references are read.
    let old: Vec<_> = blobs
        .list()
        .await?
        .into_iter()
        .filter(|blob| blob.modified_ms < cutoff)
        .collect();
    let mut swept = Swept::default();
    if old.is_empty() {
        return Ok(swept);
    }
    let referenced = store.media().referenced_blob_hashes().await?;
    for blob in old {
        if referenced.contains(&blob.hash) {
            swept.referenced += 1;
            continue;
        }
        // Put again since it was listed: a new message is taking it.
        match blobs.stat(&blob.hash).await? {
            Some(now) if now.modified_ms < cutoff => {}
            _ => continue,
        }
        blobs.delete(&blob.hash).await?;
        swept.removed += 1;
        swept.bytes += blob.size;
    }
    Ok(swept)
}

/// The media part of the maintenance task.
pub struct MediaHousekeeping {
    store: Store,
    blobs: Arc<dyn BlobStore>,
    /// 0: blobs are never removed.
    retention_days: u32,
    owner: String,
    last_run: Option<Instant>,
}

impl MediaHousekeeping {
    /// Housekeeping of `blobs` against the messages in `store`, as the
    /// instance `owner`.
    #[must_use]
    pub fn new(
        store: Store,
        blobs: Arc<dyn BlobStore>,
        retention_days: u32,
        owner: impl Into<String>,
    ) -> Self {
        Self {
            store,
            blobs,
            retention_days,
            owner: owner.into(),
            last_run: None,
        }
    }

    /// Runs when this instance has not run (or found the lease taken)
    /// within the hour and
    /// no other instance holds the lease. Returns what the run did, `None`
    /// when it did not run.
    ///
    /// # Errors
    /// The store or the database failed.
    pub async fn tick(&mut self) -> Result<Option<Swept>, CleanupError> {
        if self.last_run.is_some_and(|last| last.elapsed() < EVERY) {
            return Ok(None);
        }
        let ttl_ms = i64::try_from(EVERY.as_millis()).unwrap_or(i64::MAX);
        let held = self
            .store
            .leases()
            .acquire_platform(LEASE, &self.owner, ttl_ms)
            .await?;
        // Held or not, this instance looks again in an hour (a failure to
        // reach the database is tried again at the next tick).
        self.last_run = Some(Instant::now());
        if held.is_none() {
            return Ok(None);
        }
        self.run().await.map(Some)
    }

    /// One run, whoever holds the lease.
    ///
    /// # Errors
    /// The store or the database failed.
    pub async fn run(&self) -> Result<Swept, CleanupError> {
        let now = now_ms();
        self.store.media().prune_usage(&utc_day(now)).await?;
        if self.retention_days == 0 {
            return Ok(Swept::default());
        }
        let retention_ms = i64::from(self.retention_days).saturating_mul(DAY_MS);
        remove_unreferenced(&self.store, self.blobs.as_ref(), retention_ms).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::blobs::{MemoryBlobs, hash_of};
    use super::*;
    use crate::store::test_support::scratch_store;

    #[tokio::test]
    async fn one_instance_runs_an_hour_and_the_others_skip() {
        let (store, _dir) = scratch_store().await;
        let blobs = MemoryBlobs::default();
        let old = hash_of(b"old");
        blobs.put(&old, b"old").await.expect("put");
        blobs.age(&old, 40 * DAY_MS);
        let mut first = MediaHousekeeping::new(store.clone(), Arc::new(blobs.clone()), 30, "a");
        let mut second = MediaHousekeeping::new(store.clone(), Arc::new(blobs.clone()), 30, "b");
        assert_eq!(
            first.tick().await.expect("tick"),
            Some(Swept {
                removed: 1,
                bytes: 3,
                referenced: 0
            })
        );
        assert!(blobs.is_empty());
        assert_eq!(
            second.tick().await.expect("tick"),
            None,
            "a holds the lease"
        );
        assert_eq!(
            first.tick().await.expect("tick"),
            None,
            "ran within the hour"
        );
    }

    #[tokio::test]
    async fn no_retention_keeps_every_blob() {
        let (store, _dir) = scratch_store().await;
        let blobs = MemoryBlobs::default();
        let old = hash_of(b"old");
        blobs.put(&old, b"old").await.expect("put");
        blobs.age(&old, 400 * DAY_MS);
        let keeping = MediaHousekeeping::new(store, Arc::new(blobs.clone()), 0, "a");
        assert_eq!(keeping.run().await.expect("run"), Swept::default());
        assert_eq!(blobs.len(), 1);
    }
}
