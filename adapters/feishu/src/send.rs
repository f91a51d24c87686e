//! [`FeishuSender`]: the adapter's [`PlatformSender`], delivering the core's
//! replies as Feishu messages.
//!
//! A reply with Markdown syntax goes out as an interactive card in card JSON
//! 2.0 (the version whose `markdown` element renders headings, quotes,
//! tables and inline code; Feishu clients from 7.20 show it) holding one
//! `markdown` element; a reply without any goes out as a plain `text`
//! message. A reply is split across messages only when one cannot hold it:
//! each chunk (cut in UTF-8 bytes, code fences kept balanced, at paragraph
//! or line boundaries where they fill at least half) is as large as its
//! request body allows under Feishu's limits (30 KB for cards, 150 KB for
//! text). Each chunk carries a `uuid` derived from the reply's
//! idempotency key and the chunk's index, so when the core retries a reply
//! whose first chunks already went out, Feishu drops the repeats (for an hour).
//!
//! While a turn runs, [`PlatformSender::draft`] shows the reply growing in
//! one card: sent with the first words, then updated in place (`PATCH` of
//! the card message) at most once per `card_update_interval_ms`. The reply
//! replaces that card's content with its first chunk (as a card, whatever
//! its Markdown; [`OutboundMessage::replaces`]) and sends the rest as new
//! messages; a recalled draft card is replaced by a new message.
//!
//! A reply with buttons is a card whatever its Markdown, the buttons under
//! its last chunk's text: card JSON 2.0 `button` elements (`primary`,
//! `danger` or `default`) whose `behaviors` are a `callback` with the value
//! `{"action": "<action id>"}`, one a line. [`PlatformSender::edit`]
//! replaces a card's content (`PATCH`) with the new text and no buttons.
//!
//! With a reply target the chunks are replies to it (`reply_in_thread` when
//! the reply belongs to a Feishu thread, whose ids start with `omt_`); without
//! one they are new messages in the chat.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use switchboard_contract::markdown::{MarkupRenderer, PlainText};
use switchboard_contract::{
    Button, ButtonStyle, ChatRef, DeliveryReceipt, Draft, LengthUnit, OutboundMessage,
    PlatformSender, SendError, split_message_fitting,
};

use crate::api::{ApiError, ErrorCode, OpenApi, Payload, Target};

/// Largest request body for a card message, in bytes.
pub const CARD_BODY_LIMIT: usize = 30 * 1024;
/// Largest request body for a text message, in bytes.
pub const TEXT_BODY_LIMIT: usize = 150 * 1024;
/// Longest `uuid` Feishu accepts.
pub const UUID_MAX_LEN: usize = 50;

/// Sends replies through the Feishu open API. Cheap to share: the gateway
/// registers it with the core as an `Arc<dyn PlatformSender>`.
pub struct FeishuSender {
    api: Arc<OpenApi>,
    /// How often a draft's card is updated; `None`: no drafts.
    drafts: Option<Duration>,
}

impl FeishuSender {
    pub(crate) fn new(api: Arc<OpenApi>, drafts: Option<Duration>) -> Self {
        Self { api, drafts }
    }
}

#[async_trait]
impl PlatformSender for FeishuSender {
    #[tracing::instrument(
        name = "feishu.send",
        skip_all,
        fields(chat = %message.chat, key = %message.idempotency_key)
    )]
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let chat = message.chat_ref();
        let target = target(&chat, message.reply_to.as_deref());
        let mut draft = message.replaces.as_deref();
        // A reply replacing a draft's card is a card itself.
        // Buttons only come on a card.
        let markdown = draft.is_some() || has_markup(&message.text) || !message.buttons.is_empty();
        let payloads = self.payloads(&message.text, &target, markdown, &message.buttons);
        let mut message_ids = Vec::with_capacity(payloads.len());
        for (index, payload) in payloads.iter().enumerate() {
            if let Some(card) = draft.take() {
                match self.api.update_card(card, &payload.content).await {
                    Ok(()) => {
                        message_ids.push(card.to_owned());
                        continue;
                    }
                    // The draft's card was recalled: a new message stands in.
                    Err(err) if err.code() == Some(ErrorCode::MessageRecalled) => {}
                    Err(err) => return Err(send_error(&err)),
                }
            }
            let uuid = chunk_uuid(&message.idempotency_key, index);
            let id = match self.api.send(&target, payload, &uuid).await {
                // The message replied to is gone: say it in the chat instead.
                Err(err) if err.code() == Some(ErrorCode::MessageRecalled) => {
                    let chat = Target::Chat(message.chat.as_str());
                    self.api.send(&chat, payload, &uuid).await
                }
                other => other,
            }
            .map_err(|err| send_error(&err))?;
            message_ids.push(id);
        }
        tracing::info!(chunks = message_ids.len(), "reply delivered to Feishu");
        Ok(DeliveryReceipt { message_ids })
    }

    fn draft_interval(&self, _chat: &ChatRef) -> Option<Duration> {
        self.drafts
    }

    async fn draft(&self, draft: &Draft) -> Result<Option<String>, SendError> {
        let target = target(&draft.chat, draft.reply_to.as_deref());
        let Some(card) = self.payloads(&draft.text, &target, true, &[]).pop() else {
            return Ok(draft.message_id.clone());
        };
        if let Some(id) = draft.message_id.as_deref() {
            match self.api.update_card(id, &card.content).await {
                Ok(()) => return Ok(Some(id.to_owned())),
                Err(err) if err.code() == Some(ErrorCode::MessageRecalled) => {}
                Err(err) => return Err(draft_error(&err)),
            }
        }
        // The turn's key: created again after a crash, before its id was
        // recorded, the card is the one already posted (Feishu keeps a
        // `uuid` for an hour).
        let uuid = chunk_uuid(&draft.key, 0);
        let id = self
            .api
            .send(&target, &card, &uuid)
            .await
            .map_err(|err| draft_error(&err))?;
        Ok(Some(id))
    }

    async fn edit(&self, _chat: &ChatRef, message_id: &str, text: &str) -> Result<(), SendError> {
        self.api
            .update_card(message_id, &card(text, &[]))
            .await
            .map_err(|err| send_error(&err))
    }
}

/// Where a reply to `chat` goes: a reply to `reply_to` (in its thread when
/// the chat is a Feishu thread, whose ids start with `omt_`), or the chat.
fn target<'a>(chat: &'a ChatRef, reply_to: Option<&'a str>) -> Target<'a> {
    let in_thread = chat
        .thread
        .as_ref()
        .is_some_and(|thread| thread.as_str().starts_with("omt_"));
    match reply_to {
        Some(message_id) if !message_id.is_empty() => Target::Reply {
            message_id,
            in_thread,
        },
        _ => Target::Chat(chat.chat.as_str()),
    }
}

impl FeishuSender {
    /// The reply's chunks as message payloads (cards when `markdown`), each
    /// request body under its limit and as full as that limit allows: a
    /// reply is split across messages only when one message cannot hold it.
    /// The last card carries `buttons`; every chunk is measured with them.
    fn payloads(
        &self,
        text: &str,
        target: &Target<'_>,
        markdown: bool,
        buttons: &[Button],
    ) -> Vec<Payload> {
        let limit = if markdown {
            CARD_BODY_LIMIT
        } else {
            TEXT_BODY_LIMIT
        };
        let longest_uuid = "x".repeat(UUID_MAX_LEN);
        let body_size = |chunk: &str| {
            let (_, body) =
                self.api
                    .request_for(target, &payload(chunk, markdown, buttons), &longest_uuid);
            body.to_string().len()
        };
        // The content is a JSON string inside a JSON body, so escaping can
        // double a chunk's size; the chunks are measured as sent.
        let chunks = split_message_fitting(text, limit, LengthUnit::Bytes, &|chunk| {
            body_size(chunk) <= limit
        });
        let last = chunks.len().saturating_sub(1);
        chunks
            .iter()
            .enumerate()
            .map(|(index, chunk)| {
                let shown: &[Button] = if index == last { buttons } else { &[] };
                payload(chunk, markdown, shown)
            })
            .collect()
    }
}

/// Whether `text` uses Markdown syntax: rendering it as plain text changes it.
#[must_use]
pub fn has_markup(text: &str) -> bool {
    PlainText.render(text).trim() != text.trim()
}

/// The `uuid` of chunk `index` of a reply: `{key}-{index}` when that fits in
/// 50 ASCII characters, otherwise a SHA-256 prefix of the key instead of it.
#[must_use]
pub fn chunk_uuid(idempotency_key: &str, index: usize) -> String {
    let plain = format!("{idempotency_key}-{index}");
    if plain.len() <= UUID_MAX_LEN && plain.bytes().all(|b| b.is_ascii_graphic()) {
        return plain;
    }
    let digest = Sha256::digest(idempotency_key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let suffix = format!("-{index}");
    format!("{}{suffix}", &hex[..UUID_MAX_LEN - suffix.len()])
}

fn payload(chunk: &str, markdown: bool, buttons: &[Button]) -> Payload {
    if markdown {
        Payload {
            msg_type: "interactive",
            content: card(chunk, buttons),
        }
    } else {
        Payload {
            msg_type: "text",
            content: serde_json::json!({ "text": chunk }).to_string(),
        }
    }
}

/// A card (JSON 2.0, shared: `update_multi`) showing `text` as Markdown
/// and `buttons` under it, as the JSON string a message's content is.
pub(crate) fn card(text: &str, buttons: &[Button]) -> String {
    card_json(text, buttons).to_string()
}

/// [`card`] as a JSON value (what a card callback answers with).
pub(crate) fn card_json(text: &str, buttons: &[Button]) -> serde_json::Value {
    let mut elements = vec![serde_json::json!({ "tag": "markdown", "content": text })];
    elements.extend(buttons.iter().map(button));
    serde_json::json!({
        "schema": "2.0",
        "config": { "update_multi": true, "width_mode": "fill" },
        "body": { "elements": elements },
    })
}

/// A card JSON 2.0 button whose press calls back with the action id.
fn button(button: &Button) -> serde_json::Value {
    let kind = match button.style {
        ButtonStyle::Plain => "default",
        ButtonStyle::Primary => "primary",
        ButtonStyle::Danger => "danger",
    };
    let label = match button.label.trim() {
        "" => "·",
        label => label,
    };
    serde_json::json!({
        "tag": "button",
        "text": { "tag": "plain_text", "content": label },
        "type": kind,
        "behaviors": [{
            "type": "callback",
            "value": { (crate::press::ACTION_KEY): button.action.as_str() },
        }],
    })
}

/// A failed draft: only a rate limit's wait matters (drafts are not
/// retried), and it is not worth more than a debug line.
fn draft_error(err: &ApiError) -> SendError {
    match err {
        ApiError::RateLimited { retry_after, .. } => SendError::RetryAfter(*retry_after),
        other => SendError::Transient(other.to_string()),
    }
}

/// Maps an API failure to what the core's retry loop understands, logging
/// Feishu's code (never a token) once here.
fn send_error(err: &ApiError) -> SendError {
    match err {
        ApiError::RateLimited { retry_after, .. } => SendError::RetryAfter(*retry_after),
        ApiError::Network(_)
        | ApiError::Server { .. }
        | ApiError::TokenRejected { .. }
        | ApiError::InvalidJson { .. } => {
            tracing::warn!(error = %err, "Feishu send failed; retryable");
            SendError::Transient(err.to_string())
        }
        ApiError::Api { code, msg } => {
            tracing::error!(code, msg = %msg, "Feishu refused the message");
            SendError::Permanent(err.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_make_readable_uuids() {
        assert_eq!(chunk_uuid("sb-42", 0), "sb-42-0");
        assert_eq!(chunk_uuid("sb-42", 3), "sb-42-3");
    }

    #[test]
    fn database_scoped_keys_stay_readable() {
        // `sb-<database id>-<outbox id>`, as the core writes them.
        let key = "sb-9f3a61c0d2-9223372036854775807";
        assert_eq!(chunk_uuid(key, 7), format!("{key}-7"));
        assert!(chunk_uuid(key, 999).len() <= UUID_MAX_LEN);
    }

    #[test]
    fn long_keys_are_hashed_to_fifty_characters() {
        let key = "k".repeat(80);
        let a = chunk_uuid(&key, 0);
        let b = chunk_uuid(&key, 12);
        assert_eq!(a.len(), UUID_MAX_LEN);
        assert_eq!(b.len(), UUID_MAX_LEN);
        assert_ne!(a, b);
        assert_eq!(a, chunk_uuid(&key, 0));
    }

    #[test]
    fn markdown_is_told_apart_from_plain_text() {
        assert!(!has_markup("Seventeen times 23 is 391."));
        assert!(has_markup("**391**"));
        assert!(has_markup("```\nlet x = 1;\n```"));
    }
}
