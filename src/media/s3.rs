//! Blobs in an S3-compatible bucket (`media.store = "s3"`), which several
//! instances share: any of them can store a file and any can read it back
//! to rebuild a model request.
//!
//! A blob of hash `ab12…` is the object `<prefix>/ab/ab12…`. Requests are
//! signed (AWS Signature V4) with the access key read from the environment
//! variables `[media.s3]` names; the key never appears in a log line or an
//! error. The client is the `object_store` crate's, with path-style URLs
//! against a configured endpoint (MinIO, Ceph, R2, …) or AWS S3 itself, and
//! one `DELETE` per object (the multi-object delete is not offered by every
//! S3-compatible service).

use std::sync::Arc;

use async_trait::async_trait;
use futures::TryStreamExt as _;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

use super::blobs::{BlobError, BlobInfo, BlobStore, RENEW_AFTER_MS, checked, is_hash};
use crate::domain::now_ms;
use crate::media::settings::S3Settings;

/// Blobs in an S3-compatible bucket.
#[derive(Debug, Clone)]
pub struct S3Blobs {
    store: Arc<dyn ObjectStore>,
    /// The key prefix, without slashes at either end; empty for none.
    prefix: String,
}

/// A failure of the object store, as a [`BlobError`]. Its text names the
/// operation and the object's URL, never the credentials (they travel in
/// the `Authorization` header only).
fn remote(err: &object_store::Error) -> BlobError {
    BlobError::Remote(err.to_string())
}

impl S3Blobs {
    /// The bucket of `settings`, with the credentials read from the
    /// environment variables it names.
    ///
    /// # Errors
    /// A credential variable is unset or empty, or the settings are not
    /// usable (the message names the setting or variable, never a value).
    pub fn from_settings(settings: &S3Settings) -> Result<Self, BlobError> {
        let credential = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
                .ok_or_else(|| {
                    BlobError::Remote(format!(
                        "media.s3: the environment variable {name} is unset or empty"
                    ))
                })
        };
        let access_key_id = credential(&settings.access_key_id_env)?;
        let secret_access_key = credential(&settings.secret_access_key_env)?;
        // The HTTP client's TLS takes the process's rustls provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(settings.bucket.trim())
            .with_region(settings.region.trim())
            .with_access_key_id(access_key_id)
            .with_secret_access_key(secret_access_key)
            .with_allow_http(settings.allow_http)
            .with_virtual_hosted_style_request(false)
            .with_disable_bulk_delete(true);
        let endpoint = settings.endpoint.trim();
        if !endpoint.is_empty() {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
        }
        let store = builder
            .build()
            .map_err(|err| BlobError::Remote(format!("media.s3: {err}")))?;
        Ok(Self {
            store: Arc::new(store),
            prefix: settings.prefix.trim().trim_matches('/').to_owned(),
        })
    }

    /// The object of blob `hash`.
    fn path_of(&self, hash: &str) -> Result<Path, BlobError> {
        let hash = checked(hash)?;
        let key = if self.prefix.is_empty() {
            format!("{}/{hash}", &hash[..2])
        } else {
            format!("{}/{}/{hash}", self.prefix, &hash[..2])
        };
        Ok(Path::from(key))
    }

    /// The hash of the blob stored at `location`, when it is one.
    fn hash_at(&self, location: &Path) -> Option<String> {
        let name = location.filename()?;
        if !is_hash(name) {
            return None;
        }
        let expected = self.path_of(name).ok()?;
        (expected == *location).then(|| name.to_owned())
    }

    async fn upload(&self, path: &Path, bytes: &[u8]) -> Result<(), BlobError> {
        self.store
            .put(path, PutPayload::from(bytes.to_vec()))
            .await
            .map_err(|err| remote(&err))?;
        Ok(())
    }
}

#[async_trait]
impl BlobStore for S3Blobs {
    async fn put(&self, hash: &str, bytes: &[u8]) -> Result<bool, BlobError> {
        let path = self.path_of(hash)?;
        if let Some(found) = self.stat(hash).await? {
            // Uploading it again is the only way S3 renews the time.
            if now_ms() - found.modified_ms > RENEW_AFTER_MS {
                self.upload(&path, bytes).await?;
            }
            return Ok(false);
        }
        self.upload(&path, bytes).await?;
        Ok(true)
    }

    async fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let path = self.path_of(hash)?;
        match self.store.get(&path).await {
            Ok(found) => {
                let bytes = found.bytes().await.map_err(|err| remote(&err))?;
                Ok(Some(bytes.to_vec()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(remote(&err)),
        }
    }

    async fn stat(&self, hash: &str) -> Result<Option<BlobInfo>, BlobError> {
        let path = self.path_of(hash)?;
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(BlobInfo {
                hash: hash.to_owned(),
                size: meta.size,
                modified_ms: meta.last_modified.timestamp_millis(),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(remote(&err)),
        }
    }

    async fn delete(&self, hash: &str) -> Result<(), BlobError> {
        let path = self.path_of(hash)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(remote(&err)),
        }
    }

    async fn list(&self) -> Result<Vec<BlobInfo>, BlobError> {
        let prefix = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        let objects: Vec<_> = self
            .store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|err| remote(&err))?;
        Ok(objects
            .into_iter()
            .filter_map(|meta| {
                self.hash_at(&meta.location).map(|hash| BlobInfo {
                    hash,
                    size: meta.size,
                    modified_ms: meta.last_modified.timestamp_millis(),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchboard_test_support::s3::{ACCESS_KEY_ID, FakeS3, SECRET_ACCESS_KEY};

    use super::super::blobs::{check_store, hash_of};
    use super::*;

    /// Settings for `fake`, with credentials in variables named for this
    /// test (tests share the process environment).
    fn settings(fake: &FakeS3, test: &str, prefix: &str) -> S3Settings {
        let id_env = format!("SWITCHBOARD_TEST_S3_ID_{test}");
        let secret_env = format!("SWITCHBOARD_TEST_S3_SECRET_{test}");
        // SAFETY: each test sets variables of its own name, read only by it.
        unsafe {
            std::env::set_var(&id_env, ACCESS_KEY_ID);
            std::env::set_var(&secret_env, SECRET_ACCESS_KEY);
        }
        S3Settings {
            bucket: fake.bucket(),
            endpoint: fake.endpoint(),
            prefix: prefix.to_owned(),
            allow_http: true,
            access_key_id_env: id_env,
            secret_access_key_env: secret_env,
            ..S3Settings::default()
        }
    }

    #[tokio::test]
    async fn a_bucket_keeps_each_blob_once_under_its_prefix() {
        let fake = FakeS3::start("blobs").await;
        let store = S3Blobs::from_settings(&settings(&fake, "ONCE", "/team/media/")).expect("s3");
        let aging = fake.clone();
        check_store(&store, &|hash, by| {
            let key = format!("team/media/{}/{hash}", &hash[..2]);
            aging.age(
                &key,
                Duration::from_millis(u64::try_from(by).expect("positive")),
            );
        })
        .await;
        let other = hash_of(b"other");
        assert_eq!(
            fake.keys(),
            vec![format!("team/media/{}/{other}", &other[..2])]
        );
        assert_eq!(fake.unauthorized(), 0, "every request was signed");
        let requests = fake.requests();
        assert!(
            requests
                .iter()
                .any(|r| r.starts_with("PUT /blobs/team/media/")),
            "{requests:?}"
        );
        assert!(
            requests
                .iter()
                .any(|r| r.starts_with("DELETE /blobs/team/media/")),
            "{requests:?}"
        );
    }

    #[tokio::test]
    async fn listing_pages_through_the_bucket_and_skips_other_objects() {
        let fake = FakeS3::start("blobs").await;
        fake.set_page_size(2);
        let store = S3Blobs::from_settings(&settings(&fake, "LIST", "")).expect("s3");
        let mut hashes = Vec::new();
        for i in 0..5 {
            let bytes = format!("blob {i}");
            let hash = hash_of(bytes.as_bytes());
            assert!(store.put(&hash, bytes.as_bytes()).await.expect("put"));
            hashes.push(hash);
        }
        fake.put("README.txt", b"not a blob");
        fake.put(&format!("zz/{}", hashes[0]), b"in the wrong folder");
        let mut listed: Vec<String> = store
            .list()
            .await
            .expect("list")
            .into_iter()
            .map(|info| info.hash)
            .collect();
        listed.sort();
        hashes.sort();
        assert_eq!(listed, hashes);
        let pages = fake
            .requests()
            .iter()
            .filter(|r| r.contains("list-type=2"))
            .count();
        assert!(pages >= 3, "seven objects, two a page: {pages} pages");
    }

    #[tokio::test]
    async fn missing_credentials_are_named_and_a_wrong_key_is_refused() {
        let fake = FakeS3::start("blobs").await;
        let mut unset = settings(&fake, "UNSET", "media");
        unset.secret_access_key_env = "SWITCHBOARD_TEST_S3_NEVER_SET".to_owned();
        let err = S3Blobs::from_settings(&unset).expect_err("no secret");
        assert!(
            err.to_string().contains("SWITCHBOARD_TEST_S3_NEVER_SET"),
            "{err}"
        );

        let wrong = settings(&fake, "WRONG", "media");
        // SAFETY: as in `settings`.
        unsafe { std::env::set_var(&wrong.access_key_id_env, "SOMEONEELSE") };
        let store = S3Blobs::from_settings(&wrong).expect("s3");
        let err = store.put(&hash_of(b"x"), b"x").await.expect_err("refused");
        let text = err.to_string();
        assert!(fake.unauthorized() > 0);
        assert!(fake.keys().is_empty());
        assert!(
            !text.contains(SECRET_ACCESS_KEY) && !text.contains("SOMEONEELSE"),
            "{text}"
        );
    }
}
