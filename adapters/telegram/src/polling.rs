//! Long polling: the `getUpdates` loop.
//!
//! Each round asks for updates after the last one handled (`offset` =
//! last update id + 1, which also confirms the earlier ones to Telegram),
//! hands them one by one to [`Inbound`], and asks again. When the core is
//! temporarily unavailable the same update is retried with a capped backoff
//! before the offset moves past it, so no update is lost; a redelivered one
//! is dropped by the core's dedup. An update whose handling panics is
//! logged and confirmed like a handled one (see `inbound`). On shutdown the
//! loop stops between requests (an interrupted `getUpdates` confirms
//! nothing) and confirms the handled updates with a last short call.
//!
//! Telegram answers a `getUpdates` with 409 Conflict when another poller of
//! the bot took over. The loop then stops at once, without confirming
//! (that call would cut the other poller's short in turn), and returns
//! [`TelegramError::PollingConflict`] for its caller to decide: stand by
//! while another instance holds the platform lease, or poll again later.
//! Likewise, stopped for a reason other than shutdown (a lost lease), it
//! confirms nothing: the next poller is handed the unconfirmed updates again
//! and the core's dedup drops those already recorded.

use std::sync::Arc;
use std::time::Duration;

use switchboard_contract::backoff::{self, Backoff, Wait};
use switchboard_contract::{LinkObserver, SubmitError};
use teloxide_core::payloads::GetUpdatesSetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::Update;
use teloxide_core::{ApiError, Bot, RequestError};
use tokio_util::sync::CancellationToken;

use crate::error::{Scrubber, TelegramError};
use crate::inbound::Inbound;

/// Between failed attempts (a `getUpdates`, or handing one update to the
/// core): from 500 ms, doubling, at most 30 s.
const RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
/// How long the final offset confirmation may take at shutdown.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) struct Poller {
    pub bot: Bot,
    pub inbound: Arc<Inbound>,
    pub scrubber: Scrubber,
    pub timeout_secs: u32,
    /// Cancelled at shutdown: only then is the offset confirmed when the
    /// loop stops.
    pub shutdown: CancellationToken,
    /// Told when a `getUpdates` fails, and when one works again.
    pub link: Option<Arc<dyn LinkObserver>>,
}

impl Poller {
    /// Polls until `stop` is cancelled.
    ///
    /// # Errors
    /// At start, the webhook that blocks polling could not be removed; any
    /// time, [`TelegramError::PollingConflict`].
    pub(crate) async fn run(self, stop: CancellationToken) -> Result<(), TelegramError> {
        self.remove_webhook().await?;
        tracing::info!("Telegram long polling started");
        let offset = self.poll(&stop).await?;
        if self.shutdown.is_cancelled() {
            self.confirm(offset).await;
        } else {
            tracing::info!(
                "Telegram long polling stopped before shutdown; the offset is left unconfirmed"
            );
        }
        tracing::info!("Telegram long polling stopped");
        Ok(())
    }

    /// Asks for updates and hands them to the core until `stop` is
    /// cancelled; returns the offset that confirms those handled.
    async fn poll(&self, stop: &CancellationToken) -> Result<Option<i32>, TelegramError> {
        let mut offset: Option<i32> = None;
        loop {
            let Some(updates) = self.next_updates(offset, stop).await? else {
                return Ok(offset);
            };
            for update in updates {
                if !self.hand_over(&update, stop).await {
                    return Ok(offset);
                }
                offset = Some(next_offset(update.id.0));
            }
        }
    }

    /// The updates after `offset`: `getUpdates`, asked again after a
    /// capped backoff while it fails (reported to the link observer);
    /// `None` once `stop` is cancelled.
    async fn next_updates(
        &self,
        offset: Option<i32>,
        stop: &CancellationToken,
    ) -> Result<Option<Vec<Update>>, TelegramError> {
        let mut retries = RETRY.retries();
        let mut failing = false;
        loop {
            let mut request = self
                .bot
                .get_updates()
                .timeout(self.timeout_secs)
                .allowed_updates(crate::ALLOWED_UPDATES);
            if let Some(offset) = offset {
                request = request.offset(offset);
            }
            // Stop first: a poll sent after the stop (a lost lease) would
            // cut short the poll of the process that polls now.
            let result = tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(None),
                result = request => result,
            };
            let error = match result {
                Ok(updates) => {
                    if failing && let Some(link) = &self.link {
                        link.up();
                    }
                    return Ok(Some(updates));
                }
                Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates)) => {
                    tracing::warn!(
                        "another poller took this bot over (409 Conflict); polling stops, the offset unconfirmed"
                    );
                    return Err(TelegramError::PollingConflict);
                }
                Err(error) => error,
            };
            let detail = self.scrubber.scrub(&error.to_string());
            tracing::warn!(%detail, "getUpdates failed");
            failing = true;
            if let Some(link) = &self.link {
                link.down(&format!("getUpdates failed: {detail}"));
            }
            let delay = retries.next_delay(retry_after(&error));
            if backoff::wait(delay, stop).await == Wait::Cancelled {
                return Ok(None);
            }
        }
    }

    /// Hands one update to the core, again after a capped backoff while the
    /// core is unavailable; `false` when `stop` came first (the update is
    /// not handled).
    async fn hand_over(&self, update: &Update, stop: &CancellationToken) -> bool {
        let mut retries = RETRY.retries();
        loop {
            match self.inbound.handle_contained(update).await {
                Ok(_) => return true,
                Err(SubmitError::Rejected(reason)) => {
                    tracing::warn!(update_id = update.id.0, %reason, "update rejected by the core");
                    return true;
                }
                Err(SubmitError::Unavailable(reason)) => {
                    tracing::warn!(update_id = update.id.0, %reason, "core unavailable; retrying the update");
                    let delay = retries.next_delay(None);
                    if backoff::wait(delay, stop).await == Wait::Cancelled {
                        return false;
                    }
                }
            }
        }
    }

    /// `getUpdates` fails while a webhook is set: remove it first.
    async fn remove_webhook(&self) -> Result<(), TelegramError> {
        let info = self
            .bot
            .get_webhook_info()
            .await
            .map_err(|e| self.scrubber.api_error("getWebhookInfo", &e))?;
        if info.url.is_some() {
            tracing::warn!("a webhook is set for this bot; deleting it to poll instead");
            self.bot
                .delete_webhook()
                .await
                .map_err(|e| self.scrubber.api_error("deleteWebhook", &e))?;
        }
        Ok(())
    }

    /// Confirms handled updates so a restart does not fetch them again.
    async fn confirm(&self, offset: Option<i32>) {
        let Some(offset) = offset else { return };
        let request = self.bot.get_updates().offset(offset).timeout(0).limit(1);
        match tokio::time::timeout(CONFIRM_TIMEOUT, request).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::debug!(error = %self.scrubber.scrub(&error.to_string()), "offset not confirmed");
            }
            Err(_) => tracing::debug!("offset confirmation timed out"),
        }
    }
}

fn next_offset(update_id: u32) -> i32 {
    i32::try_from(update_id).map_or(i32::MAX, |id| id.saturating_add(1))
}

/// The wait Telegram asks for after a failed `getUpdates`, which replaces
/// the computed backoff.
fn retry_after(error: &RequestError) -> Option<Duration> {
    match error {
        RequestError::RetryAfter(wait) => Some(Duration::from_secs(u64::from(wait.seconds()))),
        _ => None,
    }
}
