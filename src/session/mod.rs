//! Everything platform-neutral between an adapter and the agent loop.
//!
//! [`service`] records inbound messages (deduplicated), applies group rules,
//! handles [`commands`], and routes each message to a session by its
//! [`key`] (or, for direct chats, by the sender's principal; [`link`] codes
//! join identities into one principal). [`runner`] runs one turn at a time per session (a database lease
//! makes that hold across processes) and delivers replies through the
//! outbox. [`turn`] is one turn: load the session and its history from the
//! database, run the loop, end the turn atomically with its reply.

pub mod commands;
pub mod key;
pub mod link;
pub mod runner;
pub mod service;
pub mod turn;
