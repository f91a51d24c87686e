//! Switchboard's Slack adapter.
//!
//! Inbound, Slack delivers events either over HTTP (the Events API: signed
//! requests to `events_path`, button presses to `interactivity_path`) or
//! over a WebSocket the adapter opens (Socket Mode). Either way DMs,
//! channel mentions and free-response channels become
//! [`InboundMessage`](switchboard_contract::InboundMessage)s for the core's
//! [`InboundSink`](switchboard_contract::InboundSink), acknowledged only once
//! the core has recorded them, and button presses reach
//! [`InboundSink::act`](switchboard_contract::InboundSink::act). Outbound,
//! [`SlackSender`] posts the core's Markdown replies as `mrkdwn`, in
//! threads, with live drafts and buttons.
//!
//! The core builds one [`SlackAdapter`] for the `[slack]` table, which
//! serves every workspace configured there, and starts it like every
//! other adapter ([`switchboard_contract::Adapter`]):
//!
//! ```ignore
//! let slack = SlackAdapter::from_settings(settings)?; // reads the env; no network
//! let paths = slack.webhook_paths();                   // mount these now (503 until up)
//! let started = slack.start(hookup).await?;            // auth.test per workspace
//! // started.sender: register under "slack"; started.webhook: serve it
//! // (Events API); started.connection: run it under its lease (Socket Mode);
//! // started.drain: at shutdown.
//! ```
//!
//! Identity: the contract's account of every message and reply is the
//! workspace's team id (`T0123…`), and a sender's user id is the Slack user
//! id (`U0456…`), unique within it; so one adapter serves several
//! workspaces, and a person in two workspaces is two senders.
//!
//! The Web API is spoken by a thin client over `reqwest` 0.12 (rustls), the
//! HTTP stack the rest of the workspace uses, rather than `slack-morphism`:
//! the adapter needs a dozen methods, wants to classify every error for the
//! core's retry loop itself, and the fake Slack of the tests serves exactly
//! what is used. Socket Mode runs on `tokio-tungstenite` (rustls), which
//! the workspace builds already.
//!
//! Layout: [`settings`] (configuration and secrets), `adapter` (building
//! and starting; [`SlackAdapter::check`]), `workspace` (team id →
//! token and bot identity), [`api`] (the Web API client), [`signature`]
//! (request signatures), `webhook` (the HTTP routes), `socket` (Socket
//! Mode), `inbound` (events and presses → the core), `events` (payloads),
//! `normalise` (a message event → an inbound message), `press`
//! (a button press → an inbound action), `recent` (events handed over
//! lately), `text` (Slack's
//! markup → plain text), `names` (display names), `media` (files),
//! [`mrkdwn`] (Markdown → mrkdwn), `format` (splitting, blocks),
//! [`sender`] (replies), [`handoff`] (tasks handing work to the core),
//! `bounded` (small bounded maps).

mod adapter;
pub mod api;
mod bounded;
mod events;
mod format;
pub mod handoff;
mod inbound;
mod media;
pub mod mrkdwn;
mod names;
mod normalise;
mod press;
mod recent;
pub mod sender;
pub mod settings;
pub mod signature;
mod socket;
mod text;
mod webhook;
mod workspace;

pub use adapter::{SlackAdapter, WorkspaceCheck};
pub use api::{ApiError, BotIdentity};
pub use format::{SECTION_LIMIT, TEXT_LIMIT};
pub use handoff::Handoff;
pub use mrkdwn::Mrkdwn;
pub use sender::SlackSender;
pub use settings::{
    DEFAULT_WORKSPACE, Mode, Secrets, SettingsError, SlackSettings, WorkspaceSecrets,
    WorkspaceSettings,
};
pub use socket::SocketMode;

/// The platform name this adapter submits under and registers its sender
/// for.
pub const PLATFORM: &str = "slack";
