//! A webhook payload, normalised into what the core takes: messages for
//! [`InboundSink::submit`](switchboard_contract::InboundSink::submit),
//! button presses for `act`, delivery statuses for `delivery_status`.
//!
//! - Every chat is direct: the Cloud API has no group messages. The chat
//!   and the sender are the person's `wa_id` (a phone number, never logged
//!   in full); the account is the receiving number's Phone Number ID; the
//!   event id is the message's `wamid`, so a redelivered payload repeats
//!   it and the core drops the repeat.
//! - `text`, `button` (a template's quick reply) and `location` (a note
//!   with its name, address and coordinates) become text; `image`,
//!   `audio` (`voice: true` is a voice note), `video`, `document` (with its
//!   file name) and `sticker` become attachments whose fetcher downloads
//!   them, their caption the text; a reply's `context.id` is `reply_to`.
//! - `interactive` `button_reply`/`list_reply` is a press of one of the
//!   core's buttons: its id is the [`ActionId`].
//! - `reaction` is passed on only with `react_to_reactions` (the emoji as
//!   the text, replying to the message reacted to); other types are
//!   ignored with a debug line.
//!
//! Every message also tells [`Contacts`] when the person last wrote.

use std::collections::HashMap;
use std::sync::Arc;

use switchboard_contract::{
    ActionId, Attachment, AttachmentKind, ChatId, ChatKind, DeliveryState, DeliveryStatus, EventId,
    IdError, InboundAction, InboundMessage, MediaFetcher, Sender, UserId,
};

use crate::api::Graph;
use crate::media::WhatsAppMedia;
use crate::numbers::{Number, Numbers};
use crate::payload::{self, Media, Message, MessagesValue, Notification, Status};
use crate::platform;
use crate::redact;
use crate::window::{Clock, Contacts, unix};

/// One thing for the core, in the order the payload held it.
pub(crate) enum Item {
    Message(Box<InboundMessage>),
    Action(InboundAction),
    /// A delivery status, with the error code of a failure.
    Status {
        status: DeliveryStatus,
        code: Option<i64>,
    },
}

/// What a normalisation needs.
pub(crate) struct Normaliser<'a> {
    pub numbers: &'a Numbers,
    pub graph: &'a Arc<Graph>,
    pub contacts: &'a Contacts,
    pub clock: &'a dyn Clock,
    pub react_to_reactions: bool,
}

/// What a message says, by its type.
enum Content {
    Text {
        text: String,
        reply_to: Option<String>,
    },
    Media {
        kind: AttachmentKind,
        media: Media,
    },
    Press(String),
    Ignored(&'static str),
}

impl Normaliser<'_> {
    /// Everything in `notification` for the core. Changes of other
    /// fields, for numbers not configured here, and parts that do not
    /// parse are skipped (logged); they would not parse on redelivery
    /// either.
    pub(crate) fn items(&self, notification: Notification) -> Vec<Item> {
        let mut items = Vec::new();
        for change in notification
            .entry
            .into_iter()
            .flat_map(|entry| entry.changes)
        {
            if change.field != payload::MESSAGES_FIELD {
                tracing::debug!(field = %change.field, "WhatsApp webhook field ignored");
                continue;
            }
            let Ok(value) = serde_json::from_value::<MessagesValue>(change.value) else {
                tracing::warn!("WhatsApp messages change that does not parse; skipped");
                continue;
            };
            let Some(number) = self.numbers.get(&value.metadata.phone_number_id) else {
                tracing::warn!(
                    phone_number_id = %redact::scrub(&value.metadata.phone_number_id),
                    "WhatsApp webhook for a phone number not configured here; ignored"
                );
                continue;
            };
            self.change(number, value, &mut items);
        }
        items
    }

    fn change(&self, number: &Arc<Number>, value: MessagesValue, items: &mut Vec<Item>) {
        let names: HashMap<String, String> = value
            .contacts
            .into_iter()
            .filter_map(|contact| Some((contact.wa_id, contact.profile?.name?)))
            .collect();
        for raw in value.messages {
            match serde_json::from_value::<Message>(raw) {
                Ok(message) => items.extend(self.message(number, message, &names)),
                Err(_) => tracing::warn!("WhatsApp message that does not parse; skipped"),
            }
        }
        for raw in value.statuses {
            match serde_json::from_value::<Status>(raw) {
                Ok(status) => items.extend(status_item(number, status)),
                Err(_) => tracing::warn!("WhatsApp status that does not parse; skipped"),
            }
        }
    }

    fn message(
        &self,
        number: &Arc<Number>,
        message: Message,
        names: &HashMap<String, String>,
    ) -> Option<Item> {
        let now = unix(self.clock.now());
        let sent = message.timestamp.map_or(now, |sent| sent.min(now));
        self.contacts
            .inbound(&number.id, &message.from, &message.id, sent);
        let content = content(&message, self.react_to_reactions);
        if let Content::Ignored(why) = content {
            tracing::debug!(
                kind = %message.kind,
                wamid = %redact::message(&message.id),
                why,
                "WhatsApp message ignored"
            );
            return None;
        }
        let built = self.build(number, message, names, content);
        built.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "WhatsApp message with an unusable id; skipped");
            None
        })
    }

    fn build(
        &self,
        number: &Arc<Number>,
        message: Message,
        names: &HashMap<String, String>,
        content: Content,
    ) -> Result<Option<Item>, IdError> {
        let context = message.context.and_then(|context| context.id);
        let mut press = None;
        let (text, reply_to, attachments) = match content {
            Content::Text { text, reply_to } => (text, reply_to.or(context), Vec::new()),
            Content::Media { kind, media } => {
                let text = media.caption.clone().unwrap_or_default();
                (text, context, vec![self.attachment(number, kind, media)])
            }
            Content::Press(id) => {
                press = Some(id);
                (String::new(), context, Vec::new())
            }
            Content::Ignored(_) => return Ok(None),
        };
        let normalised = InboundMessage {
            platform: platform(),
            account: number.account.clone(),
            event_id: EventId::parse(message.id.as_str())?,
            chat: ChatId::parse(message.from.as_str())?,
            chat_kind: ChatKind::Direct,
            thread: None,
            sender: Sender {
                id: UserId::parse(message.from.as_str())?,
                display_name: names.get(&message.from).cloned(),
                is_bot: false,
            },
            text,
            mentions_bot: true,
            reply_to,
            message_id: Some(message.id.clone()),
            attachments,
        };
        if let Some(id) = press {
            return Ok(action(normalised, id).map(Item::Action));
        }
        tracing::info!(
            account = %number.account,
            from = %redact::phone(&message.from),
            wamid = %redact::message(&message.id),
            kind = %message.kind,
            "WhatsApp message received"
        );
        Ok(Some(Item::Message(Box::new(normalised))))
    }

    fn attachment(&self, number: &Number, kind: AttachmentKind, media: Media) -> Attachment {
        let fetcher = WhatsAppMedia {
            graph: Arc::clone(self.graph),
            token: number.token.clone(),
            media_id: media.id,
        };
        Attachment {
            kind,
            url: None,
            name: media.filename,
            media_type: media.mime_type,
            size: media.file_size,
            fetch: Some(MediaFetcher::new(fetcher)),
        }
    }
}

/// The press of the button `id` that `message` (a reply to the question)
/// is; `None` when the id cannot be one of the core's.
fn action(message: InboundMessage, id: String) -> Option<InboundAction> {
    let Ok(action) = ActionId::parse(id) else {
        tracing::debug!("WhatsApp button press with an id that is not ours; ignored");
        return None;
    };
    Some(InboundAction {
        platform: message.platform,
        account: message.account,
        event_id: message.event_id,
        chat: message.chat,
        chat_kind: message.chat_kind,
        thread: message.thread,
        sender: message.sender,
        action,
        message_id: message.reply_to,
    })
}

/// What `message` says, by its type.
fn content(message: &Message, reactions: bool) -> Content {
    let media = |kind, media: &Option<Media>| match media {
        Some(media) => Content::Media {
            kind,
            media: media.clone(),
        },
        None => Content::Ignored("a media message without its media"),
    };
    let text = |text: String| Content::Text {
        text,
        reply_to: None,
    };
    match message.kind.as_str() {
        "text" => text(
            message
                .text
                .as_ref()
                .map(|t| t.body.clone())
                .unwrap_or_default(),
        ),
        "image" => media(AttachmentKind::Image, &message.image),
        "audio" => {
            let voice = message.audio.as_ref().is_some_and(|audio| audio.voice);
            let kind = if voice {
                AttachmentKind::Voice
            } else {
                AttachmentKind::Audio
            };
            media(kind, &message.audio)
        }
        "video" => media(AttachmentKind::Video, &message.video),
        "document" => media(AttachmentKind::Document, &message.document),
        "sticker" => media(AttachmentKind::Sticker, &message.sticker),
        "location" => match &message.location {
            Some(location) => text(location_note(location)),
            None => Content::Ignored("a location message without its location"),
        },
        "button" => match message.button.as_ref().and_then(|b| b.text.clone()) {
            Some(tapped) => text(tapped),
            None => Content::Ignored("a quick reply without its text"),
        },
        "interactive" => press(message),
        "reaction" if reactions => reaction(message),
        "reaction" => Content::Ignored("reactions are turned off (react_to_reactions)"),
        _ => Content::Ignored("unsupported message type"),
    }
}

fn press(message: &Message) -> Content {
    let Some(interactive) = &message.interactive else {
        return Content::Ignored("an interactive message without its reply");
    };
    let reply = match interactive.kind.as_str() {
        "button_reply" => interactive.button_reply.as_ref(),
        "list_reply" => interactive.list_reply.as_ref(),
        _ => None,
    };
    match reply {
        Some(reply) => Content::Press(reply.id.clone()),
        None => Content::Ignored("an interactive reply of another kind"),
    }
}

fn reaction(message: &Message) -> Content {
    let Some(reaction) = &message.reaction else {
        return Content::Ignored("a reaction message without its reaction");
    };
    match reaction.emoji.as_deref().filter(|emoji| !emoji.is_empty()) {
        Some(emoji) => Content::Text {
            text: emoji.to_owned(),
            reply_to: reaction.message_id.clone(),
        },
        None => Content::Ignored("a reaction was removed"),
    }
}

/// `📍 Name, Address (lat, lon)`, with what the location names.
fn location_note(location: &payload::Location) -> String {
    let mut parts: Vec<String> = [&location.name, &location.address]
        .into_iter()
        .flatten()
        .filter(|part| !part.trim().is_empty())
        .cloned()
        .collect();
    if let (Some(lat), Some(lon)) = (location.latitude, location.longitude) {
        parts.push(format!("({lat}, {lon})"));
    }
    let described = parts.join(", ").replace(", (", " (");
    format!("📍 Location: {described}")
}

/// A status callback as a [`DeliveryStatus`]; statuses other than sent,
/// delivered, read and failed are ignored.
fn status_item(number: &Number, status: Status) -> Option<Item> {
    let first = status.errors.first();
    let code = first.and_then(|error| error.code);
    let state = match status.status.as_str() {
        "sent" => DeliveryState::Sent,
        "delivered" => DeliveryState::Delivered,
        "read" => DeliveryState::Read,
        "failed" => DeliveryState::Failed {
            code,
            reason: redact::scrub(
                first
                    .and_then(|error| error.title.as_deref())
                    .unwrap_or("failed"),
            ),
        },
        other => {
            tracing::debug!(status = %other, "WhatsApp status of another kind ignored");
            return None;
        }
    };
    let wamid = redact::message(&status.id);
    let recipient = redact::phone(&status.recipient_id);
    match &state {
        DeliveryState::Failed { reason, .. } => {
            tracing::warn!(%wamid, %recipient, code, %reason, "WhatsApp message failed");
        }
        _ => {
            tracing::debug!(%wamid, %recipient, state = %status.status, "WhatsApp delivery status")
        }
    }
    let chat = ChatId::parse(status.recipient_id).ok()?;
    Some(Item::Status {
        status: DeliveryStatus {
            platform: platform(),
            account: number.account.clone(),
            chat,
            message_id: status.id,
            state,
        },
        code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_read_as_notes() {
        let location = payload::Location {
            latitude: Some(52.370_216),
            longitude: Some(4.895_168),
            name: Some("Dam Square".to_owned()),
            address: Some("Amsterdam".to_owned()),
        };
        assert_eq!(
            location_note(&location),
            "📍 Location: Dam Square, Amsterdam (52.370216, 4.895168)"
        );
        let bare = payload::Location {
            latitude: Some(1.5),
            longitude: Some(-2.0),
            name: None,
            address: None,
        };
        assert_eq!(location_note(&bare), "📍 Location: (1.5, -2)");
    }
}
