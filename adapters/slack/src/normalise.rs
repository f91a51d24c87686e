//! A Slack `message` or `app_mention` event → the contract's
//! [`InboundMessage`]. Pure, but for the fetchers of files. The rules:
//!
//! - a DM (`channel_type: im`, or a `D…` channel) is [`ChatKind::Direct`]
//!   and always addressed to the bot; channels, private channels and group
//!   DMs are [`ChatKind::Group`], addressed by `app_mention`, by a
//!   `<@BOT>` mention in the text, or by being a free-response channel;
//!   a channel message that addresses nobody is skipped (never submitted);
//! - the bot's mention is stripped from the text, and Slack's markup made
//!   plain ([`crate::text`]);
//! - `thread_ts` is the [`InboundMessage::thread`]; a channel message
//!   outside a thread starts one (its own `ts`) unless `thread_replies` is
//!   off; DMs outside a thread stay unthreaded;
//! - the bot's own messages, other bots' (`bot_id`, `bot_message`),
//!   edits, deletions and other subtypes are skipped (`file_share` and
//!   `thread_broadcast` are people's messages);
//! - the [`EventId`] is `{channel}:{ts}`, the message's identity, so Slack's
//!   retries of an event and the `message` event it sends beside an
//!   `app_mention` for the same message carry the same id: the adapter
//!   submits a repeat it sees once only ([`crate::recent`]), the core drops
//!   any other by its id, and the message is answered once; `message_id`
//!   is the `ts`.

use std::collections::HashSet;

use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, IdError, InboundMessage, PlatformName, Sender, ThreadId,
    UserId,
};

use crate::PLATFORM;
use crate::events::MessageEvent;
use crate::media::{self, Downloads};
use crate::text::plain_text;

/// What became of one event.
#[derive(Debug)]
pub(crate) enum Normalised {
    /// A message for the core.
    Message(Box<InboundMessage>),
    /// Not for the core; nothing is submitted.
    Skipped(Skip),
}

/// Why an event is not submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not a `message` or `app_mention`.
    OtherEvent,
    /// The bot's own message.
    OwnMessage,
    /// Another bot's or app's message.
    Bot,
    /// An edit, deletion, join or other non-message subtype.
    Subtype,
    /// No person sent it.
    NoSender,
    /// A channel message that neither mentions the bot nor is in a
    /// free-response channel.
    NotAddressed,
    /// No text and no file.
    Empty,
}

/// What normalising needs besides the event.
pub(crate) struct Context<'a> {
    pub account: &'a AccountId,
    pub bot_user_id: &'a str,
    pub rules: &'a Rules,
    /// Downloads files; `None` in tests of normalisation.
    pub downloads: Option<&'a Downloads>,
}

/// The conversation settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub free_response: HashSet<String>,
    pub thread_replies: bool,
}

/// Normalises one event.
///
/// # Errors
/// An id the contract rejects (not expected of Slack's).
pub(crate) fn normalise(ctx: &Context<'_>, event: MessageEvent) -> Result<Normalised, IdError> {
    if let Some(skip) = skip_reason(&event, ctx.bot_user_id) {
        return Ok(Normalised::Skipped(skip));
    }
    let Some(user) = event.user.clone().filter(|user| !user.is_empty()) else {
        return Ok(Normalised::Skipped(Skip::NoSender));
    };
    let (text, mentioned) = plain_text(event.text.as_deref().unwrap_or_default(), ctx.bot_user_id);
    let direct = event.channel_type.as_deref() == Some("im")
        || (event.channel_type.is_none() && event.channel.starts_with('D'));
    let addressed = direct
        || mentioned
        || event.kind == "app_mention"
        || ctx.rules.free_response.contains(&event.channel);
    if !addressed {
        return Ok(Normalised::Skipped(Skip::NotAddressed));
    }
    let attachments = media::attachments(&event.files, ctx.downloads);
    if text.is_empty() && attachments.is_empty() {
        return Ok(Normalised::Skipped(Skip::Empty));
    }
    let in_thread = event.thread_ts.clone().filter(|ts| !ts.is_empty());
    let thread = match in_thread {
        Some(thread) => Some(thread),
        None if !direct && ctx.rules.thread_replies => Some(event.ts.clone()),
        None => None,
    };
    Ok(Normalised::Message(Box::new(InboundMessage {
        platform: PlatformName::parse(PLATFORM)?,
        account: ctx.account.clone(),
        event_id: EventId::parse(format!("{}:{}", event.channel, event.ts))?,
        chat: ChatId::parse(event.channel)?,
        chat_kind: if direct {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
        thread: thread.map(ThreadId::parse).transpose()?,
        sender: Sender {
            id: UserId::parse(user)?,
            display_name: None,
            is_bot: false,
        },
        text,
        mentions_bot: true,
        reply_to: None,
        message_id: Some(event.ts),
        attachments,
    })))
}

fn skip_reason(event: &MessageEvent, bot_user_id: &str) -> Option<Skip> {
    if event.kind != "message" && event.kind != "app_mention" {
        return Some(Skip::OtherEvent);
    }
    if event.user.as_deref() == Some(bot_user_id) {
        return Some(Skip::OwnMessage);
    }
    match event.subtype.as_deref() {
        None | Some("file_share" | "thread_broadcast") => {}
        Some("bot_message") => return Some(Skip::Bot),
        Some(_) => return Some(Skip::Subtype),
    }
    if event.hidden {
        return Some(Skip::Subtype);
    }
    if event.bot_id.is_some() {
        return Some(Skip::Bot);
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const BOT: &str = "UBOT";

    fn rules(thread_replies: bool, free: &[&str]) -> Rules {
        Rules {
            free_response: free.iter().map(|c| (*c).to_owned()).collect(),
            thread_replies,
        }
    }

    fn run(event: Value, rules: &Rules) -> Normalised {
        let account = AccountId::parse("T1").unwrap();
        let ctx = Context {
            account: &account,
            bot_user_id: BOT,
            rules,
            downloads: None,
        };
        normalise(&ctx, serde_json::from_value(event).unwrap()).unwrap()
    }

    fn message(channel: &str, channel_type: &str, text: &str) -> Value {
        json!({"type": "message", "channel": channel, "channel_type": channel_type,
               "user": "U1", "text": text, "ts": "1700000000.000100"})
    }

    fn submitted(normalised: Normalised) -> InboundMessage {
        match normalised {
            Normalised::Message(message) => *message,
            Normalised::Skipped(skip) => panic!("skipped: {skip:?}"),
        }
    }

    fn skipped(normalised: Normalised) -> Skip {
        match normalised {
            Normalised::Skipped(skip) => skip,
            Normalised::Message(message) => panic!("submitted: {message:?}"),
        }
    }

    #[test]
    fn a_dm_is_direct_addressed_and_unthreaded() {
        let message = submitted(run(message("D1", "im", "hello"), &rules(true, &[])));
        assert_eq!(message.chat_kind, ChatKind::Direct);
        assert!(message.mentions_bot);
        assert_eq!(message.thread, None);
        assert_eq!(message.event_id.as_str(), "D1:1700000000.000100");
        assert_eq!(message.message_id.as_deref(), Some("1700000000.000100"));
        assert_eq!(message.sender.id.as_str(), "U1");
        assert_eq!(message.account.as_str(), "T1");
    }

    #[test]
    fn a_channel_mention_starts_a_thread_unless_turned_off() {
        let event = message("C1", "channel", "<@UBOT> hi");
        let threaded = submitted(run(event.clone(), &rules(true, &[])));
        assert_eq!(threaded.text, "hi");
        assert_eq!(threaded.chat_kind, ChatKind::Group);
        assert_eq!(threaded.thread.unwrap().as_str(), "1700000000.000100");
        let flat = submitted(run(event, &rules(false, &[])));
        assert_eq!(flat.thread, None);
    }

    #[test]
    fn a_reply_in_a_thread_keeps_the_thread() {
        let mut event = message("C1", "channel", "<@UBOT> more");
        event["thread_ts"] = json!("1600000000.000001");
        let message = submitted(run(event, &rules(true, &[])));
        assert_eq!(message.thread.unwrap().as_str(), "1600000000.000001");
        let mut dm = self::message("D1", "im", "in a DM thread");
        dm["thread_ts"] = json!("1600000000.000001");
        assert!(submitted(run(dm, &rules(true, &[]))).thread.is_some());
    }

    #[test]
    fn channel_messages_need_a_mention_or_a_free_response_channel() {
        let event = message("C1", "channel", "lunch?");
        assert_eq!(
            skipped(run(event.clone(), &rules(true, &[]))),
            Skip::NotAddressed
        );
        assert!(submitted(run(event, &rules(true, &["C1"]))).mentions_bot);
        let mention = json!({"type": "app_mention", "channel": "C1", "user": "U1",
                             "text": "<@UBOT> hi", "ts": "1.2"});
        assert_eq!(
            submitted(run(mention, &rules(true, &[]))).chat_kind,
            ChatKind::Group
        );
    }

    #[test]
    fn bots_edits_and_other_subtypes_are_skipped() {
        let rules = rules(true, &[]);
        let mut own = message("D1", "im", "me");
        own["user"] = json!(BOT);
        assert_eq!(skipped(run(own, &rules)), Skip::OwnMessage);
        let mut bot = message("D1", "im", "beep");
        bot["bot_id"] = json!("B2");
        assert_eq!(skipped(run(bot, &rules)), Skip::Bot);
        let mut bot_message = message("D1", "im", "beep");
        bot_message["subtype"] = json!("bot_message");
        assert_eq!(skipped(run(bot_message, &rules)), Skip::Bot);
        for subtype in ["message_changed", "message_deleted", "channel_join"] {
            let mut event = message("D1", "im", "x");
            event["subtype"] = json!(subtype);
            assert_eq!(skipped(run(event, &rules)), Skip::Subtype, "{subtype}");
        }
        let mut broadcast = message("D1", "im", "also in the channel");
        broadcast["subtype"] = json!("thread_broadcast");
        submitted(run(broadcast, &rules));
        let other = json!({"type": "reaction_added", "channel": "C1", "ts": "1.2"});
        assert_eq!(skipped(run(other, &rules)), Skip::OtherEvent);
        assert_eq!(skipped(run(message("D1", "im", "  "), &rules)), Skip::Empty);
    }

    #[test]
    fn shared_files_are_attachments() {
        let mut event = message("D1", "im", "");
        event["subtype"] = json!("file_share");
        event["files"] = json!([{"name": "cat.png", "mimetype": "image/png", "size": 3,
                                 "url_private_download": "https://files.slack.com/x"}]);
        let message = submitted(run(event, &rules(true, &[])));
        assert_eq!(message.attachments.len(), 1);
        assert_eq!(message.attachments[0].name.as_deref(), Some("cat.png"));
    }
}
