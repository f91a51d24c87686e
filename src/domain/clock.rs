//! Time, read through one clock: Unix milliseconds ([`now_ms`]), the start
//! of the UTC day that daily spend counts from ([`start_of_today_ms`]) and
//! the day's label ([`day_label`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One day in milliseconds.
pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// `duration` in whole milliseconds, as the database keeps times
/// (saturating: no duration the gateway uses comes near `i64::MAX`).
#[must_use]
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The current time in Unix milliseconds.
#[must_use]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The start of the current UTC day in Unix milliseconds: where daily
/// spend and `/usage` count from.
#[must_use]
pub fn start_of_today_ms() -> i64 {
    let now = now_ms();
    now - now.rem_euclid(DAY_MS)
}

/// A day since the Unix epoch as `YYYY-MM-DD` (UTC).
pub fn day_label(day: i64) -> String {
    jiff::Timestamp::from_second(day.saturating_mul(86_400))
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_else(|_| day.to_string())
}

/// The gateway's clock for what it schedules itself (task runs, approval
/// expiries): the system's, moved by an offset that only tests set
/// ([`Clock::advance`]). Whoever sleeps on it ([`Clock::sleep_until`])
/// wakes when it moves, so a test moves time instead of waiting for it.
/// Cheap to clone; clones share the offset.
#[derive(Debug, Clone)]
pub struct Clock {
    offset_ms: std::sync::Arc<tokio::sync::watch::Sender<i64>>,
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl Clock {
    /// The system's clock.
    #[must_use]
    pub fn system() -> Self {
        Self {
            offset_ms: std::sync::Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// Now, in Unix milliseconds.
    #[must_use]
    pub fn now_ms(&self) -> i64 {
        now_ms().saturating_add(*self.offset_ms.borrow())
    }

    /// Moves the clock on by `by` (tests), waking every sleeper.
    pub fn advance(&self, by: Duration) {
        self.offset_ms
            .send_modify(|offset| *offset = offset.saturating_add(millis(by)));
    }

    /// Sleeps until `at_ms` on this clock, or until `cap` has passed,
    /// whichever is first (so a sleeper looks again even when nothing
    /// told it to); returns early when the clock is moved.
    pub async fn sleep_until(&self, at_ms: i64, cap: Duration) {
        let mut moved = self.offset_ms.subscribe();
        let wait = u64::try_from(at_ms.saturating_sub(self.now_ms())).unwrap_or(0);
        let wait = Duration::from_millis(wait).min(cap);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = moved.changed() => {}
        }
    }
}
