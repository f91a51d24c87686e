//! The normalised messages that cross between adapters and the core.

use serde::{Deserialize, Serialize};

use crate::ids::{AccountId, ChatId, EventId, PlatformName, ThreadId, UserId};
use crate::media::MediaFetcher;

/// What kind of conversation a chat is; group rules (mention gating, shared
/// sessions) depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A one-to-one conversation with the bot.
    Direct,
    /// A group chat, server channel or supergroup.
    Group,
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    pub id: UserId,
    pub display_name: Option<String>,
    pub is_bot: bool,
}

/// A file or media item attached to a message.
///
/// `kind` is the platform's word for it (`photo`, `document`, `voice`,
/// `image`, `file`…). When the adapter can download it, `fetch` gets its
/// bytes for the core (which stores them); `url` is only ever a link that
/// carries no credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: String,
    pub url: Option<String>,
    pub name: Option<String>,
    /// The media type the platform declared (`image/png`), if any; the core
    /// checks the bytes rather than trusting it.
    #[serde(default)]
    pub media_type: Option<String>,
    /// The size the platform declared, in bytes, if any.
    #[serde(default)]
    pub size: Option<u64>,
    /// Downloads the file; `None` when the adapter cannot.
    #[serde(skip)]
    pub fetch: Option<MediaFetcher>,
}

impl Attachment {
    /// An attachment of `kind` named `name`, with nothing else known.
    #[must_use]
    pub fn new(kind: impl Into<String>, name: Option<String>) -> Self {
        Self {
            kind: kind.into(),
            url: None,
            name,
            media_type: None,
            size: None,
            fetch: None,
        }
    }
}

/// One platform event, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundMessage {
    pub platform: PlatformName,
    pub account: AccountId,
    /// Unique per platform + account; a redelivered event repeats it.
    pub event_id: EventId,
    pub chat: ChatId,
    pub chat_kind: ChatKind,
    pub thread: Option<ThreadId>,
    pub sender: Sender,
    /// The text with the bot's mention stripped.
    pub text: String,
    /// Whether the bot was addressed (mention, reply to the bot, command
    /// addressed to it). Always true in direct chats.
    pub mentions_bot: bool,
    /// The platform's id of the message this one replies to.
    pub reply_to: Option<String>,
    /// The platform's id of this message, for replying to it.
    pub message_id: Option<String>,
    pub attachments: Vec<Attachment>,
}

/// Where a message goes: a chat (and thread) of one account on a platform.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatRef {
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat: ChatId,
    pub thread: Option<ThreadId>,
}

/// A reply for an adapter to deliver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundMessage {
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat: ChatId,
    pub thread: Option<ThreadId>,
    /// The platform message to reply to, when the platform threads replies.
    pub reply_to: Option<String>,
    /// Markdown as the model wrote it; the adapter converts and splits it.
    pub text: String,
    /// A stable key derived from the reply's identity (its outbox row), for
    /// platforms with idempotent sends (Feishu `uuid`, Discord `nonce`).
    pub idempotency_key: String,
    /// The platform message that showed this reply's draft while it was
    /// written ([`crate::Draft`]), if one did: the reply's first part
    /// replaces its content (an edit), so no partial copy is left behind.
    /// Should the edit be refused (the message was deleted), the part goes
    /// out as a new message instead.
    #[serde(default)]
    pub replaces: Option<String>,
}

impl OutboundMessage {
    /// The chat this reply goes to.
    pub fn chat_ref(&self) -> ChatRef {
        ChatRef {
            platform: self.platform.clone(),
            account: self.account.clone(),
            chat: self.chat.clone(),
            thread: self.thread.clone(),
        }
    }
}

/// What a platform returned for a delivered reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReceipt {
    /// The platform's ids of the messages sent (one per chunk).
    pub message_ids: Vec<String>,
}
