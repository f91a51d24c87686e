//! The webhook payloads Meta posts, as far as the adapter reads them.
//!
//! `{"object": "whatsapp_business_account", "entry": [{"id": <WABA id>,
//! "changes": [{"field": "messages", "value": {"metadata":
//! {"phone_number_id"}, "contacts": [{"wa_id", "profile": {"name"}}],
//! "messages": [...], "statuses": [...]}}]}]}`. Unknown fields and values
//! are tolerated; each change, message and status is read on its own, so
//! one that does not parse is skipped without losing the others.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The `object` of WhatsApp Business Account notifications.
pub(crate) const OBJECT: &str = "whatsapp_business_account";

/// The change field carrying messages and statuses.
pub(crate) const MESSAGES_FIELD: &str = "messages";

#[derive(Debug, Deserialize)]
pub(crate) struct Notification {
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub entry: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Entry {
    #[serde(default)]
    pub changes: Vec<Change>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Change {
    #[serde(default)]
    pub field: String,
    /// Read as [`MessagesValue`] only for the `messages` field.
    #[serde(default)]
    pub value: Value,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessagesValue {
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub contacts: Vec<Contact>,
    #[serde(default)]
    pub messages: Vec<Value>,
    #[serde(default)]
    pub statuses: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Metadata {
    #[serde(default)]
    pub phone_number_id: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Contact {
    #[serde(default)]
    pub wa_id: String,
    #[serde(default)]
    pub profile: Option<Profile>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Profile {
    #[serde(default)]
    pub name: Option<String>,
}

/// One message a person sent.
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    /// The sender's `wa_id`.
    pub from: String,
    /// The `wamid`.
    pub id: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub timestamp: Option<u64>,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub context: Option<Context>,
    #[serde(default)]
    pub text: Option<Text>,
    #[serde(default)]
    pub image: Option<Media>,
    #[serde(default)]
    pub audio: Option<Media>,
    #[serde(default)]
    pub video: Option<Media>,
    #[serde(default)]
    pub document: Option<Media>,
    #[serde(default)]
    pub sticker: Option<Media>,
    #[serde(default)]
    pub location: Option<Location>,
    #[serde(default)]
    pub interactive: Option<Interactive>,
    #[serde(default)]
    pub button: Option<QuickReply>,
    #[serde(default)]
    pub reaction: Option<Reaction>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Context {
    /// The message replied to (absent on forwarded messages).
    #[serde(default)]
    pub id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Text {
    #[serde(default)]
    pub body: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Media {
    pub id: String,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub caption: Option<String>,
    #[serde(default)]
    pub filename: Option<String>,
    /// On audio: recorded in the app as a voice note.
    #[serde(default)]
    pub voice: bool,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Location {
    #[serde(default)]
    pub latitude: Option<f64>,
    #[serde(default)]
    pub longitude: Option<f64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub address: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Interactive {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub button_reply: Option<Reply>,
    #[serde(default)]
    pub list_reply: Option<Reply>,
}

/// A press of a reply button or a pick from a list.
#[derive(Debug, Deserialize)]
pub(crate) struct Reply {
    pub id: String,
}

/// A tap on a template's quick-reply button.
#[derive(Debug, Deserialize)]
pub(crate) struct QuickReply {
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Reaction {
    #[serde(default)]
    pub message_id: Option<String>,
    /// Empty or absent when a reaction is removed.
    #[serde(default)]
    pub emoji: Option<String>,
}

/// What became of a message the business sent.
#[derive(Debug, Deserialize)]
pub(crate) struct Status {
    /// The `wamid` of the message sent.
    pub id: String,
    /// `sent`, `delivered`, `read` or `failed`.
    pub status: String,
    #[serde(default)]
    pub recipient_id: String,
    #[serde(default)]
    pub errors: Vec<StatusError>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StatusError {
    #[serde(default)]
    pub code: Option<i64>,
    #[serde(default)]
    pub title: Option<String>,
}

/// A number written as a JSON number or a string of digits (timestamps
/// come as strings); anything else reads as absent.
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        Some(Value::Number(number)) => number.as_u64(),
        Some(Value::String(text)) => text.trim().parse().ok(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_strings_or_numbers() {
        let message: Message =
            serde_json::from_str(r#"{"from":"1","id":"w","timestamp":"1750000000","type":"text"}"#)
                .unwrap();
        assert_eq!(message.timestamp, Some(1_750_000_000));
        let message: Message =
            serde_json::from_str(r#"{"from":"1","id":"w","timestamp":17,"type":"text"}"#).unwrap();
        assert_eq!(message.timestamp, Some(17));
        let message: Message =
            serde_json::from_str(r#"{"from":"1","id":"w","timestamp":null,"future":{}}"#).unwrap();
        assert_eq!(message.timestamp, None);
    }
}
