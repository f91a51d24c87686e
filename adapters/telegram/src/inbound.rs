//! One update in: normalise it and submit it to the core, or, for a tap on
//! an inline button (`callback_query`), hand it to [`Callbacks`]. Shared by
//! long polling and the webhook route.
//!
//! This is all an update costs the adapter: the core's
//! [`InboundSink::submit`] records and queues the message and returns at once,
//! so a long agent turn in a chat never holds up the next update of that chat
//! (a `/stop` or `/status` sent while a turn runs is handled right away).
//!
//! A panic while handling one update (a bug met by an input nobody
//! foresaw) is contained to that update: [`Inbound::handle_contained`]
//! logs it at ERROR and reports the update as handled, so that polling
//! confirms it and moves on and the webhook answers 200. Delivering it again
//! would only panic again, and hold up every later update behind it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use switchboard_contract::{InboundSink, SubmitError};
use teloxide_core::types::{Update, UpdateKind};

use crate::callback::Callbacks;
use crate::normalise::Normaliser;

/// Normalises updates and submits them to the core's sink.
pub(crate) struct Inbound {
    pub normaliser: Normaliser,
    pub sink: Arc<dyn InboundSink>,
    pub callbacks: Callbacks,
}

impl Inbound {
    /// Handles one update: submitted, or skipped when it is not for the
    /// core (logged at debug).
    ///
    /// # Errors
    /// The core could not take the message ([`SubmitError::Unavailable`]:
    /// deliver the update again later; [`SubmitError::Rejected`]: don't).
    #[tracing::instrument(name = "telegram.update", skip_all, fields(update_id = update.id.0))]
    pub(crate) async fn handle(&self, update: &Update) -> Result<(), SubmitError> {
        if let UpdateKind::CallbackQuery(query) = &update.kind {
            let account = &self.normaliser.account;
            self.callbacks.handle(&*self.sink, account, query).await;
            return Ok(());
        }
        let message = match self.normaliser.normalise(update) {
            Ok(message) => message,
            Err(skip) => {
                tracing::debug!(?skip, "update skipped");
                return Ok(());
            }
        };
        let submitted = self.sink.submit(message).await?;
        tracing::debug!(?submitted, "update submitted");
        Ok(())
    }

    /// [`Inbound::handle`], with a panic anywhere in it (the core's submit
    /// included) caught, logged at ERROR with the update id (never its
    /// content) and counted as handled.
    ///
    /// # Errors
    /// As [`Inbound::handle`].
    pub(crate) async fn handle_contained(&self, update: &Update) -> Result<(), SubmitError> {
        match AssertUnwindSafe(self.handle(update)).catch_unwind().await {
            Ok(result) => result,
            Err(_) => {
                // Not the panic's message: a slicing panic quotes the text
                // it sliced, a user's message. The panic hook has printed
                // it with its location to stderr.
                tracing::error!(
                    update_id = update.id.0,
                    "handling a Telegram update panicked; the update is skipped"
                );
                Ok(())
            }
        }
    }
}
