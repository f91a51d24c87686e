//! Conversions between Discord snowflakes and the contract's string ids.

use std::num::NonZeroU64;

use serenity::model::id::{ChannelId, MessageId};

/// Parses a channel (or thread) id; `None` unless it is a non-zero integer.
pub(crate) fn channel_id(raw: &str) -> Option<ChannelId> {
    snowflake(raw).map(ChannelId::from)
}

/// Parses a message id; `None` unless it is a non-zero integer.
pub(crate) fn message_id(raw: &str) -> Option<MessageId> {
    snowflake(raw).map(MessageId::from)
}

fn snowflake(raw: &str) -> Option<NonZeroU64> {
    raw.trim().parse::<NonZeroU64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_words_are_not_snowflakes() {
        assert!(channel_id("0").is_none());
        assert!(channel_id("general").is_none());
        assert_eq!(
            channel_id("1100000000000000001").map(ChannelId::get),
            Some(1_100_000_000_000_000_001)
        );
    }
}
