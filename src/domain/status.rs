//! The states records go through and the outcomes they end with, each an
//! enum whose string form (as the database keeps it, as metrics and the
//! API show it) is written once, by `strum`: `snake_case` of the variant.
//!
//! Reading a stored value back is [`std::str::FromStr`]; the store turns a
//! value no variant names into corrupt data.

use serde::Serialize;
use strum::{Display, EnumString, IntoStaticStr};

/// Where an inbound message is in its life.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum InboundStatus {
    /// Waiting for its session's runner.
    Pending,
    /// Its turn is running (or was, when the process died).
    Running,
    /// Answered; the reply is in the outbox.
    Done,
    /// Ended without a normal answer; the reason is in its outcome.
    Failed,
    /// A command, answered directly.
    Command,
    /// Its turn is parked until a person decides (an approval, a question,
    /// a call in doubt); nothing of the session runs meanwhile.
    Waiting,
}

/// Where a reply is in its delivery.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum OutboxStatus {
    Pending,
    Sent,
    /// Not sent: a background run's reply, which its conversation delivers
    /// (the relay of the run's answer).
    Relayed,
    /// Delivery failed permanently (the chat is gone); kept for inspection.
    Failed,
}

/// Who a transcript entry is from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    Tool,
}

/// Where a tool call's checkpoint stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ToolCallStatus {
    /// Started; its result is not stored (it runs, or the process died).
    Running,
    /// Its result is stored.
    Done,
    /// It failed; the error is its result.
    Failed,
    /// Not run: it waits for a person's decision (see `approvals`).
    Awaiting,
    /// Not run here: a call of the API client's own tool, handed to the
    /// client, whose next request brings its result.
    Client,
}

/// Where a pairing request stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PairingStatus {
    Pending,
    Approved,
    Denied,
}

/// Where a task stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TaskStatus {
    /// Its runs come due.
    Active,
    /// Kept, but no run comes due until it is resumed (by the person, or
    /// after failing runs in a row).
    Paused,
    /// Its last run was delivered (a one-off task, its count reached, or
    /// past its `until`).
    Done,
    /// Cancelled by its owner or an operator.
    Cancelled,
}

/// Where one run of a task stands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RunStatus {
    /// Claimed: its message waits for, or runs in, its session's turn.
    Queued,
    /// Its turn answered; the answer was delivered.
    Done,
    /// Its turn ended without an answer.
    Failed,
    /// It came due while no instance was up, and too late to catch up.
    Missed,
}

/// What made a task run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RunTrigger {
    /// Its schedule came due.
    Schedule,
    /// A signed HTTP request (`POST /hooks/tasks/{id}`).
    Hook,
    /// `/tasks run ID`.
    Manual,
}

/// Why a running turn was stopped.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StopCause {
    /// `/stop`.
    User,
    /// A newer message, with `sessions.busy = "interrupt"`.
    Interrupted,
    /// The task's wall-clock limit.
    TimeLimit,
}

impl StopCause {
    /// A stored stop request's cause; an unknown one reads as `/stop`.
    #[must_use]
    pub fn read(value: &str) -> Self {
        value.parse().unwrap_or(Self::User)
    }
}

/// How a message's turn ended, as stored with it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// The model answered.
    Answered,
    /// The step budget ran out; the answer is the final summary, or none.
    BudgetExhausted,
    /// `/compact` (whether or not there was anything to summarise).
    Compact,
    /// A command, answered directly.
    Command,
    /// Merged into an earlier message's turn, which answered both.
    Merged,
    /// The principal's daily spend cap.
    SpendLimit,
    /// The model call failed for good.
    ModelError,
    /// A database write of the turn failed.
    StoreError,
    /// The task's wall-clock limit.
    TimeLimit,
    /// A newer message interrupted the task.
    Interrupted,
    /// `/stop`.
    Cancelled,
    /// The task's token limit.
    TokenLimit,
    /// The same tool result repeated.
    NoProgress,
    /// A file of the message could not be made readable.
    MediaRefused,
    /// The turn waits for a person's decision (an approval or an answer).
    AwaitingPerson,
    /// The model called the API client's own tools: the turn ended handing
    /// the calls to the client, whose next request brings the results.
    ClientTools,
    /// A message nobody sent: a question or notice the gateway posted.
    Notice,
}

impl Outcome {
    /// The outcomes that mean a limit stopped the task.
    pub const LIMITS: [Self; 5] = [
        Self::TimeLimit,
        Self::TokenLimit,
        Self::NoProgress,
        Self::SpendLimit,
        Self::BudgetExhausted,
    ];

    /// The outcome's stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether a person stopped the turn (`/stop`, or a newer message).
    #[must_use]
    pub fn is_stopped(self) -> bool {
        matches!(self, Self::Cancelled | Self::Interrupted)
    }
}

macro_rules! as_str {
    ($($name:ident),*) => {$(
        impl $name {
            /// The stored name.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }
    )*};
}

/// What a person is asked.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ApprovalKind {
    /// May this tool call run?
    Tool,
    /// A question of the agent's own (`ask_user`).
    Question,
    /// A call a crash left with an unknown outcome: run it again or skip it?
    InDoubt,
}

/// Where an approval stands; every state but `pending` is final.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Display, EnumString, IntoStaticStr, Serialize,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    /// Allowed once (or, in doubt, run again).
    Allowed,
    /// Allowed, and remembered for the tool in this conversation.
    AllowedSession,
    /// Refused (or, in doubt, skipped).
    Denied,
    /// The question was answered (`answer` holds it).
    Answered,
    /// Nobody decided within `tools.approval.timeout_secs`.
    Expired,
    /// `/stop` ended the turn that waited.
    Stopped,
}

impl ApprovalStatus {
    /// Whether the call may run.
    #[must_use]
    pub fn allows(self) -> bool {
        matches!(self, Self::Allowed | Self::AllowedSession)
    }
}

as_str!(
    ApprovalKind,
    ApprovalStatus,
    InboundStatus,
    OutboxStatus,
    Role,
    ToolCallStatus,
    PairingStatus,
    StopCause,
    TaskStatus,
    RunStatus,
    RunTrigger
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_are_snake_case_and_read_back() {
        assert_eq!(InboundStatus::Command.as_str(), "command");
        assert_eq!(Outcome::BudgetExhausted.as_str(), "budget_exhausted");
        assert_eq!("media_refused".parse(), Ok(Outcome::MediaRefused));
        assert_eq!(StopCause::TimeLimit.to_string(), "time_limit");
        assert!("sent".parse::<OutboxStatus>().is_ok());
        assert!("Sent".parse::<OutboxStatus>().is_err());
    }

    #[test]
    fn an_unknown_stop_cause_reads_as_a_stop() {
        assert_eq!(StopCause::read("interrupted"), StopCause::Interrupted);
        assert_eq!(StopCause::read("whatever"), StopCause::User);
    }
}
