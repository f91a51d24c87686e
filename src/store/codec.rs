//! The domain's types as database columns (sqlx's `Any` driver): ids as
//! integers or text, statuses, roles, causes and outcomes by their stored
//! names, a message's files as JSON text. Rows are then read with
//! `#[derive(sqlx::FromRow)]` and values bound as they are; a stored value
//! that names no variant is corrupt data (a decode error), except a stop
//! cause, which reads as `/stop` (see [`StopCause::read`]).

use std::borrow::Cow;

use sqlx::any::{AnyTypeInfo, AnyValueRef};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{Any, Database, Decode, Encode, Type};

use crate::domain::{
    ApprovalKind, ApprovalStatus, InboundId, InboundStatus, MediaRef, OutboxStatus, Outcome,
    PairingStatus, PrincipalId, Role, RunStatus, RunTrigger, Scope, SessionId, StopCause,
    StoredTool, TaskId, TaskStatus, ToolCallStatus,
};

type Buffer<'q> = <Any as Database>::ArgumentBuffer<'q>;

/// Implements the column traits for a type stored as text: `$to` gives
/// the text, `$from` reads it back.
macro_rules! text_column {
    ($($name:ty => |$value:ident| $from:expr, |$this:ident| $to:expr;)*) => {$(
        impl Type<Any> for $name {
            fn type_info() -> AnyTypeInfo {
                <String as Type<Any>>::type_info()
            }
        }

        impl<'r> Decode<'r, Any> for $name {
            fn decode(raw: AnyValueRef<'r>) -> Result<Self, BoxDynError> {
                let $value = <String as Decode<'r, Any>>::decode(raw)?;
                $from
            }
        }

        impl<'q> Encode<'q, Any> for $name {
            fn encode_by_ref(&self, buf: &mut Buffer<'q>) -> Result<IsNull, BoxDynError> {
                let $this = self;
                let text: Cow<'_, str> = $to;
                <String as Encode<'q, Any>>::encode_by_ref(&text.into_owned(), buf)
            }
        }
    )*};
}

/// Implements the column traits for a type stored as an integer.
macro_rules! int_column {
    ($($name:ty),*) => {$(
        impl Type<Any> for $name {
            fn type_info() -> AnyTypeInfo {
                <i64 as Type<Any>>::type_info()
            }
        }

        impl<'r> Decode<'r, Any> for $name {
            fn decode(raw: AnyValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(Self::new(<i64 as Decode<'r, Any>>::decode(raw)?))
            }
        }

        impl<'q> Encode<'q, Any> for $name {
            fn encode_by_ref(&self, buf: &mut Buffer<'q>) -> Result<IsNull, BoxDynError> {
                <i64 as Encode<'q, Any>>::encode_by_ref(&self.get(), buf)
            }
        }
    )*};
}

int_column!(InboundId, PrincipalId, TaskId);

/// A stored name that must name a variant of `T`.
fn named<T: std::str::FromStr>(what: &str, text: &str) -> Result<T, BoxDynError> {
    text.parse()
        .map_err(|_| format!("stored data is invalid: {what} {text:?}").into())
}

text_column! {
    SessionId => |text| Ok(SessionId::parse(&text)?), |id| Cow::Borrowed(id.as_str());
    Scope => |text| Ok(Scope::stored(text)), |scope| Cow::Borrowed(scope.as_str());
    InboundStatus => |text| named("inbound status", &text), |status| Cow::Borrowed(status.as_str());
    OutboxStatus => |text| named("outbox status", &text), |status| Cow::Borrowed(status.as_str());
    Role => |text| named("message role", &text), |role| Cow::Borrowed(role.as_str());
    ToolCallStatus => |text| named("tool call status", &text), |status| Cow::Borrowed(status.as_str());
    PairingStatus => |text| named("pairing status", &text), |status| Cow::Borrowed(status.as_str());
    Outcome => |text| named("outcome", &text), |outcome| Cow::Borrowed(outcome.as_str());
    StopCause => |text| Ok(StopCause::read(&text)), |cause| Cow::Borrowed(cause.as_str());
    TaskStatus => |text| named("task status", &text), |status| Cow::Borrowed(status.as_str());
    RunStatus => |text| named("run status", &text), |status| Cow::Borrowed(status.as_str());
    RunTrigger => |text| named("run trigger", &text), |trigger| Cow::Borrowed(trigger.as_str());
    ApprovalKind => |text| named("approval kind", &text), |kind| Cow::Borrowed(kind.as_str());
    ApprovalStatus => |text| named("approval status", &text), |status| Cow::Borrowed(status.as_str());
}

/// A message's files as stored: JSON text (`[]` for none). Read into a
/// `Vec<MediaRef>` field with `#[sqlx(try_from = "MediaJson")]`.
pub struct MediaJson(String);

impl Type<Any> for MediaJson {
    fn type_info() -> AnyTypeInfo {
        <String as Type<Any>>::type_info()
    }
}

impl<'r> Decode<'r, Any> for MediaJson {
    fn decode(raw: AnyValueRef<'r>) -> Result<Self, BoxDynError> {
        if sqlx::ValueRef::is_null(&raw) {
            return Ok(Self(String::new()));
        }
        Ok(Self(<String as Decode<'r, Any>>::decode(raw)?))
    }
}

impl TryFrom<MediaJson> for Vec<MediaRef> {
    type Error = serde_json::Error;

    fn try_from(json: MediaJson) -> Result<Self, Self::Error> {
        if json.0.is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&json.0)
    }
}

/// A session's toolset as stored: JSON text. Read into a
/// `Vec<StoredTool>` field with `#[sqlx(try_from = "ToolsetJson")]`.
pub struct ToolsetJson(String);

impl Type<Any> for ToolsetJson {
    fn type_info() -> AnyTypeInfo {
        <String as Type<Any>>::type_info()
    }
}

impl<'r> Decode<'r, Any> for ToolsetJson {
    fn decode(raw: AnyValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Self(<String as Decode<'r, Any>>::decode(raw)?))
    }
}

impl TryFrom<ToolsetJson> for Vec<StoredTool> {
    type Error = serde_json::Error;

    fn try_from(json: ToolsetJson) -> Result<Self, Self::Error> {
        serde_json::from_str(&json.0)
    }
}
