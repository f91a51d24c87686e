//! A platform that records what the core sends it: every delivery attempt
//! and every typing indicator, answering with receipts `m1`, `m2`, … (the
//! number of the attempt), and refusing the first attempt with a rate limit
//! when asked to.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::{ChatRef, DeliveryReceipt, OutboundMessage, PlatformSender, SendError};

/// How long the rate limit on a first attempt asks the core to wait.
const RATE_LIMIT_WAIT: Duration = Duration::from_millis(20);

/// The recording platform; register it with the core's runner.
#[derive(Debug, Default)]
pub struct RecordingSender {
    attempts: Mutex<Vec<OutboundMessage>>,
    typing: Mutex<Vec<ChatRef>>,
    rate_limit_first: Option<Duration>,
    typing_interval: Option<Duration>,
}

impl RecordingSender {
    /// A platform that accepts everything and shows no typing indicator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers the first attempt with a short `RetryAfter`.
    #[must_use]
    pub fn rate_limiting_the_first_attempt(self) -> Self {
        self.rate_limiting_the_first_attempt_for(RATE_LIMIT_WAIT)
    }

    /// Answers the first attempt with `RetryAfter(wait)`.
    #[must_use]
    pub fn rate_limiting_the_first_attempt_for(self, wait: Duration) -> Self {
        Self {
            rate_limit_first: Some(wait),
            ..self
        }
    }

    /// Asks the core to repeat the typing indicator every `interval`.
    #[must_use]
    pub fn typing_every(self, interval: Duration) -> Self {
        Self {
            typing_interval: Some(interval),
            ..self
        }
    }

    /// Every delivery attempt so far, refused ones included, oldest first.
    pub fn attempts(&self) -> Vec<OutboundMessage> {
        self.attempts.lock().expect("lock").clone()
    }

    /// The attempt number `index` (0-based), once it has been made.
    pub fn attempt(&self, index: usize) -> Option<OutboundMessage> {
        self.attempts.lock().expect("lock").get(index).cloned()
    }

    /// The chats a typing indicator was shown in, one entry per time.
    pub fn typing(&self) -> Vec<ChatRef> {
        self.typing.lock().expect("lock").clone()
    }
}

#[async_trait]
impl PlatformSender for RecordingSender {
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let mut attempts = self.attempts.lock().expect("lock");
        attempts.push(message.clone());
        if let Some(wait) = self.rate_limit_first
            && attempts.len() == 1
        {
            return Err(SendError::RetryAfter(wait));
        }
        Ok(DeliveryReceipt {
            message_ids: vec![format!("m{}", attempts.len())],
        })
    }

    async fn typing(&self, chat: &ChatRef) {
        self.typing.lock().expect("lock").push(chat.clone());
    }

    fn typing_interval(&self) -> Option<Duration> {
        self.typing_interval
    }
}
