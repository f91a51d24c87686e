//! Media in conversations: attachments fetched from platforms are kept in
//! the [blob store](blobs) once each, content-addressed by SHA-256, and the
//! user's message references them by hash ([`MediaRef`]), so history
//! replays byte-identically and any instance can rebuild a model request.
//!
//! What is taken: images (PNG, JPEG, GIF, WebP, recognised by their
//! bytes, not by the declared type) up to `media.max_file_bytes`, text
//! documents (plain text, Markdown, code, CSV, JSON: named or declared so,
//! and UTF-8) and PDFs (their text, [`pdf`]) up to `media.max_text_bytes` of
//! text, and voice notes and audio files when `[media.transcription]` is
//! set ([`voice`]). A vision model (`media.vision_models`) gets images as
//! image parts (a version scaled down to the provider limits when the
//! original is over them, [`resize`]); another model gets a one-line note
//! in their place. Every model gets a document's text, between a header and
//! a footer naming the file, and a voice note's transcript after a marker.
//! What a file becomes for models is worked out once ([`content`]): on
//! arrival, except a voice note's transcript, made when its turn starts. A
//! file over the cap, of another type, or that cannot be downloaded or read
//! is answered with a reply that says so, and no turn runs for that message;
//! so is a voice note or audio file when no transcription is configured
//! (the reply says voice notes are not enabled), and one the transcription
//! server fails on or hears no speech in (its turn ends with that reply
//! before any model call).
//!
//! Images a tool returns (an MCP server's) take the same way in
//! ([`tool_files`]) and are shown the same way, inside the tool's result.

pub mod blobs;
pub mod budget;
pub mod cleanup;
mod content;
pub mod pdf;
pub mod resize;
pub mod s3;
pub mod settings;
pub mod tool_files;
pub mod voice;

use crate::domain::{MediaRef, Shown};
use std::sync::Arc;

use switchboard_contract::{Attachment, AttachmentKind, FetchError};

use crate::media::settings::MediaSettings;
use blobs::{BlobError, BlobStore, hash_of};
use voice::Transcriber;

/// Why a message's attachments were not taken: the reply the sender gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Over `media.max_file_bytes`.
    TooLarge { name: String, limit: u64 },
    /// Not a file type the gateway reads.
    Unsupported { name: String, kind: String },
    /// A text document longer than `media.max_text_bytes`.
    TextTooLong { name: String, limit: u64 },
    /// The platform gave no way to download it, or the download failed.
    Unavailable { name: String },
    /// A voice note or audio file: no transcription is configured.
    Voice,
    /// The message's files add up to more than `media.max_message_bytes`.
    MessageTooLarge { limit: u64 },
    /// The files would take the sender past `media.principal_daily_bytes`
    /// today.
    DailyBudget { limit: u64 },
    /// The transcription server failed.
    TranscriptionFailed { name: String },
    /// The transcription heard no speech.
    NoSpeech { name: String },
    /// A PDF without text (a scan).
    PdfWithoutText { name: String },
    /// A PDF that does not parse.
    BrokenPdf { name: String },
    /// An image over the provider limits that does not decode.
    BadImage { name: String },
    /// A voice note or audio file in a format the transcription API does
    /// not take.
    AudioFormat { name: String },
}

impl Refusal {
    /// The reply for the sender.
    #[must_use]
    pub fn reply(&self) -> String {
        match self {
            Self::TooLarge { name, limit } => format!(
                "Sorry, {name} is too large: files can be at most {} here.",
                human_bytes(*limit)
            ),
            Self::Unsupported { name, kind } => format!(
                "Sorry, I can't read {name} ({kind}): only images (PNG, JPEG, GIF, WebP), \
                 PDFs, text files (plain text, Markdown, code, CSV, JSON) and, where enabled, \
                 voice notes are supported so far."
            ),
            Self::TextTooLong { name, limit } => format!(
                "Sorry, {name} is too long: text files can be at most {} here.",
                human_bytes(*limit)
            ),
            Self::Unavailable { name } => {
                format!("Sorry, I could not download {name}; please send it again.")
            }
            Self::Voice => "Sorry, voice notes are not enabled here: no transcription is \
                            configured. Please send your message as text."
                .to_owned(),
            Self::MessageTooLarge { limit } => format!(
                "Sorry, these files are too large together: one message's files can add up \
                 to at most {} here.",
                human_bytes(*limit)
            ),
            Self::DailyBudget { limit } => format!(
                "Sorry, you have reached today's limit for files: at most {} a day (UTC) \
                 here. Please send it again tomorrow, or as text.",
                human_bytes(*limit)
            ),
            Self::TranscriptionFailed { name } => format!(
                "Sorry, I could not transcribe {name} just now: the transcription service \
                 failed. Please try again in a moment, or send your message as text."
            ),
            Self::NoSpeech { name } => {
                format!("Sorry, I could not make out any speech in {name}.")
            }
            Self::PdfWithoutText { name } => format!(
                "Sorry, {name} has no text I can read (a scanned document?). Please send \
                 the text, or photos of the pages."
            ),
            Self::BrokenPdf { name } => format!(
                "Sorry, I could not read {name}: the PDF is damaged, password-protected or \
                 in a form I can't open."
            ),
            Self::AudioFormat { name } => format!(
                "Sorry, I can't transcribe {name}: its audio format is not one I can read \
                 (Ogg, WAV, MP3, M4A, WebM, FLAC)."
            ),
            Self::BadImage { name } => format!(
                "Sorry, I could not read the image {name}: it is damaged, or too large to \
                 process."
            ),
        }
    }
}

/// `bytes` for people: `20 MiB`, `512 KiB`, `300 bytes`.
fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else if bytes >= KIB {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// A media failure that is the gateway's, not the sender's.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error(transparent)]
    Blob(#[from] BlobError),
}

/// The media service: takes attachments in, and shows them to models.
pub struct Media {
    blobs: Arc<dyn BlobStore>,
    max_file_bytes: u64,
    max_text_bytes: u64,
    vision_models: Vec<String>,
    max_image_side: u32,
    max_image_bytes: u64,
    /// Set when `[media.transcription]` is.
    transcriber: Option<Transcriber>,
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Media")
            .field("max_file_bytes", &self.max_file_bytes)
            .field("vision_models", &self.vision_models)
            .finish_non_exhaustive()
    }
}

impl Media {
    /// The service over `blobs` with `settings`' limits.
    ///
    /// # Errors
    /// `[media.transcription]` is set and its HTTP client cannot be built.
    pub fn new(
        blobs: Arc<dyn BlobStore>,
        settings: &MediaSettings,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self {
            blobs,
            max_file_bytes: settings.max_file_bytes.into(),
            max_text_bytes: settings.max_text_bytes.into(),
            vision_models: settings.vision_models.clone(),
            max_image_side: settings.max_image_side,
            max_image_bytes: settings.max_image_bytes,
            transcriber: settings
                .transcription
                .as_ref()
                .map(Transcriber::new)
                .transpose()?,
        })
    }

    /// The blob store files are kept in.
    #[must_use]
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        &self.blobs
    }

    /// Whether `model` is shown images.
    #[must_use]
    pub fn has_vision(&self, model: &str) -> bool {
        self.vision_models.iter().any(|name| name == model)
    }

    /// Downloads and stores each attachment. `Ok(Err(_))` is the first
    /// attachment that cannot be taken, with the reply for the sender; the
    /// message is refused before anything is fetched when the sizes the
    /// platform declares pass `allowance`, and before the file that takes
    /// it past `allowance` is stored.
    ///
    /// # Errors
    /// The blob store failed.
    pub async fn ingest(
        &self,
        attachments: &[Attachment],
        allowance: &budget::Allowance,
    ) -> Result<Result<Vec<MediaRef>, Refusal>, MediaError> {
        let declared = attachments.iter().filter_map(|a| a.size).sum::<u64>();
        if let Err(refusal) = allowance.check(declared) {
            tracing::info!(declared, "attachments over the message or daily limit");
            return Ok(Err(refusal));
        }
        let mut taken = 0_u64;
        let mut refs = Vec::with_capacity(attachments.len());
        for attachment in attachments {
            let name = display_name(attachment);
            if is_audio(attachment) && self.transcriber.is_none() {
                return Ok(Err(Refusal::Voice));
            }
            if let Some(size) = attachment.size.filter(|&size| size > self.max_file_bytes) {
                tracing::info!(
                    size,
                    limit = self.max_file_bytes,
                    "attachment over the size cap"
                );
                return Ok(Err(Refusal::TooLarge {
                    name,
                    limit: self.max_file_bytes,
                }));
            }
            let Some(fetch) = &attachment.fetch else {
                return Ok(Err(Refusal::Unsupported {
                    name,
                    kind: attachment.kind.to_string(),
                }));
            };
            let bytes = match fetch.fetch(self.max_file_bytes).await {
                Ok(bytes) => bytes,
                Err(FetchError::TooLarge { size, limit }) => {
                    tracing::info!(size, limit, "attachment over the size cap");
                    return Ok(Err(Refusal::TooLarge {
                        name,
                        limit: self.max_file_bytes,
                    }));
                }
                Err(FetchError::Failed(reason)) => {
                    tracing::warn!(%reason, kind = %attachment.kind, "attachment download failed");
                    return Ok(Err(Refusal::Unavailable { name }));
                }
            };
            let (media_type, width, height) = if let Some(image) = sniff_image(&bytes) {
                let (width, height) = image_size(&bytes);
                (image, width, height)
            } else if let Some(audio) = voice::sniff_audio(&bytes)
                .filter(|_| is_audio(attachment) || attachment.kind == AttachmentKind::Document)
            {
                if self.transcriber.is_none() {
                    return Ok(Err(Refusal::Voice));
                }
                (audio, None, None)
            } else if is_audio(attachment) {
                return Ok(Err(Refusal::AudioFormat { name }));
            } else if pdf::is_pdf(&bytes) {
                ("application/pdf", None, None)
            } else if let Some(text) = text_type(attachment, &bytes) {
                if bytes.len() as u64 > self.max_text_bytes {
                    return Ok(Err(Refusal::TextTooLong {
                        name,
                        limit: self.max_text_bytes,
                    }));
                }
                (text, None, None)
            } else {
                let kind = attachment
                    .media_type
                    .clone()
                    .unwrap_or_else(|| attachment.kind.to_string());
                return Ok(Err(Refusal::Unsupported { name, kind }));
            };
            taken = taken.saturating_add(bytes.len() as u64);
            if let Err(refusal) = allowance.check(taken) {
                tracing::info!(taken, "attachments over the message or daily limit");
                return Ok(Err(refusal));
            }
            let mut media = new_ref(&bytes, media_type, attachment.name.clone(), (width, height));
            // What models are shown is worked out first, so that a file
            // refused for its content is not kept. Audio is transcribed when
            // its turn starts (`Media::transcribe`), not here: a slow
            // transcription server must not hold up the platform's next
            // messages.
            if let Err(refusal) = self.prepare(&name, &mut media, &bytes).await? {
                return Ok(Err(refusal));
            }
            let new = self.blobs.put(&media.hash, &bytes).await?;
            tracing::debug!(hash = %media.hash, new, size = bytes.len(), "attachment stored");
            refs.push(media);
        }
        Ok(Ok(refs))
    }

    /// Sets how each of `refs` is shown to `model`: the image (loaded from
    /// the blob store) for a vision model, a note otherwise.
    ///
    /// # Errors
    /// The blob store failed.
    pub async fn show(&self, model: &str, refs: &mut [MediaRef]) -> Result<(), MediaError> {
        let vision = self.has_vision(model);
        for media in refs {
            media.shown = if media.transcript.is_some() || media.awaits_transcript() {
                Shown::NoVision
            } else if !media.is_image() {
                match self.blobs.get(media.shown_hash()).await? {
                    Some(bytes) => Shown::Document(Arc::from(String::from_utf8_lossy(&bytes))),
                    None => Shown::Missing,
                }
            } else if !vision {
                Shown::NoVision
            } else {
                match self.blobs.get(media.shown_hash()).await? {
                    Some(bytes) => Shown::Image(Arc::from(bytes)),
                    None => Shown::Missing,
                }
            };
        }
        Ok(())
    }
}

/// An image's width and height, when its header says them.
fn image_size(bytes: &[u8]) -> (Option<u32>, Option<u32>) {
    match imagesize::blob_size(bytes) {
        Ok(size) => (
            u32::try_from(size.width).ok(),
            u32::try_from(size.height).ok(),
        ),
        Err(_) => (None, None),
    }
}

/// The reference of a file about to be stored: its hash, type, name, size
/// and (an image's) dimensions; how it is shown is set later (`show`).
fn new_ref(
    bytes: &[u8],
    media_type: &str,
    name: Option<String>,
    (width, height): (Option<u32>, Option<u32>),
) -> MediaRef {
    MediaRef {
        hash: hash_of(bytes),
        media_type: media_type.to_owned(),
        name,
        size: bytes.len() as u64,
        width,
        height,
        derived: None,
        transcript: None,
        shown: Shown::NoVision,
    }
}

/// Whether `attachment` is a voice note or an audio file (by the
/// platform's kind or declared type; it is not downloaded).
fn is_audio(attachment: &Attachment) -> bool {
    attachment.kind.is_audio()
        || attachment
            .media_type
            .as_deref()
            .is_some_and(|media_type| media_type.starts_with("audio/"))
}

/// How the sender would call the attachment: its name, else its kind.
fn display_name(attachment: &Attachment) -> String {
    match attachment
        .name
        .as_deref()
        .filter(|name| !name.trim().is_empty())
    {
        Some(name) => format!("\"{name}\""),
        None => format!("the {}", attachment.kind),
    }
}

/// File name endings of text files taken as documents, with their type.
const TEXT_EXTENSIONS: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("log", "text/plain"),
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("csv", "text/csv"),
    ("tsv", "text/tab-separated-values"),
    ("json", "application/json"),
    ("rs", "text/x-rust"),
    ("py", "text/x-python"),
    ("js", "text/javascript"),
    ("ts", "text/x-typescript"),
    ("go", "text/x-go"),
    ("java", "text/x-java"),
    ("c", "text/x-c"),
    ("h", "text/x-c"),
    ("cpp", "text/x-c++"),
    ("sh", "text/x-shellscript"),
    ("toml", "text/x-toml"),
    ("yaml", "text/yaml"),
    ("yml", "text/yaml"),
    ("xml", "text/xml"),
    ("html", "text/html"),
    ("css", "text/css"),
    ("sql", "text/x-sql"),
];

/// The type of a text document: `attachment` is named like one (or
/// declared `text/*` or JSON) and `bytes` are UTF-8 without NUL bytes.
fn text_type(attachment: &Attachment, bytes: &[u8]) -> Option<&'static str> {
    if bytes.contains(&0) || std::str::from_utf8(bytes).is_err() {
        return None;
    }
    let extension = attachment
        .name
        .as_deref()
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, extension)| extension.to_ascii_lowercase());
    if let Some(found) = extension.as_deref().and_then(|extension| {
        TEXT_EXTENSIONS
            .iter()
            .find(|(known, _)| *known == extension)
            .map(|(_, media_type)| *media_type)
    }) {
        return Some(found);
    }
    match attachment.media_type.as_deref() {
        Some("application/json") => Some("application/json"),
        Some(declared) if declared.starts_with("text/") => Some("text/plain"),
        _ => None,
    }
}

/// The image type of `bytes`, read off their signature.
#[must_use]
pub fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// A 1×1 PNG, for tests.
#[cfg(test)]
pub(crate) const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0xF8, 0xCF, 0xC0, 0xF0,
    0x1F, 0x00, 0x05, 0x00, 0x01, 0xFF, 0x89, 0x99, 0x3D, 0x1D, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
];

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use crate::domain::{Part, user_parts};
    use async_trait::async_trait;
    use switchboard_contract::{FetchMedia, MediaFetcher};

    use super::blobs::MemoryBlobs;
    use super::*;

    struct Serve(Vec<u8>);

    const ALL: budget::Allowance = budget::Allowance {
        max_message_bytes: u64::MAX,
        daily: None,
    };

    #[async_trait]
    impl FetchMedia for Serve {
        async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
            if self.0.len() as u64 > max_bytes {
                return Err(FetchError::TooLarge {
                    size: self.0.len() as u64,
                    limit: max_bytes,
                });
            }
            Ok(self.0.clone())
        }
    }

    fn photo(bytes: &[u8]) -> Attachment {
        Attachment {
            fetch: Some(MediaFetcher::new(Serve(bytes.to_vec()))),
            ..Attachment::new(AttachmentKind::Image, Some("dot.png".to_owned()))
        }
    }

    fn media(blobs: &MemoryBlobs, max: u64) -> Media {
        let settings = MediaSettings {
            max_file_bytes: std::num::NonZero::new(max).unwrap(),
            vision_models: vec!["seeing".to_owned()],
            ..MediaSettings::default()
        };
        Media::new(Arc::new(blobs.clone()), &settings).expect("media")
    }

    #[tokio::test]
    async fn an_image_is_stored_once_with_its_size() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 1024);
        let first = media
            .ingest(&[photo(TINY_PNG)], &ALL)
            .await
            .expect("ingest");
        let second = media
            .ingest(&[photo(TINY_PNG)], &ALL)
            .await
            .expect("ingest");
        let refs = first.expect("taken");
        assert_eq!(Ok(refs.clone()), second);
        assert_eq!(blobs.len(), 1);
        assert_eq!(refs[0].media_type, "image/png");
        assert_eq!((refs[0].width, refs[0].height), (Some(1), Some(1)));
        assert_eq!(refs[0].hash, hash_of(TINY_PNG));
    }

    #[tokio::test]
    async fn limits_and_types_are_refused_with_a_reply() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 16);
        let refusal = media
            .ingest(&[photo(TINY_PNG)], &ALL)
            .await
            .expect("ingest");
        let Err(refusal) = refusal else {
            panic!("over the cap: {refusal:?}")
        };
        assert!(refusal.reply().contains("16 bytes"), "{}", refusal.reply());
        let refusal = media
            .ingest(&[photo(b"plain text")], &ALL)
            .await
            .expect("ingest");
        assert!(matches!(refusal, Err(Refusal::Unsupported { .. })));
        let voice = Attachment {
            kind: AttachmentKind::Voice,
            ..photo(TINY_PNG)
        };
        let refusal = media.ingest(&[voice], &ALL).await.expect("ingest");
        assert_eq!(refusal, Err(Refusal::Voice));
        assert!(
            Refusal::Voice
                .reply()
                .contains("voice notes are not enabled")
        );
        assert!(blobs.is_empty());
    }

    #[tokio::test]
    async fn a_text_file_reaches_every_model_as_text_and_binary_files_are_refused() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 1024);
        let notes = Attachment {
            fetch: Some(MediaFetcher::new(Serve(b"# Plan\nship it".to_vec()))),
            ..Attachment::new(AttachmentKind::Document, Some("plan.md".to_owned()))
        };
        let mut refs = media
            .ingest(&[notes], &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert_eq!(refs[0].media_type, "text/markdown");
        media.show("blind", &mut refs).await.expect("show");
        assert_eq!(
            user_parts("see this", &refs),
            vec![Part::Text(Cow::Owned(
                "see this\n[file: plan.md]\n# Plan\nship it\n[end of file: plan.md]".to_owned()
            ))]
        );
        let binary = Attachment {
            fetch: Some(MediaFetcher::new(Serve(vec![0, 1, 2, 3]))),
            ..Attachment::new(AttachmentKind::Document, Some("data.txt".to_owned()))
        };
        let refusal = media.ingest(&[binary], &ALL).await.expect("ingest");
        assert!(matches!(refusal, Err(Refusal::Unsupported { .. })));
        let settings = MediaSettings {
            max_text_bytes: std::num::NonZero::new(4).unwrap(),
            ..MediaSettings::default()
        };
        let small = Media::new(Arc::new(blobs.clone()), &settings).expect("media");
        let long = Attachment {
            fetch: Some(MediaFetcher::new(Serve(b"too long".to_vec()))),
            ..Attachment::new(AttachmentKind::Document, Some("a.txt".to_owned()))
        };
        let refusal = small.ingest(&[long], &ALL).await.expect("ingest");
        let Err(refusal) = refusal else {
            panic!("over the text cap: {refusal:?}")
        };
        assert!(refusal.reply().contains("4 bytes"), "{}", refusal.reply());
    }

    #[tokio::test]
    async fn a_message_over_its_allowance_is_refused_before_the_file_over_it_is_stored() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 1024);
        let png = TINY_PNG.len() as u64;
        // Declared sizes over the cap: nothing is fetched.
        let declared = Attachment {
            size: Some(png * 2),
            ..photo(TINY_PNG)
        };
        let refusal = media
            .ingest(&[declared], &budget::Allowance::per_message(png))
            .await
            .expect("ingest");
        assert_eq!(refusal, Err(Refusal::MessageTooLarge { limit: png }));
        // Undeclared sizes: the first photo fits and is stored, the second
        // (other bytes) passes the cap and is not.
        let other: Vec<u8> = [TINY_PNG, b"trailing"].concat();
        let refusal = media
            .ingest(
                &[photo(TINY_PNG), photo(&other)],
                &budget::Allowance::per_message(png + 4),
            )
            .await
            .expect("ingest");
        assert_eq!(refusal, Err(Refusal::MessageTooLarge { limit: png + 4 }));
        assert_eq!(blobs.len(), 1);
        assert!(blobs.get(&hash_of(&other)).await.expect("get").is_none());
        let daily = budget::Allowance {
            max_message_bytes: u64::MAX,
            daily: Some((100, 90)),
        };
        let refusal = media
            .ingest(&[photo(TINY_PNG)], &daily)
            .await
            .expect("ingest");
        let Err(refusal) = refusal else {
            panic!("over the daily budget: {refusal:?}")
        };
        assert_eq!(refusal, Refusal::DailyBudget { limit: 100 });
        assert!(
            refusal.reply().contains("100 bytes a day"),
            "{}",
            refusal.reply()
        );
    }

    #[tokio::test]
    async fn a_large_image_is_shown_scaled_down_and_both_versions_are_kept() {
        let blobs = MemoryBlobs::default();
        let settings = MediaSettings {
            vision_models: vec!["seeing".to_owned()],
            max_image_side: 100,
            ..MediaSettings::default()
        };
        let media = Media::new(Arc::new(blobs.clone()), &settings).expect("media");
        let png = switchboard_test_support::media::gradient_png(400, 200, false);
        let mut refs = media
            .ingest(&[photo(&png)], &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert_eq!(blobs.len(), 2, "the original and the scaled-down version");
        let derived = refs[0].derived.clone().expect("derived");
        assert_eq!((refs[0].width, refs[0].height), (Some(400), Some(200)));
        assert_eq!((derived.width, derived.height), (Some(100), Some(50)));
        assert_eq!(derived.media_type, "image/jpeg");
        media.show("seeing", &mut refs).await.expect("show");
        let Shown::Image(shown) = &refs[0].shown else {
            panic!("an image: {:?}", refs[0].shown)
        };
        assert_eq!(hash_of(shown), derived.hash);
        let parts = user_parts("", &refs);
        assert!(matches!(
            parts[0],
            Part::Image {
                media_type: "image/jpeg",
                ..
            }
        ));
        // The same photo again: the same versions, nothing new stored.
        let again = media
            .ingest(&[photo(&png)], &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert_eq!(again[0].derived, Some(derived));
        assert_eq!(blobs.len(), 2);
    }

    #[tokio::test]
    async fn a_pdf_reaches_every_model_as_its_text() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 1 << 20);
        let pdf = switchboard_test_support::media::test_pdf(&["Invoice 42", "Total 99 EUR"]);
        let attachment = Attachment {
            fetch: Some(MediaFetcher::new(Serve(pdf))),
            ..Attachment::new(AttachmentKind::Document, Some("invoice.pdf".to_owned()))
        };
        let mut refs = media
            .ingest(&[attachment], &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert_eq!(refs[0].media_type, "application/pdf");
        media.show("blind", &mut refs).await.expect("show");
        let [Part::Text(text)] = &user_parts("", &refs)[..] else {
            panic!("one text part")
        };
        assert!(text.starts_with("[file: invoice.pdf]\n"), "{text}");
        assert!(
            text.contains("Invoice 42") && text.contains("Total 99 EUR"),
            "{text}"
        );
        assert!(text.ends_with("\n[end of file: invoice.pdf]"), "{text}");
        let blank = Attachment {
            fetch: Some(MediaFetcher::new(Serve(
                switchboard_test_support::media::test_pdf(&[]),
            ))),
            ..Attachment::new(AttachmentKind::Document, Some("scan.pdf".to_owned()))
        };
        assert_eq!(blobs.len(), 2, "the PDF and its text");
        let refusal = media.ingest(&[blank], &ALL).await.expect("ingest");
        assert!(matches!(refusal, Err(Refusal::PdfWithoutText { .. })));
        assert_eq!(blobs.len(), 2, "a refused PDF is not kept");
    }

    #[tokio::test]
    async fn a_voice_note_becomes_its_transcript_and_the_audio_is_kept() {
        use switchboard_test_support::transcription::FakeTranscription;
        let server = FakeTranscription::start("call mum at six").await;
        let blobs = MemoryBlobs::default();
        let settings = MediaSettings {
            transcription: Some(voice::TranscriptionSettings {
                base_url: crate::domain::BaseUrl::parse(&server.base_url()).expect("the fake URL"),
                api_key_env: "SWITCHBOARD_TEST_NO_SUCH_KEY".to_owned(),
                ..voice::TranscriptionSettings::default()
            }),
            ..MediaSettings::default()
        };
        let media = Media::new(Arc::new(blobs.clone()), &settings).expect("media");
        let wav = switchboard_test_support::media::tone_wav(20);
        let note = Attachment {
            kind: AttachmentKind::Voice,
            ..photo(&wav)
        };
        let note = Attachment { name: None, ..note };
        let mut refs = media
            .ingest(std::slice::from_ref(&note), &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert_eq!(refs[0].media_type, "audio/wav");
        assert_eq!(refs[0].transcript, None, "transcribed when its turn starts");
        assert!(server.requests().is_empty());
        assert_eq!(blobs.len(), 1, "the audio, stored on arrival");
        // Not transcribed (yet), it is a note, never its bytes as text.
        media.show("blind", &mut refs).await.expect("show");
        assert_eq!(
            user_parts("", &refs),
            vec![Part::Text(Cow::Owned(
                "[voice note, not transcribed]".to_owned()
            ))]
        );
        assert_eq!(
            media.transcribe(&mut refs).await.expect("transcribe"),
            Ok(1)
        );
        assert_eq!(refs[0].transcript.as_deref(), Some("call mum at six"));
        assert_eq!(server.requests()[0].file, wav);
        media.show("blind", &mut refs).await.expect("show");
        assert_eq!(
            user_parts("", &refs),
            vec![Part::Text(Cow::Owned(
                "[voice note, transcribed] call mum at six".to_owned()
            ))]
        );
        assert_eq!(
            media.transcribe(&mut refs).await.expect("transcribe"),
            Ok(0),
            "a transcript is made once"
        );
        assert_eq!(server.requests().len(), 1);
        // The server fails, or hears nothing: the reply for the sender.
        server.fail_with(500);
        let mut again = media
            .ingest(std::slice::from_ref(&note), &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        assert!(matches!(
            media.transcribe(&mut again).await.expect("transcribe"),
            Err(Refusal::TranscriptionFailed { .. })
        ));
        server.answer("  ");
        let refusal = media.transcribe(&mut again).await.expect("transcribe");
        assert_eq!(
            refusal.map_err(|refusal| refusal.reply()),
            Err("Sorry, I could not make out any speech in your voice note.".to_owned())
        );
        // Gone from the blob store by the time its turn starts.
        let gone = MediaRef {
            hash: "0".repeat(64),
            ..again[0].clone()
        };
        assert!(matches!(
            media.transcribe(&mut [gone]).await.expect("transcribe"),
            Err(Refusal::Unavailable { .. })
        ));
        // Audio in a format the API does not take (AMR) is refused by name.
        let amr = Attachment {
            fetch: Some(MediaFetcher::new(Serve(b"#!AMR\n\x3c".to_vec()))),
            ..note
        };
        let refusal = media.ingest(&[amr], &ALL).await.expect("ingest");
        assert!(matches!(refusal, Err(Refusal::AudioFormat { .. })));
        assert_eq!(blobs.len(), 1);
    }

    #[tokio::test]
    async fn only_vision_models_are_shown_the_image() {
        let blobs = MemoryBlobs::default();
        let media = media(&blobs, 1024);
        let mut refs = media
            .ingest(&[photo(TINY_PNG)], &ALL)
            .await
            .expect("ingest")
            .expect("taken");
        media.show("blind", &mut refs).await.expect("show");
        assert_eq!(refs[0].shown, Shown::NoVision);
        assert_eq!(
            refs[0].note(),
            "[image: dot.png, 1×1, not shown: this model has no vision]"
        );
        media.show("seeing", &mut refs).await.expect("show");
        assert_eq!(refs[0].shown, Shown::Image(Arc::from(TINY_PNG)));
    }
}
