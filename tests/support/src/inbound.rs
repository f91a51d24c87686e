//! Messages as an adapter submits them to the core through `InboundSink`,
//! from the test platform `fake` (account `bot-1`); a test adjusts the
//! fields it cares about with struct update syntax.

use std::sync::atomic::{AtomicU64, Ordering};

use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, InboundMessage, PlatformName, Sender, UserId,
};

/// The platform the messages come from.
pub const PLATFORM: &str = "fake";
/// The bot account on [`PLATFORM`].
pub const ACCOUNT: &str = "bot-1";

/// `text` from `user` in `chat`, addressed to the bot, with an event id of
/// its own.
///
/// # Panics
///
/// When an id is not a valid one.
pub fn message(user: &str, chat: &str, kind: ChatKind, text: &str) -> InboundMessage {
    static EVENTS: AtomicU64 = AtomicU64::new(0);
    let event = EVENTS.fetch_add(1, Ordering::Relaxed);
    InboundMessage {
        platform: PlatformName::parse(PLATFORM).expect("id"),
        account: AccountId::parse(ACCOUNT).expect("id"),
        event_id: EventId::parse(format!("event-{event}")).expect("id"),
        chat: ChatId::parse(chat).expect("id"),
        chat_kind: kind,
        thread: None,
        sender: Sender {
            id: UserId::parse(user).expect("id"),
            display_name: None,
            is_bot: false,
        },
        text: text.to_owned(),
        mentions_bot: true,
        reply_to: None,
        message_id: None,
        attachments: Vec::new(),
    }
}
