//! One Markdown reply → the `text` and `blocks` of Slack messages.
//!
//! The Markdown is split with the contract's splitter so that each part,
//! rendered to `mrkdwn` ([`Mrkdwn`]), is at most [`TEXT_LIMIT`] characters
//! (escaping lengthens text, so the rendered form is measured); the
//! splitter keeps code fences balanced and never cuts a character, so each
//! part renders on its own. A reply with buttons is split to
//! [`SECTION_LIMIT`] instead, because its last part goes in a `section`
//! block (whose text Slack limits to 3,000 characters) above an `actions`
//! block holding the buttons.

use serde_json::{Value, json};
use switchboard_contract::markdown::MarkupRenderer;
use switchboard_contract::split::{LengthUnit, split_message_fitting};
use switchboard_contract::{Button, ButtonStyle};

use crate::mrkdwn::Mrkdwn;

/// The most characters one message's text holds here (Slack truncates far
/// later, at 40,000, but recommends 4,000).
pub const TEXT_LIMIT: usize = 4000;

/// The most characters of a `section` block's text.
pub const SECTION_LIMIT: usize = 3000;

/// The longest button label Slack shows.
const LABEL_LIMIT: usize = 75;

/// The most buttons one `actions` block holds.
const MAX_BUTTONS: usize = 25;

/// The reply's parts as `mrkdwn`, each at most `limit` characters; parts
/// that render to nothing are dropped.
pub(crate) fn parts(markdown: &str, limit: usize) -> Vec<String> {
    let unit = LengthUnit::Chars;
    let fits = |piece: &str| unit.measure(&Mrkdwn.render(piece)) <= limit;
    split_message_fitting(markdown, limit, unit, &fits)
        .iter()
        .map(|piece| Mrkdwn.render(piece))
        .filter(|part| !part.trim().is_empty())
        .collect()
}

/// The limit a reply's parts are split to.
pub(crate) fn limit_for(buttons: &[Button]) -> usize {
    if buttons.is_empty() {
        TEXT_LIMIT
    } else {
        SECTION_LIMIT
    }
}

/// The blocks of a message showing `text` (already `mrkdwn`) with
/// `buttons` under it: a `section`, then an `actions` block whose buttons'
/// `value` is their action id (their `action_id` too, made unique within
/// the block).
pub(crate) fn blocks(text: &str, buttons: &[Button]) -> Value {
    let mut blocks = vec![section(text)];
    if !buttons.is_empty() {
        let mut seen: Vec<&str> = Vec::new();
        let elements: Vec<Value> = buttons
            .iter()
            .take(MAX_BUTTONS)
            .map(|button| {
                let id = button.action.as_str();
                let repeats = seen.iter().filter(|&&other| other == id).count();
                seen.push(id);
                let action_id = if repeats == 0 {
                    id.to_owned()
                } else {
                    format!("{id}#{repeats}")
                };
                button_element(button, action_id)
            })
            .collect();
        blocks.push(
            json!({"type": "actions", "block_id": "switchboard_actions", "elements": elements}),
        );
    }
    Value::Array(blocks)
}

/// The blocks of a message showing only `text`: one section, or none when
/// the text is too long for one (then the message's `text` shows).
pub(crate) fn text_blocks(text: &str) -> Value {
    if text.chars().count() <= SECTION_LIMIT && !text.trim().is_empty() {
        Value::Array(vec![section(text)])
    } else {
        Value::Array(Vec::new())
    }
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

fn button_element(button: &Button, action_id: String) -> Value {
    let mut label: String = button.label.trim().to_owned();
    if label.is_empty() {
        label = button.action.as_str().to_owned();
    }
    if label.chars().count() > LABEL_LIMIT {
        label = label.chars().take(LABEL_LIMIT - 1).collect::<String>() + "…";
    }
    let mut element = json!({
        "type": "button",
        "text": {"type": "plain_text", "text": label, "emoji": true},
        "action_id": action_id,
        "value": button.action.as_str(),
    });
    let style = match button.style {
        ButtonStyle::Plain => None,
        ButtonStyle::Primary => Some("primary"),
        ButtonStyle::Danger => Some("danger"),
    };
    if let Some(style) = style {
        element["style"] = json!(style);
    }
    element
}

#[cfg(test)]
mod tests {
    use switchboard_contract::ActionId;

    use super::*;

    #[test]
    fn a_long_reply_is_split_into_rendered_parts_within_the_limit() {
        let paragraph = "Some **bold** text & more words to fill the line. ".repeat(10);
        let code = format!("```rust\n{}```", "let x = a < b;\n".repeat(200));
        let markdown = format!("{paragraph}\n\n{code}\n\n{paragraph}");
        let parts = parts(&markdown, TEXT_LIMIT);
        assert!(parts.len() > 1);
        for part in &parts {
            assert!(part.chars().count() <= TEXT_LIMIT);
            assert_eq!(part.matches("```").count() % 2, 0, "{part}");
            assert!(!part.contains("**"));
        }
    }

    #[test]
    fn whitespace_gives_no_parts() {
        assert!(parts(" \n\n ", TEXT_LIMIT).is_empty());
    }

    #[test]
    fn buttons_go_in_an_actions_block_under_a_section() {
        let yes =
            Button::new(ActionId::parse("ap:1:yes").unwrap(), "Allow").styled(ButtonStyle::Primary);
        let no = Button::new(ActionId::parse("ap:1:no").unwrap(), "x".repeat(100))
            .styled(ButtonStyle::Danger);
        let again = Button::new(ActionId::parse("ap:1:yes").unwrap(), "Allow too");
        let blocks = blocks("Run *it*?", &[yes, no, again]);
        assert_eq!(blocks[0]["text"]["text"], "Run *it*?");
        let elements = blocks[1]["elements"].as_array().unwrap();
        assert_eq!(elements[0]["value"], "ap:1:yes");
        assert_eq!(elements[0]["action_id"], "ap:1:yes");
        assert_eq!(elements[0]["style"], "primary");
        assert_eq!(elements[1]["style"], "danger");
        assert_eq!(
            elements[1]["text"]["text"]
                .as_str()
                .unwrap()
                .chars()
                .count(),
            75
        );
        assert_eq!(elements[2]["action_id"], "ap:1:yes#1");
        assert!(elements[2].get("style").is_none());
    }

    #[test]
    fn text_blocks_hold_one_section_when_it_fits() {
        assert_eq!(text_blocks("done")[0]["type"], "section");
        assert_eq!(text_blocks(&"x".repeat(3001)), json!([]));
    }
}
