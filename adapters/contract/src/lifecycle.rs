//! How the core starts, runs and stops every adapter the same way.
//!
//! An [`Adapter`] is built from its settings without a network call, so
//! that what fails there is the configuration. The core then mounts its
//! [`Adapter::webhook_paths`] at once (answering 503 until it is up, so the
//! platform delivers again later) and calls [`Adapter::start`] — the
//! start-up calls (the bot's identity, a token, `setWebhook`) — again after
//! a capped backoff while it fails with [`StartError::Unavailable`]. What
//! it gets back, [`Started`], is everything the core needs:
//!
//! - the [`PlatformSender`] for replies;
//! - the router serving the webhook paths, if any (events over HTTP work on
//!   every instance);
//! - a [`Connection`] only one instance may hold (long polling, a gateway
//!   WebSocket, Socket Mode), which the core runs under a platform lease
//!   named [`Connection::lease_name`] and starts again after a backoff when
//!   it fails;
//! - work to finish at shutdown ([`Drain`]), such as events handed to the
//!   core after their webhook was answered.
//!
//! The adapter reports a connection that fails and recovers by itself
//! through the [`LinkObserver`] in its [`Hookup`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::ids::PlatformName;
use crate::platform::{InboundSink, LinkObserver, PlatformSender};

/// What an adapter is given to start: where to hand what arrives, whom to
/// tell how its connection fares, and when the process shuts down.
#[derive(Clone)]
pub struct Hookup {
    pub sink: Arc<dyn InboundSink>,
    pub observer: Arc<dyn LinkObserver>,
    /// Cancelled when the process shuts down. A [`Connection`]'s `stop` is
    /// cancelled then too, but also earlier, when its lease goes to another
    /// instance: what an adapter does only at shutdown (Telegram confirms
    /// the updates it handled, which would cut short another instance's
    /// poll) it does when this is cancelled.
    pub shutdown: CancellationToken,
}

/// Why an adapter did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The configuration is wrong (a rejected token, an invalid setting):
    /// no retry mends it. The text names no secret.
    #[error("{0}")]
    Configuration(String),
    /// The platform could not be reached or failed; the core tries again.
    /// The text names no secret.
    #[error("{0}")]
    Unavailable(String),
}

/// Why a [`Connection`] ended before it was told to stop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The platform says another process holds the connection (Telegram's
    /// 409 Conflict). Under a lease the core first waits for the lease to
    /// settle who holds it.
    #[error("{0}")]
    Conflict(String),
    /// The connection failed; the core starts it again after a backoff.
    #[error("{0}")]
    Failed(String),
}

/// A platform adapter, as the core supervises it.
#[async_trait]
pub trait Adapter: Send + Sync + 'static {
    /// The platform it connects (`telegram`).
    fn platform(&self) -> PlatformName;

    /// The HTTP paths its webhook router will serve, known before it
    /// starts (empty: it takes no webhooks).
    fn webhook_paths(&self) -> Vec<String> {
        Vec::new()
    }

    /// Makes the start-up calls and returns what runs the adapter.
    ///
    /// # Errors
    /// [`StartError::Unavailable`] when the platform could not be reached
    /// (the core calls again after a backoff), [`StartError::Configuration`]
    /// when it never will be with these settings.
    async fn start(&self, hookup: Hookup) -> Result<Started, StartError>;

    /// Reaches the platform the way [`Adapter::start`] would, changing
    /// nothing there (no webhook registered, no connection held), and says
    /// what it found (`getMe answered: bot @name`), for `switchboard
    /// check`. The text names no secret.
    ///
    /// # Errors
    /// What went wrong, as [`Adapter::start`] would report it.
    async fn check(&self) -> Result<String, StartError>;
}

/// A started adapter.
pub struct Started {
    /// Delivers replies.
    pub sender: Arc<dyn PlatformSender>,
    /// Serves [`Adapter::webhook_paths`].
    pub webhook: Option<axum::Router>,
    /// The connection one instance at a time holds, if the adapter has one.
    pub connection: Option<Arc<dyn Connection>>,
    /// Work to finish at shutdown, if any.
    pub drain: Option<Arc<dyn Drain>>,
}

impl Started {
    /// An adapter that only sends (and takes nothing in by itself).
    #[must_use]
    pub fn sender(sender: Arc<dyn PlatformSender>) -> Self {
        Self {
            sender,
            webhook: None,
            connection: None,
            drain: None,
        }
    }

    /// With a webhook router.
    #[must_use]
    pub fn with_webhook(self, router: axum::Router) -> Self {
        Self {
            webhook: Some(router),
            ..self
        }
    }

    /// With a connection one instance holds.
    #[must_use]
    pub fn with_connection(self, connection: Arc<dyn Connection>) -> Self {
        Self {
            connection: Some(connection),
            ..self
        }
    }

    /// With work to finish at shutdown.
    #[must_use]
    pub fn with_drain(self, drain: Arc<dyn Drain>) -> Self {
        Self {
            drain: Some(drain),
            ..self
        }
    }
}

/// A connection to a platform that one process at a time may hold.
#[async_trait]
pub trait Connection: Send + Sync {
    /// The name of the platform lease that decides who holds it
    /// (`telegram:<bot id>`): the same on every instance for one bot.
    fn lease_name(&self) -> String;

    /// Runs the connection until `stop` is cancelled (`Ok`) or it fails.
    ///
    /// # Errors
    /// The connection ended by itself; the core starts it again after a
    /// backoff.
    async fn run(&self, stop: CancellationToken) -> Result<(), ConnectionError>;
}

/// Work an adapter finishes at shutdown.
#[async_trait]
pub trait Drain: Send + Sync {
    /// Waits up to `grace` for the work in hand.
    async fn drain(&self, grace: Duration);
}
