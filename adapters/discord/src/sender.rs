//! Delivering replies to Discord: [`DiscordSender`], the adapter's
//! [`PlatformSender`].
//!
//! A reply is split at 2,000 characters without breaking code fences and sent
//! chunk by chunk into its chat (a channel, DM or thread id), the first chunk
//! replying to the message that started the turn (without pinging its author
//! unless `discord.reply_ping` is set, and never in a DM). Every chunk carries a nonce
//! derived from the reply's idempotency key and the chunk's index, with
//! `enforce_nonce`, so when a send is retried (after a 429, a timeout, or a
//! crash between sending and marking the outbox row sent) Discord returns the
//! message it already created instead of posting it again. Discord only
//! remembers nonces for a few minutes; a retry after that may duplicate.
//!
//! While a turn runs, [`PlatformSender::draft`] shows the reply growing in
//! one message: sent with the first words (replying to the asker like the
//! reply will), then edited in place (`PATCH`) at most once per
//! `edit_interval_ms`. The reply edits that message into its first chunk
//! ([`OutboundMessage::replaces`]) and sends the rest as new messages; a
//! draft longer than 2,000 characters shows its newest chunk.
//!
//! A reply with buttons carries them as message components
//! ([`crate::components`]: action rows of buttons whose `custom_id` is the
//! action id) on its last chunk only. [`PlatformSender::edit`] replaces a
//! message's content (its first 2,000 characters) and removes its
//! components: a question once it is answered.
//!
//! A 429 is read in full by [`Rest`]: a wait of at most
//! [`INLINE_RETRY_LIMIT`] is slept here and the chunk sent once more; a
//! longer one (or a second 429) goes back to the core as
//! [`SendError::RetryAfter`] with Discord's `retry_after`, and until it has
//! passed no request is made to that channel (a retry that comes early gets
//! `RetryAfter` with the time left). The typing indicator is skipped while
//! its route is rate limited.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serenity::builder::{CreateActionRow, CreateAllowedMentions, CreateMessage, EditMessage};
use serenity::http::{LightMethod, Request, Route};
use serenity::model::channel::{MessageReference, MessageReferenceKind, Nonce};
use serenity::model::id::{ChannelId, MessageId};
use switchboard_contract::{
    ChatRef, DeliveryReceipt, Draft, LengthUnit, OutboundMessage, PlatformSender, SendError,
    split_message,
};

use crate::active::ActiveChannels;
use crate::components;
use crate::ids;
use crate::rest::{Bucket, Rest, RestError};

/// Discord's limit on one message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

/// Discord's limit on a nonce's length.
pub const NONCE_LIMIT: usize = 25;

/// How often the typing indicator is repeated; Discord shows it for 10 s.
pub const TYPING_INTERVAL: Duration = Duration::from_secs(8);

pub use crate::rest::FALLBACK_RETRY_AFTER;

/// The longest rate-limit wait slept inside [`DiscordSender::send`]; a
/// longer one is handed back to the core as [`SendError::RetryAfter`].
pub const INLINE_RETRY_LIMIT: Duration = Duration::from_secs(2);

/// Sends replies and typing indicators through Discord's REST API.
#[derive(Debug, Clone)]
pub struct DiscordSender {
    rest: Rest,
    /// Whether replies in server channels ping the asker.
    reply_ping: bool,
    /// Tells DMs (where replies never ping) from server channels.
    channels: Option<Arc<ActiveChannels>>,
    /// How often a draft's message is edited; `None`: no drafts.
    drafts: Option<Duration>,
}

impl DiscordSender {
    /// A sender over `rest` whose replies ping nobody (built by
    /// [`crate::DiscordAdapter`], which also sets the ping setting).
    #[must_use]
    pub fn new(rest: Rest) -> Self {
        Self {
            rest,
            reply_ping: false,
            channels: None,
            drafts: None,
        }
    }

    /// Shows replies growing, editing their message at most once per
    /// `interval` (`None`: not at all).
    #[must_use]
    pub(crate) fn with_drafts(mut self, interval: Option<Duration>) -> Self {
        self.drafts = interval;
        self
    }

    /// Replaces the content of the bot's message `id` in `channel`, and its
    /// components with `components` when given (an empty list removes them).
    async fn edit_content(
        &self,
        channel: ChannelId,
        id: MessageId,
        content: String,
        components: Option<Vec<CreateActionRow>>,
    ) -> Result<(), RestError> {
        let mut edit = EditMessage::new().content(content);
        if let Some(components) = components {
            edit = edit.components(components);
        }
        let body = serde_json::to_vec(&edit)
            .map_err(|err| RestError::Invalid(format!("invalid edit: {err}")))?;
        let request = Request::new(
            Route::ChannelMessage {
                channel_id: channel,
                message_id: id,
            },
            LightMethod::Patch,
        )
        .body(Some(body));
        self.rest
            .call_empty(Bucket::EditMessage, channel, request)
            .await
    }

    /// Replies in server channels ping the asker when `reply_ping` is set;
    /// `channels` tells which channels are DMs, whose replies never do.
    #[must_use]
    pub(crate) fn with_reply_ping(
        mut self,
        reply_ping: bool,
        channels: Arc<ActiveChannels>,
    ) -> Self {
        self.reply_ping = reply_ping;
        self.channels = Some(channels);
        self
    }

    /// Whether a reply in `channel` notifies the person it answers.
    fn pings(&self, channel: ChannelId) -> bool {
        self.reply_ping
            && !self
                .channels
                .as_ref()
                .is_some_and(|channels| channels.is_dm(channel))
    }

    async fn send_chunk(
        &self,
        channel: ChannelId,
        reply_to: Option<MessageId>,
        nonce: String,
        content: String,
        components: Option<Vec<CreateActionRow>>,
    ) -> Result<MessageId, SendError> {
        let mut builder = CreateMessage::new()
            .content(content)
            .nonce(Nonce::String(nonce))
            .enforce_nonce(true)
            // Model output must not ping @everyone, roles or users; whether
            // the reply notifies the person who asked is a setting.
            .allowed_mentions(CreateAllowedMentions::new().replied_user(self.pings(channel)));
        if let Some(components) = components {
            builder = builder.components(components);
        }
        if let Some(original) = reply_to {
            builder = builder.reference_message(
                MessageReference::new(MessageReferenceKind::Default, channel)
                    .message_id(original)
                    // A deleted original turns the reply into a plain message
                    // instead of failing the delivery.
                    .fail_if_not_exists(false),
            );
        }
        let body = serde_json::to_vec(&builder)
            .map_err(|err| SendError::Permanent(format!("invalid message: {err}")))?;
        let mut waited = false;
        loop {
            let request = Request::new(
                Route::ChannelMessages {
                    channel_id: channel,
                },
                LightMethod::Post,
            )
            .body(Some(body.clone()));
            match self
                .rest
                .call::<Created>(Bucket::CreateMessage, channel, request)
                .await
            {
                Ok(created) => return Ok(created.id),
                Err(RestError::RateLimited(wait)) if !waited && wait <= INLINE_RETRY_LIMIT => {
                    tracing::debug!(?wait, "rate limited; waiting before sending again");
                    waited = true;
                    tokio::time::sleep(wait).await;
                }
                Err(err) => return Err(send_error(err)),
            }
        }
    }
}

#[async_trait]
impl PlatformSender for DiscordSender {
    #[tracing::instrument(skip_all, fields(chat = %message.chat, key = %message.idempotency_key))]
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let channel = ids::channel_id(message.chat.as_str()).ok_or_else(|| {
            SendError::Permanent(format!(
                "{:?} is not a Discord channel id",
                message.chat.as_str()
            ))
        })?;
        let reply_to = message.reply_to.as_deref().and_then(ids::message_id);
        let chunks = split_message(&message.text, MESSAGE_LIMIT, LengthUnit::Chars);
        if chunks.is_empty() {
            tracing::warn!("empty reply not sent");
            return Ok(DeliveryReceipt {
                message_ids: Vec::new(),
            });
        }
        let mut message_ids = Vec::with_capacity(chunks.len());
        let mut draft = message.replaces.as_deref().and_then(ids::message_id);
        let last = chunks.len() - 1;
        for (index, chunk) in chunks.into_iter().enumerate() {
            // The buttons go on the last part only.
            let components = (index == last && !message.buttons.is_empty())
                .then(|| components::action_rows(&message.buttons));
            if let Some(id) = draft.take() {
                match self
                    .edit_content(channel, id, chunk.clone(), components.clone())
                    .await
                {
                    Ok(()) => {
                        message_ids.push(id.to_string());
                        continue;
                    }
                    // The draft's message was deleted: a new one stands in.
                    Err(RestError::Status { status: 404, .. }) => {}
                    Err(err) => return Err(send_error(err)),
                }
            }
            let nonce = nonce(&message.idempotency_key, index);
            let reply = if index == 0 { reply_to } else { None };
            let id = self
                .send_chunk(channel, reply, nonce, chunk, components)
                .await?;
            message_ids.push(id.to_string());
        }
        tracing::info!(chunks = message_ids.len(), "reply delivered");
        Ok(DeliveryReceipt { message_ids })
    }

    async fn typing(&self, chat: &ChatRef) {
        let Some(channel) = ids::channel_id(chat.chat.as_str()) else {
            tracing::debug!(chat = %chat.chat, "typing skipped: not a channel id");
            return;
        };
        let request = Request::new(
            Route::ChannelTyping {
                channel_id: channel,
            },
            LightMethod::Post,
        );
        if let Err(err) = self.rest.call_empty(Bucket::Typing, channel, request).await {
            tracing::debug!(chat = %chat.chat, error = %err, "typing indicator not shown");
        }
    }

    fn typing_interval(&self) -> Option<Duration> {
        Some(TYPING_INTERVAL)
    }

    fn draft_interval(&self, _chat: &ChatRef) -> Option<Duration> {
        self.drafts
    }

    async fn draft(&self, draft: &Draft) -> Result<Option<String>, SendError> {
        let channel = ids::channel_id(draft.chat.chat.as_str()).ok_or_else(|| {
            SendError::Permanent(format!(
                "{:?} is not a Discord channel id",
                draft.chat.chat.as_str()
            ))
        })?;
        let Some(content) = split_message(&draft.text, MESSAGE_LIMIT, LengthUnit::Chars).pop()
        else {
            return Ok(draft.message_id.clone());
        };
        if let Some(id) = draft.message_id.as_deref().and_then(ids::message_id) {
            match self.edit_content(channel, id, content.clone(), None).await {
                Ok(()) => return Ok(Some(id.to_string())),
                Err(RestError::Status { status: 404, .. }) => {}
                Err(err) => return Err(send_error(err)),
            }
        }
        let reply_to = draft.reply_to.as_deref().and_then(ids::message_id);
        // The turn's key: created again after a crash, before its id was
        // recorded, the draft is the message Discord already made.
        let nonce = nonce(&draft.key, 0);
        let id = self
            .send_chunk(channel, reply_to, nonce, content, None)
            .await?;
        Ok(Some(id.to_string()))
    }

    async fn edit(&self, chat: &ChatRef, message_id: &str, text: &str) -> Result<(), SendError> {
        let channel = ids::channel_id(chat.chat.as_str()).ok_or_else(|| {
            SendError::Permanent(format!(
                "{:?} is not a Discord channel id",
                chat.chat.as_str()
            ))
        })?;
        let id = ids::message_id(message_id).ok_or_else(|| {
            SendError::Permanent(format!("{message_id:?} is not a Discord message id"))
        })?;
        // One message shows the new text: a longer one keeps its first part.
        let Some(content) = split_message(text, MESSAGE_LIMIT, LengthUnit::Chars)
            .into_iter()
            .next()
        else {
            return Err(SendError::Permanent(
                "Discord cannot show an empty message".to_owned(),
            ));
        };
        self.edit_content(channel, id, content, Some(Vec::new()))
            .await
            .map_err(send_error)
    }
}

/// The nonce of chunk `index` of the reply with `key`: stable for a key and
/// index, at most [`NONCE_LIMIT`] characters.
///
/// A short key of safe characters is used as written (`sb-42.0`, readable in
/// logs); any other key is replaced by 48 bits of its FNV-1a hash (`h…`),
/// which leaves room for chunk indexes below 10^11.
#[must_use]
pub fn nonce(key: &str, index: usize) -> String {
    let readable = format!("{key}.{index}");
    let safe = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if safe && readable.len() <= NONCE_LIMIT {
        readable
    } else {
        format!("h{:012x}.{index}", fnv1a(key.as_bytes()) >> 16)
    }
}

/// 64-bit FNV-1a: stable across Rust versions and processes, unlike
/// `DefaultHasher`, which nonces surviving a restart need.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// The part of a created message the sender needs.
#[derive(serde::Deserialize)]
struct Created {
    id: MessageId,
}

/// Maps a REST failure to the contract's retry classes. Messages hold
/// status codes and Discord's error text, never the token or the content.
fn send_error(err: RestError) -> SendError {
    match err {
        RestError::RateLimited(wait) => SendError::RetryAfter(wait),
        // The message may have been created before reading the answer
        // failed; a retry carries the same nonce, so Discord will not post
        // it twice.
        RestError::Invalid(_) => SendError::Transient(err.to_string()),
        err if err.is_transient() => SendError::Transient(err.to_string()),
        err => SendError::Permanent(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_key_is_used_as_written() {
        assert_eq!(nonce("sb-42", 0), "sb-42.0");
        assert_eq!(nonce("sb-42", 3), "sb-42.3");
    }

    #[test]
    fn a_long_or_odd_key_is_hashed_within_the_limit() {
        let long = "x".repeat(100);
        let hashed = nonce(&long, 12);
        assert!(hashed.len() <= NONCE_LIMIT, "{hashed}");
        assert_eq!(hashed, nonce(&long, 12));
        assert_ne!(hashed, nonce(&long, 13));
        assert!(nonce("key with spaces", 0).starts_with('h'));
        assert!(nonce(&long, 99_999_999_999).len() <= NONCE_LIMIT);
    }

    #[test]
    fn fnv1a_matches_the_reference_vector() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
