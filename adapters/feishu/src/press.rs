//! A `card.action.trigger` callback (a press of a button on one of the
//! bot's cards, event schema 2.0) → the contract's [`InboundAction`]. Pure.
//!
//! The button's `value` is `{"action": "<action id>"}` ([`ACTION_KEY`]); a
//! press whose value holds no valid [`ActionId`] there is not the core's.
//! The event id is the callback's `header.event_id`, the chat
//! `context.open_chat_id`, the presser `operator.open_id`, and `message_id`
//! `context.open_message_id`. The callback does not say whether the chat
//! is a direct one: the press is reported as in a group chat, and the core
//! matches it by its chat id. The older `card.action.trigger_v1` format is
//! not read.

use serde::Deserialize;
use switchboard_contract::{
    AccountId, ActionId, ChatId, ChatKind, EventId, InboundAction, PlatformName, Sender, UserId,
};

use crate::PLATFORM;

/// The event type of a card button press.
pub const CARD_ACTION: &str = "card.action.trigger";
/// The key of a button's `value` that holds the action id.
pub const ACTION_KEY: &str = "action";

/// The `event` object of `card.action.trigger`; only what is read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CardAction {
    #[serde(default)]
    pub operator: Option<Operator>,
    #[serde(default)]
    pub action: Option<Pressed>,
    #[serde(default)]
    pub context: Option<Place>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Operator {
    #[serde(default)]
    pub open_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Pressed {
    #[serde(default)]
    pub value: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Place {
    #[serde(default)]
    pub open_message_id: Option<String>,
    #[serde(default)]
    pub open_chat_id: Option<String>,
}

/// Why a callback is not a press for the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotOurs {
    /// No value, or one without a valid action id.
    NoAction,
    /// No chat or no operator.
    Incomplete,
    /// An id Feishu sent does not make a valid identifier.
    InvalidId,
}

/// The press `event` (the callback `event_id`) as an action of `account`.
///
/// # Errors
/// Why it is not one of the core's presses.
pub(crate) fn action(
    event_id: &str,
    event: &CardAction,
    account: &AccountId,
) -> Result<InboundAction, NotOurs> {
    let action = event
        .action
        .as_ref()
        .and_then(|pressed| pressed.value.as_ref())
        .and_then(|value| value.get(ACTION_KEY))
        .and_then(serde_json::Value::as_str)
        .and_then(|raw| ActionId::parse(raw).ok())
        .ok_or(NotOurs::NoAction)?;
    let place = event.context.as_ref().ok_or(NotOurs::Incomplete)?;
    let chat = place.open_chat_id.as_deref().ok_or(NotOurs::Incomplete)?;
    let operator = event
        .operator
        .as_ref()
        .and_then(|operator| operator.open_id.as_deref())
        .ok_or(NotOurs::Incomplete)?;
    let invalid = |_| NotOurs::InvalidId;
    Ok(InboundAction {
        platform: PlatformName::parse(PLATFORM).map_err(invalid)?,
        account: account.clone(),
        event_id: EventId::parse(event_id).map_err(invalid)?,
        chat: ChatId::parse(chat).map_err(invalid)?,
        chat_kind: ChatKind::Group,
        thread: None,
        sender: Sender {
            id: UserId::parse(operator).map_err(invalid)?,
            display_name: None,
            is_bot: false,
        },
        action,
        message_id: place.open_message_id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn event(value: Value) -> CardAction {
        serde_json::from_value(json!({
            "operator": {"open_id": "ou_alice", "tenant_key": "t"},
            "token": "c-123",
            "action": {"tag": "button", "value": value},
            "host": "im_message",
            "context": {"open_message_id": "om_q", "open_chat_id": "oc_chat"},
        }))
        .unwrap()
    }

    #[test]
    fn a_press_of_a_core_button_is_an_action_in_its_chat() {
        let account = AccountId::parse("cli_app").unwrap();
        let action = action("ev-1", &event(json!({"action": "ap:2:once"})), &account).unwrap();
        assert_eq!(action.action.as_str(), "ap:2:once");
        assert_eq!(action.event_id.as_str(), "ev-1");
        assert_eq!(action.chat.as_str(), "oc_chat");
        assert_eq!(action.sender.id.as_str(), "ou_alice");
        assert_eq!(action.message_id.as_deref(), Some("om_q"));
    }

    #[test]
    fn other_presses_are_not_the_cores() {
        let account = AccountId::parse("cli_app").unwrap();
        for value in [
            json!({"action": "a b"}),
            json!({"other": "x"}),
            json!("ap:1:x"),
            json!({"action": 7}),
        ] {
            assert_eq!(
                action("ev", &event(value), &account),
                Err(NotOurs::NoAction)
            );
        }
        let mut nowhere = event(json!({"action": "ap:1:x"}));
        nowhere.context = None;
        assert_eq!(action("ev", &nowhere, &account), Err(NotOurs::Incomplete));
    }
}
