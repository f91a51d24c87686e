//! Turning one Markdown reply into Telegram messages: split to the length
//! limit, rendered to Telegram HTML, with a plain-text twin per chunk for when
//! Telegram rejects the markup.
//!
//! The Markdown is split so that each chunk's HTML fits the limit
//! ([`split_message_fitting`] keeps code fences balanced, so each chunk
//! renders on its own, and fills each chunk as far as its rendered form
//! allows, preferring paragraph and line boundaries). Rendering lengthens a
//! chunk (`<` becomes `&lt;`, tags are added), so the HTML is what is
//! measured, in UTF-16 units: Telegram counts after entity parsing, so this
//! is conservative, and a chunk Telegram refuses as markup goes out as its
//! plain-text twin, which fits too.

use switchboard_contract::markdown::{MarkupRenderer, PlainText, TelegramHtml};
use switchboard_contract::split::{LengthUnit, split_message_fitting};

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
    let fits = |piece: &str| unit.measure(&TelegramHtml.render(piece)) <= limit;
    let mut chunks = Vec::new();
    for piece in split_message_fitting(markdown, limit, unit, &fits) {
        let html = TelegramHtml.render(&piece);
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
