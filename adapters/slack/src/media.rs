//! Files people share in Slack, as the contract's attachments: each
//! becomes an [`Attachment`] of the kind its type says, with a fetcher
//! ([`SlackFile`]) that downloads `url_private_download` with the bot token
//! in the `Authorization` header, within the core's size cap: the declared
//! `size` is checked before anything is requested, and the body is read
//! through [`collect_capped`].
//!
//! The bot token only ever goes to Slack: a download URL must be `https` on
//! `slack.com` or one of its subdomains, or on the Web API's own origin
//! (a test's fake). Neither the URL nor the token appears in an error.

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use switchboard_contract::{
    Attachment, AttachmentKind, FetchError, FetchMedia, MediaFetcher, collect_capped,
};
use url::Url;

use crate::events::File;

/// How long one download may take in all: longer than a Web API call
/// (the client's own timeout), since files run to tens of megabytes.
const DOWNLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// What downloads need: the HTTP client, the workspace's bot token, and
/// the Web API's base URL (whose origin is trusted with the token).
#[derive(Clone)]
pub(crate) struct Downloads {
    pub http: reqwest::Client,
    pub token: SecretString,
    pub api_base: String,
}

/// The attachments of a message's files; files that cannot be downloaded
/// (deleted, external, over the workspace's plan limit) are left out.
pub(crate) fn attachments(files: &[File], downloads: Option<&Downloads>) -> Vec<Attachment> {
    files
        .iter()
        .filter(|file| {
            !matches!(
                file.mode.as_deref(),
                Some("tombstone" | "external" | "hidden_by_limit")
            )
        })
        .map(|file| attachment(file, downloads))
        .collect()
}

fn attachment(file: &File, downloads: Option<&Downloads>) -> Attachment {
    let url = file
        .url_private_download
        .clone()
        .or_else(|| file.url_private.clone());
    let fetch = match (url, downloads) {
        (Some(url), Some(downloads)) => Some(MediaFetcher::new(SlackFile {
            downloads: downloads.clone(),
            url,
            size: file.size.filter(|&size| size > 0),
        })),
        _ => None,
    };
    Attachment {
        media_type: file.mimetype.clone(),
        size: file.size,
        fetch,
        ..Attachment::new(kind(file), file.name.clone().or_else(|| file.title.clone()))
    }
}

/// The attachment kind of a file: Slack's clips by their subtype, others
/// by their media type.
fn kind(file: &File) -> AttachmentKind {
    match file.subtype.as_deref() {
        Some("slack_audio") => return AttachmentKind::Voice,
        Some("slack_video") => return AttachmentKind::Video,
        _ => {}
    }
    let mimetype = file.mimetype.as_deref().unwrap_or_default();
    match mimetype.split('/').next().unwrap_or_default() {
        "image" => AttachmentKind::Image,
        "audio" => AttachmentKind::Audio,
        "video" => AttachmentKind::Video,
        _ => AttachmentKind::Document,
    }
}

/// One file's download.
struct SlackFile {
    downloads: Downloads,
    url: String,
    /// The size Slack declared.
    size: Option<u64>,
}

#[async_trait]
impl FetchMedia for SlackFile {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        if let Some(size) = self.size.filter(|&size| size > max_bytes) {
            return Err(FetchError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
        if !trusted(&self.url, &self.downloads.api_base) {
            return Err(FetchError::Failed(
                "the file is not on a Slack host; the bot token is not sent there".to_owned(),
            ));
        }
        let failed = |err: reqwest::Error| FetchError::Failed(err.without_url().to_string());
        let response = self
            .downloads
            .http
            .get(&self.url)
            .bearer_auth(self.downloads.token.expose_secret())
            .timeout(DOWNLOAD_TIMEOUT)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Failed(format!("HTTP {}", status.as_u16())));
        }
        let html = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/html"));
        if html {
            // Slack answers a download it refuses with its sign-in page.
            return Err(FetchError::Failed(
                "Slack answered with a web page instead of the file: does the app have the \
                 files:read scope?"
                    .to_owned(),
            ));
        }
        collect_capped(
            response.bytes_stream(),
            self.size,
            max_bytes,
            |err: reqwest::Error| err.without_url().to_string(),
        )
        .await
    }
}

/// Whether the bot token may be sent to `url`: https on Slack's own
/// hosts, or the Web API's origin.
fn trusted(url: &str, api_base: &str) -> bool {
    let Ok(url) = Url::parse(url) else {
        return false;
    };
    let same_origin = Url::parse(api_base).is_ok_and(|api| api.origin() == url.origin());
    let slack = url.scheme() == "https"
        && url
            .host_str()
            .is_some_and(|host| host == "slack.com" || host.ends_with(".slack.com"));
    same_origin || slack
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mimetype: &str, subtype: Option<&str>) -> File {
        serde_json::from_value(serde_json::json!({
            "name": "f", "mimetype": mimetype, "subtype": subtype, "size": 10,
            "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/f",
        }))
        .unwrap()
    }

    #[test]
    fn kinds_follow_slacks_clips_then_media_types() {
        assert_eq!(kind(&file("image/png", None)), AttachmentKind::Image);
        assert_eq!(kind(&file("audio/mpeg", None)), AttachmentKind::Audio);
        assert_eq!(
            kind(&file("audio/webm", Some("slack_audio"))),
            AttachmentKind::Voice
        );
        assert_eq!(
            kind(&file("video/mp4", Some("slack_video"))),
            AttachmentKind::Video
        );
        assert_eq!(
            kind(&file("application/pdf", None)),
            AttachmentKind::Document
        );
        assert_eq!(kind(&file("", None)), AttachmentKind::Document);
    }

    #[test]
    fn the_token_only_goes_to_slack() {
        let api = "https://slack.com/api";
        assert!(trusted(
            "https://files.slack.com/files-pri/T1-F1/download/a.png",
            api
        ));
        assert!(!trusted("http://files.slack.com/x", api), "not https");
        assert!(!trusted("https://files.slack.com.evil.example/x", api));
        assert!(!trusted("https://evilslack.com/x", api));
        assert!(trusted(
            "http://127.0.0.1:9/files/x",
            "http://127.0.0.1:9/api"
        ));
        assert!(!trusted(
            "http://127.0.0.1:8/files/x",
            "http://127.0.0.1:9/api"
        ));
        assert!(!trusted("not a url", api));
    }

    #[test]
    fn unusable_files_are_left_out() {
        let mut deleted = file("image/png", None);
        deleted.mode = Some("tombstone".to_owned());
        let kept = attachments(&[deleted, file("image/png", None)], None);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].size, Some(10));
        assert!(kept[0].fetch.is_none(), "no downloads without a token");
    }
}
