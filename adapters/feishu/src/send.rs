//! [`FeishuSender`]: the adapter's [`PlatformSender`], delivering the core's
//! replies as Feishu messages.
//!
//! A reply with Markdown syntax goes out as an interactive card holding one
//! `markdown` element; a reply without any goes out as a plain `text`
//! message. Long replies are split (in UTF-8 bytes, code fences kept balanced)
//! so each request body stays under Feishu's limits (30 KB for cards, 150 KB
//! for text). Each chunk carries a `uuid` derived from the reply's
//! idempotency key and the chunk's index, so when the core retries a reply
//! whose first chunks already went out, Feishu drops the repeats (for an hour).
//!
//! With a reply target the chunks are replies to it (`reply_in_thread` when
//! the reply belongs to a Feishu thread, whose ids start with `omt_`); without
//! one they are new messages in the chat.

use std::sync::Arc;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use switchboard_contract::markdown::{MarkupRenderer, PlainText};
use switchboard_contract::{
    DeliveryReceipt, LengthUnit, OutboundMessage, PlatformSender, SendError, split_message,
};

use crate::api::{ApiError, ErrorCode, OpenApi, Payload, Target};

/// Largest request body for a card message, in bytes.
pub const CARD_BODY_LIMIT: usize = 30 * 1024;
/// Largest request body for a text message, in bytes.
pub const TEXT_BODY_LIMIT: usize = 150 * 1024;
/// Longest `uuid` Feishu accepts.
pub const UUID_MAX_LEN: usize = 50;

/// Chunks are never split below this many bytes, whatever their escaping
/// costs; it bounds the re-splitting of pathological text.
const MIN_SPLIT: usize = 512;

/// Sends replies through the Feishu open API. Cheap to share: the gateway
/// registers it with the core as an `Arc<dyn PlatformSender>`.
pub struct FeishuSender {
    api: Arc<OpenApi>,
}

impl FeishuSender {
    pub(crate) fn new(api: Arc<OpenApi>) -> Self {
        Self { api }
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
        let in_thread = message
            .thread
            .as_ref()
            .is_some_and(|thread| thread.as_str().starts_with("omt_"));
        let target = match message.reply_to.as_deref() {
            Some(message_id) if !message_id.is_empty() => Target::Reply {
                message_id,
                in_thread,
            },
            _ => Target::Chat(message.chat.as_str()),
        };
        let payloads = self.payloads(&message.text, &target);
        let mut message_ids = Vec::with_capacity(payloads.len());
        for (index, payload) in payloads.iter().enumerate() {
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
}

impl FeishuSender {
    /// The reply's chunks as message payloads, each under its body limit.
    fn payloads(&self, text: &str, target: &Target<'_>) -> Vec<Payload> {
        let markdown = has_markup(text);
        let limit = if markdown {
            CARD_BODY_LIMIT
        } else {
            TEXT_BODY_LIMIT
        };
        let mut out = Vec::new();
        // Escaping roughly doubles quote- and newline-heavy text (the content
        // is a JSON string inside a JSON body), so start at half the limit
        // and halve again for a chunk that still does not fit.
        self.fit(text, limit / 2, limit, markdown, target, &mut out);
        out
    }

    fn fit(
        &self,
        text: &str,
        split_at: usize,
        body_limit: usize,
        markdown: bool,
        target: &Target<'_>,
        out: &mut Vec<Payload>,
    ) {
        for chunk in split_message(text, split_at, LengthUnit::Bytes) {
            let payload = payload(&chunk, markdown);
            let (_, body) = self
                .api
                .request_for(target, &payload, &"x".repeat(UUID_MAX_LEN));
            let size = body.to_string().len();
            if size > body_limit && split_at / 2 >= MIN_SPLIT {
                self.fit(&chunk, split_at / 2, body_limit, markdown, target, out);
            } else {
                out.push(payload);
            }
        }
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

fn payload(chunk: &str, markdown: bool) -> Payload {
    if markdown {
        let card = serde_json::json!({
            "config": { "wide_screen_mode": true },
            "elements": [{ "tag": "markdown", "content": chunk }],
        });
        Payload {
            msg_type: "interactive",
            content: card.to_string(),
        }
    } else {
        Payload {
            msg_type: "text",
            content: serde_json::json!({ "text": chunk }).to_string(),
        }
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
