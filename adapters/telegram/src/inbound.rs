//! One update in: normalise it and submit it to the core. Shared by long
//! polling and the webhook route.
//!
//! This is all an update costs the adapter: the core's
//! [`InboundSink::submit`] records and queues the message and returns at once,
//! so a long agent turn in a chat never holds up the next update of that chat
//! (a `/stop` or `/status` sent while a turn runs is handled right away).

use std::sync::Arc;

use switchboard_contract::{InboundSink, SubmitError};
use teloxide_core::types::Update;

use crate::normalise::Normaliser;

/// Normalises updates and submits them to the core's sink.
pub(crate) struct Inbound {
    pub normaliser: Normaliser,
    pub sink: Arc<dyn InboundSink>,
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
}
