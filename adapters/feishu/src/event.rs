//! Feishu's webhook payloads (event schema 2.0, URL verification) and their
//! normalisation into [`InboundMessage`].
//!
//! Only the fields the gateway uses are modelled; unknown fields are ignored,
//! and timestamps may be strings or integers. `im.message.receive_v1` text and
//! post (rich text) messages become inbound messages, and so do image, file
//! and audio messages: their resource becomes an attachment whose bytes the
//! core fetches through the Open API (`im/v1/messages/{id}/resources/{key}`);
//! other message types (stickers…) and other events are acknowledged and
//! dropped.
//!
//! Threads: a message's `thread_id` (a topic, `omt_…`) or else its `root_id`
//! (the first message of the reply chain it belongs to) becomes the
//! [`InboundMessage::thread`], so a thread or reply chain is one session.
//! `parent_id` (the message replied to) becomes `reply_to`.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use switchboard_contract::{
    AccountId, Attachment, AttachmentKind, ChatId, ChatKind, EventId, FetchError, FetchMedia,
    IdError, InboundMessage, MediaFetcher, PlatformName, Sender, ThreadId, UserId,
};

use crate::PLATFORM;
use crate::api::OpenApi;

/// The event type of a received message.
pub const MESSAGE_RECEIVE: &str = "im.message.receive_v1";

/// The outer JSON of any webhook request, after decryption. Fields from the
/// URL verification body and from the 2.0 event envelope live side by side;
/// which ones are present tells the request's kind.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Envelope {
    /// Present when the body is encrypted (then nothing else is).
    pub encrypt: Option<String>,
    /// `url_verification`, or `event_callback` for schema 1.0 events.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub challenge: Option<String>,
    /// The verification token of URL verification and schema 1.0 events.
    pub token: Option<String>,
    pub header: Option<EventHeader>,
    /// Kept raw: its shape depends on `header.event_type`.
    pub event: Option<serde_json::Value>,
}

impl Envelope {
    pub fn is_url_verification(&self) -> bool {
        self.kind.as_deref() == Some("url_verification")
    }

    /// The verification token wherever this kind of request carries it.
    pub fn token(&self) -> Option<&str> {
        self.header
            .as_ref()
            .and_then(|header| header.token.as_deref())
            .or(self.token.as_deref())
    }
}

/// The schema 2.0 event header.
#[derive(Debug, Deserialize)]
pub(crate) struct EventHeader {
    pub event_id: String,
    pub event_type: String,
    #[serde(default)]
    pub create_time: Option<Timestamp>,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub app_id: Option<String>,
}

/// A millisecond timestamp, sent as a string or a number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Timestamp {
    Number(i64),
    Text(String),
}

impl Timestamp {
    /// Milliseconds since the epoch, if the value is a number at all.
    pub fn millis(&self) -> Option<i64> {
        match self {
            Self::Number(value) => Some(*value),
            Self::Text(value) => value.trim().parse().ok(),
        }
    }
}

/// The `event` object of `im.message.receive_v1`.
#[derive(Debug, Deserialize)]
pub(crate) struct MessageReceived {
    pub sender: EventSender,
    pub message: EventMessage,
}

#[derive(Debug, Deserialize)]
pub(crate) struct EventSender {
    #[serde(default)]
    pub sender_id: Option<UserIds>,
    /// `user` for people; `app` and others for bots.
    #[serde(default)]
    pub sender_type: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct UserIds {
    #[serde(default)]
    pub open_id: Option<String>,
    #[serde(default)]
    pub union_id: Option<String>,
    #[serde(default)]
    pub user_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct EventMessage {
    pub message_id: String,
    #[serde(default)]
    pub root_id: Option<String>,
    #[serde(default)]
    pub parent_id: Option<String>,
    #[serde(default)]
    pub thread_id: Option<String>,
    pub chat_id: String,
    /// `p2p` or `group`.
    pub chat_type: String,
    pub message_type: String,
    /// A JSON document in a string; its shape depends on `message_type`.
    #[serde(default)]
    pub content: Option<String>,
    /// Absent or `null` when nobody is mentioned.
    #[serde(default)]
    pub mentions: Option<Vec<Mention>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Mention {
    /// The placeholder in the text, e.g. `@_user_1`.
    pub key: String,
    #[serde(default)]
    pub id: Option<UserIds>,
    #[serde(default)]
    pub name: Option<String>,
}

/// Why a message event was not turned into an [`InboundMessage`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum NormaliseError {
    #[error("event does not match the im.message.receive_v1 schema: {0}")]
    Schema(serde_json::Error),
    #[error("message type {0} is not handled")]
    UnsupportedType(String),
    #[error("the sender has no id")]
    NoSender,
    #[error("invalid id: {0}")]
    Id(IdError),
}

impl From<serde_json::Error> for NormaliseError {
    fn from(err: serde_json::Error) -> Self {
        Self::Schema(err)
    }
}

impl From<IdError> for NormaliseError {
    fn from(err: IdError) -> Self {
        Self::Id(err)
    }
}

/// The values normalisation needs besides the event.
pub(crate) struct Context<'a> {
    pub account: &'a AccountId,
    /// The bot's own open_id, from `GET /open-apis/bot/v3/info`.
    pub bot_open_id: &'a str,
    /// Downloads message resources; `None` in tests of normalisation.
    pub api: Option<&'a Arc<OpenApi>>,
}

/// One message resource, downloaded with the tenant token.
struct FeishuResource {
    api: Arc<OpenApi>,
    message_id: String,
    key: String,
    /// `image` or `file`, as the resources endpoint names it.
    kind: &'static str,
}

#[async_trait]
impl FetchMedia for FeishuResource {
    async fn fetch(&self, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        self.api
            .resource(&self.message_id, &self.key, self.kind, max_bytes)
            .await
    }
}

/// The resource of an image, file or audio message: its attachment kind,
/// the resources endpoint's `type`, its key and file name.
fn resource_of(
    message_type: &str,
    content: &str,
) -> Option<(AttachmentKind, &'static str, String, Option<String>)> {
    #[derive(Deserialize)]
    struct Content {
        #[serde(default)]
        image_key: Option<String>,
        #[serde(default)]
        file_key: Option<String>,
        #[serde(default)]
        file_name: Option<String>,
    }
    let content: Content = serde_json::from_str(content).ok()?;
    match message_type {
        "image" => Some((AttachmentKind::Image, "image", content.image_key?, None)),
        "file" => Some((
            AttachmentKind::Document,
            "file",
            content.file_key?,
            content.file_name,
        )),
        "audio" => Some((AttachmentKind::Voice, "file", content.file_key?, None)),
        _ => None,
    }
}

/// Turns an `im.message.receive_v1` event into an [`InboundMessage`].
pub(crate) fn normalise(
    ctx: &Context<'_>,
    event_id: &str,
    event: serde_json::Value,
) -> Result<InboundMessage, NormaliseError> {
    let received: MessageReceived = serde_json::from_value(event)?;
    let message = received.message;
    let content = message.content.as_deref().unwrap_or_default();
    let mut attachments = Vec::new();
    let raw_text = match message.message_type.as_str() {
        "text" => text_content(content),
        "post" => post_content(content),
        kind @ ("image" | "file" | "audio") => {
            let (kind, endpoint_type, key, name) = resource_of(kind, content)
                .ok_or_else(|| NormaliseError::UnsupportedType(kind.to_owned()))?;
            attachments.push(Attachment {
                fetch: ctx.api.map(|api| {
                    MediaFetcher::new(FeishuResource {
                        api: Arc::clone(api),
                        message_id: message.message_id.clone(),
                        key,
                        kind: endpoint_type,
                    })
                }),
                ..Attachment::new(kind, name)
            });
            String::new()
        }
        other => return Err(NormaliseError::UnsupportedType(other.to_owned())),
    };
    let mentions = message.mentions.unwrap_or_default();
    let (text, bot_mentioned) = resolve_mentions(&raw_text, &mentions, ctx.bot_open_id);
    let chat_kind = if message.chat_type == "p2p" {
        ChatKind::Direct
    } else {
        ChatKind::Group
    };
    let sender_ids = received.sender.sender_id.unwrap_or_default();
    let sender_id = non_empty(sender_ids.open_id)
        .or(non_empty(sender_ids.union_id))
        .or(non_empty(sender_ids.user_id))
        .ok_or(NormaliseError::NoSender)?;
    let thread = non_empty(message.thread_id).or(non_empty(message.root_id));
    Ok(InboundMessage {
        platform: PlatformName::parse(PLATFORM)?,
        account: ctx.account.clone(),
        event_id: EventId::parse(event_id)?,
        chat: ChatId::parse(message.chat_id)?,
        chat_kind,
        thread: thread.map(ThreadId::parse).transpose()?,
        sender: Sender {
            id: UserId::parse(sender_id)?,
            display_name: None,
            is_bot: received.sender.sender_type.as_deref() != Some("user"),
        },
        text,
        mentions_bot: chat_kind == ChatKind::Direct || bot_mentioned,
        reply_to: non_empty(message.parent_id),
        message_id: Some(message.message_id),
        attachments,
    })
}

/// The text of a `text` message: `{"text":"…"}`.
fn text_content(content: &str) -> String {
    #[derive(Deserialize)]
    struct Text {
        #[serde(default)]
        text: String,
    }
    serde_json::from_str::<Text>(content)
        .map(|t| t.text)
        .unwrap_or_default()
}

/// The text of a `post` message: the title, then one line per paragraph.
/// Accepts the flat form (`{"title","content"}`) and the per-locale form
/// (`{"zh_cn":{"title","content"}}`, first locale taken). Mentions (`at`
/// elements) are written as their placeholder key so that
/// [`resolve_mentions`] treats them like those of text messages.
fn post_content(content: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(content) else {
        return String::new();
    };
    let post = if value.get("content").is_some() {
        &value
    } else {
        match value
            .as_object()
            .and_then(|locales| locales.values().next())
        {
            Some(first) => first,
            None => return String::new(),
        }
    };
    let mut lines = Vec::new();
    if let Some(title) = post.get("title").and_then(|t| t.as_str())
        && !title.trim().is_empty()
    {
        lines.push(title.to_owned());
    }
    let paragraphs = post.get("content").and_then(|c| c.as_array());
    for paragraph in paragraphs.into_iter().flatten() {
        let mut line = String::new();
        for element in paragraph.as_array().into_iter().flatten() {
            let field = |name: &str| element.get(name).and_then(|v| v.as_str());
            match field("tag").unwrap_or_default() {
                "text" | "md" => line.push_str(field("text").unwrap_or_default()),
                "a" => match (field("text"), field("href")) {
                    (Some(text), Some(href)) if text != href => {
                        line.push_str(&format!("{text} ({href})"));
                    }
                    (_, Some(href)) => line.push_str(href),
                    (Some(text), None) => line.push_str(text),
                    (None, None) => {}
                },
                "at" => line.push_str(field("user_id").unwrap_or_default()),
                "code_block" => {
                    let language = field("language").unwrap_or_default().to_ascii_lowercase();
                    let code = field("text").unwrap_or_default().trim_end_matches('\n');
                    line.push_str(&format!("```{language}\n{code}\n```"));
                }
                _ => {}
            }
        }
        lines.push(line);
    }
    lines.join("\n").trim().to_owned()
}

/// Replaces mention placeholders in `text`: the bot's own mention is removed
/// (with one following space), others become `@name`. Returns the text and
/// whether the bot was mentioned. `@_all` is never the bot.
fn resolve_mentions(text: &str, mentions: &[Mention], bot_open_id: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut mentioned = false;
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        // The longest key wins, so `@_user_1` never matches inside `@_user_10`.
        let hit = mentions
            .iter()
            .filter(|m| !m.key.is_empty() && rest.starts_with(m.key.as_str()))
            .max_by_key(|m| m.key.len());
        match hit {
            Some(mention) => {
                rest = &rest[mention.key.len()..];
                let is_bot = mention.key != "@_all"
                    && !bot_open_id.is_empty()
                    && mention.id.as_ref().and_then(|id| id.open_id.as_deref())
                        == Some(bot_open_id);
                if is_bot {
                    mentioned = true;
                    rest = rest.strip_prefix(' ').unwrap_or(rest);
                } else if mention.key == "@_all" {
                    out.push_str("@all");
                } else {
                    out.push('@');
                    out.push_str(mention.name.as_deref().unwrap_or(&mention.key[1..]));
                }
            }
            None => {
                out.push('@');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    (out.trim().to_owned(), mentioned)
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mention(key: &str, open_id: &str, name: &str) -> Mention {
        Mention {
            key: key.to_owned(),
            id: Some(UserIds {
                open_id: Some(open_id.to_owned()),
                ..UserIds::default()
            }),
            name: Some(name.to_owned()),
        }
    }

    #[test]
    fn the_bot_mention_is_stripped_and_others_are_named() {
        let mentions = [
            mention("@_user_1", "ou_bot", "Switchboard"),
            mention("@_user_10", "ou_ann", "Ann"),
        ];
        let (text, mentioned) =
            resolve_mentions("@_user_1 ask @_user_10 about it", &mentions, "ou_bot");
        assert!(mentioned);
        assert_eq!(text, "ask @Ann about it");
    }

    #[test]
    fn at_all_is_not_a_mention_of_the_bot() {
        let mentions = [Mention {
            key: "@_all".to_owned(),
            id: None,
            name: Some("所有人".to_owned()),
        }];
        let (text, mentioned) = resolve_mentions("@_all standup now", &mentions, "ou_bot");
        assert!(!mentioned);
        assert_eq!(text, "@all standup now");
    }

    #[test]
    fn post_messages_flatten_to_lines_with_mention_keys() {
        let content = json!({
            "title": "Plan",
            "content": [
                [{"tag": "at", "user_id": "@_user_1", "user_name": "bot"},
                 {"tag": "text", "text": " see "},
                 {"tag": "a", "text": "doc", "href": "https://example.com"}],
                [{"tag": "img", "image_key": "img_x"}, {"tag": "text", "text": "second"}]
            ]
        })
        .to_string();
        assert_eq!(
            post_content(&content),
            "Plan\n@_user_1 see doc (https://example.com)\nsecond"
        );
        let localised =
            json!({"en_us": {"title": "", "content": [[{"tag": "text", "text": "hi"}]]}});
        assert_eq!(post_content(&localised.to_string()), "hi");
    }

    #[test]
    fn timestamps_may_be_strings_or_numbers() {
        let a: Timestamp = serde_json::from_value(json!("1700000000000")).unwrap();
        let b: Timestamp = serde_json::from_value(json!(1_700_000_000_000_i64)).unwrap();
        assert_eq!(a.millis(), b.millis());
    }
}
