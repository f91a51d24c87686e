//! Buttons under a message, and what a person pressing one sends back.
//!
//! The core asks a person something (may this tool run? which of these?)
//! with an [`OutboundMessage`](crate::OutboundMessage) that carries
//! [`Button`]s; each adapter shows them the way its platform does (an
//! inline keyboard, message components, a card, Block Kit buttons, reply
//! buttons). A press comes back as an [`InboundAction`] for
//! [`InboundSink::act`](crate::InboundSink::act), whose [`ActionReply`] the
//! adapter shows: a short notice to the person who pressed, and the
//! message's new text (its buttons gone) once the question is settled.
//!
//! An [`ActionId`] is opaque: the core checks it against what it stored
//! (the chat, who may answer, whether it is still open), never takes it for
//! an instruction. It is at most [`MAX_ACTION_ID_LEN`] bytes of printable
//! ASCII, which every platform's button payload holds (Telegram's
//! `callback_data` is the smallest, 64 bytes).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{AccountId, ChatId, EventId, PlatformName, ThreadId};
use crate::message::{ChatKind, Sender};

/// Longest [`ActionId`], in bytes (Telegram's `callback_data` limit).
pub const MAX_ACTION_ID_LEN: usize = 64;

/// Why a string is not an [`ActionId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an action id is 1 to {MAX_ACTION_ID_LEN} bytes of printable ASCII")]
pub struct InvalidActionId;

/// What a button hands back when it is pressed: an opaque token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ActionId(String);

impl ActionId {
    /// Validates and wraps an action id.
    ///
    /// # Errors
    /// Empty, longer than [`MAX_ACTION_ID_LEN`] bytes, or holding anything
    /// but printable ASCII.
    pub fn parse(value: impl Into<String>) -> Result<Self, InvalidActionId> {
        let value = value.into();
        let printable = value.bytes().all(|byte| byte.is_ascii_graphic());
        if value.is_empty() || value.len() > MAX_ACTION_ID_LEN || !printable {
            return Err(InvalidActionId);
        }
        Ok(Self(value))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ActionId {
    type Error = InvalidActionId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<ActionId> for String {
    fn from(value: ActionId) -> Self {
        value.0
    }
}

/// How a button looks, where the platform has a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ButtonStyle {
    /// The platform's ordinary button.
    #[default]
    Plain,
    /// The suggested answer (green or blue, where the platform colours).
    Primary,
    /// An answer that refuses or destroys something (red).
    Danger,
}

/// One button under a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Button {
    /// What a press hands back.
    pub action: ActionId,
    /// The text on the button. Adapters shorten it to their platform's
    /// limit (WhatsApp: 20 characters), never the action.
    pub label: String,
    #[serde(default)]
    pub style: ButtonStyle,
}

impl Button {
    /// A plain button labelled `label` that hands back `action`.
    #[must_use]
    pub fn new(action: ActionId, label: impl Into<String>) -> Self {
        Self {
            action,
            label: label.into(),
            style: ButtonStyle::Plain,
        }
    }

    /// The same button with `style`.
    #[must_use]
    pub fn styled(self, style: ButtonStyle) -> Self {
        Self { style, ..self }
    }
}

/// A press of a button, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundAction {
    pub platform: PlatformName,
    pub account: AccountId,
    /// The platform's id of this press (a callback query id, an
    /// interaction id): a redelivery repeats it.
    pub event_id: EventId,
    /// The chat the pressed message is in.
    pub chat: ChatId,
    pub chat_kind: ChatKind,
    pub thread: Option<ThreadId>,
    /// Who pressed.
    pub sender: Sender,
    /// What the button handed back. Never trusted: the core checks it.
    pub action: ActionId,
    /// The platform message the button was under.
    pub message_id: Option<String>,
}

/// What the adapter shows after a press.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ActionReply {
    /// A short notice for the person who pressed (a toast, an ephemeral
    /// message, or a message where the platform has neither).
    pub notice: Option<String>,
    /// The message's new text, shown in place of the question with its
    /// buttons removed; `None` leaves the message as it is.
    pub update: Option<String>,
}

impl ActionReply {
    /// A reply that only tells the presser `notice`.
    #[must_use]
    pub fn notice(notice: impl Into<String>) -> Self {
        Self {
            notice: Some(notice.into()),
            update: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_ids_fit_every_platforms_payload() {
        assert!(ActionId::parse("ap:7:allow").is_ok());
        assert!(ActionId::parse("x".repeat(MAX_ACTION_ID_LEN)).is_ok());
        assert_eq!(
            ActionId::parse("x".repeat(MAX_ACTION_ID_LEN + 1)),
            Err(InvalidActionId)
        );
        assert_eq!(ActionId::parse(""), Err(InvalidActionId));
        assert_eq!(ActionId::parse("a b"), Err(InvalidActionId));
        assert_eq!(ActionId::parse("é"), Err(InvalidActionId));
    }
}
