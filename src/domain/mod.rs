//! The ground floor: plain domain types that every other part of the
//! gateway shares and that depend on nothing of it — the conversation model
//! ([`conversation`], [`media`]), the gateway's own identifiers ([`ids`]),
//! the states and outcomes records go through ([`status`]), what a
//! request asks of its turn ([`options`]), the platforms
//! served in this process ([`platform`]), canonical JSON ([`canonical`])
//! and the clock ([`clock`]).
//!
//! A string becomes one of these types where it enters (an adapter, the
//! configuration, a row) and a string again only where it leaves.

pub mod canonical;
pub mod clock;
pub mod conversation;
pub mod ids;
pub mod media;
pub mod options;
pub mod platform;
pub mod schedule;
pub mod setting;
pub mod status;

pub use canonical::canonical_json;
pub use clock::{Clock, DAY_MS, day_label, millis, now_ms, start_of_today_ms};
pub use conversation::{ChatMessage, StopReason, StoredTool, ToolCall, ToolSpec, Usage};
pub use ids::{InboundId, InvalidSessionId, PrincipalId, Scope, SessionId, TaskId};
pub use media::{Derived, MediaRef, Part, Shown, shown_images, text_with_notes, user_parts};
pub use options::{
    AskedToolChoice, CallOptions, ClientResult, NO_CALL_OPTIONS, ResponseFormat, TurnOptions,
};
pub use platform::LocalPlatform;
pub use schedule::{Schedule, ScheduleError, ScheduleRequest};
pub use setting::{BaseUrl, InvalidSetting, closest};
pub use status::{
    ApprovalKind, ApprovalStatus, InboundStatus, OutboxStatus, Outcome, PairingStatus, Role,
    RunStatus, RunTrigger, StopCause, TaskStatus, ToolCallStatus,
};
