//! Identifiers of the gateway's own records, each a newtype checked once
//! where it enters (made fresh, read from a row, sent by a client) and
//! passed around typed from there to the row.

use std::fmt;

/// The id of a session: today a UUID v4 in its hyphenated text form, but
/// any non-empty run of at most [`SessionId::MAX_LEN`] printable ASCII
/// characters other than space is accepted, so ids stored by earlier
/// versions (or by tests) still read back.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

/// Text that cannot be a session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id {0:?}: it must be 1 to 128 printable ASCII characters without spaces")]
pub struct InvalidSessionId(String);

impl SessionId {
    /// The longest id accepted, in bytes (the `X-Session-Id` header's limit).
    pub const MAX_LEN: usize = 128;

    /// A fresh id: a random UUID v4, hyphenated.
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// Checks that `text` may be a session id.
    ///
    /// # Errors
    /// Empty text, text longer than [`Self::MAX_LEN`] bytes, or a character
    /// that is not printable ASCII (a space or a control character included).
    pub fn parse(text: &str) -> Result<Self, InvalidSessionId> {
        let valid = !text.is_empty()
            && text.len() <= Self::MAX_LEN
            && text.bytes().all(|byte| byte.is_ascii_graphic());
        if valid {
            Ok(Self(text.to_owned()))
        } else {
            Err(InvalidSessionId(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// As the bare string, so logs read as they did when ids were `String`s.
impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A principal's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrincipalId(i64);

impl PrincipalId {
    pub fn new(id: i64) -> Self {
        Self(id)
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for PrincipalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An inbound message's id: the row that records it, the turn it starts
/// (its task: every entry the turn writes carries it) and the key its
/// reply and waiters are found by.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct InboundId(i64);

impl InboundId {
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for InboundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for InboundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A task's id: what the person and the API name it by (`/tasks cancel 7`).
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TaskId(i64);

impl TaskId {
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whose conversation a transcript entry belongs to within its session:
/// the session's own ([`Scope::top`], stored as `""`), a sub-agent's (its
/// path, `/mc-…` under its parent) or a side call's (`memory`).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Scope(String);

impl Scope {
    /// The session's own conversation.
    #[must_use]
    pub const fn top() -> Self {
        Self(String::new())
    }

    /// A side call's own scope (`memory`).
    #[must_use]
    pub fn named(name: &str) -> Self {
        Self(name.to_owned())
    }

    /// A scope as stored.
    #[must_use]
    pub fn stored(text: String) -> Self {
        Self(text)
    }

    /// The scope of a sub-agent started by the call `request_id` in this
    /// scope.
    #[must_use]
    pub fn child(&self, request_id: &str) -> Self {
        Self(format!("{}/{request_id}", self.0))
    }

    /// Whether this is the session's own conversation.
    #[must_use]
    pub fn is_top(&self) -> bool {
        self.0.is_empty()
    }

    /// As stored (`""` for the session's own conversation).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_hyphenated_uuids_that_parse_back() {
        let id = SessionId::generate();
        assert_eq!(id.as_str().len(), 36);
        assert!(uuid::Uuid::parse_str(id.as_str()).is_ok());
        assert_eq!(SessionId::parse(id.as_str()), Ok(id));
    }

    #[test]
    fn short_printable_ids_are_accepted() {
        for text in ["s1", "a", "session-42_x.y", &"x".repeat(SessionId::MAX_LEN)] {
            assert_eq!(
                SessionId::parse(text).map(|id| id.to_string()).as_deref(),
                Ok(text)
            );
        }
    }

    #[test]
    fn empty_long_spaced_or_non_ascii_ids_are_rejected() {
        for text in [
            "",
            " ",
            "a b",
            "tab\there",
            "é",
            &"x".repeat(SessionId::MAX_LEN + 1),
        ] {
            assert!(SessionId::parse(text).is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn debug_prints_the_bare_string() {
        let id = SessionId::parse("s1").expect("valid");
        assert_eq!(format!("{id:?}"), "\"s1\"");
    }
}
