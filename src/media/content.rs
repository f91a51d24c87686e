//! What a stored file becomes for models, worked out once when it arrives:
//! an image over the provider limits gets a smaller re-encoded version
//! ([`resize`](super::resize)), a PDF its text ([`pdf`](super::pdf)), a voice
//! note or audio file its transcript ([`voice`](super::voice)). A derived
//! version is a blob of its own, named by the [`MediaRef`]'s
//! [`Derived`]; a transcript is kept in the [`MediaRef`] itself. Either way
//! later turns replay the same bytes without working them out again.

use super::blobs::hash_of;
use super::pdf::{self, PdfError};
use super::resize::{self, Fitted};
use super::voice::TranscribeError;
use super::{Derived, Media, MediaError, MediaRef, Refusal};

impl Media {
    /// Works out what `media` (with the bytes `bytes`; `name` as the sender
    /// would call it) becomes for models, and sets it. `Ok(Err(_))` is the
    /// reply when it cannot be made readable. Audio is stored before it is
    /// transcribed, so that a failing transcription server loses nothing;
    /// other files are stored by the caller once this succeeds.
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
        } else if media.media_type.starts_with("audio/") {
            let Some(transcriber) = &self.transcriber else {
                return Ok(Err(Refusal::Voice));
            };
            let new = self.blobs.put(&media.hash, bytes).await?;
            tracing::debug!(hash = %media.hash, new, size = bytes.len(), "audio stored");
            match transcriber
                .transcribe(bytes.to_vec(), &media.media_type)
                .await
            {
                Ok(text) => media.transcript = Some(text),
                Err(TranscribeError::NoSpeech) => {
                    return Ok(Err(Refusal::NoSpeech {
                        name: name.to_owned(),
                    }));
                }
                Err(TranscribeError::Failed(reason)) => {
                    tracing::warn!(%reason, "a voice note could not be transcribed");
                    return Ok(Err(Refusal::TranscriptionFailed {
                        name: name.to_owned(),
                    }));
                }
            }
        }
        Ok(Ok(()))
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
