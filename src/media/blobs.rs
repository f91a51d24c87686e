//! The blob store: files kept once each, named by the SHA-256 of their
//! bytes, behind [`BlobStore`] so that a store shared by several instances
//! (an S3-compatible one) can stand in for the local folder.
//!
//! [`LocalBlobs`] writes each blob to `<folder>/<first two hex digits>/<hash>`
//! through a temporary file renamed into place, so a reader never sees half
//! a blob and two writers of the same blob leave one file. [`MemoryBlobs`]
//! keeps them in memory (tests, single-process tools).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

/// A blob store failure.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A name that is not a SHA-256 in lowercase hex.
    #[error("not a blob hash: {0:?}")]
    BadHash(String),
    /// The storage failed.
    #[error("blob storage failed: {0}")]
    Io(#[from] std::io::Error),
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
}

/// The SHA-256 of `bytes` in lowercase hex: a blob's name.
#[must_use]
pub fn hash_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn checked(hash: &str) -> Result<&str, BlobError> {
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
        if tokio::fs::try_exists(&path).await? {
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
}

/// Blobs in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryBlobs {
    blobs: Arc<Mutex<HashMap<String, Arc<[u8]>>>>,
}

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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[u8]>>> {
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
        if blobs.contains_key(hash) {
            return Ok(false);
        }
        blobs.insert(hash.to_owned(), Arc::from(bytes));
        Ok(true)
    }

    async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let hash = checked(hash)?;
        Ok(self.lock().get(hash).map(|bytes| bytes.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn stores_once(store: &dyn BlobStore) {
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
        assert!(matches!(
            store.get("../etc/passwd").await,
            Err(BlobError::BadHash(_))
        ));
    }

    #[tokio::test]
    async fn a_local_folder_keeps_each_blob_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = LocalBlobs::new(dir.path().join("media"));
        stores_once(&store).await;
        let hash = hash_of(b"hello blob");
        let file = dir.path().join("media").join(&hash[..2]).join(&hash);
        assert_eq!(std::fs::read(file).expect("the blob file"), b"hello blob");
        let entries = std::fs::read_dir(dir.path().join("media").join(&hash[..2]))
            .expect("folder")
            .count();
        assert_eq!(entries, 1, "no temporary file is left behind");
    }

    #[tokio::test]
    async fn memory_keeps_each_blob_once() {
        let store = MemoryBlobs::default();
        stores_once(&store).await;
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
