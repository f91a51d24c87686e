//! Files in the conversation model: a user message references each of its
//! files by blob ([`MediaRef`]), and [`user_parts`] says how the message
//! appears in a model request (text, images, or notes in their place), the
//! same way every time, so a replayed request is byte-identical.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// A file attached to a user message (or returned by a tool), by its blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaRef {
    /// The SHA-256 of the bytes, lowercase hex: the blob's name.
    pub hash: String,
    /// The media type read off the bytes (`image/png`).
    pub media_type: String,
    /// The file name the platform gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Pixel width, for images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Pixel height, for images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// The version of the file models are shown instead of the original,
    /// made once on arrival: an image scaled down to the provider limits,
    /// or a PDF's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<Derived>,
    /// A voice note's or audio file's transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// What the model request shows for it; set for each request, never
    /// stored.
    #[serde(skip)]
    pub shown: Shown,
}

/// A version of a file made for models (see [`MediaRef::derived`]), a blob
/// of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Derived {
    /// The SHA-256 of its bytes, lowercase hex.
    pub hash: String,
    /// Its media type (`image/jpeg`, `text/plain`).
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Pixel width, for images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Pixel height, for images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
}

/// How a [`MediaRef`] appears in a model request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Shown {
    /// A note: the model has no vision.
    #[default]
    NoVision,
    /// The image itself (its bytes, loaded from the blob store).
    Image(Arc<[u8]>),
    /// A note: the blob is no longer stored.
    Missing,
    /// A text document's content (any model reads it).
    Document(Arc<str>),
}

impl MediaRef {
    /// Whether this is an image.
    #[must_use]
    pub fn is_image(&self) -> bool {
        self.media_type.starts_with("image/")
    }

    /// Whether this is a voice note or audio file not transcribed yet
    /// (see `media::Media::transcribe`).
    #[must_use]
    pub fn awaits_transcript(&self) -> bool {
        self.media_type.starts_with("audio/") && self.transcript.is_none()
    }

    /// The blob models are shown: the derived version's, else the file's.
    #[must_use]
    pub fn shown_hash(&self) -> &str {
        self.derived
            .as_ref()
            .map_or(self.hash.as_str(), |derived| derived.hash.as_str())
    }

    /// The media type of what models are shown.
    #[must_use]
    pub fn shown_media_type(&self) -> &str {
        self.derived
            .as_ref()
            .map_or(self.media_type.as_str(), |derived| {
                derived.media_type.as_str()
            })
    }

    /// The file name the sender gave, when it is not blank.
    pub fn given_name(&self) -> Option<&str> {
        self.name.as_deref().filter(|name| !name.trim().is_empty())
    }

    /// The marker of a voice note, `[voice note, STATE]`, or of a named
    /// audio file, `[audio: talk.mp3, STATE]`.
    fn audio_marker(&self, state: &str) -> String {
        match self.given_name() {
            Some(name) => format!("[audio: {name}, {state}]"),
            None => format!("[voice note, {state}]"),
        }
    }

    /// The text standing for a text document: its content between a header
    /// and a footer that name it; the note when it is not loaded.
    #[must_use]
    pub fn document_text(&self) -> String {
        let name = self.name.as_deref().unwrap_or("unnamed");
        match &self.shown {
            Shown::Document(text) => {
                format!("[file: {name}]\n{text}\n[end of file: {name}]")
            }
            _ => format!(
                "[file: {name}, {} bytes, not shown: the file is no longer stored]",
                self.size
            ),
        }
    }

    /// The one-line note a tool's result text carries for it, the file
    /// numbered `number`: `[file 1: image/png, 640×480, 10240 bytes]`.
    #[must_use]
    pub fn listing(&self, number: usize) -> String {
        match (self.width, self.height) {
            (Some(width), Some(height)) => format!(
                "[file {number}: {}, {width}×{height}, {} bytes]",
                self.media_type, self.size
            ),
            _ => format!("[file {number}: {}, {} bytes]", self.media_type, self.size),
        }
    }

    /// The text that stands in for the file when it is not shown, e.g.
    /// `[image: photo.jpg, 1280×960, not shown: this model has no vision]`
    /// (a photo without a file name: `[image: 1280×960, …]`).
    #[must_use]
    pub fn note(&self) -> String {
        if let Some(transcript) = &self.transcript {
            return format!("{} {transcript}", self.audio_marker("transcribed"));
        }
        if self.awaits_transcript() {
            return self.audio_marker("not transcribed");
        }
        if !self.is_image() {
            return self.document_text();
        }
        let size = match (self.width, self.height) {
            (Some(width), Some(height)) => format!("{width}×{height}"),
            _ => format!("{} bytes", self.size),
        };
        let why = match self.shown {
            Shown::Missing => "not shown: the file is no longer stored",
            _ => "not shown: this model has no vision",
        };
        match self.given_name() {
            Some(name) => format!("[image: {name}, {size}, {why}]"),
            None => format!("[image: {size}, {why}]"),
        }
    }
}

/// One part of a user message as a model request shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'a> {
    Text(Cow<'a, str>),
    /// An image: its media type and its bytes in standard base64.
    Image {
        media_type: &'a str,
        base64: String,
    },
}

/// The parts of a user message (or a tool result) with text `content` and
/// files `media`, for a provider to encode: the text alone when no image is shown (the notes of
/// files not shown and the text of documents appended, one per line), else the text (when not empty)
/// followed by each file in order, as an image or its note. The same
/// message always gives the same parts.
#[must_use]
pub fn user_parts<'a>(content: &'a str, media: &'a [MediaRef]) -> Vec<Part<'a>> {
    if media.is_empty() {
        return vec![Part::Text(Cow::Borrowed(content))];
    }
    if !media
        .iter()
        .any(|file| matches!(file.shown, Shown::Image(_)))
    {
        return vec![Part::Text(text_with_notes(content, media))];
    }
    let mut parts = Vec::with_capacity(media.len() + 1);
    if !content.is_empty() {
        parts.push(Part::Text(Cow::Borrowed(content)));
    }
    for file in media {
        parts.push(match &file.shown {
            Shown::Image(bytes) => Part::Image {
                media_type: file.shown_media_type(),
                base64: BASE64.encode(bytes),
            },
            _ => Part::Text(Cow::Owned(file.note())),
        });
    }
    parts
}

/// `content` followed by the note of each of `media` not shown as an image,
/// one per line: `content` itself when every file is shown (or there is
/// none).
#[must_use]
pub fn text_with_notes<'a>(content: &'a str, media: &'a [MediaRef]) -> Cow<'a, str> {
    let mut notes = media
        .iter()
        .filter(|file| !matches!(file.shown, Shown::Image(_)))
        .peekable();
    if notes.peek().is_none() {
        return Cow::Borrowed(content);
    }
    let mut text = content.to_owned();
    for file in notes {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&file.note());
    }
    Cow::Owned(text)
}

/// The images of `media` that are shown, in order, as image parts.
#[must_use]
pub fn shown_images(media: &[MediaRef]) -> Vec<Part<'_>> {
    media
        .iter()
        .filter_map(|file| match &file.shown {
            Shown::Image(bytes) => Some(Part::Image {
                media_type: file.shown_media_type(),
                base64: BASE64.encode(bytes),
            }),
            _ => None,
        })
        .collect()
}
