//! Route keys: which chat (platform, account, chat, thread, and the sender in
//! groups when configured) a message came from, as one unambiguous string.
//!
//! Every component is percent-encoded so that it contains no `:`; components
//! are joined with `:` and an absent thread or sender is `-`, which no encoded
//! component can equal (`-` is always encoded). Two different origins can
//! therefore never map to one key.

use std::fmt;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId, UserId};

use crate::domain::PrincipalId;

/// Everything except ASCII letters, digits, `_` and `.` is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'_').remove(b'.');

/// Where a conversation happens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat: ChatId,
    pub thread: Option<ThreadId>,
    /// Set for group chats configured with one session per sender.
    pub sender: Option<UserId>,
}

/// The escaped, unambiguous key of an [`Origin`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteKey(String);

impl RouteKey {
    /// The route of a principal's direct conversation, shared by all its
    /// identities. Three components, so it never equals an origin key (five).
    pub fn principal_dm(principal: PrincipalId) -> Self {
        Self(format!("principal:{principal}:dm"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Origin {
    pub fn key(&self) -> RouteKey {
        let parts = [
            Some(self.platform.as_str()),
            Some(self.account.as_str()),
            Some(self.chat.as_str()),
            self.thread.as_ref().map(ThreadId::as_str),
            self.sender.as_ref().map(UserId::as_str),
        ];
        let encoded: Vec<String> = parts
            .iter()
            .map(|part| match part {
                Some(value) => utf8_percent_encode(value, COMPONENT).to_string(),
                None => "-".to_owned(),
            })
            .collect();
        RouteKey(encoded.join(":"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(chat: &str, thread: Option<&str>, sender: Option<&str>) -> Origin {
        Origin {
            platform: PlatformName::parse("telegram").expect("valid"),
            account: AccountId::parse("bot").expect("valid"),
            chat: ChatId::parse(chat).expect("valid"),
            thread: thread.map(|t| ThreadId::parse(t).expect("valid")),
            sender: sender.map(|s| UserId::parse(s).expect("valid")),
        }
    }

    #[test]
    fn separators_inside_components_cannot_forge_another_origin() {
        let a = origin("1:2", None, None);
        let b = origin("1", Some("2"), None);
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn an_absent_thread_differs_from_a_thread_named_dash() {
        assert_ne!(
            origin("1", None, None).key(),
            origin("1", Some("-"), None).key()
        );
    }

    #[test]
    fn thread_and_sender_positions_are_distinct() {
        assert_ne!(
            origin("1", Some("x"), None).key(),
            origin("1", None, Some("x")).key()
        );
    }

    #[test]
    fn percent_signs_are_escaped_too() {
        assert_ne!(
            origin("%3A", None, None).key(),
            origin(":", None, None).key()
        );
    }

    #[test]
    fn keys_are_readable_for_plain_ids() {
        assert_eq!(
            origin("-100123", Some("7"), None).key().as_str(),
            "telegram:bot:%2D100123:7:-"
        );
    }

    #[test]
    fn principal_routes_never_equal_origin_keys() {
        let key = RouteKey::principal_dm(PrincipalId::new(7));
        assert_eq!(key.as_str(), "principal:7:dm");
        assert_eq!(key.as_str().matches(':').count(), 2);
        assert_eq!(
            origin("dm", None, None).key().as_str().matches(':').count(),
            4
        );
    }

    #[test]
    fn many_generated_origins_never_collide() {
        let alphabet = ["", "a", ":", "-", "%", "%3A", "a:b", "_", "."];
        let mut seen = std::collections::HashMap::new();
        for chat in alphabet.iter().filter(|c| !c.is_empty()) {
            for thread in alphabet {
                for sender in alphabet {
                    let o = origin(
                        chat,
                        (!thread.is_empty()).then_some(thread),
                        (!sender.is_empty()).then_some(sender),
                    );
                    if let Some(previous) = seen.insert(o.key(), o.clone()) {
                        assert_eq!(previous, o, "two origins share a key");
                    }
                }
            }
        }
    }
}
