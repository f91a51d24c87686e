//! [`SlackSender`]: the adapter's [`PlatformSender`], delivering the core's
//! replies with `chat.postMessage` in the workspace the reply's account
//! (its team id) names.
//!
//! - A reply is split and rendered by the `format` module and posted part by
//!   part (`mrkdwn: true`), in the reply's thread (`thread_ts`) when it has
//!   one: a channel conversation's thread, never a DM's top level.
//!   `reply_to` is not used: Slack threads replies, it does not quote them.
//! - Buttons go under the last part as a Block Kit `actions` block below a
//!   `section` holding the part's text; [`PlatformSender::edit`] replaces
//!   a message's text with `chat.update` and leaves only a section.
//! - While a turn runs, [`PlatformSender::draft`] posts one message with
//!   the first words and updates it (`chat.update`) at most once per
//!   `draft_interval_ms`; the reply then updates that message into its
//!   first part ([`OutboundMessage::replaces`]), or posts the part anew if
//!   the message is gone.
//! - Slack has no idempotent post, so each part carries message metadata
//!   (`switchboard_reply`: the reply's idempotency key and the part's
//!   number). A send whose earlier try failed after some parts went out
//!   sends only the rest (remembered in this process, for
//!   [`PARTIAL_CAPACITY`] replies); a **redelivery** (the core cannot tell
//!   whether an earlier try reached Slack) first reads the conversation —
//!   the thread's replies, or the channel's history — from the last
//!   [`LOOKBACK`] and skips every part the bot already posted under that key.
//!   What that guarantees: a part posted within the lookback and among the
//!   newest [`HISTORY_LIMIT`] messages (or the first [`REPLIES_LIMIT`]
//!   replies of the thread in that window) is not posted twice; when the
//!   lookup itself is refused (a missing `*:history` scope) the parts are
//!   posted again, at least once rather than at most once.
//! - 429 becomes [`SendError::RetryAfter`] with Slack's `Retry-After`;
//!   network failures, 5xx and Slack's transient errors `Transient`; other
//!   errors (`channel_not_found`, `not_in_channel`, `invalid_auth`…)
//!   `Permanent`.
//! - Slack offers bots no typing indicator outside assistant threads
//!   (`assistant.threads.setStatus` needs the app's AI assistant feature
//!   and a thread it opened), so [`PlatformSender::typing_interval`] stays
//!   `None`; the growing draft shows the agent at work instead.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_contract::{
    ChatRef, DeliveryReceipt, Draft, OutboundMessage, PlatformSender, SendError,
};

use crate::api::{ApiError, WebApi};
use crate::bounded::Bounded;
use crate::format::{self, TEXT_LIMIT};
use crate::workspace::{Workspace, Workspaces};

/// The metadata `event_type` of every reply part.
pub const METADATA_TYPE: &str = "switchboard_reply";

/// How many partly delivered replies are remembered at most.
pub const PARTIAL_CAPACITY: usize = 256;

/// How far back a redelivery looks for parts already posted.
pub const LOOKBACK: Duration = Duration::from_secs(24 * 3600);

/// How many channel messages a redelivery reads.
pub const HISTORY_LIMIT: usize = 100;

/// How many thread replies a redelivery reads.
pub const REPLIES_LIMIT: usize = 200;

/// How long a partly delivered reply's parts are remembered.
const PARTIAL_TTL: Duration = Duration::from_secs(3600);

/// Slack's errors for an update of a message that cannot be updated any
/// more (deleted, or too old).
const GONE: [&str; 4] = [
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
    "msg_not_found",
];

/// Sends replies through the Web API. Cheap to share: the gateway
/// registers it with the core as an `Arc<dyn PlatformSender>`.
pub struct SlackSender {
    api: WebApi,
    workspaces: Arc<Workspaces>,
    /// How often drafts change; `None`: no drafts.
    drafts: Option<Duration>,
    /// Parts already posted, by idempotency key.
    partial: Mutex<Bounded<String, Vec<String>>>,
}

/// Where a message goes.
struct Target<'a> {
    workspace: &'a Workspace,
    channel: &'a str,
    thread: Option<&'a str>,
}

/// What `chat.postMessage` and `chat.update` answer.
#[derive(Deserialize)]
struct Posted {
    ts: String,
}

impl SlackSender {
    pub(crate) fn new(api: WebApi, workspaces: Arc<Workspaces>, drafts: Option<Duration>) -> Self {
        Self {
            api,
            workspaces,
            drafts,
            partial: Mutex::new(Bounded::new(PARTIAL_CAPACITY, PARTIAL_TTL)),
        }
    }

    fn target<'a>(&'a self, chat: &'a ChatRef) -> Result<Target<'a>, SendError> {
        let workspace = self.workspaces.by_account(&chat.account).ok_or_else(|| {
            SendError::Permanent(format!("no Slack workspace {} is configured", chat.account))
        })?;
        Ok(Target {
            workspace,
            channel: chat.chat.as_str(),
            thread: chat.thread.as_ref().map(|thread| thread.as_str()),
        })
    }

    /// Posts one message and returns its `ts`.
    async fn post(
        &self,
        target: &Target<'_>,
        text: &str,
        blocks: Option<Value>,
        metadata: Option<Value>,
    ) -> Result<String, ApiError> {
        let mut body = json!({"channel": target.channel, "text": text, "mrkdwn": true});
        if let Some(thread) = target.thread {
            body["thread_ts"] = json!(thread);
        }
        if let Some(blocks) = blocks {
            body["blocks"] = blocks;
        }
        if let Some(metadata) = metadata {
            body["metadata"] = metadata;
        }
        let posted: Posted = self
            .api
            .post("chat.postMessage", &target.workspace.token, &body)
            .await?;
        Ok(posted.ts)
    }

    /// Replaces the text (and blocks) of the bot's message `ts`.
    async fn update(
        &self,
        target: &Target<'_>,
        ts: &str,
        text: &str,
        blocks: Value,
        metadata: Option<Value>,
    ) -> Result<(), ApiError> {
        let mut body = json!({"channel": target.channel, "ts": ts, "text": text, "blocks": blocks});
        if let Some(metadata) = metadata {
            body["metadata"] = metadata;
        }
        let _: Posted = self
            .api
            .post("chat.update", &target.workspace.token, &body)
            .await?;
        Ok(())
    }

    /// Shows `text` (Markdown) to `user` alone, in `chat`
    /// (`chat.postEphemeral`).
    pub(crate) async fn ephemeral(
        &self,
        chat: &ChatRef,
        user: &str,
        text: &str,
    ) -> Result<(), SendError> {
        let target = self.target(chat)?;
        let mut body = json!({"channel": target.channel, "user": user, "text": first_part(text)});
        if let Some(thread) = target.thread {
            body["thread_ts"] = json!(thread);
        }
        let _: Value = self
            .api
            .post("chat.postEphemeral", &target.workspace.token, &body)
            .await
            .map_err(|err| send_error(&err))?;
        Ok(())
    }

    /// Delivers the parts after those in `sent`, pushing each one's `ts`.
    async fn deliver(
        &self,
        message: &OutboundMessage,
        target: &Target<'_>,
        parts: &[String],
        sent: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let mut found = if message.redelivery && sent.is_empty() {
            self.posted_before(target, &message.idempotency_key).await?
        } else {
            Vec::new()
        };
        for (index, part) in parts.iter().enumerate().skip(sent.len()) {
            if let Some(at) = found.iter().position(|(part, _)| *part == index) {
                tracing::info!(
                    part = index,
                    "reply part already in Slack; not posted again"
                );
                sent.push(found.swap_remove(at).1);
                continue;
            }
            let last = index + 1 == parts.len();
            let blocks = (last && !message.buttons.is_empty())
                .then(|| format::blocks(part, &message.buttons));
            let metadata = Some(metadata(&message.idempotency_key, index));
            if index == 0
                && let Some(draft) = message.replaces.as_deref()
            {
                let shown = blocks.clone().unwrap_or_else(|| format::text_blocks(part));
                match self
                    .update(target, draft, part, shown, metadata.clone())
                    .await
                {
                    Ok(()) => {
                        sent.push(draft.to_owned());
                        continue;
                    }
                    Err(err) if is_gone(&err) => {
                        tracing::info!("the draft's message is gone; posting the reply anew");
                    }
                    Err(err) => return Err(err),
                }
            }
            sent.push(self.post(target, part, blocks, metadata).await?);
        }
        Ok(())
    }

    /// The parts of the reply `key` the bot already posted in the target's
    /// conversation, with their `ts`. A lookup Slack refuses for good (a
    /// missing scope) finds nothing.
    async fn posted_before(
        &self,
        target: &Target<'_>,
        key: &str,
    ) -> Result<Vec<(usize, String)>, ApiError> {
        #[derive(Deserialize)]
        struct Page {
            #[serde(default)]
            messages: Vec<Value>,
        }
        let oldest = SystemTime::now()
            .checked_sub(LOOKBACK)
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map_or_else(|| "0".to_owned(), |at| format!("{}.000000", at.as_secs()));
        let (method, limit) = match target.thread {
            Some(_) => ("conversations.replies", REPLIES_LIMIT),
            None => ("conversations.history", HISTORY_LIMIT),
        };
        let limit = limit.to_string();
        let mut query = vec![
            ("channel", target.channel),
            ("oldest", oldest.as_str()),
            ("limit", limit.as_str()),
            ("include_all_metadata", "true"),
        ];
        if let Some(thread) = target.thread {
            query.push(("ts", thread));
        }
        let read = self
            .api
            .get::<Page>(method, &target.workspace.token, &query)
            .await;
        let page = match read {
            Ok(page) => page,
            Err(err) if err.is_transient() => return Err(err),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read what was posted before; posting the reply again");
                return Ok(Vec::new());
            }
        };
        let bot = &target.workspace.identity;
        Ok(page
            .messages
            .iter()
            .filter(|m| {
                m["user"].as_str() == Some(bot.user_id.as_str())
                    || (bot.bot_id.is_some() && m["bot_id"].as_str() == bot.bot_id.as_deref())
            })
            .filter(|m| m["metadata"]["event_type"] == METADATA_TYPE)
            .filter(|m| m["metadata"]["event_payload"]["key"] == key)
            .filter_map(|m| {
                let part = m["metadata"]["event_payload"]["part"].as_u64()?;
                Some((usize::try_from(part).ok()?, m["ts"].as_str()?.to_owned()))
            })
            .collect())
    }

    fn partial(&self) -> std::sync::MutexGuard<'_, Bounded<String, Vec<String>>> {
        self.partial.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl PlatformSender for SlackSender {
    #[tracing::instrument(name = "slack.send", skip_all, fields(chat = %message.chat, key = %message.idempotency_key))]
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let chat = message.chat_ref();
        let target = self.target(&chat)?;
        let parts = format::parts(&message.text, format::limit_for(&message.buttons));
        let key = &message.idempotency_key;
        let mut sent = self.partial().take(key).unwrap_or_default();
        let delivered = self.deliver(message, &target, &parts, &mut sent).await;
        match delivered {
            Ok(()) => {
                tracing::debug!(parts = sent.len(), "reply delivered to Slack");
                Ok(DeliveryReceipt { message_ids: sent })
            }
            Err(err) => {
                if !sent.is_empty() {
                    self.partial().insert(key.clone(), sent);
                }
                Err(send_error(&err))
            }
        }
    }

    fn draft_interval(&self, _chat: &ChatRef) -> Option<Duration> {
        self.drafts
    }

    async fn draft(&self, draft: &Draft) -> Result<Option<String>, SendError> {
        let target = self.target(&draft.chat)?;
        let Some(part) = format::parts(&draft.text, TEXT_LIMIT).pop() else {
            return Ok(draft.message_id.clone());
        };
        if let Some(ts) = draft.message_id.as_deref() {
            match self
                .update(&target, ts, &part, format::text_blocks(&part), None)
                .await
            {
                Ok(()) => return Ok(Some(ts.to_owned())),
                Err(err) if is_gone(&err) => {}
                Err(err) => return Err(draft_error(&err)),
            }
        }
        let ts = self
            .post(&target, &part, None, None)
            .await
            .map_err(|err| draft_error(&err))?;
        Ok(Some(ts))
    }

    async fn edit(&self, chat: &ChatRef, message_id: &str, text: &str) -> Result<(), SendError> {
        let target = self.target(chat)?;
        let text = first_part(text);
        self.update(&target, message_id, &text, format::text_blocks(&text), None)
            .await
            .map_err(|err| send_error(&err))
    }
}

/// The metadata of part `index` of the reply `key`.
fn metadata(key: &str, index: usize) -> Value {
    json!({"event_type": METADATA_TYPE, "event_payload": {"key": key, "part": index}})
}

/// `text` (Markdown) as one message's `mrkdwn`: its first part, with an
/// ellipsis when more was cut off; a lone space for nothing at all (Slack
/// refuses an empty message).
fn first_part(text: &str) -> String {
    let mut parts = format::parts(text, TEXT_LIMIT - 1).into_iter();
    match (parts.next(), parts.next()) {
        (Some(first), None) => first,
        (Some(first), Some(_)) => first + "…",
        (None, _) => " ".to_owned(),
    }
}

/// Whether an update failed because the message cannot be updated any
/// more: a new message stands in for it.
fn is_gone(err: &ApiError) -> bool {
    err.code().is_some_and(|code| GONE.contains(&code))
}

/// A failed draft: only a rate limit's wait matters (drafts are not
/// retried), and it is worth a debug line at most.
fn draft_error(err: &ApiError) -> SendError {
    tracing::debug!(error = %err, "Slack draft not shown");
    match err {
        ApiError::RateLimited { retry_after, .. } => SendError::RetryAfter(*retry_after),
        other => SendError::Transient(other.to_string()),
    }
}

/// Maps a Web API failure onto the core's retry classes, logging it once.
fn send_error(err: &ApiError) -> SendError {
    match err {
        ApiError::RateLimited { retry_after, .. } => {
            tracing::info!(error = %err, "Slack rate-limited the send");
            SendError::RetryAfter(*retry_after)
        }
        err if err.is_transient() => {
            tracing::warn!(error = %err, "Slack send failed; retryable");
            SendError::Transient(err.to_string())
        }
        err => {
            tracing::error!(error = %err, "Slack refused the message");
            SendError::Permanent(err.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_onto_the_retry_classes() {
        let slack = |error: &str| ApiError::Slack {
            method: "chat.postMessage",
            error: error.to_owned(),
        };
        for permanent in [
            "channel_not_found",
            "not_in_channel",
            "invalid_auth",
            "is_archived",
        ] {
            assert!(matches!(
                send_error(&slack(permanent)),
                SendError::Permanent(_)
            ));
        }
        assert!(matches!(
            send_error(&slack("internal_error")),
            SendError::Transient(_)
        ));
        let limited = ApiError::RateLimited {
            method: "chat.postMessage",
            retry_after: Duration::from_secs(9),
        };
        assert!(matches!(
            send_error(&limited),
            SendError::RetryAfter(wait) if wait == Duration::from_secs(9)
        ));
        let network = ApiError::Network {
            method: "chat.postMessage",
            detail: "reset".to_owned(),
        };
        assert!(matches!(send_error(&network), SendError::Transient(_)));
    }

    #[test]
    fn an_update_of_a_gone_message_posts_anew() {
        let gone = ApiError::Slack {
            method: "chat.update",
            error: "message_not_found".to_owned(),
        };
        assert!(is_gone(&gone));
        assert!(!is_gone(&ApiError::Slack {
            method: "chat.update",
            error: "channel_not_found".to_owned(),
        }));
    }

    #[test]
    fn one_message_texts_are_cut_with_an_ellipsis() {
        assert_eq!(first_part("**Approved**"), "*Approved*");
        assert_eq!(first_part(""), " ");
        let long = first_part(&"word ".repeat(2000));
        assert!(long.ends_with('…'));
        assert!(long.chars().count() <= TEXT_LIMIT);
    }
}
