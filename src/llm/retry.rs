//! Retry policy for model calls.
use std::time::Duration;

/// How often and how long to retry a failed model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}
