//! The `[media]` settings: where files are kept (a folder or an S3
//! bucket), how large they may be, which models see images, and where
//! voice notes are transcribed.

use std::num::NonZeroU64;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::domain::setting::{self, InvalidSetting};
use crate::media::voice::TranscriptionSettings;

/// Photos and files sent to the bot: where they are kept, how large they
/// may be, and which models are shown images (see `media`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MediaSettings {
    /// Where blobs are kept: `local` (the folder `folder`; one instance, or
    /// instances sharing that folder) or `s3` (the bucket of `[media.s3]`,
    /// which several instances share).
    pub store: BlobStoreKind,
    /// The folder blobs are kept in, each file once under its SHA-256. A
    /// relative path is resolved against the folder of the file that sets
    /// it, or else the working directory; the path kept is absolute.
    pub folder: PathBuf,
    /// The S3-compatible bucket blobs are kept in when `store = "s3"`.
    pub s3: S3Settings,
    /// The most bytes one message's files may add up to; a message over it
    /// is answered with a reply naming the limit, and none of it is kept.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "u64")]
    pub max_message_bytes: NonZeroU64,
    /// The most bytes of files one person may send in a UTC day, counted
    /// in the database (so across instances and restarts); a message over
    /// it is answered with a reply naming the limit. 0: no daily limit.
    pub principal_daily_bytes: u64,
    /// Housekeeping removes blobs that no message refers to once they are
    /// this many days old. 0: blobs are never removed.
    pub retention_days: u32,
    /// The largest file taken, in bytes; a larger one is answered with a
    /// reply naming the limit.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "u64")]
    pub max_file_bytes: NonZeroU64,
    /// The longest text document taken (plain text, Markdown, code, CSV,
    /// JSON), in bytes; its whole text reaches the model.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "u64")]
    pub max_text_bytes: NonZeroU64,
    /// The models (as `llm.model` / `llm.extra_models` name them) shown
    /// images as image content parts; other models get a one-line note in
    /// the image's place.
    pub vision_models: Vec<String>,
    /// The longest side, in pixels, of an image shown to a model; a larger
    /// one is scaled down (and re-encoded) once on arrival, the original
    /// kept too. 1568 is what Anthropic recommends; OpenAI scales images
    /// down to 2048 anyway.
    pub max_image_side: u32,
    /// The largest image file shown to a model, in bytes; a larger one is
    /// re-encoded (and scaled down further if need be) to fit. Anthropic
    /// takes at most 5 MB of base64, about 3.75 MB of image.
    pub max_image_bytes: u64,
    /// Where voice notes and audio files are transcribed; unset, they are
    /// answered that voice notes are not enabled.
    pub transcription: Option<TranscriptionSettings>,
}

impl Default for MediaSettings {
    fn default() -> Self {
        Self {
            store: BlobStoreKind::Local,
            folder: PathBuf::from("data/media"),
            s3: S3Settings::default(),
            max_message_bytes: NonZeroU64::new(50 * 1024 * 1024).expect("not 0"),
            principal_daily_bytes: 0,
            retention_days: 30,
            max_file_bytes: NonZeroU64::new(20 * 1024 * 1024).expect("not 0"),
            max_text_bytes: NonZeroU64::new(100_000).expect("not 0"),
            vision_models: Vec::new(),
            max_image_side: 1568,
            max_image_bytes: 3_750_000,
            transcription: None,
        }
    }
}

impl S3Settings {
    /// Checks the bucket settings used with `media.store = "s3"`.
    ///
    /// # Errors
    /// The first invalid value, by key.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let invalid = |key, reason: &str| InvalidSetting::new(key, reason);
        if self.bucket.trim().is_empty() {
            return Err(invalid(
                "media.s3.bucket",
                "must name the bucket when media.store is \"s3\"",
            ));
        }
        let endpoint = self.endpoint.trim();
        if !endpoint.is_empty() {
            match url::Url::parse(endpoint) {
                Ok(url) if url.scheme() == "https" => {}
                Ok(url) if url.scheme() == "http" && self.allow_http => {}
                Ok(url) if url.scheme() == "http" => {
                    return Err(invalid(
                        "media.s3.endpoint",
                        "is http://: set media.s3.allow_http = true to allow it",
                    ));
                }
                _ => {
                    return Err(invalid(
                        "media.s3.endpoint",
                        "must be an http(s) URL, like https://s3.example.com",
                    ));
                }
            }
        }
        if self.region.trim().is_empty() {
            return Err(invalid("media.s3.region", "must not be empty"));
        }
        for (key, name) in [
            ("media.s3.access_key_id_env", &self.access_key_id_env),
            (
                "media.s3.secret_access_key_env",
                &self.secret_access_key_env,
            ),
        ] {
            if name.trim().is_empty() {
                return Err(invalid(key, "must name an environment variable"));
            }
        }
        Ok(())
    }
}

/// Where blobs are kept (`media.store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlobStoreKind {
    /// A local folder (`media.folder`).
    Local,
    /// An S3-compatible bucket (`[media.s3]`).
    S3,
}

/// An S3-compatible bucket for blobs (`[media.s3]`). The credentials are
/// read from the environment variables named here, never from the file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct S3Settings {
    /// The bucket's name.
    pub bucket: String,
    /// The service's URL, for an S3-compatible service other than AWS
    /// (MinIO, Ceph, R2, …): requests go path-style to
    /// `<endpoint>/<bucket>/<key>`. Empty: AWS S3 in `region`.
    pub endpoint: String,
    /// The region (`us-east-1` when the service has none).
    pub region: String,
    /// Blobs are kept under this key prefix (`media` keeps
    /// `media/ab/ab12…`); empty: at the bucket's root.
    pub prefix: String,
    /// Whether an `http://` endpoint is allowed (a service on the same
    /// host or private network); otherwise only `https://`.
    pub allow_http: bool,
    /// The environment variable holding the access key id.
    pub access_key_id_env: String,
    /// The environment variable holding the secret access key.
    pub secret_access_key_env: String,
}

impl Default for S3Settings {
    fn default() -> Self {
        Self {
            bucket: String::new(),
            endpoint: String::new(),
            region: "us-east-1".to_owned(),
            prefix: "media".to_owned(),
            allow_http: false,
            access_key_id_env: "SWITCHBOARD_S3_ACCESS_KEY_ID".to_owned(),
            secret_access_key_env: "SWITCHBOARD_S3_SECRET_ACCESS_KEY".to_owned(),
        }
    }
}

impl MediaSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// The first invalid value, by key.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.folder.as_os_str().is_empty() {
            return Err(InvalidSetting::new("media.folder", "must name a folder"));
        }
        if self.store == BlobStoreKind::S3 {
            self.s3.validate()?;
        }
        if self.max_image_side < 16 {
            return Err(InvalidSetting::new(
                "media.max_image_side",
                "must be at least 16",
            ));
        }
        if self.max_image_bytes < 1024 {
            return Err(InvalidSetting::new(
                "media.max_image_bytes",
                "must be at least 1024",
            ));
        }
        if let Some(transcription) = &self.transcription {
            transcription.validate()?;
        }
        Ok(())
    }
}
