//! Downloading a message's media for the core: `GET /{media-id}` with the
//! number's access token gives a short-lived URL and the file's size; a
//! file over the cap is refused there, before any byte is downloaded;
//! otherwise the URL is downloaded with the same token, capped while it
//! streams. Neither the token nor the URL is logged or put in an error.

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use switchboard_contract::{FetchError, FetchMedia, collect_capped};

use crate::api::{Graph, describe_network};

/// One media item of a message.
pub(crate) struct WhatsAppMedia {
    pub graph: Arc<Graph>,
    /// The token of the number that received the message.
    pub token: SecretString,
    pub media_id: String,
}

#[async_trait]
impl FetchMedia for WhatsAppMedia {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        let info = self
            .graph
            .media(&self.token, &self.media_id)
            .await
            .map_err(|err| FetchError::Failed(format!("media lookup: {err}")))?;
        if let Some(size) = info.file_size.filter(|&size| size > max_bytes) {
            return Err(FetchError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
        let response = self
            .graph
            .http()
            .get(&info.url)
            .bearer_auth(self.token.expose_secret())
            .send()
            .await
            .map_err(|err| {
                FetchError::Failed(format!("media download: {}", describe_network(err)))
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Failed(format!(
                "media download: HTTP {}",
                status.as_u16()
            )));
        }
        let declared = info.file_size.or(response.content_length());
        collect_capped(response.bytes_stream(), declared, max_bytes, |err| {
            format!("media download: {}", describe_network(err))
        })
        .await
    }
}
