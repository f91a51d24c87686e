//! Identifier newtypes shared by the core and the adapters.
//!
//! Each identifier is validated when it is built (non-empty, bounded length, no
//! control characters) and keeps its field private, so a value of one of these
//! types is always a usable identifier.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest identifier accepted, in bytes. Platform ids are far shorter; the
/// bound keeps a hostile payload from growing keys and rows without limit.
pub const MAX_ID_LEN: usize = 256;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} must not be empty")]
    Empty { kind: &'static str },
    #[error("{kind} is longer than {MAX_ID_LEN} bytes")]
    TooLong { kind: &'static str },
    #[error("{kind} contains a control character")]
    ControlCharacter { kind: &'static str },
}

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { kind });
    }
    if value.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter { kind });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an identifier.
            ///
            /// # Errors
            /// Empty, over-long, or containing a control character.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::Type<sqlx::Any> for $name {
            fn type_info() -> sqlx::any::AnyTypeInfo {
                <String as sqlx::Type<sqlx::Any>>::type_info()
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> sqlx::Decode<'r, sqlx::Any> for $name {
            fn decode(value: sqlx::any::AnyValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <String as sqlx::Decode<'r, sqlx::Any>>::decode(value)?;
                Ok(Self::parse(text)?)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q> sqlx::Encode<'q, sqlx::Any> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut <sqlx::Any as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, sqlx::Any>>::encode_by_ref(&self.0, buf)
            }
        }
    };
}

id_type!(
    /// A platform's name as the gateway knows it: `telegram`, `discord`,
    /// `feishu`, `terminal`, `api`.
    PlatformName,
    "platform name"
);
id_type!(
    /// The bot or account on a platform that received the message (one gateway
    /// may run several bots on one platform).
    AccountId,
    "account id"
);
id_type!(
    /// A chat, channel or group on a platform.
    ChatId,
    "chat id"
);
id_type!(
    /// A thread or forum topic inside a chat.
    ThreadId,
    "thread id"
);
id_type!(
    /// A user on a platform.
    UserId,
    "user id"
);
id_type!(
    /// The platform's id for one delivery of an event (Telegram update id,
    /// Discord message id, Feishu event id): redelivery repeats it.
    EventId,
    "event id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ids_are_rejected() {
        assert_eq!(ChatId::parse(""), Err(IdError::Empty { kind: "chat id" }));
    }

    #[test]
    fn control_characters_are_rejected() {
        assert!(UserId::parse("a\nb").is_err());
    }

    #[test]
    fn over_long_ids_are_rejected() {
        assert!(EventId::parse("x".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(EventId::parse("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn ids_deserialize_through_validation() {
        let bad: Result<ChatId, _> = serde_json_like("\"\"");
        assert!(bad.is_err());
    }

    fn serde_json_like(raw: &str) -> Result<ChatId, IdError> {
        // A tiny stand-in for a JSON string literal, avoiding a dev-dependency.
        let inner = raw.trim_matches('"').to_owned();
        ChatId::try_from(inner)
    }
}
