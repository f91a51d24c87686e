//! What a stored file becomes for models, worked out once: an image over the
//! provider limits gets a smaller re-encoded version
//! ([`resize`](super::resize)) and a PDF its text ([`pdf`](super::pdf)) when
//! they arrive; a voice note or audio file gets its transcript
//! ([`voice`](super::voice)) when its turn starts, so that a slow
//! transcription server holds up that one conversation, never the
//! platform's next messages. A derived version is a blob of its own, named
//! by the [`MediaRef`]'s [`Derived`]; a transcript is kept in the
//! [`MediaRef`] itself, and so in the stored user message. Either way later
//! turns replay the same bytes without working them out again.

use super::blobs::hash_of;
use super::pdf::{self, PdfError};
use super::resize::{self, Fitted};
use super::voice::TranscribeError;
use super::{Media, MediaError, Refusal};
use crate::domain::{Derived, MediaRef};

impl Media {
    /// Works out what `media` (with the bytes `bytes`; `name` as the sender
    /// would call it) becomes for models, and sets it. `Ok(Err(_))` is the
    /// reply when it cannot be made readable. The caller stores the file
    /// once this succeeds; audio is transcribed later
    /// ([`Media::transcribe`]).
    ///
    /// # Errors
    /// The blob store failed.
    pub(super) async fn prepare(
        &self,
        name: &str,
        media: &mut MediaRef,
        bytes: &[u8],
    ) -> Result<Result<(), Refusal>, MediaError> {
        if media.is_image() {
            let needed = match (media.width, media.height) {
                (Some(width), Some(height)) => resize::needs_fitting(
                    media.size,
                    width,
                    height,
                    self.max_image_side,
                    self.max_image_bytes,
                ),
                // Sizes unknown: only the byte cap can be told.
                _ => media.size > self.max_image_bytes,
            };
            if !needed {
                return Ok(Ok(()));
            }
            let owned = bytes.to_vec();
            let media_type = media.media_type.clone();
            let (side, cap) = (self.max_image_side, self.max_image_bytes);
            let fitted =
                tokio::task::spawn_blocking(move || resize::fit(&owned, &media_type, side, cap))
                    .await;
            let Fitted {
                bytes,
                media_type,
                width,
                height,
            } = match fitted {
                Ok(Ok(fitted)) => fitted,
                Ok(Err(err)) => {
                    tracing::info!(error = %err, "an image could not be resized");
                    return Ok(Err(Refusal::BadImage {
                        name: name.to_owned(),
                    }));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "image resizing failed");
                    return Ok(Err(Refusal::BadImage {
                        name: name.to_owned(),
                    }));
                }
            };
            media.derived = Some(self.keep(&bytes, media_type, Some((width, height))).await?);
        } else if media.media_type == "application/pdf" {
            let text = match pdf::extract_text(bytes.to_vec()).await {
                Ok(text) => text,
                Err(PdfError::NoText) => {
                    return Ok(Err(Refusal::PdfWithoutText {
                        name: name.to_owned(),
                    }));
                }
                Err(PdfError::Broken(reason)) => {
                    tracing::info!(%reason, "a PDF could not be read");
                    return Ok(Err(Refusal::BrokenPdf {
                        name: name.to_owned(),
                    }));
                }
            };
            if text.len() as u64 > self.max_text_bytes {
                return Ok(Err(Refusal::TextTooLong {
                    name: name.to_owned(),
                    limit: self.max_text_bytes,
                }));
            }
            media.derived = Some(self.keep(text.as_bytes(), "text/plain", None).await?);
        }
        Ok(Ok(()))
    }

    /// Transcribes each voice note or audio file of `media` (a message's
    /// files, its audio stored on arrival) that has no transcript yet, and
    /// returns how many it did. `Ok(Err(_))` is the reply when one cannot
    /// be: transcription is not (or no longer) configured, the audio is no
    /// longer stored, the server failed, or it heard no speech.
    ///
    /// # Errors
    /// The blob store failed.
    pub async fn transcribe(
        &self,
        media: &mut [MediaRef],
    ) -> Result<Result<usize, Refusal>, MediaError> {
        let mut done = 0;
        for file in media.iter_mut().filter(|file| file.awaits_transcript()) {
            let name = file
                .given_name()
                .map_or_else(|| "your voice note".to_owned(), |n| format!("\"{n}\""));
            let Some(transcriber) = &self.transcriber else {
                return Ok(Err(Refusal::Voice));
            };
            let Some(bytes) = self.blobs.get(&file.hash).await? else {
                tracing::warn!(hash = %file.hash, "a voice note to transcribe is no longer stored");
                return Ok(Err(Refusal::Unavailable { name }));
            };
            match transcriber.transcribe(bytes, &file.media_type).await {
                Ok(text) => file.transcript = Some(text),
                Err(TranscribeError::NoSpeech) => return Ok(Err(Refusal::NoSpeech { name })),
                Err(TranscribeError::Failed(reason)) => {
                    tracing::warn!(%reason, "a voice note could not be transcribed");
                    return Ok(Err(Refusal::TranscriptionFailed { name }));
                }
            }
            done += 1;
        }
        Ok(Ok(done))
    }

    /// Stores `bytes`, a version of a file made for models, as a blob.
    async fn keep(
        &self,
        bytes: &[u8],
        media_type: &str,
        size: Option<(u32, u32)>,
    ) -> Result<Derived, MediaError> {
        let hash = hash_of(bytes);
        let new = self.blobs.put(&hash, bytes).await?;
        tracing::debug!(%hash, new, size = bytes.len(), media_type, "derived version stored");
        Ok(Derived {
            hash,
            media_type: media_type.to_owned(),
            size: bytes.len() as u64,
            width: size.map(|(width, _)| width),
            height: size.map(|(_, height)| height),
        })
    }
}
