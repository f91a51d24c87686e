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
