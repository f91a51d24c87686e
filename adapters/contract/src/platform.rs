//! The two directions of the contract: the core's [`InboundSink`] that adapters
//! submit to, and the [`PlatformSender`] that each adapter implements.

use std::time::Duration;

use async_trait::async_trait;

use crate::draft::Draft;
use crate::interaction::{ActionReply, InboundAction};
use crate::message::{ChatRef, DeliveryReceipt, DeliveryStatus, InboundMessage, OutboundMessage};

/// The result of submitting an inbound message to the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Recorded and queued for its session.
    Accepted,
    /// The same platform event was recorded before; nothing happens.
    Duplicate,
    /// Not for the agent (a group message that does not address the bot, a
    /// bot's message, an unauthorised sender); nothing happens.
    Ignored,
    /// Answered directly (a command); the reply goes through the outbox.
    Handled,
}

/// Why the core could not take an inbound message.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The message itself is unusable; the platform should not redeliver it.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A transient failure (the database is unavailable); the platform may
    /// redeliver.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
}

/// Implemented by the core: where adapters deliver normalised messages.
#[async_trait]
pub trait InboundSink: Send + Sync {
    /// Records the message (deduplicated by platform, account and event id)
    /// and queues it for its session. Returns quickly: the turn runs later.
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError>;

    /// Takes a press of one of the core's buttons and says what to show.
    /// Returns quickly (within a platform's interaction deadline): the work
    /// it wakes runs later. The default knows no buttons.
    ///
    /// # Errors
    /// [`SubmitError::Unavailable`] when the press could not be recorded
    /// (the adapter tells the person to try again).
    async fn act(&self, _action: InboundAction) -> Result<ActionReply, SubmitError> {
        Ok(ActionReply::default())
    }

    /// Takes what the platform reported about a message the bot sent
    /// (delivered, read, failed), for the outbox. Reports may repeat and
    /// come out of order. Returns quickly. The default records nothing.
    ///
    /// # Errors
    /// [`SubmitError::Unavailable`] when the report could not be recorded
    /// (the platform delivers it again).
    async fn delivery_status(&self, _status: DeliveryStatus) -> Result<(), SubmitError> {
        Ok(())
    }
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The platform asked us to wait; the caller retries after the delay.
    #[error("rate limited, retry after {0:?}")]
    RetryAfter(Duration),
    /// A transient failure (network, 5xx); the caller may retry.
    #[error("transient failure: {0}")]
    Transient(String),
    /// A permanent failure (chat gone, bot removed); retrying will not help.
    #[error("permanent failure: {0}")]
    Permanent(String),
}

/// Told by an adapter whether its connection to the platform works, as it
/// finds out while running (a poll that fails, one that works again), so
/// that the core can show it (`/readyz`, `/metrics`).
pub trait LinkObserver: Send + Sync {
    /// The connection works (again).
    fn up(&self);
    /// The connection failed with `reason` (never a secret); the adapter
    /// keeps trying.
    fn down(&self, reason: &str);
}

/// Implemented by each adapter: delivers replies to its platform.
#[async_trait]
pub trait PlatformSender: Send + Sync {
    /// Delivers one reply, splitting and converting it as the platform needs.
    /// Must be idempotent per `message.idempotency_key` where the platform
    /// allows it.
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError>;

    /// Shows that the agent is working (a typing indicator) in `chat`. Best
    /// effort: failures are the adapter's to log, never the caller's.
    async fn typing(&self, _chat: &ChatRef) {}

    /// How often the core repeats [`PlatformSender::typing`] while a turn
    /// runs (a platform's indicator fades after a few seconds). `None`: the
    /// platform has no indicator.
    fn typing_interval(&self) -> Option<Duration> {
        None
    }

    /// How often a draft of a reply may change in `chat`
    /// ([`PlatformSender::draft`]), under the platform's rate limits.
    /// `None` (the default): no drafts there, because the platform has none
    /// or streaming is turned off.
    fn draft_interval(&self, _chat: &ChatRef) -> Option<Duration> {
        None
    }

    /// Shows the reply written so far. Returns the platform message that
    /// shows it, if it is a message (created now, or `draft.message_id`
    /// edited); `None` when the draft is ephemeral and the final reply
    /// replaces it by itself. Best effort: the caller skips a failed draft.
    async fn draft(&self, _draft: &Draft) -> Result<Option<String>, SendError> {
        Ok(None)
    }

    /// Replaces the text of the message `message_id` in `chat` (one this
    /// sender sent) with `text`, and removes its buttons: a question once it
    /// is answered. The default cannot edit.
    ///
    /// # Errors
    /// As [`PlatformSender::send`]; [`SendError::Permanent`] where the
    /// platform cannot edit messages.
    async fn edit(&self, _chat: &ChatRef, _message_id: &str, _text: &str) -> Result<(), SendError> {
        Err(SendError::Permanent(
            "this platform's messages cannot be edited".to_owned(),
        ))
    }
}
