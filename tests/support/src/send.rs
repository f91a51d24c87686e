//! Delivering one message through a `PlatformSender` the way the core's
//! runner does: retried on `RetryAfter` and `Transient`, given up on
//! `Permanent`. The waits asked for are recorded, not slept.

use std::time::Duration;

use switchboard_contract::{DeliveryReceipt, OutboundMessage, PlatformSender, SendError};

/// Attempts before [`send_with_retries`] gives up.
const MAX_ATTEMPTS: usize = 5;

/// What a delivery through [`send_with_retries`] went through.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Every attempt, the successful one included.
    pub attempts: usize,
    /// One entry per retry: the wait a `RetryAfter` asked for, or zero after
    /// a `Transient` failure.
    pub waits: Vec<Duration>,
}

impl Delivery {
    /// How many attempts were rate limited (`RetryAfter`).
    pub fn rate_limited(&self) -> usize {
        self.waits.iter().filter(|wait| !wait.is_zero()).count()
    }
}

/// Sends `message` like the core's runner and returns the outcome with what
/// it took; after [`MAX_ATTEMPTS`] the last retryable error.
///
/// # Panics
///
/// When a rate limit asks for no wait at all.
pub async fn send_with_retries(
    sender: &dyn PlatformSender,
    message: &OutboundMessage,
) -> (Result<DeliveryReceipt, SendError>, Delivery) {
    let mut delivery = Delivery::default();
    let mut last = None;
    while delivery.attempts < MAX_ATTEMPTS {
        delivery.attempts += 1;
        match sender.send(message).await {
            Err(SendError::RetryAfter(wait)) => {
                assert!(!wait.is_zero(), "a rate limit asks for a positive wait");
                delivery.waits.push(wait);
                last = Some(SendError::RetryAfter(wait));
            }
            Err(SendError::Transient(reason)) => {
                delivery.waits.push(Duration::ZERO);
                last = Some(SendError::Transient(reason));
            }
            done => return (done, delivery),
        }
    }
    let last = last.unwrap_or_else(|| SendError::Transient("no attempt made".to_owned()));
    (Err(last), delivery)
}
