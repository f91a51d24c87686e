//! The normalised messages that cross between adapters and the core.

use serde::{Deserialize, Serialize};

use crate::ids::{AccountId, ChatId, EventId, PlatformName, ThreadId, UserId};
use crate::interaction::Button;
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

/// What kind of file an attachment is, as the platform declared it (each
/// adapter maps its platform's words onto these; the core never sees them).
/// The core checks the bytes themselves: the kind only decides how a file
/// is named in a reply and whether audio is expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    /// A photo or picture.
    Image,
    /// A voice note recorded in the chat app.
    Voice,
    /// An audio file.
    Audio,
    /// A video or an animation.
    Video,
    /// A sticker.
    Sticker,
    /// A document or any other file.
    Document,
}

impl AttachmentKind {
    /// The kind's name, as a reply names a file that has no name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Voice => "voice note",
            Self::Audio => "audio file",
            Self::Video => "video",
            Self::Sticker => "sticker",
            Self::Document => "file",
        }
    }

    /// Whether the platform says this is sound (a voice note or an audio
    /// file).
    #[must_use]
    pub fn is_audio(self) -> bool {
        matches!(self, Self::Voice | Self::Audio)
    }
}

impl std::fmt::Display for AttachmentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file or media item attached to a message.
///
/// When the adapter can download it, `fetch` gets its bytes for the core
/// (which stores them); `url` is only ever a link that carries no
/// credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
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
    pub fn new(kind: AttachmentKind, name: Option<String>) -> Self {
        Self {
            kind,
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
    /// Buttons under the reply (a question for the person), shown under
    /// its last part; empty for an ordinary reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<Button>,
    /// Whether an earlier delivery of this reply may have reached the
    /// platform unrecorded (a crash or a lost claim came between sending it
    /// and recording it). A platform without idempotent sends that can look
    /// up what the bot sent checks before sending again.
    #[serde(default)]
    pub redelivery: bool,
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

/// What became of a message the bot sent, as the platform reported it after
/// the send returned (WhatsApp's status callbacks: sent, delivered, read,
/// failed). Platforms that report nothing of the kind never produce one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryStatus {
    pub platform: PlatformName,
    pub account: AccountId,
    /// The chat the message went to.
    pub chat: ChatId,
    /// The platform's id of the message, one of the
    /// [`DeliveryReceipt::message_ids`] its send returned.
    pub message_id: String,
    pub state: DeliveryState,
}

/// How far a sent message got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum DeliveryState {
    /// The platform took it on.
    Sent,
    /// It reached the person's device.
    Delivered,
    /// The person read it.
    Read,
    /// It will not arrive. `code` is the platform's error code, if it gave
    /// one; `reason` names no secret and no phone number.
    Failed { code: Option<i64>, reason: String },
}
