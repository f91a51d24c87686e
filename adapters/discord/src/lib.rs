//! Switchboard's Discord adapter: DMs, server channels and threads, on
//! serenity 0.12.
//!
//! - [`settings`]: the `[discord]` configuration section.
//! - [`normalise`]: a Discord message → the contract's `InboundMessage`
//!   (mention gating, mention stripping, threads as chats).
//! - [`inbound`]: the gateway's message handler, which only normalises and
//!   submits to the core's `InboundSink`.
//! - [`sender`]: the `PlatformSender` (2,000-character chunks, idempotent
//!   nonces, typing indicator, 429 handling).
//! - [`gateway`]: running serenity's client until shutdown; close code 4014
//!   is reported with its fix.
//! - [`adapter`]: wiring it together from settings.

pub mod adapter;
pub mod error;
pub mod gateway;
mod ids;
pub mod inbound;
pub mod normalise;
pub mod sender;
pub mod settings;

pub use adapter::DiscordAdapter;
pub use error::DiscordError;
pub use gateway::{DiscordGateway, intents, invite_permissions};
pub use inbound::{Handled, InboundHandler};
pub use normalise::{NormaliseError, Normalised, PLATFORM, Skip, normalise};
pub use sender::DiscordSender;
pub use settings::DiscordSettings;
