//! The one backoff policy every retry loop uses: the core's model calls and
//! outbox deliveries, and the adapters' reconnect and polling loops.
//!
//! [`Backoff`] is the policy: exponential delays from a base, capped, with
//! "equal jitter" (a uniformly random delay between half the ceiling and the
//! ceiling), so that many sessions or instances hitting the same outage do not
//! retry in lockstep, yet each still backs off and none waits past the cap.
//! [`Retries`] counts one loop's retries against it; a delay the platform or
//! provider asks for (`retry_after`, `Retry-After`) replaces the computed one
//! as is. [`wait`] sleeps unless shutdown comes first. How many attempts to
//! make is the caller's business: compare [`Retries::count`] with its limit.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Capped exponential backoff with equal jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// Starts at `base` and doubles per retry, never past `cap`.
    #[must_use]
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Self { base, cap }
    }

    /// The backoff ceiling before retry number `retry` (0-based):
    /// `base * 2^retry`, capped, without jitter.
    #[must_use]
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.cap)
    }

    /// How long to wait before retry number `retry` (0-based): `retry_after`
    /// when the other side sent one (used as is, even past the cap: it knows
    /// when its window resets), otherwise a random delay between half the
    /// [`ceiling`](Self::ceiling) and the ceiling.
    #[must_use]
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after;
        }
        let ceiling = self.ceiling(retry);
        let jittered = ceiling.as_secs_f64() * (0.5 + fastrand::f64() * 0.5);
        // Float rounding must not push it past the ceiling (nor overflow it).
        Duration::try_from_secs_f64(jittered).map_or(ceiling, |delay| delay.min(ceiling))
    }

    /// A fresh retry count for one loop.
    #[must_use]
    pub const fn retries(self) -> Retries {
        Retries {
            policy: self,
            count: 0,
        }
    }
}

/// One loop's retries under a [`Backoff`].
#[derive(Debug, Clone)]
pub struct Retries {
    policy: Backoff,
    count: u32,
}

impl Retries {
    /// Retries made so far.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The delay before the next retry (see [`Backoff::delay`]), counting it.
    /// Every retry counts, one made after a `retry_after` too, so the next
    /// computed delay is that of the next step.
    pub fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        let delay = self.policy.delay(self.count, retry_after);
        self.count = self.count.saturating_add(1);
        delay
    }

    /// Starts again from the base delay, after a success.
    pub fn reset(&mut self) {
        self.count = 0;
    }
}

/// How a [`wait`] ended.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The delay passed: retry.
    Elapsed,
    /// Shutdown was signalled first (or already): stop retrying.
    Cancelled,
}

/// Sleeps for `delay`, or until `shutdown` is cancelled if that comes first.
pub async fn wait(delay: Duration, shutdown: &CancellationToken) -> Wait {
    tokio::select! {
        // Checked first, so an already cancelled token never sleeps.
        biased;
        () = shutdown.cancelled() => Wait::Cancelled,
        () = tokio::time::sleep(delay) => Wait::Elapsed,
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> Backoff {
        Backoff::new(100 * MS, 1000 * MS)
    }

    #[test]
    fn the_ceiling_doubles_then_stays_at_the_cap_without_overflow() {
        let ceilings: Vec<_> = (0..6).map(|n| policy().ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(policy().ceiling(40), 1000 * MS);
        assert_eq!(policy().ceiling(u32::MAX), 1000 * MS);
        let huge = Backoff::new(Duration::MAX, Duration::from_secs(60));
        assert_eq!(huge.ceiling(3), Duration::from_secs(60));
        let uncapped = Backoff::new(Duration::MAX, Duration::MAX);
        assert!(uncapped.delay(0, None) <= Duration::MAX);
    }

    #[test]
    fn a_jittered_delay_stays_between_half_the_ceiling_and_the_ceiling() {
        for retry in 0..8 {
            let ceiling = policy().ceiling(retry);
            for _ in 0..200 {
                let delay = policy().delay(retry, None);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?}");
            }
        }
    }

    #[test]
    fn the_jitter_spreads_the_delays() {
        let delays: std::collections::HashSet<_> =
            (0..50).map(|_| policy().delay(3, None)).collect();
        assert!(delays.len() > 1, "{delays:?}");
    }

    #[test]
    fn retry_after_replaces_the_computed_delay_even_past_the_cap() {
        assert_eq!(policy().delay(0, Some(7 * MS)), 7 * MS);
        assert_eq!(policy().delay(5, Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(
            policy().delay(0, Some(Duration::from_secs(90))),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn retries_count_every_step_and_reset_to_the_base() {
        let mut retries = policy().retries();
        assert_eq!(
            retries.next_delay(Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        let second = retries.next_delay(None);
        assert!(second >= 100 * MS && second <= 200 * MS, "{second:?}");
        assert_eq!(retries.count(), 2);
        for _ in 0..10 {
            assert!(retries.next_delay(None) <= 1000 * MS);
        }
        retries.reset();
        assert_eq!(retries.count(), 0);
        assert!(retries.next_delay(None) <= 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_lasts_its_delay() {
        let start = Instant::now();
        let outcome = wait(750 * MS, &CancellationToken::new()).await;
        assert_eq!(outcome, Wait::Elapsed);
        assert_eq!(start.elapsed(), 750 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_a_wait_promptly() {
        let shutdown = CancellationToken::new();
        let canceller = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            canceller.cancel();
        });
        let start = Instant::now();
        let outcome = wait(Duration::from_secs(60), &shutdown).await;
        assert_eq!(outcome, Wait::Cancelled);
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_shutdown_means_no_wait_at_all() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let start = Instant::now();
        assert_eq!(wait(Duration::ZERO, &shutdown).await, Wait::Cancelled);
        assert_eq!(
            wait(Duration::from_secs(60), &shutdown).await,
            Wait::Cancelled
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
