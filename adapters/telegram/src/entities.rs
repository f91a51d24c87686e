//! Message entities (mentions, commands…) as byte ranges of the text.
//!
//! Telegram counts entity offsets and lengths in UTF-16 code units; Rust
//! slices strings by UTF-8 byte. This module converts one to the other with
//! checked arithmetic and never panics: an entity that reaches past the
//! text, overflows, or starts or ends inside a character (between the two
//! halves of a surrogate pair) is left out, and logged at debug. teloxide's
//! own `MessageEntityRef::parse` asserts instead, so one malformed update
//! would take the adapter down.

use std::ops::Range;

use teloxide_core::types::{MessageEntity, MessageEntityKind};

/// One entity, located in the text it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entity<'a> {
    pub kind: &'a MessageEntityKind,
    /// Byte range in the text, on character boundaries.
    pub range: Range<usize>,
    /// The text the entity covers (`&text[range]`).
    pub text: &'a str,
}

/// The entities of `text` whose UTF-16 offsets are valid, in their order.
pub(crate) fn parse<'a>(text: &'a str, entities: &'a [MessageEntity]) -> Vec<Entity<'a>> {
    if entities.is_empty() {
        return Vec::new();
    }
    // Every character boundary as (UTF-16 offset, byte offset), the end of
    // the text included; both columns strictly increase.
    let mut boundaries = Vec::with_capacity(text.len() + 1);
    let mut utf16 = 0usize;
    for (byte, c) in text.char_indices() {
        boundaries.push((utf16, byte));
        utf16 += c.len_utf16();
    }
    boundaries.push((utf16, text.len()));
    let byte_at = |offset: usize| {
        boundaries
            .binary_search_by_key(&offset, |&(utf16, _)| utf16)
            .ok()
            .map(|i| boundaries[i].1)
    };
    entities
        .iter()
        .filter_map(|entity| {
            let located = entity.offset.checked_add(entity.length).and_then(|end| {
                let range = byte_at(entity.offset)?..byte_at(end)?;
                Some(Entity {
                    kind: &entity.kind,
                    text: text.get(range.clone())?,
                    range,
                })
            });
            if located.is_none() {
                tracing::debug!(
                    offset = entity.offset,
                    length = entity.length,
                    "message entity outside the text or inside a character; ignored"
                );
            }
            located
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mention(offset: usize, length: usize) -> MessageEntity {
        MessageEntity::new(MessageEntityKind::Mention, offset, length)
    }

    #[test]
    fn utf16_offsets_become_byte_ranges() {
        // "😀" is two UTF-16 units and four bytes; "é" one unit, two bytes.
        let text = "😀é @bot";
        let entities = [mention(4, 4)];
        let parsed = parse(text, &entities);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].text, "@bot");
        assert_eq!(parsed[0].range, 7..11);
    }

    #[test]
    fn invalid_entities_are_left_out() {
        let text = "😀 @bot";
        let entities = [
            mention(1, 2),          // starts inside the surrogate pair
            mention(0, 1),          // ends inside it
            mention(3, 10),         // past the end
            mention(usize::MAX, 2), // overflows
            mention(3, 4),          // fine
        ];
        let parsed = parse(text, &entities);
        assert_eq!(parsed.len(), 1, "{parsed:?}");
        assert_eq!(parsed[0].text, "@bot");
    }

    #[test]
    fn an_empty_entity_at_the_end_is_kept() {
        let entities = [mention(3, 0)];
        let parsed = parse("abc", &entities);
        assert_eq!(parsed[0].range, 3..3);
    }
}
