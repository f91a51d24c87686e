//! Everything platform-neutral between an adapter and the agent loop.
//!
//! [`service`] takes each inbound message: [`access`] decides whether its
//! sender may talk (allowlists, pairing), [`routing`] finds its session by
//! its [`key`] (or, for direct chats, by the sender's principal; [`link`]
//! codes join identities into one principal), and the message is either
//! answered as one of the [`commands`] or queued. [`runner`] runs one turn
//! at a time per session (a database lease makes that hold across
//! processes) and delivers replies through the outbox, showing them growing
//! on chat platforms meanwhile ([`drafts`]). [`turn`] is one
//! turn: load the session and its history from the database, run the loop,
//! end the turn atomically with its reply; [`LocalPlatform`](crate::domain::LocalPlatform) names the platforms
//! served inside this process. [`texts`] holds every text the
//! gateway writes to a chat itself; [`speaker`] names group members to the
//! model.

pub mod access;
pub mod approvals;
mod arrivals;
pub mod commands;
pub mod drafts;
pub mod elicit;
mod instructions;
pub mod key;
pub mod link;
pub mod notices;

pub mod routing;
pub mod runner;
pub mod scheduler;
pub mod service;
pub mod settings;
pub mod speaker;
pub mod task_runs;
pub mod texts;
pub mod turn;
