//! The core's [`Button`]s as a Telegram inline keyboard.
//!
//! Each button is a `callback_data` button on a row of its own (labels such
//! as "Allow for this conversation" stay readable on a phone), its data the
//! [`ActionId`](switchboard_contract::ActionId), which always fits Telegram's
//! 1–64 bytes. Telegram's inline buttons have no colours, so
//! [`Button::style`] is not shown. An empty keyboard is how an edit takes the
//! buttons away.

use switchboard_contract::Button;
use teloxide_core::types::{InlineKeyboardButton, InlineKeyboardMarkup};

/// Stands in for a label that is empty (Telegram refuses a button without
/// text).
const NO_LABEL: &str = "·";

/// The keyboard showing `buttons`; `None` when there are none.
pub(crate) fn keyboard(buttons: &[Button]) -> Option<InlineKeyboardMarkup> {
    if buttons.is_empty() {
        return None;
    }
    let rows = buttons.iter().map(|button| {
        let label = match button.label.trim() {
            "" => NO_LABEL,
            label => label,
        };
        [InlineKeyboardButton::callback(
            label,
            button.action.as_str(),
        )]
    });
    Some(InlineKeyboardMarkup::new(rows))
}

/// The keyboard of a message whose buttons are gone.
pub(crate) fn none() -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchboard_contract::{ActionId, ButtonStyle};

    use super::*;

    #[test]
    fn each_button_is_a_callback_button_on_its_own_row() {
        let buttons = [
            Button::new(ActionId::parse("ap:1:once").unwrap(), "Allow once")
                .styled(ButtonStyle::Primary),
            Button::new(ActionId::parse("ap:1:deny").unwrap(), "  "),
        ];
        let markup = serde_json::to_value(keyboard(&buttons).unwrap()).unwrap();
        assert_eq!(
            markup,
            json!({"inline_keyboard": [
                [{"text": "Allow once", "callback_data": "ap:1:once"}],
                [{"text": "·", "callback_data": "ap:1:deny"}],
            ]})
        );
        assert_eq!(keyboard(&[]), None);
        assert_eq!(
            serde_json::to_value(none()).unwrap(),
            json!({"inline_keyboard": []})
        );
    }
}
