//! The messages a reply becomes, and their request bodies
//! (`POST /{phone-number-id}/messages`).
//!
//! A reply is rendered and split by [`crate::format`] into text messages
//! (`type: "text"`, `preview_url: false`), the first replying to the
//! person's message (`context.message_id`). Buttons go under the last
//! part: up to three as reply buttons (`interactive.type: "button"`, titles
//! cut to 20 characters, ids the [`ActionId`](switchboard_contract::ActionId)s),
//! more as a list (`interactive.type: "list"`, up to ten rows, titles cut to
//! 24 characters with the whole label, up to 72, as the row's
//! description). An interactive body holds at most 1,024 characters: when
//! the last part is longer it goes as text too, and the buttons follow
//! under `buttons_prompt`.
//!
//! Outside the 24-hour window a reply goes as the configured template
//! instead (`template`): its body parameter is the reply on one line
//! (WhatsApp refuses line breaks, tabs and runs of spaces in parameters),
//! cut to `max_chars` and ended with the truncation note.

use serde_json::{Value, json};
use switchboard_contract::Button;
use switchboard_contract::markdown::MarkupRenderer;

use crate::format::{INTERACTIVE_BODY_LIMIT, TEXT_LIMIT, UNIT, WhatsAppMarkup, render_chunks};
use crate::settings::{TemplateFill, TemplateSettings};

/// Most reply buttons one message holds.
pub const MAX_REPLY_BUTTONS: usize = 3;
/// Most rows one list message holds.
pub const MAX_LIST_ROWS: usize = 10;
/// Longest reply button title, in characters.
pub const BUTTON_TITLE_LIMIT: usize = 20;
/// Longest list row title, in characters.
pub const ROW_TITLE_LIMIT: usize = 24;
/// Longest list row description, in characters.
pub const ROW_DESCRIPTION_LIMIT: usize = 72;

/// One message of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// A text message (already WhatsApp formatting).
    Text(String),
    /// The reply's last part with its buttons (at most
    /// [`MAX_REPLY_BUTTONS`] as buttons, else a list).
    Interactive { body: String, buttons: Vec<Button> },
}

/// The messages `markdown` with `buttons` becomes; empty when it renders
/// to nothing and has no buttons.
pub(crate) fn plan(markdown: &str, buttons: &[Button], prompt: &str) -> Vec<Outgoing> {
    let mut chunks = render_chunks(markdown, TEXT_LIMIT);
    if buttons.is_empty() {
        return chunks.into_iter().map(Outgoing::Text).collect();
    }
    if buttons.len() > MAX_LIST_ROWS {
        tracing::warn!(
            buttons = buttons.len(),
            "a WhatsApp list holds {MAX_LIST_ROWS} answers; the rest are left out"
        );
    }
    let fits = chunks
        .last()
        .is_some_and(|last| UNIT.measure(last) <= INTERACTIVE_BODY_LIMIT);
    let body = match chunks.pop() {
        Some(last) if fits => last,
        Some(last) => {
            chunks.push(last);
            prompt.to_owned()
        }
        None => prompt.to_owned(),
    };
    let buttons = buttons.iter().take(MAX_LIST_ROWS).cloned().collect();
    chunks
        .into_iter()
        .map(Outgoing::Text)
        .chain([Outgoing::Interactive { body, buttons }])
        .collect()
}

impl Outgoing {
    /// The request body sending this to `to`, replying to `reply_to`.
    pub(crate) fn body(&self, to: &str, reply_to: Option<&str>, list_button: &str) -> Value {
        let mut body = match self {
            Self::Text(text) => json!({
                "type": "text",
                "text": { "body": text, "preview_url": false },
            }),
            Self::Interactive { body, buttons } if buttons.len() <= MAX_REPLY_BUTTONS => json!({
                "type": "interactive",
                "interactive": {
                    "type": "button",
                    "body": { "text": body },
                    "action": { "buttons": buttons.iter().map(reply_button).collect::<Vec<_>>() },
                },
            }),
            Self::Interactive { body, buttons } => json!({
                "type": "interactive",
                "interactive": {
                    "type": "list",
                    "body": { "text": body },
                    "action": {
                        "button": shorten(list_button, BUTTON_TITLE_LIMIT),
                        "sections": [{
                            "title": shorten(list_button, ROW_TITLE_LIMIT),
                            "rows": buttons.iter().map(list_row).collect::<Vec<_>>(),
                        }],
                    },
                },
            }),
        };
        address(&mut body, to, reply_to);
        body
    }
}

/// The template message standing for a reply of `markdown` to `to`.
pub(crate) fn template(to: &str, template: &TemplateSettings, markdown: &str) -> Value {
    let mut spec = json!({
        "name": template.name,
        "language": { "code": template.language },
    });
    if template.fill == TemplateFill::Body {
        let text = template_text(markdown, template);
        spec["components"] = json!([{
            "type": "body",
            "parameters": [{ "type": "text", "text": text }],
        }]);
    }
    let mut body = json!({ "type": "template", "template": spec });
    address(&mut body, to, None);
    body
}

/// The reply as one template parameter: rendered, on one line, cut to
/// `max_chars` with the truncation note.
pub(crate) fn template_text(markdown: &str, template: &TemplateSettings) -> String {
    let rendered = WhatsAppMarkup.render(markdown);
    let flat = rendered.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        // A parameter may not be empty (a reply of buttons only).
        return "…".to_owned();
    }
    if flat.chars().count() <= template.max_chars {
        return flat;
    }
    let note = &template.truncation_note;
    let keep = template.max_chars.saturating_sub(note.chars().count());
    let cut: String = flat.chars().take(keep).collect();
    format!("{}{note}", cut.trim_end())
}

/// Adds the fields every message carries.
fn address(body: &mut Value, to: &str, reply_to: Option<&str>) {
    body["messaging_product"] = json!("whatsapp");
    body["recipient_type"] = json!("individual");
    body["to"] = json!(to);
    if let Some(message_id) = reply_to.filter(|id| !id.is_empty()) {
        body["context"] = json!({ "message_id": message_id });
    }
}

fn reply_button(button: &Button) -> Value {
    json!({
        "type": "reply",
        "reply": {
            "id": button.action.as_str(),
            "title": label(button, BUTTON_TITLE_LIMIT),
        },
    })
}

fn list_row(button: &Button) -> Value {
    let mut row = json!({
        "id": button.action.as_str(),
        "title": label(button, ROW_TITLE_LIMIT),
    });
    if button.label.trim().chars().count() > ROW_TITLE_LIMIT {
        row["description"] = json!(shorten(button.label.trim(), ROW_DESCRIPTION_LIMIT));
    }
    row
}

/// The button's label cut to `limit`, or its action id when it has none.
fn label(button: &Button, limit: usize) -> String {
    let label = button.label.trim();
    let shown = if label.is_empty() {
        button.action.as_str()
    } else {
        label
    };
    shorten(shown, limit)
}

/// `text` in at most `limit` characters, ending with `…` when cut.
fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let cut: String = text.chars().take(limit.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use switchboard_contract::ActionId;

    use super::*;

    fn button(id: &str, label: &str) -> Button {
        Button::new(ActionId::parse(id).unwrap(), label)
    }

    #[test]
    fn a_reply_without_buttons_is_text_messages() {
        let plan = plan("Hello **there**", &[], "Choose:");
        assert_eq!(plan, [Outgoing::Text("Hello *there*".to_owned())]);
        let body = plan[0].body("15551234567", Some("wamid.q"), "Answers");
        assert_eq!(
            body,
            json!({
                "messaging_product": "whatsapp",
                "recipient_type": "individual",
                "to": "15551234567",
                "type": "text",
                "text": { "body": "Hello *there*", "preview_url": false },
                "context": { "message_id": "wamid.q" },
            })
        );
        assert!(super::plan("  ", &[], "Choose:").is_empty());
    }

    #[test]
    fn up_to_three_buttons_are_reply_buttons_under_the_text() {
        let buttons = [
            button("ap:1:allow", "Allow"),
            button("ap:1:deny", "Deny this one, and every later one"),
        ];
        let plan = plan("May I run `ls`?", &buttons, "Choose:");
        assert_eq!(plan.len(), 1);
        let body = plan[0].body("1555", None, "Answers");
        assert_eq!(body["type"], "interactive");
        assert_eq!(body["interactive"]["type"], "button");
        assert_eq!(body["interactive"]["body"]["text"], "May I run `ls`?");
        let sent = &body["interactive"]["action"]["buttons"];
        assert_eq!(
            sent[0]["reply"],
            json!({"id": "ap:1:allow", "title": "Allow"})
        );
        let title = sent[1]["reply"]["title"].as_str().unwrap();
        assert_eq!(title, "Deny this one, and…");
        assert!(title.chars().count() <= BUTTON_TITLE_LIMIT);
        assert!(body.get("context").is_none());
    }

    #[test]
    fn more_buttons_make_a_list_of_ten_at_most() {
        let buttons: Vec<_> = (0..12)
            .map(|n| {
                button(
                    &format!("pick:{n}"),
                    &format!("Option number {n} of a long list"),
                )
            })
            .collect();
        let plan = plan("Which one?", &buttons, "Choose:");
        let body = plan[0].body("1555", None, "Answers");
        assert_eq!(body["interactive"]["type"], "list");
        assert_eq!(body["interactive"]["action"]["button"], "Answers");
        let rows = body["interactive"]["action"]["sections"][0]["rows"]
            .as_array()
            .unwrap();
        assert_eq!(rows.len(), MAX_LIST_ROWS);
        assert_eq!(rows[3]["id"], "pick:3");
        assert!(rows[3]["title"].as_str().unwrap().chars().count() <= ROW_TITLE_LIMIT);
        assert_eq!(rows[3]["description"], "Option number 3 of a long list");
    }

    #[test]
    fn a_long_text_goes_first_and_the_buttons_follow_under_the_prompt() {
        let text = "word ".repeat(400);
        let plan = plan(&text, &[button("a", "A")], "Choose:");
        assert_eq!(plan.len(), 2);
        assert!(matches!(&plan[0], Outgoing::Text(t) if t.len() > INTERACTIVE_BODY_LIMIT));
        assert!(matches!(&plan[1], Outgoing::Interactive { body, .. } if body == "Choose:"));
    }

    #[test]
    fn template_text_is_one_line_cut_with_the_note() {
        let mut settings = TemplateSettings::new("reply_ready", "en_US");
        assert_eq!(
            template_text("# Hi\n\n- a\n- b\n\n```\nx    y\n```", &settings),
            "*Hi* - a - b ```x y```"
        );
        assert_eq!(template_text("", &settings), "…");
        settings.max_chars = 40;
        let text = template_text(&"long words ".repeat(20), &settings);
        assert_eq!(text.chars().count(), 40, "{text}");
        assert!(text.ends_with(&settings.truncation_note), "{text}");
    }

    #[test]
    fn templates_carry_the_reply_as_their_body_parameter_or_nothing() {
        let mut settings = TemplateSettings::new("reply_ready", "en_US");
        let body = template("1555", &settings, "Your answer");
        assert_eq!(body["type"], "template");
        assert_eq!(body["to"], "1555");
        assert_eq!(body["template"]["name"], "reply_ready");
        assert_eq!(body["template"]["language"]["code"], "en_US");
        assert_eq!(
            body["template"]["components"][0]["parameters"][0],
            json!({"type": "text", "text": "Your answer"})
        );
        settings.fill = TemplateFill::None;
        let body = template("1555", &settings, "Your answer");
        assert!(body["template"].get("components").is_none());
    }
}
