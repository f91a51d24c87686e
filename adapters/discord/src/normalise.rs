//! Turning a Discord `MESSAGE_CREATE` into the contract's [`InboundMessage`].
//!
//! Pure functions of serenity's [`Message`] and the bot's user id, so they are
//! tested with recorded payloads and no gateway. The rules:
//!
//! - a message without `guild_id` is a DM: [`ChatKind::Direct`], always
//!   addressed to the bot;
//! - a server message is [`ChatKind::Group`], addressed to the bot when it
//!   mentions the bot (`<@id>`/`<@!id>`, read from `msg.mentions`), replies to
//!   one of the bot's messages, or is in a free-response channel;
//! - a thread is a channel of its own: the chat is always `msg.channel_id`, so
//!   each thread gets its own session and replies land in it;
//! - the bot's own messages, other bots', webhook and system messages are
//!   skipped (never submitted);
//! - the bot's mention is stripped from the text, and the event id is the
//!   message id, so a redelivered message is dropped by the core.

use serenity::model::channel::{Message, MessageType};
use serenity::model::id::UserId;
use switchboard_contract::{
    AccountId, Attachment, AttachmentKind, ChatId, ChatKind, EventId, IdError, InboundMessage,
    PlatformName, Sender, UserId as ContractUserId,
};

/// The platform name the core knows this adapter by.
pub const PLATFORM: &str = "discord";

/// What became of one Discord message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Normalised {
    /// A message for the core.
    Message(Box<InboundMessage>),
    /// Not for the core; nothing is submitted.
    Skipped(Skip),
}

/// Why a message is not submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The bot's own message.
    OwnMessage,
    /// Sent by another bot.
    Bot,
    /// Sent through a webhook (`webhook_id` set).
    Webhook,
    /// A system message (pin, join, thread created, ...), not a user's words.
    System,
    /// No text after stripping the mention, and no attachment.
    Empty,
}

/// Why a message could not be normalised (an id the contract rejects; not
/// expected for real Discord payloads).
#[derive(Debug, thiserror::Error)]
#[error("discord message has an unusable id: {0}")]
pub struct NormaliseError(IdError);

impl From<IdError> for NormaliseError {
    fn from(err: IdError) -> Self {
        Self(err)
    }
}

/// Normalises one message received by the bot `bot_id`.
///
/// `free_response` says whether the message's channel answers without a
/// mention (a configured free-response channel, or a thread the bot opened);
/// it only matters in servers.
///
/// # Errors
/// [`NormaliseError`] when an id is unusable as a contract id.
pub fn normalise(
    msg: &Message,
    bot_id: UserId,
    free_response: bool,
) -> Result<Normalised, NormaliseError> {
    if let Some(skip) = skip_reason(msg, bot_id) {
        return Ok(Normalised::Skipped(skip));
    }
    let text = strip_mention(&msg.content, bot_id);
    let attachments: Vec<Attachment> = msg.attachments.iter().map(attachment).collect();
    if text.is_empty() && attachments.is_empty() {
        return Ok(Normalised::Skipped(Skip::Empty));
    }
    let (chat_kind, mentions_bot) = match msg.guild_id {
        None => (ChatKind::Direct, true),
        Some(_) => (
            ChatKind::Group,
            free_response || is_addressed_to(msg, bot_id),
        ),
    };
    let display_name = msg
        .member
        .as_ref()
        .and_then(|member| member.nick.clone())
        .or_else(|| msg.author.global_name.clone())
        .or_else(|| Some(msg.author.name.clone()).filter(|name| !name.is_empty()));
    Ok(Normalised::Message(Box::new(InboundMessage {
        platform: PlatformName::parse(PLATFORM)?,
        account: account_id(bot_id)?,
        event_id: EventId::parse(msg.id.to_string())?,
        chat: ChatId::parse(msg.channel_id.to_string())?,
        chat_kind,
        thread: None,
        sender: Sender {
            id: ContractUserId::parse(msg.author.id.to_string())?,
            display_name,
            is_bot: msg.author.bot,
        },
        text,
        mentions_bot,
        reply_to: msg
            .message_reference
            .as_ref()
            .and_then(|reference| reference.message_id)
            .map(|id| id.to_string()),
        message_id: Some(msg.id.to_string()),
        attachments,
    })))
}

/// The account id of the bot `bot_id`: its user id.
///
/// # Errors
/// Never for a real user id; the contract's validation error otherwise.
pub fn account_id(bot_id: UserId) -> Result<AccountId, IdError> {
    AccountId::parse(bot_id.to_string())
}

/// Whether a server message mentions the bot or replies to one of its
/// messages (free-response channels aside).
#[must_use]
pub fn is_addressed_to(msg: &Message, bot_id: UserId) -> bool {
    let mentioned = msg.mentions.iter().any(|user| user.id == bot_id);
    let replies_to_bot = msg
        .referenced_message
        .as_ref()
        .is_some_and(|original| original.author.id == bot_id);
    mentioned || replies_to_bot
}

fn skip_reason(msg: &Message, bot_id: UserId) -> Option<Skip> {
    if msg.author.id == bot_id {
        Some(Skip::OwnMessage)
    } else if msg.webhook_id.is_some() {
        Some(Skip::Webhook)
    } else if msg.author.bot || msg.author.system {
        Some(Skip::Bot)
    } else if !matches!(msg.kind, MessageType::Regular | MessageType::InlineReply) {
        Some(Skip::System)
    } else {
        None
    }
}

/// Removes every `<@id>` / `<@!id>` mention of the bot, with one adjoining
/// space where the mention stood between words, and trims the result.
fn strip_mention(content: &str, bot_id: UserId) -> String {
    let forms = [format!("<@{bot_id}>"), format!("<@!{bot_id}>")];
    let mut text = content.to_owned();
    for form in &forms {
        while let Some(start) = text.find(form.as_str()) {
            let mut end = start + form.len();
            let space_before = start == 0 || text[..start].ends_with(' ');
            if space_before && text[end..].starts_with(' ') {
                end += 1;
            }
            text.replace_range(start..end, "");
        }
    }
    text.trim().to_owned()
}

fn attachment(file: &serenity::model::channel::Attachment) -> Attachment {
    let top = file
        .content_type
        .as_deref()
        .and_then(|mime| mime.split('/').next());
    let kind = match top {
        Some("image") => AttachmentKind::Image,
        Some("video") => AttachmentKind::Video,
        // Discord's voice messages are audio attachments with a waveform.
        Some("audio") if file.waveform.is_some() => AttachmentKind::Voice,
        Some("audio") => AttachmentKind::Audio,
        _ => AttachmentKind::Document,
    };
    Attachment {
        url: Some(file.url.clone()),
        media_type: file.content_type.clone(),
        size: Some(u64::from(file.size)),
        ..Attachment::new(kind, Some(file.filename.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOT: UserId = UserId::new(42);

    #[test]
    fn a_leading_mention_is_stripped_with_its_space() {
        assert_eq!(strip_mention("<@42> /new", BOT), "/new");
        assert_eq!(strip_mention("<@!42>   hi", BOT), "hi");
    }

    #[test]
    fn a_mention_between_words_leaves_one_space() {
        assert_eq!(
            strip_mention("hey <@42> how are you", BOT),
            "hey how are you"
        );
        assert_eq!(strip_mention("thanks <@42>", BOT), "thanks");
    }

    #[test]
    fn other_users_mentions_stay() {
        assert_eq!(strip_mention("<@42> ask <@7>", BOT), "ask <@7>");
        assert_eq!(strip_mention("<@420> hi", BOT), "<@420> hi");
    }
}
