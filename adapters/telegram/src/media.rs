//! Downloading a message's files for the core: `getFile`, then the file from
//! `<api>/file/bot<token>/<file_path>`. That URL holds the bot token, so it
//! is never logged, stored or handed over; errors are scrubbed of it.

use async_trait::async_trait;
use switchboard_contract::{FetchError, FetchMedia, collect_capped};
use teloxide_core::Bot;
use teloxide_core::net::Download;
use teloxide_core::prelude::Requester;
use teloxide_core::types::FileId;

use crate::error::Scrubber;

/// What downloading needs: the bot (its client, API URL and token) and the
/// scrubber of its token.
#[derive(Clone, Debug)]
pub(crate) struct Files {
    pub bot: Bot,
    pub scrubber: Scrubber,
}

/// One file of a message.
pub(crate) struct TelegramFile {
    pub files: Files,
    pub file_id: String,
    /// The size the message declared, if any.
    pub size: Option<u64>,
}

#[async_trait]
impl FetchMedia for TelegramFile {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        if let Some(size) = self.size.filter(|&size| size > max_bytes) {
            return Err(FetchError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
        let scrubber = &self.files.scrubber;
        let file = self
            .files
            .bot
            .get_file(FileId(self.file_id.clone()))
            .await
            .map_err(|err| FetchError::Failed(scrubber.scrub(&format!("getFile: {err}"))))?;
        let stream = self.files.bot.download_file_stream(&file.path);
        collect_capped(
            stream,
            Some(u64::from(file.meta.size)).filter(|&size| size > 0),
            max_bytes,
            // Without the URL: it holds the token.
            |err: reqwest::Error| scrubber.scrub(&format!("file download: {}", err.without_url())),
        )
        .await
    }
}
