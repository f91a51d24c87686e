//! A `block_actions` payload (a press of one of the core's buttons) → the
//! contract's [`InboundAction`]. Pure.
//!
//! The button's `value` (else its `action_id`) is the [`ActionId`]; a
//! press of anything that is not a valid action id is not the core's. The
//! event id is the press's `trigger_id` (else the action's `action_ts`),
//! the chat the channel of the message the button is under (a `D…`
//! channel is a DM), the thread that message's thread, and `message_id`
//! its `ts`, so that the core can have the message updated.

use switchboard_contract::{
    AccountId, ActionId, ChatId, ChatKind, EventId, IdError, InboundAction, PlatformName, Sender,
    ThreadId, UserId,
};

use crate::PLATFORM;
use crate::events::Interaction;

/// Where the pressed button is.
struct Place {
    channel: String,
    message_ts: Option<String>,
    thread: Option<String>,
}

impl Interaction {
    /// The workspace the press happened in.
    pub(crate) fn team_id(&self) -> Option<&str> {
        self.team
            .as_ref()
            .map(|team| team.id.as_str())
            .or(self.user.team_id.as_deref())
    }

    fn place(&self) -> Option<Place> {
        let container = self.container.as_ref();
        let message = self.message.as_ref();
        Some(Place {
            channel: container
                .and_then(|c| c.channel_id.clone())
                .or_else(|| self.channel.as_ref().map(|c| c.id.clone()))?,
            message_ts: container
                .and_then(|c| c.message_ts.clone())
                .or_else(|| message.map(|m| m.ts.clone())),
            thread: container
                .and_then(|c| c.thread_ts.clone())
                .or_else(|| message.and_then(|m| m.thread_ts.clone())),
        })
    }
}

/// The press as an action of `account`; `None` for a press that is not of
/// one of the core's buttons (or has no place or id).
///
/// # Errors
/// An id the contract rejects.
pub(crate) fn action(
    interaction: &Interaction,
    account: &AccountId,
) -> Result<Option<InboundAction>, IdError> {
    let Some(pressed) = interaction.actions.first() else {
        return Ok(None);
    };
    let Some(action) = pressed
        .value
        .as_deref()
        .or(pressed.action_id.as_deref())
        .and_then(|raw| ActionId::parse(raw).ok())
    else {
        return Ok(None);
    };
    let event = interaction
        .trigger_id
        .clone()
        .or_else(|| pressed.action_ts.clone());
    let (Some(place), Some(event)) = (interaction.place(), event) else {
        return Ok(None);
    };
    let user = &interaction.user;
    Ok(Some(InboundAction {
        platform: PlatformName::parse(PLATFORM)?,
        account: account.clone(),
        event_id: EventId::parse(event)?,
        chat_kind: if place.channel.starts_with('D') {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        chat: ChatId::parse(place.channel)?,
        thread: place.thread.map(ThreadId::parse).transpose()?,
        sender: Sender {
            id: UserId::parse(user.id.as_str())?,
            display_name: user.name.clone().or_else(|| user.username.clone()),
            is_bot: false,
        },
        action,
        message_id: place.message_ts,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn press(value: &str) -> Interaction {
        serde_json::from_value(json!({
            "type": "block_actions",
            "team": {"id": "T1"},
            "user": {"id": "U1", "name": "alice"},
            "trigger_id": "trig-1",
            "container": {"type": "message", "message_ts": "1.5", "channel_id": "D1", "thread_ts": "1.1"},
            "actions": [{"action_id": "x", "value": value, "action_ts": "2.0"}],
        }))
        .unwrap()
    }

    #[test]
    fn a_press_of_a_core_button_is_an_action() {
        let account = AccountId::parse("T1").unwrap();
        let interaction = press("ap:1:allow");
        assert_eq!(interaction.team_id(), Some("T1"));
        let action = action(&interaction, &account).unwrap().unwrap();
        assert_eq!(action.action.as_str(), "ap:1:allow");
        assert_eq!(action.event_id.as_str(), "trig-1");
        assert_eq!(action.chat.as_str(), "D1");
        assert_eq!(action.chat_kind, ChatKind::Direct);
        assert_eq!(action.thread.unwrap().as_str(), "1.1");
        assert_eq!(action.message_id.as_deref(), Some("1.5"));
        assert_eq!(action.sender.display_name.as_deref(), Some("alice"));
    }

    #[test]
    fn other_presses_are_not_the_cores() {
        let account = AccountId::parse("T1").unwrap();
        assert!(action(&press("has space"), &account).unwrap().is_none());
        let mut nothing = press("ap:1:allow");
        nothing.actions.clear();
        assert!(action(&nothing, &account).unwrap().is_none());
    }
}
