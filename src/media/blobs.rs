//! The blob store: files kept once each, named by the SHA-256 of their
//! bytes, behind [`BlobStore`] so that a store shared by several instances
//! (an S3-compatible one) can stand in for the local folder.
//!
//! [`LocalBlobs`] writes each blob to `<folder>/<first two hex digits>/<hash>`
//! through a temporary file renamed into place, so a reader never sees half
//! a blob and two writers of the same blob leave one file. [`MemoryBlobs`]
//! keeps them in memory (tests, single-process tools); [`super::s3`] keeps
//! them in an S3-compatible bucket.
//!
//! Each blob has a last-modified time, which housekeeping
//! ([`super::cleanup`]) reads to leave recent blobs alone: putting a blob
//! that is already stored renews that time when it is older than
//! [`RENEW_AFTER_MS`], so a blob just handed to a new message is never
//! taken for an old, forgotten one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::domain::now_ms;

/// A blob store failure.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A name that is not a SHA-256 in lowercase hex.
    #[error("not a blob hash: {0:?}")]
    BadHash(String),
    /// The storage failed.
    #[error("blob storage failed: {0}")]
    Io(#[from] std::io::Error),
    /// The remote store failed or refused (the message names no secret).
    #[error("blob storage failed: {0}")]
    Remote(String),
}

/// Putting a blob already stored renews its last-modified time when that is
/// older than this (an hour): housekeeping removes only blobs older than a
/// day at least, so a blob put for a message being recorded is never
/// removed under it.
pub const RENEW_AFTER_MS: i64 = 3_600_000;

/// A stored blob, as [`BlobStore::list`] and [`BlobStore::stat`] see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// Its name: the SHA-256 of its bytes.
    pub hash: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written (or renewed), in milliseconds since the
    /// Unix epoch, on the store's clock.
    pub modified_ms: i64,
}

/// Where blobs live.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under `hash` (their SHA-256, see [`hash_of`]) unless
    /// a blob of that hash is there already. Returns whether it was new.
    ///
    /// # Errors
    /// A bad hash or a storage failure.
    async fn put(&self, hash: &str, bytes: &[u8]) -> Result<bool, BlobError>;

    /// The blob of `hash`, if stored.
    ///
    /// # Errors
    /// A bad hash or a storage failure.
    async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BlobError>;

    /// The blob of `hash`'s size and age, if stored.
    ///
    /// # Errors
    /// A bad hash or a storage failure.
    async fn stat(&self, hash: &str) -> Result<Option<BlobInfo>, BlobError>;

    /// Removes the blob of `hash`; one not stored is no error (S3 does not
    /// tell the two apart; ask [`BlobStore::stat`] first when it matters).
    ///
    /// # Errors
    /// A bad hash or a storage failure.
    async fn delete(&self, hash: &str) -> Result<(), BlobError>;

    /// Every blob stored (anything else in the store is left out).
    ///
    /// # Errors
    /// A storage failure.
    async fn list(&self) -> Result<Vec<BlobInfo>, BlobError>;
}

/// The blob store `settings` name: the local folder, or the S3 bucket.
///
/// # Errors
/// The S3 bucket's credentials are missing or its settings unusable.
pub fn open(
    settings: &crate::media::settings::MediaSettings,
) -> Result<Arc<dyn BlobStore>, BlobError> {
    Ok(match settings.store {
        crate::media::settings::BlobStoreKind::Local => Arc::new(LocalBlobs::new(&settings.folder)),
        crate::media::settings::BlobStoreKind::S3 => {
            Arc::new(super::s3::S3Blobs::from_settings(&settings.s3)?)
        }
    })
}

/// `time` in milliseconds since the Unix epoch (0 before it).
fn system_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    })
}

/// Whether `name` is a blob's name (a SHA-256 in lowercase hex).
#[must_use]
pub fn is_hash(name: &str) -> bool {
    checked(name).is_ok()
}

/// The SHA-256 of `bytes` in lowercase hex: a blob's name.
#[must_use]
pub fn hash_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub(super) fn checked(hash: &str) -> Result<&str, BlobError> {
    let valid = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if valid {
        Ok(hash)
    } else {
        Err(BlobError::BadHash(hash.to_owned()))
    }
}

/// Blobs in a local folder (created on first write).
#[derive(Debug, Clone)]
pub struct LocalBlobs {
    root: PathBuf,
}

impl LocalBlobs {
    /// Blobs under `root`.
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder blobs are kept in.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, hash: &str) -> Result<PathBuf, BlobError> {
        let hash = checked(hash)?;
        Ok(self.root.join(&hash[..2]).join(hash))
    }
}

#[async_trait]
impl BlobStore for LocalBlobs {
    async fn put(&self, hash: &str, bytes: &[u8]) -> Result<bool, BlobError> {
        let path = self.path_of(hash)?;
        if let Some(found) = self.stat(hash).await? {
            if now_ms() - found.modified_ms > RENEW_AFTER_MS {
                let file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .await?
                    .into_std()
                    .await;
                tokio::task::spawn_blocking(move || file.set_modified(SystemTime::now()))
                    .await
                    .map_err(|err| BlobError::Io(std::io::Error::other(err)))??;
            }
            return Ok(false);
        }
        let folder = path.parent().unwrap_or(&self.root).to_path_buf();
        tokio::fs::create_dir_all(&folder).await?;
        let temp = folder.join(format!(".{hash}.{}.tmp", uuid::Uuid::new_v4().simple()));
        tokio::fs::write(&temp, bytes).await?;
        if let Err(err) = tokio::fs::rename(&temp, &path).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(err.into());
        }
        Ok(true)
    }

    async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let path = self.path_of(hash)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    async fn stat(&self, hash: &str) -> Result<Option<BlobInfo>, BlobError> {
        let path = self.path_of(hash)?;
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(BlobInfo {
                hash: hash.to_owned(),
                size: meta.len(),
                modified_ms: system_ms(meta.modified()?),
            })),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    async fn delete(&self, hash: &str) -> Result<(), BlobError> {
        let path = self.path_of(hash)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    async fn list(&self) -> Result<Vec<BlobInfo>, BlobError> {
        let mut found = Vec::new();
        let mut folders = match tokio::fs::read_dir(&self.root).await {
            Ok(folders) => folders,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(err) => return Err(err.into()),
        };
        while let Some(folder) = folders.next_entry().await? {
            let Some(prefix) = folder.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if prefix.len() != 2 || !folder.file_type().await?.is_dir() {
                continue;
            }
            let mut files = tokio::fs::read_dir(folder.path()).await?;
            while let Some(file) = files.next_entry().await? {
                let Some(name) = file.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                if !is_hash(&name) || !name.starts_with(&prefix) {
                    continue;
                }
                let meta = match file.metadata().await {
                    Ok(meta) => meta,
                    // Removed since the folder was read.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(err.into()),
                };
                if meta.is_file() {
                    found.push(BlobInfo {
                        hash: name,
                        size: meta.len(),
                        modified_ms: system_ms(meta.modified()?),
                    });
                }
            }
        }
        Ok(found)
    }
}

/// Blobs in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryBlobs {
    blobs: Arc<Mutex<Held>>,
}

/// What [`MemoryBlobs`] holds: each blob's bytes and last-modified time.
type Held = HashMap<String, (Arc<[u8]>, i64)>;

impl MemoryBlobs {
    /// How many blobs are stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no blob is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves the last-modified time of the blob of `hash` `by_ms` into the
    /// past, as if it had been stored that long ago (tests of housekeeping).
    pub fn age(&self, hash: &str, by_ms: i64) {
        if let Some((_, modified)) = self.lock().get_mut(hash) {
            *modified -= by_ms;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.blobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl BlobStore for MemoryBlobs {
    async fn put(&self, hash: &str, bytes: &[u8]) -> Result<bool, BlobError> {
        let hash = checked(hash)?;
        let mut blobs = self.lock();
        let now = now_ms();
        if let Some((_, modified)) = blobs.get_mut(hash) {
            if now - *modified > RENEW_AFTER_MS {
                *modified = now;
            }
            return Ok(false);
        }
        blobs.insert(hash.to_owned(), (Arc::from(bytes), now));
        Ok(true)
    }

    async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let hash = checked(hash)?;
        Ok(self.lock().get(hash).map(|(bytes, _)| bytes.to_vec()))
    }

    async fn stat(&self, hash: &str) -> Result<Option<BlobInfo>, BlobError> {
        let hash = checked(hash)?;
        Ok(self.lock().get(hash).map(|(bytes, modified)| BlobInfo {
            hash: hash.to_owned(),
            size: bytes.len() as u64,
            modified_ms: *modified,
        }))
    }

    async fn delete(&self, hash: &str) -> Result<(), BlobError> {
        let hash = checked(hash)?;
        self.lock().remove(hash);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<BlobInfo>, BlobError> {
        Ok(self
            .lock()
            .iter()
            .map(|(hash, (bytes, modified))| BlobInfo {
                hash: hash.clone(),
                size: bytes.len() as u64,
                modified_ms: *modified,
            })
            .collect())
    }
}

/// What every [`BlobStore`] does, checked on `store`; `age(hash, ms)`
/// moves a blob's last-modified time that far into the past.
#[cfg(test)]
pub(crate) async fn check_store(store: &dyn BlobStore, age: &dyn Fn(&str, i64)) {
    let bytes = b"hello blob";
    let hash = hash_of(bytes);
    assert!(store.put(&hash, bytes).await.expect("put"));
    assert!(!store.put(&hash, bytes).await.expect("put again"));
    assert_eq!(
        store.get(&hash).await.expect("get").as_deref(),
        Some(&bytes[..])
    );
    let other = hash_of(b"other");
    assert_eq!(store.get(&other).await.expect("get missing"), None);
    assert_eq!(store.stat(&other).await.expect("stat missing"), None);
    assert!(matches!(
        store.get("../etc/passwd").await,
        Err(BlobError::BadHash(_))
    ));
    assert!(matches!(
        store.delete("../etc/passwd").await,
        Err(BlobError::BadHash(_))
    ));
    let info = store.stat(&hash).await.expect("stat").expect("stored");
    assert_eq!((info.hash.as_str(), info.size), (hash.as_str(), 10));
    assert!(
        (now_ms() - info.modified_ms).abs() < 60_000,
        "modified just now: {info:?}"
    );
    assert_eq!(store.list().await.expect("list"), vec![info]);

    // An old blob put again is renewed, so housekeeping sees it as new.
    age(&hash, 2 * RENEW_AFTER_MS);
    let aged = store.stat(&hash).await.expect("stat").expect("stored");
    assert!(now_ms() - aged.modified_ms > RENEW_AFTER_MS, "{aged:?}");
    assert!(!store.put(&hash, bytes).await.expect("put old"));
    let renewed = store.stat(&hash).await.expect("stat").expect("stored");
    assert!(now_ms() - renewed.modified_ms < 60_000, "{renewed:?}");

    assert!(store.put(&other, b"other").await.expect("put other"));
    let mut listed: Vec<String> = store
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|info| info.hash)
        .collect();
    listed.sort();
    let mut both = vec![hash.clone(), other.clone()];
    both.sort();
    assert_eq!(listed, both);
    store.delete(&hash).await.expect("delete");
    assert_eq!(store.stat(&hash).await.expect("stat deleted"), None);
    store
        .delete(&hash)
        .await
        .expect("deleting what is gone is no error");
    assert_eq!(store.get(&hash).await.expect("get deleted"), None);
    let left: Vec<String> = store
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|info| info.hash)
        .collect();
    assert_eq!(left, vec![other]);
}

/// Sets the modification time of `path` `by_ms` into the past (tests).
#[cfg(test)]
pub(crate) fn age_file(path: &Path, by_ms: i64) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the blob");
    let modified = file
        .metadata()
        .and_then(|meta| meta.modified())
        .expect("modified");
    let by = std::time::Duration::from_millis(u64::try_from(by_ms).expect("positive"));
    file.set_modified(modified - by).expect("set modified");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_folder_keeps_each_blob_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = LocalBlobs::new(dir.path().join("media"));
        let root = store.root().to_path_buf();
        check_store(&store, &|hash, by| {
            age_file(&root.join(&hash[..2]).join(hash), by);
        })
        .await;
        let hash = hash_of(b"other");
        let file = dir.path().join("media").join(&hash[..2]).join(&hash);
        assert_eq!(std::fs::read(file).expect("the blob file"), b"other");
        let entries = std::fs::read_dir(dir.path().join("media").join(&hash[..2]))
            .expect("folder")
            .count();
        assert_eq!(entries, 1, "no temporary file is left behind");
        // Files that are not blobs are not listed.
        std::fs::write(dir.path().join("media").join("notes.txt"), "x").expect("write");
        std::fs::write(dir.path().join("media").join(&hash[..2]).join(".tmp"), "x").expect("write");
        assert_eq!(store.list().await.expect("list").len(), 1);
    }

    #[tokio::test]
    async fn a_missing_local_folder_lists_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = LocalBlobs::new(dir.path().join("never"));
        assert!(store.list().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn memory_keeps_each_blob_once() {
        let store = MemoryBlobs::default();
        let aging = store.clone();
        check_store(&store, &|hash, by| aging.age(hash, by)).await;
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        assert_eq!(
            hash_of(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
