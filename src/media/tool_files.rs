//! Files a tool returned (an MCP server's images), taken in like a user's
//! photos: recognised by their bytes, held to `media.max_file_bytes`, given
//! a scaled-down version when over the provider limits, and stored once by
//! hash. Only images are taken; anything else, or a file over the cap or
//! that does not decode, is not kept, and the result says so in its note.
//! The message and daily byte budgets are the sender's, not the tool's: they
//! do not apply.
//!
//! Each file gets a one-line note, numbered from 1 in the order the tool
//! returned them, which the result text carries in place of the bytes:
//! `[file 1: image/png, 640×480, 10240 bytes]`, or `[file 2: not kept: …]`.

use crate::domain::MediaRef;

use super::{Media, Refusal, image_size, new_ref, sniff_image};

/// What became of a tool's files: those kept, and a note for each file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakenFiles {
    /// The files kept, in order.
    pub media: Vec<MediaRef>,
    /// One note per file returned, kept or not, in order.
    pub notes: Vec<String>,
}

impl Media {
    /// Takes in the files a tool returned, each its bytes and the media
    /// type the tool declared. Never fails: a file that cannot be kept (the
    /// blob store failing included) is left out with a note saying so.
    pub async fn take_tool_files(&self, files: Vec<(Vec<u8>, String)>) -> TakenFiles {
        let mut taken = TakenFiles::default();
        for (index, (bytes, declared)) in files.into_iter().enumerate() {
            let number = index + 1;
            match self.take_tool_file(number, &bytes).await {
                Ok(media) => {
                    taken.notes.push(media.listing(number));
                    taken.media.push(media);
                }
                Err(why) => {
                    tracing::info!(number, %declared, why, "a tool's file was not kept");
                    taken
                        .notes
                        .push(format!("[file {number}: {declared}, not kept: {why}]"));
                }
            }
        }
        taken
    }

    /// Stores one file of a tool's result; `Err` says why it was not kept.
    async fn take_tool_file(&self, number: usize, bytes: &[u8]) -> Result<MediaRef, &'static str> {
        let Some(media_type) = sniff_image(bytes) else {
            return Err("only images (PNG, JPEG, GIF, WebP) are kept");
        };
        if bytes.len() as u64 > self.max_file_bytes {
            return Err("it is larger than media.max_file_bytes");
        }
        let mut media = new_ref(bytes, media_type, None, image_size(bytes));
        let name = format!("file {number} of the tool's result");
        match self.prepare(&name, &mut media, bytes).await {
            Ok(Ok(())) => {}
            Ok(Err(Refusal::BadImage { .. })) => return Err("the image does not decode"),
            Ok(Err(_)) => return Err("it could not be read"),
            Err(err) => {
                tracing::warn!(error = %err, "storing a tool's file failed");
                return Err("the file store failed");
            }
        }
        match self.blobs.put(&media.hash, bytes).await {
            Ok(new) => {
                tracing::debug!(hash = %media.hash, new, size = bytes.len(), "tool file stored");
                Ok(media)
            }
            Err(err) => {
                tracing::warn!(error = %err, "storing a tool's file failed");
                Err("the file store failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::TINY_PNG;
    use super::super::blobs::{BlobStore as _, MemoryBlobs, hash_of};
    use super::*;
    use crate::media::settings::MediaSettings;

    #[tokio::test]
    async fn images_are_stored_once_and_other_files_get_a_note() {
        let blobs = MemoryBlobs::default();
        let media = Media::new(Arc::new(blobs.clone()), &MediaSettings::default()).expect("media");
        let taken = media
            .take_tool_files(vec![
                (TINY_PNG.to_vec(), "image/png".to_owned()),
                (b"RIFF....WAVE".to_vec(), "audio/wav".to_owned()),
                (TINY_PNG.to_vec(), "image/x-whatever".to_owned()),
            ])
            .await;
        assert_eq!(taken.media.len(), 2);
        assert_eq!(taken.media[0], taken.media[1]);
        assert_eq!(taken.media[0].hash, hash_of(TINY_PNG));
        assert_eq!(taken.media[0].media_type, "image/png");
        assert_eq!(blobs.len(), 1, "the same image is stored once");
        assert!(blobs.get(&hash_of(TINY_PNG)).await.expect("get").is_some());
        assert_eq!(
            taken.notes,
            [
                format!("[file 1: image/png, 1×1, {} bytes]", TINY_PNG.len()),
                "[file 2: audio/wav, not kept: only images (PNG, JPEG, GIF, WebP) are kept]"
                    .to_owned(),
                format!("[file 3: image/png, 1×1, {} bytes]", TINY_PNG.len()),
            ]
        );
    }

    #[tokio::test]
    async fn a_large_image_is_kept_with_a_scaled_down_version() {
        let blobs = MemoryBlobs::default();
        let settings = MediaSettings {
            max_image_side: 100,
            ..MediaSettings::default()
        };
        let media = Media::new(Arc::new(blobs.clone()), &settings).expect("media");
        let png = switchboard_test_support::media::gradient_png(400, 200, false);
        let taken = media
            .take_tool_files(vec![(png, "image/png".to_owned())])
            .await;
        let derived = taken.media[0].derived.clone().expect("scaled down");
        assert_eq!((derived.width, derived.height), (Some(100), Some(50)));
        assert_eq!(blobs.len(), 2, "the original and the scaled-down version");
    }
}
