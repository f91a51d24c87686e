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
//! Retrying a reply must neither lose nor duplicate chunks. When a chunk
//! fails after earlier chunks went out, the ids of those sent are remembered
//! under the reply's idempotency key; the retry sends only what is left. The
//! memory is bounded ([`PARTIAL_CAPACITY`] replies) and lives in this process
//! only: a crash between chunks can still repeat the earlier ones.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::{ChatRef, DeliveryReceipt, OutboundMessage, PlatformSender, SendError};
use teloxide_core::payloads::{SendChatActionSetters, SendMessageSetters};
use teloxide_core::prelude::Requester;
use teloxide_core::types::{ChatAction, ChatId, MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide_core::{ApiError, Bot, RequestError};

use crate::error::Scrubber;
use crate::format::{Chunk, TELEGRAM_TEXT_LIMIT, render_chunks};

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
        for (index, chunk) in chunks.iter().enumerate().skip(sent.len()) {
            let reply_to = if index == 0 { target.reply_to } else { None };
            match self.send_chunk(chat, target.thread, reply_to, chunk).await {
                Ok(id) => sent.push(id),
                Err(RequestError::MigrateToChatId(new_chat)) => {
                    // The group became a supergroup: Telegram names the new
                    // chat; send there once.
                    tracing::info!("group migrated to a supergroup; resending there");
                    chat = new_chat;
                    match self.send_chunk(chat, target.thread, reply_to, chunk).await {
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
}

impl TelegramSender {
    pub(crate) fn new(bot: Bot, scrubber: Scrubber) -> Self {
        Self {
            bot,
            scrubber,
            partial: Mutex::new(Partial::default()),
        }
    }

    /// Sends one chunk as HTML, and as plain text if the HTML is refused.
    async fn send_chunk(
        &self,
        chat: ChatId,
        thread: Option<ThreadId>,
        reply_to: Option<MessageId>,
        chunk: &Chunk,
    ) -> Result<String, RequestError> {
        let html = self
            .request(chat, thread, reply_to, &chunk.html)
            .parse_mode(ParseMode::Html)
            .await;
        let sent = match html {
            Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
                tracing::warn!(%reason, "Telegram refused the HTML; resending as plain text");
                self.request(chat, thread, reply_to, &chunk.plain).await?
            }
            other => other?,
        };
        Ok(sent.id.0.to_string())
    }

    fn request(
        &self,
        chat: ChatId,
        thread: Option<ThreadId>,
        reply_to: Option<MessageId>,
        text: &str,
    ) -> teloxide_core::requests::JsonRequest<teloxide_core::payloads::SendMessage> {
        let mut request = self.bot.send_message(chat, text);
        if let Some(thread) = thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply_to) = reply_to {
            // Deleting the triggering message must not make the reply fail.
            request = request
                .reply_parameters(ReplyParameters::new(reply_to).allow_sending_without_reply());
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

/// Where a reply goes, in Telegram's types.
struct Target {
    chat: ChatId,
    thread: Option<ThreadId>,
    reply_to: Option<MessageId>,
}

impl Target {
    fn of(message: &OutboundMessage) -> Result<Self, SendError> {
        let chat = message.chat.as_str().parse::<i64>().map_err(|_| {
            SendError::Permanent(format!("not a Telegram chat id: {}", message.chat))
        })?;
        let thread = match &message.thread {
            Some(thread) => Some(ThreadId(MessageId(thread.as_str().parse().map_err(
                |_| SendError::Permanent(format!("not a Telegram topic id: {thread}")),
            )?))),
            None => None,
        };
        // A reply_to that is not a Telegram message id (it came from another
        // platform) is dropped rather than failing the reply.
        let reply_to = message
            .reply_to
            .as_deref()
            .and_then(|id| id.parse().ok())
            .map(MessageId);
        Ok(Self {
            chat: ChatId(chat),
            thread,
            reply_to,
        })
    }
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
