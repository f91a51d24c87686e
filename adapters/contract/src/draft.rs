//! Drafts: a reply shown while the model is still writing it.
//!
//! While a turn runs, the core hands the platform's sender a [`Draft`] now
//! and then (no more often than the sender's
//! [`PlatformSender::draft_interval`](crate::PlatformSender::draft_interval)
//! for that chat): the reply's text so far, Markdown, perhaps with a line
//! saying which tool runs. The sender shows it as the platform allows (an
//! ephemeral draft, or a message it edits in place) and says which message
//! shows it, if any; the final reply then replaces that message's content
//! ([`OutboundMessage::replaces`](crate::OutboundMessage::replaces)).
//! Drafts are best effort: a failed one is skipped, never retried, and the
//! turn never waits for one.

use crate::message::ChatRef;

/// A reply as written so far, for the sender to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    /// The chat the reply goes to.
    pub chat: ChatRef,
    /// The platform message the reply answers, as the final reply will.
    pub reply_to: Option<String>,
    /// Non-zero and the same for every draft of one turn, on any instance
    /// (platforms that animate a draft by id use it).
    pub draft_id: i64,
    /// Unique to the turn across databases and deployments, the same on
    /// every instance: platforms that deduplicate message creation by a
    /// key (Discord's nonce, Feishu's `uuid`) use it, so a draft message
    /// created again after a crash (before its id was recorded) is the same
    /// message.
    pub key: String,
    /// The platform message already showing this turn's draft (returned by
    /// an earlier call, perhaps by another instance before a crash), which
    /// the sender edits instead of creating another.
    pub message_id: Option<String>,
    /// The text so far, Markdown; may end in the middle of a word, a list
    /// or a code block.
    pub text: String,
}
