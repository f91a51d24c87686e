//! Telegram update → [`InboundMessage`].
//!
//! Private chats are direct chats; groups and supergroups are group chats,
//! with the forum topic (`message_thread_id` of a topic message) as the
//! thread. The event id is the update id, so a redelivered update always maps
//! to the same event. In groups the bot is addressed by an `@botname` mention
//! (case-insensitive), a `text_mention` of the bot, `/cmd@botname`, or a reply
//! to one of its messages; chats listed in `free_response_chats` count as
//! always addressed. Mentions of the bot are stripped from the text and
//! `/cmd@botname` becomes `/cmd`; a message starting with `/cmd@otherbot` is
//! not for us and is skipped. Captions count as text; media (the largest
//! size of a photo) come with a fetcher of their bytes. Only new messages are
//! handled; edits, channel posts and other update kinds are skipped.

use std::collections::HashSet;
use std::ops::Range;

use switchboard_contract::{
    AccountId, Attachment, ChatId, ChatKind, EventId, InboundMessage, PlatformName, Sender,
    ThreadId, UserId,
};
use switchboard_contract::{AttachmentKind, MediaFetcher};
use teloxide_core::types::{FileMeta, Message, MessageEntityKind, Update, UpdateKind};

use crate::PLATFORM;
use crate::entities::{self, Entity};
use crate::media::{Files, TelegramFile};

/// The bot's own account, from `getMe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub id: u64,
    /// Without the `@`.
    pub username: String,
}

/// Why an update yields no message for the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not a new message (an edit, a channel post, a reaction…).
    NotAMessage,
    /// No sending user (channel-signed messages).
    NoSender,
    /// A command addressed to another bot (`/cmd@otherbot`).
    CommandForAnotherBot,
    /// Nothing left to read: no text, caption or attachment.
    Empty,
    /// An id Telegram sent does not make a valid identifier.
    InvalidId,
}

/// The normalisation context: who we are and where we answer freely.
#[derive(Debug, Clone)]
pub(crate) struct Normaliser {
    pub identity: BotIdentity,
    pub account: AccountId,
    pub free_response_chats: HashSet<i64>,
    /// Downloads files for the core; `None` in tests of normalisation.
    pub files: Option<Files>,
}

impl Normaliser {
    /// Normalises one update, or says why it is skipped.
    pub(crate) fn normalise(&self, update: &Update) -> Result<InboundMessage, Skip> {
        let UpdateKind::Message(message) = &update.kind else {
            return Err(Skip::NotAMessage);
        };
        let from = message.from.as_ref().ok_or(Skip::NoSender)?;
        let direct = message.chat.is_private();
        let address = self.address(message)?;
        let attachments = attachments(message, self.files.as_ref());
        if address.text.is_empty() && attachments.is_empty() {
            return Err(Skip::Empty);
        }
        let topic = if message.is_topic_message {
            message.thread_id
        } else {
            None
        };
        let reply_to = message
            .reply_to_message()
            .filter(|reply| !is_topic_root(message, reply))
            .map(|reply| reply.id.0.to_string());
        let mentions_bot =
            direct || address.addressed || self.free_response_chats.contains(&message.chat.id.0);
        let display_name = Some(from.full_name()).filter(|name| !name.trim().is_empty());
        Ok(InboundMessage {
            platform: PlatformName::parse(PLATFORM).map_err(|_| Skip::InvalidId)?,
            account: self.account.clone(),
            event_id: EventId::parse(update.id.0.to_string()).map_err(|_| Skip::InvalidId)?,
            chat: ChatId::parse(message.chat.id.0.to_string()).map_err(|_| Skip::InvalidId)?,
            chat_kind: if direct {
                ChatKind::Direct
            } else {
                ChatKind::Group
            },
            thread: topic
                .map(|thread| ThreadId::parse(thread.0.0.to_string()))
                .transpose()
                .map_err(|_| Skip::InvalidId)?,
            sender: Sender {
                id: UserId::parse(from.id.0.to_string()).map_err(|_| Skip::InvalidId)?,
                display_name,
                is_bot: from.is_bot,
            },
            text: address.text,
            mentions_bot,
            reply_to,
            message_id: Some(message.id.0.to_string()),
            attachments,
        })
    }

    /// Finds whether `message` addresses the bot, and its text with the
    /// bot's mentions removed.
    fn address(&self, message: &Message) -> Result<Addressing, Skip> {
        let (text, entities) = match (message.text(), message.caption()) {
            (Some(text), _) => (text, message.entities().unwrap_or_default()),
            (None, Some(caption)) => (caption, message.caption_entities().unwrap_or_default()),
            (None, None) => ("", &[][..]),
        };
        let entities = entities::parse(text, entities);
        let mut addressed = message
            .reply_to_message()
            .filter(|reply| !is_topic_root(message, reply))
            .and_then(|reply| reply.from.as_ref())
            .is_some_and(|author| author.id.0 == self.identity.id);
        let mut cuts: Vec<Range<usize>> = Vec::new();
        for entity in &entities {
            match entity.kind {
                MessageEntityKind::Mention if self.is_our_mention(entity.text) => {
                    addressed = true;
                    cuts.push(entity.range.clone());
                }
                MessageEntityKind::TextMention { user } if user.id.0 == self.identity.id => {
                    addressed = true;
                    cuts.push(entity.range.clone());
                }
                MessageEntityKind::BotCommand => match self.command_target(entity) {
                    CommandTarget::Us(cut) => {
                        addressed = true;
                        cuts.push(cut);
                    }
                    CommandTarget::Other if entity.range.start == 0 => {
                        return Err(Skip::CommandForAnotherBot);
                    }
                    CommandTarget::Other | CommandTarget::Anyone => {}
                },
                _ => {}
            }
        }
        Ok(Addressing {
            addressed,
            text: strip(text, cuts),
        })
    }

    fn is_our_mention(&self, mention: &str) -> bool {
        mention
            .strip_prefix('@')
            .is_some_and(|name| name.eq_ignore_ascii_case(&self.identity.username))
    }

    fn command_target(&self, entity: &Entity<'_>) -> CommandTarget {
        // `@` is one byte: `at + 1` is a character boundary.
        let Some((_, target)) = entity.text.split_once('@') else {
            return CommandTarget::Anyone;
        };
        if target.eq_ignore_ascii_case(&self.identity.username) {
            let at = entity.range.end - target.len() - 1;
            CommandTarget::Us(at..entity.range.end)
        } else {
            CommandTarget::Other
        }
    }
}

struct Addressing {
    addressed: bool,
    text: String,
}

enum CommandTarget {
    /// `/cmd@us`: the byte range of `@us`, to cut.
    Us(Range<usize>),
    /// `/cmd@someone_else`.
    Other,
    /// A bare `/cmd`.
    Anyone,
}

/// In a forum topic, a message that replies to nothing still carries the
/// topic's opening service message as `reply_to_message`; that is not a
/// reply (and not one to the bot, even when the bot opened the topic).
fn is_topic_root(message: &Message, reply: &Message) -> bool {
    reply.forum_topic_created().is_some()
        || (message.is_topic_message && message.thread_id.is_some_and(|t| t.0 == reply.id))
}

/// Removes the byte ranges `cuts` (sorted or not, non-overlapping) from
/// `text`, without leaving doubled spaces or a leading `,`/`:` from
/// `@bot, do this`, and trims the result.
fn strip(text: &str, mut cuts: Vec<Range<usize>>) -> String {
    cuts.sort_by_key(|cut| cut.start);
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for cut in cuts {
        if cut.start < pos || cut.end > text.len() {
            continue;
        }
        out.push_str(&text[pos..cut.start]);
        pos = cut.end;
        let mut rest = &text[pos..];
        if out.trim().is_empty() {
            rest = rest.trim_start_matches([',', ':']);
        }
        if out.is_empty() || out.ends_with(char::is_whitespace) {
            rest = rest.trim_start_matches([' ', '\t']);
        }
        pos = text.len() - rest.len();
    }
    out.push_str(&text[pos..]);
    out.trim().to_owned()
}

/// The media of `message`, each with a fetcher of its bytes when `files`
/// is given (never a URL: Telegram file URLs embed the bot token). A photo
/// is taken at its largest size.
fn attachments(message: &Message, files: Option<&Files>) -> Vec<Attachment> {
    let mut found = Vec::new();
    let mut add =
        |kind: AttachmentKind, file: &FileMeta, name: Option<&String>, mime: Option<String>| {
            let size = Some(u64::from(file.size)).filter(|&size| size > 0);
            found.push(Attachment {
                media_type: mime,
                size,
                fetch: files.map(|files| {
                    MediaFetcher::new(TelegramFile {
                        files: files.clone(),
                        file_id: file.id.0.clone(),
                        size,
                    })
                }),
                ..Attachment::new(kind, name.cloned())
            });
        };
    if let Some(largest) = message.photo().and_then(<[_]>::last) {
        add(AttachmentKind::Image, &largest.file, None, None);
    }
    if let Some(document) = message.document() {
        let mime = document.mime_type.as_ref().map(ToString::to_string);
        add(
            AttachmentKind::Document,
            &document.file,
            document.file_name.as_ref(),
            mime,
        );
    }
    if let Some(audio) = message.audio() {
        let mime = audio.mime_type.as_ref().map(ToString::to_string);
        add(
            AttachmentKind::Audio,
            &audio.file,
            audio.file_name.as_ref(),
            mime,
        );
    }
    if let Some(video) = message.video() {
        let mime = video.mime_type.as_ref().map(ToString::to_string);
        add(
            AttachmentKind::Video,
            &video.file,
            video.file_name.as_ref(),
            mime,
        );
    }
    if let Some(voice) = message.voice() {
        let mime = voice.mime_type.as_ref().map(ToString::to_string);
        add(AttachmentKind::Voice, &voice.file, None, mime);
    }
    if let Some(sticker) = message.sticker() {
        add(AttachmentKind::Sticker, &sticker.file, None, None);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_mention_and_its_comma_are_stripped() {
        let text = "@Bot, hello there";
        assert_eq!(strip(text, vec![Range { start: 0, end: 4 }]), "hello there");
    }

    #[test]
    fn an_inner_mention_leaves_one_space() {
        let text = "hey @bot what's up";
        assert_eq!(
            strip(text, vec![Range { start: 4, end: 8 }]),
            "hey what's up"
        );
    }

    #[test]
    fn a_command_keeps_its_name_without_the_bot() {
        let text = "/help@bot now";
        assert_eq!(strip(text, vec![Range { start: 5, end: 9 }]), "/help now");
    }

    mod fuzz {
        use proptest::prelude::*;
        use serde_json::json;

        use super::*;

        fn normaliser() -> Normaliser {
            Normaliser {
                identity: BotIdentity {
                    id: 999,
                    username: "SwitchboardBot".to_owned(),
                },
                account: AccountId::parse("999").expect("an account id"),
                free_response_chats: HashSet::new(),
                files: None,
            }
        }

        /// Text of any characters, astral ones (two UTF-16 units) and the
        /// characters entities care about (`@`, `/`) made common.
        fn text() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop_oneof![
                    Just('@'),
                    Just('/'),
                    Just(' '),
                    Just('😀'),
                    Just('é'),
                    any::<char>(),
                ],
                0..24,
            )
            .prop_map(|chars| chars.into_iter().collect())
        }

        /// An offset or length: mostly near the text, sometimes huge.
        fn position() -> impl Strategy<Value = u64> {
            prop_oneof![
                8 => 0u64..40,
                1 => Just(u64::MAX),
                1 => any::<u64>(),
            ]
        }

        fn entity() -> impl Strategy<Value = serde_json::Value> {
            let kind = prop_oneof![
                Just(json!({"type": "mention"})),
                Just(json!({"type": "bot_command"})),
                Just(json!({"type": "bold"})),
                Just(json!({"type": "text_mention",
                            "user": {"id": 999, "is_bot": true, "first_name": "Bot"}})),
            ];
            (kind, position(), position()).prop_map(|(mut kind, offset, length)| {
                kind["offset"] = json!(offset);
                kind["length"] = json!(length);
                kind
            })
        }

        proptest! {
            /// Whatever offsets and lengths Telegram sends, on whatever
            /// text, in a text or a caption, normalising never panics.
            #[test]
            fn any_entity_offsets_on_any_text_never_panic(
                text in text(),
                entities in prop::collection::vec(entity(), 0..6),
                caption in any::<bool>(),
                group in any::<bool>(),
            ) {
                let chat = if group {
                    json!({"id": -100, "type": "supergroup", "title": "G"})
                } else {
                    json!({"id": 7, "type": "private", "first_name": "Ada"})
                };
                let mut message = json!({
                    "message_id": 1, "date": 1_700_000_000, "chat": chat,
                    "from": {"id": 7, "is_bot": false, "first_name": "Ada"},
                });
                if caption {
                    message["photo"] = json!([{"file_id": "f", "file_unique_id": "u",
                                               "width": 1, "height": 1}]);
                    message["caption"] = json!(text);
                    message["caption_entities"] = json!(entities);
                } else {
                    message["text"] = json!(text);
                    message["entities"] = json!(entities);
                }
                // From text, as the adapter reads it (teloxide reads an
                // update kind from borrowed keys only).
                let update = json!({"update_id": 1, "message": message}).to_string();
                let update: Update = serde_json::from_str(&update).expect("an update");
                prop_assert!(matches!(update.kind, UpdateKind::Message(_)), "{:?}", update.kind);
                let _ = normaliser().normalise(&update);
            }

            /// Every entity kept lies inside the text, on character
            /// boundaries.
            #[test]
            fn kept_entities_are_valid_slices(
                text in text(),
                spans in prop::collection::vec((0usize..40, 0usize..40), 0..8),
            ) {
                let entities: Vec<_> = spans
                    .iter()
                    .map(|&(offset, length)| {
                        teloxide_core::types::MessageEntity::new(MessageEntityKind::Mention, offset, length)
                    })
                    .collect();
                for entity in crate::entities::parse(&text, &entities) {
                    prop_assert_eq!(text.get(entity.range.clone()), Some(entity.text));
                }
            }
        }
    }
}
