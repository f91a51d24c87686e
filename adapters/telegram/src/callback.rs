//! [`Callbacks`]: what happens to a `callback_query` (a tap on one of the
//! core's inline buttons), from polling and the webhook alike.
//!
//! The tap becomes an [`InboundAction`] ([`crate::press`]) for
//! [`InboundSink::act`], and whatever the core answers, the query is
//! answered (`answerCallbackQuery`), else the person's client shows a
//! spinner on the button until it gives up: with the core's `notice` as the
//! toast (cut to Telegram's 200 characters), with nothing for a tap the
//! core does not know or that is not the core's, with a "try again" toast
//! when the core could not take it. Then an `update` replaces the message's
//! text and removes its keyboard ([`PlatformSender::edit`]). Failures to
//! answer or edit are logged, never retried: the tap is not delivered again
//! either way, so the update is handled.

use std::sync::Arc;

use switchboard_contract::{
    AccountId, ActionReply, ChatRef, InboundAction, InboundSink, PlatformSender,
};
use teloxide_core::Bot;
use teloxide_core::payloads::AnswerCallbackQuerySetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::{CallbackQuery, CallbackQueryId};

use crate::error::Scrubber;
use crate::press;
use crate::sender::TelegramSender;

/// What the person sees when the core could not take a tap.
const TRY_AGAIN: &str = "That did not go through. Please try again in a moment.";
/// The longest `answerCallbackQuery` text, in characters.
const NOTICE_LIMIT: usize = 200;

/// Answers taps on inline buttons.
pub(crate) struct Callbacks {
    pub bot: Bot,
    pub scrubber: Scrubber,
    pub sender: Arc<TelegramSender>,
}

impl Callbacks {
    /// Hands the tap `query` to `sink` (when it is one of the core's) and
    /// shows the answer.
    pub(crate) async fn handle(
        &self,
        sink: &dyn InboundSink,
        account: &AccountId,
        query: &CallbackQuery,
    ) {
        let action = match press::action(query, account) {
            Ok(action) => action,
            Err(not_ours) => {
                tracing::debug!(
                    ?not_ours,
                    "a Telegram button that is not the core's was tapped"
                );
                self.answer(&query.id, None).await;
                return;
            }
        };
        let reply = match sink.act(action.clone()).await {
            Ok(reply) => reply,
            Err(err) => {
                tracing::warn!(error = %err, "the core could not take a Telegram button tap");
                ActionReply::notice(TRY_AGAIN)
            }
        };
        self.answer(&query.id, reply.notice.as_deref()).await;
        if let (Some(text), Some(message)) = (&reply.update, &action.message_id) {
            let chat = chat_of(&action);
            if let Err(err) = self.sender.edit(&chat, message, text).await {
                tracing::warn!(error = %err, "could not update the message of a Telegram button tap");
            }
        }
    }

    /// `answerCallbackQuery`, with `notice` as the toast if any.
    async fn answer(&self, id: &CallbackQueryId, notice: Option<&str>) {
        let mut request = self.bot.answer_callback_query(id.clone());
        if let Some(notice) = notice.filter(|notice| !notice.trim().is_empty()) {
            request = request.text(shorten(notice, NOTICE_LIMIT));
        }
        if let Err(error) = request.await {
            let detail = self.scrubber.scrub(&error.to_string());
            tracing::warn!(%detail, "could not answer a Telegram button tap");
        }
    }
}

/// The chat the tapped message is in.
fn chat_of(action: &InboundAction) -> ChatRef {
    ChatRef {
        platform: action.platform.clone(),
        account: action.account.clone(),
        chat: action.chat.clone(),
        thread: action.thread.clone(),
    }
}

/// `text` cut to `limit` characters, the cut marked with `…`.
fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(limit - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_notice_is_cut_to_the_limit_and_says_so() {
        assert_eq!(shorten("short", 200), "short");
        let long = "é".repeat(250);
        let short = shorten(&long, NOTICE_LIMIT);
        assert_eq!(short.chars().count(), NOTICE_LIMIT);
        assert!(short.ends_with('…'));
    }
}
