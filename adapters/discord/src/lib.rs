//! Switchboard's Discord adapter: DMs, server channels and threads, on
//! serenity 0.12's REST client and models, with `twilight-gateway` for the
//! gateway connection.
//!
//! - [`settings`]: the `[discord]` configuration section.
//! - [`normalise`]: a Discord message → the contract's `InboundMessage`
//!   (mention gating, mention stripping, threads as chats).
//! - [`inbound`]: the gateway's message handler, which only normalises and
//!   submits to the core's `InboundSink`.
//! - `press`: an `INTERACTION_CREATE` → the contract's `InboundAction`;
//!   `interaction`: a press handed to the core's `InboundSink::act` and
//!   answered through the interaction callback within 3 seconds (type 7
//!   UPDATE_MESSAGE, 4 with an ephemeral notice, or 6).
//! - `components`: a reply's buttons as action rows of buttons whose
//!   `custom_id` is the action id, under the reply's last chunk.
//! - `active`: the channels the bot is active in and the last message seen
//!   in each, for catching up after a lost gateway session.
//! - [`sender`]: the `PlatformSender` (2,000-character chunks, idempotent
//!   nonces, typing indicator).
//! - `rest`: the REST calls of the sender and the handler, with Discord's
//!   `retry_after` honoured per route and channel.
//! - [`gateway`]: the gateway worker (shards, their shared identify queue,
//!   shutdown within a deadline); `session`: one shard on twilight-gateway
//!   (reconnect backoff, silence watchdog, catch-up after a new session);
//!   close code 4014 is reported with its fix.
//! - [`adapter`]: wiring it together from settings.
//! - `lifecycle`: [`DiscordPlatform`], the adapter as the core starts,
//!   supervises and checks it (`switchboard_contract::Adapter`).

mod active;
pub mod adapter;
mod components;
pub mod error;
pub mod gateway;
mod ids;
pub mod inbound;
mod interaction;
mod lifecycle;
mod media;
pub mod normalise;
mod press;
mod rest;
pub mod sender;
mod session;
pub mod settings;

pub use adapter::DiscordAdapter;
pub use error::DiscordError;
pub use gateway::{DiscordGateway, SHUTDOWN_DEADLINE, intents, invite_permissions};
pub use inbound::{Handled, InboundHandler};
pub use lifecycle::DiscordPlatform;
pub use normalise::{NormaliseError, Normalised, PLATFORM, Skip, normalise};
pub use rest::Rest;
pub use sender::DiscordSender;
pub use settings::DiscordSettings;
