//! Images made to fit what providers take: a photo whose longest side is
//! over `media.max_image_side` pixels, or whose file is over
//! `media.max_image_bytes`, is scaled down (aspect ratio kept, Lanczos
//! filter) and re-encoded, once, when it arrives; the result is a blob of
//! its own that the [`MediaRef`](super::MediaRef) names as its
//! [`Derived`](super::Derived) version, and vision models are shown that.
//!
//! The output is a JPEG (quality 85) unless the image has an alpha
//! channel, then a PNG. Decoding and encoding are pure functions of the
//! bytes (no threads, no clock), so the same image always gives the same
//! bytes; and since the result is stored, every later turn replays it as
//! is. Still over the byte cap, the image is scaled by 3/4 again, up to
//! eight times. Decoding is bounded (16384 px a side, 256 MiB of pixels):
//! an image past that, or whose bytes do not decode, is refused.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat, ImageReader, Limits};

/// JPEG quality of re-encoded images.
const JPEG_QUALITY: u8 = 85;
/// The largest side decoded.
const MAX_DECODED_SIDE: u32 = 16_384;
/// The most memory a decoder may take.
const MAX_DECODE_ALLOC: u64 = 256 * 1024 * 1024;
/// How many times an image still over the byte cap is shrunk again.
const MAX_SHRINKS: u32 = 8;

/// An image re-encoded to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub bytes: Vec<u8>,
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Why an image could not be made to fit.
#[derive(Debug, thiserror::Error)]
#[error("the image could not be decoded or re-encoded: {0}")]
pub struct FitError(String);

/// Whether an image of `size` bytes and `width`×`height` pixels needs
/// fitting under `max_side` and `max_bytes`.
#[must_use]
pub fn needs_fitting(size: u64, width: u32, height: u32, max_side: u32, max_bytes: u64) -> bool {
    size > max_bytes || width.max(height) > max_side
}

/// `bytes`, an image of type `media_type`, scaled so that its longest side
/// is at most `max_side` and re-encoded so that it is at most `max_bytes`
/// long (as far as eight further 3/4 shrinks get it).
///
/// # Errors
/// The bytes do not decode within the decoding bounds, or encoding failed.
pub fn fit(
    bytes: &[u8],
    media_type: &str,
    max_side: u32,
    max_bytes: u64,
) -> Result<Fitted, FitError> {
    let format = match media_type {
        "image/png" => ImageFormat::Png,
        "image/jpeg" => ImageFormat::Jpeg,
        "image/gif" => ImageFormat::Gif,
        "image/webp" => ImageFormat::WebP,
        other => return Err(FitError(format!("not an image type taken: {other}"))),
    };
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_DECODED_SIDE);
    limits.max_image_height = Some(MAX_DECODED_SIDE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    reader.limits(limits);
    let image = reader.decode().map_err(|err| FitError(err.to_string()))?;
    let alpha = image.color().has_alpha();
    let max_side = max_side.max(1);
    let (mut width, mut height) = scaled(image.width(), image.height(), max_side);
    let mut shrinks = 0;
    loop {
        let resized = if (width, height) == (image.width(), image.height()) {
            image.clone()
        } else {
            image.resize_exact(width, height, FilterType::Lanczos3)
        };
        let fitted = encode(&resized, alpha)?;
        if fitted.bytes.len() as u64 <= max_bytes || shrinks >= MAX_SHRINKS {
            return Ok(fitted);
        }
        shrinks += 1;
        let side = (width.max(height) * 3 / 4).max(1);
        (width, height) = scaled(width, height, side);
    }
}

/// `width`×`height` scaled so that the longest side is at most `max_side`
/// (at least one pixel a side).
fn scaled(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let longest = width.max(height);
    if longest <= max_side {
        return (width.max(1), height.max(1));
    }
    let scale = |side: u32| {
        let exact = u64::from(side) * u64::from(max_side) / u64::from(longest);
        u32::try_from(exact).unwrap_or(max_side).max(1)
    };
    (scale(width), scale(height))
}

/// `image` as a PNG (when it has alpha) or a JPEG.
fn encode(image: &DynamicImage, alpha: bool) -> Result<Fitted, FitError> {
    let mut bytes = Vec::new();
    let failed = |err: image::ImageError| FitError(err.to_string());
    let media_type = if alpha {
        let rgba = DynamicImage::ImageRgba8(image.to_rgba8());
        rgba.write_with_encoder(PngEncoder::new_with_quality(
            &mut bytes,
            CompressionType::Best,
            PngFilter::Adaptive,
        ))
        .map_err(failed)?;
        "image/png"
    } else {
        let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
        rgb.write_with_encoder(JpegEncoder::new_with_quality(&mut bytes, JPEG_QUALITY))
            .map_err(failed)?;
        "image/jpeg"
    };
    Ok(Fitted {
        bytes,
        media_type,
        width: image.width(),
        height: image.height(),
    })
}

#[cfg(test)]
mod tests {
    use switchboard_test_support::media::gradient_png;

    use super::*;

    #[test]
    fn a_large_photo_is_scaled_to_the_longest_side_as_a_jpeg_the_same_every_time() {
        let png = gradient_png(600, 300, false);
        let fitted = fit(&png, "image/png", 200, u64::MAX).expect("fit");
        assert_eq!((fitted.width, fitted.height), (200, 100));
        assert_eq!(fitted.media_type, "image/jpeg");
        assert!(fitted.bytes.starts_with(&[0xFF, 0xD8, 0xFF]));
        let decoded = image::load_from_memory(&fitted.bytes).expect("decodes");
        assert_eq!((decoded.width(), decoded.height()), (200, 100));
        let again = fit(&png, "image/png", 200, u64::MAX).expect("fit");
        assert_eq!(fitted, again, "deterministic");
    }

    #[test]
    fn an_image_with_alpha_stays_a_png_and_the_byte_cap_shrinks_it_further() {
        let png = gradient_png(400, 400, true);
        let fitted = fit(&png, "image/png", 400, 20_000).expect("fit");
        assert_eq!(fitted.media_type, "image/png");
        assert!(fitted.bytes.len() <= 20_000, "{}", fitted.bytes.len());
        assert!(fitted.width < 400 && fitted.width == fitted.height);
    }

    #[test]
    fn bytes_that_do_not_decode_are_an_error() {
        let mut png = gradient_png(50, 50, false);
        png.truncate(60);
        assert!(fit(&png, "image/png", 10, u64::MAX).is_err());
        assert!(fit(b"text", "text/plain", 10, u64::MAX).is_err());
    }

    #[test]
    fn sizes_scale_down_keeping_the_aspect_ratio() {
        assert_eq!(scaled(4000, 3000, 1568), (1568, 1176));
        assert_eq!(scaled(10, 5000, 100), (1, 100));
        assert_eq!(scaled(800, 600, 1568), (800, 600));
        assert!(needs_fitting(10, 2000, 10, 1568, 100));
        assert!(needs_fitting(101, 10, 10, 1568, 100));
        assert!(!needs_fitting(100, 1568, 10, 1568, 100));
    }
}
