//! How the model tells group members apart: in a group chat each user
//! message reaches it as `[Name] text`, the name being the sender's display
//! name on the platform (or `user <id>` when the platform gives none).
//!
//! The label is fixed when the message is recorded (`inbound.speaker`) and
//! the user entry is stored with it, so the conversation replays
//! byte-identically to the model whatever the sender later renames to.
//! Direct chats and the API stay unlabelled: there is one person to talk to.

use switchboard_contract::{ChatKind, Sender};

/// The longest label, in characters; longer names are cut.
const MAX_LABEL_CHARS: usize = 64;

/// The label of `sender` in a chat of `kind`: `None` outside group chats.
#[must_use]
pub fn label(kind: ChatKind, sender: &Sender) -> Option<String> {
    if kind != ChatKind::Group {
        return None;
    }
    let name = sender
        .display_name
        .as_deref()
        .map(clean)
        .filter(|name| !name.is_empty());
    Some(name.unwrap_or_else(|| clean(&format!("user {}", sender.id.as_str()))))
}

/// The user entry's content for `text` sent by `speaker`.
#[must_use]
pub fn content(speaker: Option<&str>, text: &str) -> String {
    match speaker {
        Some(name) => format!("[{name}] {text}"),
        None => text.to_owned(),
    }
}

/// `name` on one line, without the brackets that delimit it, whitespace
/// runs collapsed, at most [`MAX_LABEL_CHARS`] characters.
fn clean(name: &str) -> String {
    let spaced: String = name
        .chars()
        .map(|c| {
            if c.is_control() || c.is_whitespace() || c == '[' || c == ']' {
                ' '
            } else {
                c
            }
        })
        .collect();
    spaced
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MAX_LABEL_CHARS)
        .collect::<String>()
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use switchboard_contract::UserId;

    use super::*;

    fn sender(name: Option<&str>) -> Sender {
        Sender {
            id: UserId::parse("42").expect("id"),
            display_name: name.map(str::to_owned),
            is_bot: false,
        }
    }

    #[test]
    fn only_group_messages_are_labelled() {
        assert_eq!(label(ChatKind::Direct, &sender(Some("Ann"))), None);
        assert_eq!(
            label(ChatKind::Group, &sender(Some("Ann"))).as_deref(),
            Some("Ann")
        );
        assert_eq!(content(Some("Ann"), "hi"), "[Ann] hi");
        assert_eq!(content(None, "hi"), "hi");
    }

    #[test]
    fn names_are_one_clean_line_or_the_user_id() {
        let odd = sender(Some("  Ann\n[admin]\t Lee  "));
        assert_eq!(
            label(ChatKind::Group, &odd).as_deref(),
            Some("Ann admin Lee")
        );
        assert_eq!(
            label(ChatKind::Group, &sender(None)).as_deref(),
            Some("user 42")
        );
        assert_eq!(
            label(ChatKind::Group, &sender(Some(" \n "))).as_deref(),
            Some("user 42")
        );
        let long = "é".repeat(100);
        let cut = label(ChatKind::Group, &sender(Some(&long))).expect("label");
        assert_eq!(cut.chars().count(), MAX_LABEL_CHARS);
    }
}
