//! Turning one Markdown reply into Telegram messages: split to the length
//! limit, rendered to Telegram HTML, with a plain-text twin per chunk for when
//! Telegram rejects the markup.
//!
//! The Markdown is split first ([`split_message`] keeps code fences balanced,
//! so each chunk renders on its own) and each chunk is rendered. Rendering can
//! lengthen a chunk (`<` becomes `&lt;`, tags are added); a chunk whose HTML
//! no longer fits is split again with a proportionally smaller limit, so every
//! HTML text sent is within the limit as counted in UTF-16 units (Telegram
//! counts after entity parsing, so this is conservative).

use std::collections::VecDeque;

use switchboard_contract::markdown::{MarkupRenderer, PlainText, TelegramHtml};
use switchboard_contract::split::{LengthUnit, split_message};

/// Telegram's limit for one message text, in UTF-16 code units.
pub const TELEGRAM_TEXT_LIMIT: usize = 4096;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The chunk as Telegram HTML (`parse_mode: HTML`).
    pub html: String,
    /// The same chunk as plain text, sent when the HTML is rejected.
    pub plain: String,
}

/// Splits and renders `markdown` into chunks whose HTML and plain text each
/// measure at most `limit` UTF-16 units. Chunks that render to nothing
/// visible are dropped; whitespace-only input gives no chunks.
pub(crate) fn render_chunks(markdown: &str, limit: usize) -> Vec<Chunk> {
    let unit = LengthUnit::Utf16;
    let mut queue: VecDeque<String> = split_message(markdown, limit, unit).into();
    let mut chunks = Vec::new();
    while let Some(piece) = queue.pop_front() {
        let html = TelegramHtml.render(&piece);
        let html_len = unit.measure(&html);
        let piece_len = unit.measure(&piece);
        if html_len > limit && piece_len > 1 {
            // Shrink the limit by the rendering's growth, and strictly below
            // the piece's length so every round makes progress.
            let scaled = piece_len.saturating_mul(limit) / html_len;
            let sub_limit = scaled.min(piece_len - 1).max(1);
            let parts = split_message(&piece, sub_limit, unit);
            for part in parts.into_iter().rev() {
                queue.push_front(part);
            }
            continue;
        }
        if html.trim().is_empty() {
            continue;
        }
        let rendered_plain = PlainText.render(&piece);
        let plain = if unit.measure(&rendered_plain) <= limit && !rendered_plain.trim().is_empty() {
            rendered_plain
        } else {
            piece
        };
        chunks.push(Chunk { html, plain });
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_reply_is_one_chunk_of_html() {
        let chunks = render_chunks("Hello **world** <3", TELEGRAM_TEXT_LIMIT);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].html, "Hello <b>world</b> &lt;3");
        assert_eq!(chunks[0].plain, "Hello world <3");
    }

    #[test]
    fn escaping_growth_is_split_again_to_fit() {
        // Every `<` becomes four characters in HTML.
        let text = "<".repeat(3000);
        let chunks = render_chunks(&text, TELEGRAM_TEXT_LIMIT);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for chunk in &chunks {
            assert!(LengthUnit::Utf16.measure(&chunk.html) <= TELEGRAM_TEXT_LIMIT);
            assert!(LengthUnit::Utf16.measure(&chunk.plain) <= TELEGRAM_TEXT_LIMIT);
        }
        let total: usize = chunks.iter().map(|c| c.plain.len()).sum();
        assert_eq!(total, 3000);
    }

    #[test]
    fn whitespace_gives_no_chunks() {
        assert!(render_chunks("  \n\n ", TELEGRAM_TEXT_LIMIT).is_empty());
    }

    #[test]
    fn emoji_count_as_two_units() {
        let text = "😀".repeat(3000);
        let chunks = render_chunks(&text, TELEGRAM_TEXT_LIMIT);
        assert_eq!(chunks.len(), 2);
        assert!(
            chunks
                .iter()
                .all(|c| LengthUnit::Utf16.measure(&c.html) <= TELEGRAM_TEXT_LIMIT)
        );
    }
}
