//! A question with buttons, in the terminal: the approvals a parked turn
//! waits for, with the buttons posted to this chat (the outbox rows'
//! `buttons`, the contract's [`Button`]s), shown as numbered choices
//! (`[1] Allow once  [2] Allow for this conversation  [3] Deny`). A number
//! or a button's label typed at the prompt is a press, handed to the core
//! as every platform's is (an [`InboundAction`] for
//! [`InboundSink::act`](switchboard_contract::InboundSink::act)), which
//! checks the button's nonce, the chat and who pressed.

use switchboard_contract::{Button, ChatKind, EventId, IdError, InboundAction, Sender, UserId};

use crate::domain::{ApprovalStatus, InboundId};
use crate::session::key::Origin;
use crate::store::{Store, StoreError};

/// A pending question of a turn, as posted to the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question's text, as the chat showed it.
    pub text: String,
    pub buttons: Vec<Button>,
}

/// The pending questions of `turn` with buttons posted to `origin`'s chat,
/// oldest first. A question without buttons (one answered in words) is not
/// among them.
///
/// # Errors
/// A database failure.
pub async fn pending(
    store: &Store,
    turn: InboundId,
    origin: &Origin,
) -> Result<Vec<Question>, StoreError> {
    let mut questions = Vec::new();
    for approval in store.approvals().of_turn(turn).await? {
        if approval.status != ApprovalStatus::Pending {
            continue;
        }
        for row in store.approvals().notices(approval.id).await? {
            if row.platform != origin.platform || row.chat_id != origin.chat {
                continue;
            }
            let buttons: Vec<Button> = row
                .buttons
                .as_deref()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or_default();
            if !buttons.is_empty() {
                questions.push(Question {
                    text: row.text,
                    buttons,
                });
                break;
            }
        }
    }
    Ok(questions)
}

/// The numbered choices: `[1] Allow once  [2] …`.
#[must_use]
pub fn menu(buttons: &[Button]) -> String {
    buttons
        .iter()
        .enumerate()
        .map(|(index, button)| format!("[{}] {}", index + 1, button.label))
        .collect::<Vec<_>>()
        .join("  ")
}

/// The button a line chooses: its number, or its label (in any case).
#[must_use]
pub fn chosen<'a>(buttons: &'a [Button], line: &str) -> Option<&'a Button> {
    let line = line.trim();
    let line = line
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(line);
    if let Ok(number) = line.parse::<usize>() {
        return number.checked_sub(1).and_then(|index| buttons.get(index));
    }
    let line = line.to_lowercase();
    buttons
        .iter()
        .find(|button| button.label.to_lowercase() == line)
}

/// The press of `button` by the terminal's `user` in `origin`'s chat.
///
/// # Errors
/// The user's name is not a valid id.
pub fn press(origin: &Origin, user: &str, button: &Button) -> Result<InboundAction, IdError> {
    Ok(InboundAction {
        platform: origin.platform.clone(),
        account: origin.account.clone(),
        event_id: EventId::parse(uuid::Uuid::new_v4().to_string())?,
        chat: origin.chat.clone(),
        chat_kind: ChatKind::Direct,
        thread: None,
        sender: Sender {
            id: UserId::parse(user)?,
            display_name: Some(user.to_owned()),
            is_bot: false,
        },
        action: button.action.clone(),
        message_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_contract::ActionId;

    fn buttons() -> Vec<Button> {
        ["Allow once", "Allow for this conversation", "Deny"]
            .iter()
            .enumerate()
            .map(|(index, label)| {
                Button::new(
                    ActionId::parse(format!("ap:1:n:{index}")).expect("an action id"),
                    *label,
                )
            })
            .collect()
    }

    #[test]
    fn choices_are_numbered_and_chosen_by_number_or_label() {
        let buttons = buttons();
        assert_eq!(
            menu(&buttons),
            "[1] Allow once  [2] Allow for this conversation  [3] Deny"
        );
        assert_eq!(chosen(&buttons, "1"), buttons.first());
        assert_eq!(chosen(&buttons, " [3] "), buttons.get(2));
        assert_eq!(chosen(&buttons, "deny"), buttons.get(2));
        assert_eq!(chosen(&buttons, "ALLOW ONCE"), buttons.first());
        assert_eq!(chosen(&buttons, "0"), None);
        assert_eq!(chosen(&buttons, "4"), None);
        assert_eq!(chosen(&buttons, "what is this?"), None);
    }
}
