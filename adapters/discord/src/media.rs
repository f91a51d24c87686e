//! Downloading a message's attachments for the core from their Discord CDN
//! URLs (signed links that need no bot token), within the core's size cap.
//! The URL is not logged: its signature grants access to the file.

use async_trait::async_trait;
use switchboard_contract::{FetchError, FetchMedia};

/// One attachment's download.
pub(crate) struct DiscordFile {
    pub client: reqwest::Client,
    pub url: String,
    /// The size Discord declared.
    pub size: u64,
}

#[async_trait]
impl FetchMedia for DiscordFile {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        if self.size > max_bytes {
            return Err(FetchError::TooLarge {
                size: self.size,
                limit: max_bytes,
            });
        }
        let failed = |err: reqwest::Error| FetchError::Failed(err.without_url().to_string());
        let mut response = self
            .client
            .get(&self.url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed)?;
        let mut out = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            out.extend_from_slice(&chunk);
            if out.len() as u64 > max_bytes {
                return Err(FetchError::TooLarge {
                    size: out.len() as u64,
                    limit: max_bytes,
                });
            }
        }
        Ok(out)
    }
}
