//! Media handed from adapters to the core: a way to fetch an attachment's
//! bytes (the adapter's download, with its platform credentials) that the
//! core calls with its own size cap, and the capped read adapters share.
//!
//! The core never sees a platform's download URL: a Telegram file URL
//! embeds the bot token, a Feishu download needs the tenant token. Errors
//! carry no URL either.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// Why an attachment's bytes could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The file is larger than the cap the core asked for; `size` is what
    /// is known of its size (at least `limit + 1`).
    #[error("the file is larger than the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// The download failed (the platform refused, the network broke). The
    /// text names no URL and no credential.
    #[error("the file could not be downloaded: {0}")]
    Failed(String),
}

/// Downloads one attachment's bytes, for an adapter.
#[async_trait]
pub trait FetchMedia: Send + Sync {
    /// The file's bytes, at most `max_bytes` of them.
    ///
    /// # Errors
    /// [`FetchError::TooLarge`] past `max_bytes`, [`FetchError::Failed`]
    /// when the platform or network fails.
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError>;
}

/// A shared [`FetchMedia`], as an [`crate::Attachment`] carries it. Two
/// fetchers are equal when they are the same one.
#[derive(Clone)]
pub struct MediaFetcher(pub Arc<dyn FetchMedia>);

impl MediaFetcher {
    /// Wraps `fetch`.
    pub fn new(fetch: impl FetchMedia + 'static) -> Self {
        Self(Arc::new(fetch))
    }

    /// See [`FetchMedia::fetch`].
    ///
    /// # Errors
    /// As [`FetchMedia::fetch`].
    pub async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        self.0.fetch(max_bytes).await
    }
}

impl fmt::Debug for MediaFetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MediaFetcher(..)")
    }
}

impl PartialEq for MediaFetcher {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MediaFetcher {}

/// Collects `chunks` (a download's body) into at most `max_bytes` bytes.
/// `declared` is the size the platform announced, if any: past the cap, no
/// byte is read.
///
/// # Errors
/// [`FetchError::TooLarge`] as soon as the cap is passed; the chunk's own
/// error, described by `describe`, as [`FetchError::Failed`].
pub async fn collect_capped<S, B, E>(
    mut chunks: S,
    declared: Option<u64>,
    max_bytes: u64,
    describe: impl Fn(E) -> String,
) -> Result<Vec<u8>, FetchError>
where
    S: futures_core::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    if let Some(size) = declared.filter(|&size| size > max_bytes) {
        return Err(FetchError::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    let mut out = Vec::new();
    while let Some(chunk) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut chunks).poll_next(cx)).await
    {
        let chunk = chunk.map_err(|err| FetchError::Failed(describe(err)))?;
        out.extend_from_slice(chunk.as_ref());
        if out.len() as u64 > max_bytes {
            return Err(FetchError::TooLarge {
                size: out.len() as u64,
                limit: max_bytes,
            });
        }
    }
    Ok(out)
}
