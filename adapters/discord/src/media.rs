//! Downloading a message's attachments for the core from their Discord CDN
//! URLs (signed links that need no bot token), within the core's size cap.
//! The URL is not logged: its signature grants access to the file.

use async_trait::async_trait;
use switchboard_contract::{FetchError, FetchMedia, collect_capped};

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
        let failed = |err: reqwest::Error| FetchError::Failed(err.without_url().to_string());
        let response = self
            .client
            .get(&self.url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed)?;
        collect_capped(
            response.bytes_stream(),
            Some(self.size).filter(|&size| size > 0),
            max_bytes,
            |err: reqwest::Error| err.without_url().to_string(),
        )
        .await
    }
}
