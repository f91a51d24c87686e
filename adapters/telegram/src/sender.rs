//! Delivering replies: [`TelegramSender`], the adapter's
//! [`PlatformSender`].
//!
//! A reply is split and rendered by [`crate::format`], sent chunk by chunk
//! with `parse_mode: HTML` (resent as plain text when Telegram cannot parse
//! the markup), the first chunk replying to the triggering message, every
//! chunk in the same forum topic. Errors map onto [`SendError`]: a 429 becomes
//! [`SendError::RetryAfter`] with Telegram's `retry_after`, so the core's
//! retry loop waits and sends again.
//!
//! While a turn runs, [`PlatformSender::draft`] shows the reply growing: in
//! a private chat as a draft (`sendMessageDraft`, Bot API 9.3: an animated
//! preview the final message replaces), in a group as one message sent
//! with the first words and edited in place (`editMessageText`) at most once
//! per `group_edit_interval_ms`. The reply then edits that message into its
//! first chunk ([`OutboundMessage::replaces`]) and sends the rest as new
//! messages, so the chat ends up with the reply once. A draft longer than
//! one message shows its newest chunk.
//!
//! A reply with buttons carries them as an inline keyboard
//! ([`crate::keyboard`]) under its last chunk only. [`PlatformSender::edit`]
//! replaces a message's text (`editMessageText`, HTML with the plain-text
//! fallback; a text longer than one message keeps its first part) and
//! removes its keyboard (an empty `inline_keyboard`): a question once it is
//! answered.
//!
//! Retrying a reply must neither lose nor duplicate chunks. When a chunk
//! fails after earlier chunks went out, the ids of those sent are remembered
//! under the reply's idempotency key; the retry sends only what is left. The
//! memory is bounded ([`PARTIAL_CAPACITY`] replies) and lives in this process
//! only: a crash between chunks can still repeat the earlier ones.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use switchboard_contract::{
    ChatRef, DeliveryReceipt, Draft, OutboundMessage, PlatformSender, SendError,
};
use teloxide_core::payloads::{EditMessageTextSetters, SendChatActionSetters, SendMessageSetters};
use teloxide_core::prelude::Requester;
use teloxide_core::requests::{JsonRequest, Payload};
use teloxide_core::types::{
    ChatAction, ChatId, InlineKeyboardMarkup, MessageId, ParseMode, ReplyParameters, ThreadId, True,
};
use teloxide_core::{ApiError, Bot, RequestError};

use crate::error::Scrubber;
use crate::format::{Chunk, TELEGRAM_TEXT_LIMIT, render_chunks};
use crate::keyboard;
use crate::settings::DraftPace;

/// How often the core should repeat the typing indicator: Telegram shows it
/// for up to 5 s.
pub const TYPING_INTERVAL: Duration = Duration::from_secs(4);

/// How many partly delivered replies are remembered at most; the oldest is
/// forgotten first. Replies are retried within seconds, so a few hundred
/// covers every reply in flight.
pub const PARTIAL_CAPACITY: usize = 256;

/// Sends replies and typing indicators through the Bot API.
pub struct TelegramSender {
    bot: Bot,
    scrubber: Scrubber,
    /// Chunk ids already sent per idempotency key. A `std` mutex: each
    /// critical section is one map operation and never spans an `.await`.
    partial: Mutex<Partial>,
    /// How often drafts change; `None`: replies are not streamed.
    drafts: Option<DraftPace>,
}

impl std::fmt::Debug for TelegramSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSender").finish_non_exhaustive()
    }
}

#[async_trait]
impl PlatformSender for TelegramSender {
    #[tracing::instrument(name = "telegram.send", skip_all, fields(chat = %message.chat))]
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let target = Target::of(message)?;
        let chunks = render_chunks(&message.text, TELEGRAM_TEXT_LIMIT);
        if chunks.is_empty() {
            tracing::debug!("empty reply; nothing to send");
            return Ok(DeliveryReceipt {
                message_ids: Vec::new(),
            });
        }
        let mut sent = self.take_partial(&message.idempotency_key);
        let mut chat = target.chat;
        let keyboard = keyboard::keyboard(&message.buttons);
        let last = chunks.len() - 1;
        let draft = message
            .replaces
            .as_deref()
            .and_then(|id| id.parse().ok())
            .map(MessageId);
        for (index, chunk) in chunks.iter().enumerate().skip(sent.len()) {
            // The buttons go under the last part only.
            let markup = keyboard.as_ref().filter(|_| index == last);
            if index == 0
                && let Some(draft) = draft
            {
                match self.edit_chunk(chat, draft, chunk, markup).await {
                    Ok(()) => {
                        sent.push(draft.0.to_string());
                        continue;
                    }
                    // The draft's message was deleted (or is too old to
                    // edit): the chunk goes out as a new message.
                    Err(error) if draft_gone(&error) => {}
                    Err(error) => return Err(self.fail(&message.idempotency_key, sent, &error)),
                }
            }
            let reply_to = if index == 0 { target.reply_to } else { None };
            let place = Place {
                thread: target.thread,
                reply_to,
                markup,
            };
            match self.send_chunk(chat, &place, chunk).await {
                Ok(id) => sent.push(id),
                Err(RequestError::MigrateToChatId(new_chat)) => {
                    // The group became a supergroup: Telegram names the new
                    // chat; send there once.
                    tracing::info!("group migrated to a supergroup; resending there");
                    chat = new_chat;
                    match self.send_chunk(chat, &place, chunk).await {
                        Ok(id) => sent.push(id),
                        Err(error) => {
                            return Err(self.fail(&message.idempotency_key, sent, &error));
                        }
                    }
                }
                Err(error) => return Err(self.fail(&message.idempotency_key, sent, &error)),
            }
        }
        tracing::debug!(chunks = sent.len(), "reply delivered");
        Ok(DeliveryReceipt { message_ids: sent })
    }

    async fn typing(&self, chat: &ChatRef) {
        let Ok(chat_id) = chat.chat.as_str().parse::<i64>() else {
            tracing::debug!(chat = %chat.chat, "typing: not a Telegram chat id");
            return;
        };
        let mut request = self
            .bot
            .send_chat_action(ChatId(chat_id), ChatAction::Typing);
        if let Some(thread) = chat.thread.as_ref().and_then(|t| t.as_str().parse().ok()) {
            request = request.message_thread_id(ThreadId(MessageId(thread)));
        }
        if let Err(error) = request.await {
            tracing::debug!(error = %self.scrubber.scrub(&error.to_string()), "typing indicator failed");
        }
    }

    fn typing_interval(&self) -> Option<Duration> {
        Some(TYPING_INTERVAL)
    }

    fn draft_interval(&self, chat: &ChatRef) -> Option<Duration> {
        let pace = self.drafts?;
        let chat = chat.chat.as_str().parse::<i64>().ok()?;
        Some(if is_private(ChatId(chat)) {
            pace.private
        } else {
            pace.group
        })
    }

    async fn draft(&self, draft: &Draft) -> Result<Option<String>, SendError> {
        let target = Target::of_chat(&draft.chat, draft.reply_to.as_deref())?;
        let Some(chunk) = render_chunks(&draft.text, TELEGRAM_TEXT_LIMIT).pop() else {
            return Ok(draft.message_id.clone());
        };
        let shown = if is_private(target.chat) {
            self.send_draft(&target, draft.draft_id, &chunk)
                .await
                .map(|()| None)
        } else {
            self.group_draft(&target, draft.message_id.as_deref(), &chunk)
                .await
                .map(Some)
        };
        shown.map_err(|error| self.draft_error(&error))
    }

    async fn edit(&self, chat: &ChatRef, message_id: &str, text: &str) -> Result<(), SendError> {
        let target = Target::of_chat(chat, None)?;
        let message = message_id.parse().map(MessageId).map_err(|_| {
            SendError::Permanent(format!("not a Telegram message id: {message_id}"))
        })?;
        // One message shows the new text: a longer one keeps its first part.
        let Some(chunk) = render_chunks(text, TELEGRAM_TEXT_LIMIT).into_iter().next() else {
            return Err(SendError::Permanent(
                "Telegram cannot show an empty message".to_owned(),
            ));
        };
        self.edit_chunk(target.chat, message, &chunk, Some(&keyboard::none()))
            .await
            .map_err(|error| self.classify(&error))
    }
}

impl TelegramSender {
    pub(crate) fn new(bot: Bot, scrubber: Scrubber) -> Self {
        Self {
            bot,
            scrubber,
            partial: Mutex::new(Partial::default()),
            drafts: None,
        }
    }

    /// Shows replies growing at this pace (`None`: not at all).
    #[must_use]
    pub(crate) fn with_drafts(mut self, drafts: Option<DraftPace>) -> Self {
        self.drafts = drafts;
        self
    }

    /// Shows a private chat's draft (`sendMessageDraft`), as HTML, and as
    /// plain text if the HTML is refused.
    async fn send_draft(
        &self,
        target: &Target,
        draft_id: i64,
        chunk: &Chunk,
    ) -> Result<(), RequestError> {
        let request = |text: &str, parse_mode| {
            JsonRequest::new(
                self.bot.clone(),
                SendMessageDraft {
                    chat_id: target.chat.0,
                    draft_id,
                    text: text.to_owned(),
                    message_thread_id: target.thread.map(|thread| thread.0.0),
                    parse_mode,
                },
            )
        };
        match request(&chunk.html, Some(ParseMode::Html)).await {
            Err(RequestError::Api(ApiError::CantParseEntities(_))) => {
                request(&chunk.plain, None).await?;
            }
            other => {
                other?;
            }
        }
        Ok(())
    }

    /// Shows a group's draft: edits the message showing it, or sends one
    /// (again, if it was deleted). Returns the message's id.
    async fn group_draft(
        &self,
        target: &Target,
        message_id: Option<&str>,
        chunk: &Chunk,
    ) -> Result<String, RequestError> {
        if let Some(id) = message_id.and_then(|id| id.parse().ok()).map(MessageId) {
            match self.edit_chunk(target.chat, id, chunk, None).await {
                Ok(()) => return Ok(id.0.to_string()),
                Err(error) if draft_gone(&error) => {}
                Err(error) => return Err(error),
            }
        }
        let place = Place {
            thread: target.thread,
            reply_to: target.reply_to,
            markup: None,
        };
        self.send_chunk(target.chat, &place, chunk).await
    }

    /// Replaces a sent message's text with `chunk`, and its keyboard with
    /// `markup` (none given: Telegram leaves no keyboard), as HTML, and as
    /// plain text if the HTML is refused. A message already showing it is
    /// fine.
    async fn edit_chunk(
        &self,
        chat: ChatId,
        message: MessageId,
        chunk: &Chunk,
        markup: Option<&InlineKeyboardMarkup>,
    ) -> Result<(), RequestError> {
        let request = |text: &str| {
            let request = self.bot.edit_message_text(chat, message, text);
            match markup {
                Some(markup) => request.reply_markup(markup.clone()),
                None => request,
            }
        };
        let html = request(&chunk.html).parse_mode(ParseMode::Html).await;
        let edited = match html {
            Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
                tracing::warn!(%reason, "Telegram refused the HTML; editing as plain text");
                request(&chunk.plain).await
            }
            other => other,
        };
        match edited {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// A failed draft as the core's retry classes (only a rate limit's wait
    /// matters: drafts are not retried).
    fn draft_error(&self, error: &RequestError) -> SendError {
        let detail = self.scrubber.scrub(&error.to_string());
        match error {
            RequestError::RetryAfter(wait) => {
                SendError::RetryAfter(Duration::from_secs(u64::from(wait.seconds())))
            }
            _ => SendError::Transient(detail),
        }
    }

    /// Sends one chunk as HTML, and as plain text if the HTML is refused.
    async fn send_chunk(
        &self,
        chat: ChatId,
        place: &Place<'_>,
        chunk: &Chunk,
    ) -> Result<String, RequestError> {
        let html = self
            .request(chat, place, &chunk.html)
            .parse_mode(ParseMode::Html)
            .await;
        let sent = match html {
            Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
                tracing::warn!(%reason, "Telegram refused the HTML; resending as plain text");
                self.request(chat, place, &chunk.plain).await?
            }
            other => other?,
        };
        Ok(sent.id.0.to_string())
    }

    fn request(
        &self,
        chat: ChatId,
        place: &Place<'_>,
        text: &str,
    ) -> teloxide_core::requests::JsonRequest<teloxide_core::payloads::SendMessage> {
        let mut request = self.bot.send_message(chat, text);
        if let Some(thread) = place.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply_to) = place.reply_to {
            // Deleting the triggering message must not make the reply fail.
            request = request
                .reply_parameters(ReplyParameters::new(reply_to).allow_sending_without_reply());
        }
        if let Some(markup) = place.markup {
            request = request.reply_markup(markup.clone());
        }
        request
    }

    /// Remembers what was sent and turns the error into a [`SendError`].
    fn fail(&self, key: &str, sent: Vec<String>, error: &RequestError) -> SendError {
        if !sent.is_empty() {
            self.partial
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.to_owned(), sent);
        }
        self.classify(error)
    }

    /// A failed call as the core's retry classes, scrubbed of the token.
    fn classify(&self, error: &RequestError) -> SendError {
        let detail = self.scrubber.scrub(&error.to_string());
        match error {
            RequestError::RetryAfter(wait) => {
                SendError::RetryAfter(Duration::from_secs(u64::from(wait.seconds())))
            }
            RequestError::Network(_) | RequestError::Io(_) | RequestError::InvalidJson { .. } => {
                SendError::Transient(detail)
            }
            // Errors teloxide does not know include Telegram's 5xx bodies
            // ("Bad Gateway"); a few retries are cheap.
            RequestError::Api(ApiError::Unknown(_)) => SendError::Transient(detail),
            RequestError::Api(_) | RequestError::MigrateToChatId(_) => SendError::Permanent(detail),
        }
    }

    fn take_partial(&self, key: &str) -> Vec<String> {
        self.partial
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(key)
    }
}

/// Where one chunk goes in its chat, and the keyboard under it.
struct Place<'a> {
    thread: Option<ThreadId>,
    reply_to: Option<MessageId>,
    markup: Option<&'a InlineKeyboardMarkup>,
}

/// Where a reply goes, in Telegram's types.
struct Target {
    chat: ChatId,
    thread: Option<ThreadId>,
    reply_to: Option<MessageId>,
}

impl Target {
    fn of(message: &OutboundMessage) -> Result<Self, SendError> {
        Self::of_chat(&message.chat_ref(), message.reply_to.as_deref())
    }

    fn of_chat(chat_ref: &ChatRef, reply_to: Option<&str>) -> Result<Self, SendError> {
        let chat = chat_ref.chat.as_str().parse::<i64>().map_err(|_| {
            SendError::Permanent(format!("not a Telegram chat id: {}", chat_ref.chat))
        })?;
        let thread = match &chat_ref.thread {
            Some(thread) => Some(ThreadId(MessageId(thread.as_str().parse().map_err(
                |_| SendError::Permanent(format!("not a Telegram topic id: {thread}")),
            )?))),
            None => None,
        };
        // A reply_to that is not a Telegram message id (it came from another
        // platform) is dropped rather than failing the reply.
        let reply_to = reply_to.and_then(|id| id.parse().ok()).map(MessageId);
        Ok(Self {
            chat: ChatId(chat),
            thread,
            reply_to,
        })
    }
}

/// Whether `chat` is a private chat with one person (whose ids are
/// positive; groups' and channels' are negative).
fn is_private(chat: ChatId) -> bool {
    chat.0 > 0
}

/// Whether an edit failed because the message cannot be edited any more
/// (deleted, or otherwise out of reach): a new message stands in for it.
fn draft_gone(error: &RequestError) -> bool {
    matches!(
        error,
        RequestError::Api(
            ApiError::MessageToEditNotFound
                | ApiError::MessageCantBeEdited
                | ApiError::MessageIdInvalid
        )
    )
}

/// `sendMessageDraft` (Bot API 9.3), which teloxide does not have yet.
#[derive(Debug, Clone, Serialize)]
struct SendMessageDraft {
    chat_id: i64,
    draft_id: i64,
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_thread_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parse_mode: Option<ParseMode>,
}

impl Payload for SendMessageDraft {
    type Output = True;
    const NAME: &'static str = "SendMessageDraft";
}

/// Chunk ids of partly delivered replies, oldest first.
#[derive(Debug, Default)]
struct Partial {
    sent: HashMap<String, Vec<String>>,
    order: VecDeque<String>,
}

impl Partial {
    fn insert(&mut self, key: String, ids: Vec<String>) {
        if self.sent.insert(key.clone(), ids).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > PARTIAL_CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.sent.remove(&oldest);
            }
        }
    }

    fn take(&mut self, key: &str) -> Vec<String> {
        match self.sent.remove(key) {
            Some(ids) => {
                self.order.retain(|k| k != key);
                ids
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_deliveries_are_bounded() {
        let mut partial = Partial::default();
        for n in 0..PARTIAL_CAPACITY + 10 {
            partial.insert(n.to_string(), vec!["1".to_owned()]);
        }
        assert_eq!(partial.sent.len(), PARTIAL_CAPACITY);
        assert!(partial.take("0").is_empty());
        assert_eq!(partial.take(&(PARTIAL_CAPACITY + 9).to_string()), vec!["1"]);
    }
}
