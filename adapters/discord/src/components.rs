//! The core's [`Button`]s as Discord message components: action rows
//! (type 1) of up to [`ROW_LIMIT`] buttons (type 2), each button's
//! `custom_id` the [`ActionId`](switchboard_contract::ActionId) (at most 64
//! bytes, within Discord's 100), its label cut to [`LABEL_LIMIT`]
//! characters. A plain button is Secondary (grey), a primary one Primary
//! (blurple), a danger one Danger (red). A message holds at most
//! [`ROWS_LIMIT`] rows; buttons beyond them are left out (and logged).

use serenity::builder::{CreateActionRow, CreateButton};
use serenity::model::application::ButtonStyle as DiscordStyle;
use switchboard_contract::{Button, ButtonStyle};

/// Buttons in one action row, at most.
pub const ROW_LIMIT: usize = 5;
/// Action rows in one message, at most.
pub const ROWS_LIMIT: usize = 5;
/// A button label's length, in characters, at most.
pub const LABEL_LIMIT: usize = 80;

/// The action rows showing `buttons` (none for none).
pub(crate) fn action_rows(buttons: &[Button]) -> Vec<CreateActionRow> {
    let shown = ROW_LIMIT * ROWS_LIMIT;
    if buttons.len() > shown {
        tracing::warn!(
            buttons = buttons.len(),
            shown,
            "more buttons than a Discord message holds; the rest are left out"
        );
    }
    buttons
        .iter()
        .take(shown)
        .collect::<Vec<_>>()
        .chunks(ROW_LIMIT)
        .map(|row| CreateActionRow::Buttons(row.iter().map(|button| create(button)).collect()))
        .collect()
}

fn create(button: &Button) -> CreateButton {
    let label: String = button.label.trim().chars().take(LABEL_LIMIT).collect();
    let style = match button.style {
        ButtonStyle::Plain => DiscordStyle::Secondary,
        ButtonStyle::Primary => DiscordStyle::Primary,
        ButtonStyle::Danger => DiscordStyle::Danger,
    };
    let created = CreateButton::new(button.action.as_str()).style(style);
    // Discord refuses an empty label on a button without an emoji.
    if label.is_empty() {
        created.label("·")
    } else {
        created.label(label)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use switchboard_contract::ActionId;

    use super::*;

    fn button(n: usize) -> Button {
        Button::new(
            ActionId::parse(format!("q:{n}")).unwrap(),
            format!("Choice {n}"),
        )
    }

    #[test]
    fn buttons_are_styled_in_rows_of_five() {
        let mut buttons: Vec<Button> = (0..7).map(button).collect();
        buttons[0].style = ButtonStyle::Primary;
        buttons[1].style = ButtonStyle::Danger;
        buttons[2].label = "x".repeat(100);
        let rows = serde_json::to_value(action_rows(&buttons)).unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 2);
        assert_eq!(rows[0]["type"], 1);
        assert_eq!(rows[0]["components"].as_array().unwrap().len(), 5);
        assert_eq!(
            rows[0]["components"][0],
            json!({"type": 2, "style": 1, "custom_id": "q:0", "label": "Choice 0", "disabled": false})
        );
        assert_eq!(rows[0]["components"][1]["style"], 4);
        assert_eq!(rows[0]["components"][3]["style"], 2);
        assert_eq!(
            rows[0]["components"][2]["label"].as_str().unwrap().len(),
            LABEL_LIMIT
        );
        assert_eq!(rows[1]["components"][1]["custom_id"], "q:6");
    }

    #[test]
    fn a_message_shows_at_most_twenty_five_buttons() {
        let buttons: Vec<Button> = (0..30).map(button).collect();
        let rows = action_rows(&buttons);
        assert_eq!(rows.len(), ROWS_LIMIT);
        assert!(action_rows(&[]).is_empty());
    }
}
