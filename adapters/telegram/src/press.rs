//! A `callback_query` (a tap on an inline keyboard button) → the contract's
//! [`InboundAction`]. Pure.
//!
//! The button's `callback_data` is the [`ActionId`]; data that is not a
//! valid action id (or none: a game button) is not the core's. The event id
//! is the callback query's `id`, the chat the chat of the message the
//! keyboard is under (a private chat is direct), the thread its forum
//! topic, and `message_id` that message's id, so that the core can have it
//! edited. A query without a message (a button under an inline-mode
//! message, which no chat holds) is not the core's either.

use switchboard_contract::{
    AccountId, ActionId, ChatId, ChatKind, EventId, InboundAction, PlatformName, Sender, ThreadId,
    UserId,
};
use teloxide_core::types::{CallbackQuery, MaybeInaccessibleMessage};

use crate::PLATFORM;

/// Why a callback query is not a press for the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotOurs {
    /// No `callback_data`, or data that is not an action id.
    NoAction,
    /// No message in a chat (an inline-mode message).
    NoMessage,
    /// An id Telegram sent does not make a valid identifier.
    InvalidId,
}

/// The press `query` as an action of `account`.
///
/// # Errors
/// Why it is not one of the core's presses.
pub(crate) fn action(query: &CallbackQuery, account: &AccountId) -> Result<InboundAction, NotOurs> {
    let action = query
        .data
        .as_deref()
        .and_then(|data| ActionId::parse(data).ok())
        .ok_or(NotOurs::NoAction)?;
    let message = query.message.as_ref().ok_or(NotOurs::NoMessage)?;
    let chat = message.chat();
    let thread = match message {
        MaybeInaccessibleMessage::Regular(message) if message.is_topic_message => message.thread_id,
        _ => None,
    };
    let invalid = |_| NotOurs::InvalidId;
    let from = &query.from;
    Ok(InboundAction {
        platform: PlatformName::parse(PLATFORM).map_err(invalid)?,
        account: account.clone(),
        event_id: EventId::parse(query.id.0.as_str()).map_err(invalid)?,
        chat: ChatId::parse(chat.id.0.to_string()).map_err(invalid)?,
        chat_kind: if chat.is_private() {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        thread: thread
            .map(|thread| ThreadId::parse(thread.0.0.to_string()))
            .transpose()
            .map_err(invalid)?,
        sender: Sender {
            id: UserId::parse(from.id.0.to_string()).map_err(invalid)?,
            display_name: Some(from.full_name()).filter(|name| !name.trim().is_empty()),
            is_bot: from.is_bot,
        },
        action,
        message_id: Some(message.id().0.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn query(data: Value, message: Value) -> CallbackQuery {
        serde_json::from_value(json!({
            "id": "4382bfdwdsb323b2d9",
            "from": {"id": 42, "is_bot": false, "first_name": "Ada", "last_name": "Lovelace"},
            "chat_instance": "-1234",
            "data": data,
            "message": message,
        }))
        .unwrap()
    }

    fn topic_message() -> Value {
        json!({
            "message_id": 5000, "date": 1_700_000_000,
            "chat": {"id": -100_200, "type": "supergroup", "title": "Forum", "is_forum": true},
            "from": {"id": 999, "is_bot": true, "first_name": "Bot"},
            "message_thread_id": 300, "is_topic_message": true,
            "text": "May I?",
        })
    }

    #[test]
    fn a_tap_under_a_topic_message_is_an_action_there() {
        let account = AccountId::parse("999").unwrap();
        let action = action(&query(json!("ap:7:allow"), topic_message()), &account).unwrap();
        assert_eq!(action.action.as_str(), "ap:7:allow");
        assert_eq!(action.event_id.as_str(), "4382bfdwdsb323b2d9");
        assert_eq!(action.chat.as_str(), "-100200");
        assert_eq!(action.chat_kind, ChatKind::Group);
        assert_eq!(action.thread.unwrap().as_str(), "300");
        assert_eq!(action.sender.id.as_str(), "42");
        assert_eq!(action.sender.display_name.as_deref(), Some("Ada Lovelace"));
        assert_eq!(action.message_id.as_deref(), Some("5000"));
    }

    #[test]
    fn a_tap_under_an_old_message_still_names_its_chat() {
        // Telegram sends `date: 0` for a message the bot can no longer read.
        let old = json!({"message_id": 12, "date": 0,
                         "chat": {"id": 42, "type": "private", "first_name": "Ada"}});
        let account = AccountId::parse("999").unwrap();
        let action = action(&query(json!("ap:7:deny"), old), &account).unwrap();
        assert_eq!(action.chat_kind, ChatKind::Direct);
        assert_eq!(action.chat.as_str(), "42");
        assert_eq!(action.message_id.as_deref(), Some("12"));
        assert_eq!(action.thread, None);
    }

    #[test]
    fn other_taps_are_not_the_cores() {
        let account = AccountId::parse("999").unwrap();
        let spaced = query(json!("has space"), topic_message());
        assert_eq!(action(&spaced, &account), Err(NotOurs::NoAction));
        let none = query(Value::Null, topic_message());
        assert_eq!(action(&none, &account), Err(NotOurs::NoAction));
        let mut inline = query(json!("ap:1:allow"), Value::Null);
        inline.inline_message_id = Some("inline-1".to_owned());
        assert_eq!(action(&inline, &account), Err(NotOurs::NoMessage));
    }
}
