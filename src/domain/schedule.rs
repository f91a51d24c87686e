//! When a task runs: once at an instant, every fixed interval, or on a
//! five-field cron expression in a time zone ([`Schedule`]), parsed from what
//! the agent asks for ([`ScheduleRequest`]) and stored as text
//! ([`Schedule::kind`], [`Schedule::spec`]).
//!
//! Times are Unix milliseconds. A cron schedule is wall-clock time in its
//! zone (`jiff-cron` over `jiff`), so a 09:00 task stays at 09:00 local
//! across daylight-saving changes: a local time skipped by the change fires
//! at the shifted instant, one that occurs twice fires once. An interval is
//! elapsed time, counted from when the task was made.

use std::str::FromStr;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Span, SpanRelativeTo, Timestamp, civil};

/// When a task runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Once, at `at_ms`.
    Once { at_ms: i64 },
    /// Every `interval`, the first one interval after `anchor_ms`.
    Every { interval: Duration, anchor_ms: i64 },
    /// At each time the five-field `expression` matches in `timezone`.
    Cron {
        expression: String,
        timezone: String,
    },
}

/// Why a schedule could not be made; the text is for the model to correct
/// its call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(String);

impl ScheduleError {
    fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// What the agent asked for: exactly one of `at`, `in`, `every`, `cron`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleRequest {
    /// RFC 3339 (`2026-12-02T09:00:00+01:00`), or a local date-time
    /// (`2026-12-02T09:00`) in the time zone.
    pub at: Option<String>,
    /// A duration from now (`90s`, `2h30m`, `1d`).
    pub after: Option<String>,
    /// A duration between runs, at least the minimum interval.
    pub every: Option<String>,
    /// Five cron fields: minute hour day-of-month month day-of-week.
    pub cron: Option<String>,
    /// An IANA time zone (`Europe/Paris`).
    pub timezone: String,
}

impl ScheduleRequest {
    /// The schedule, as of `now_ms`; an interval shorter than
    /// `min_interval` is refused.
    ///
    /// # Errors
    /// Not exactly one form, an unparseable time or duration, an unknown
    /// time zone, a time in the past, an interval under the minimum, or a
    /// cron expression without exactly five fields.
    pub fn parse(&self, now_ms: i64, min_interval: Duration) -> Result<Schedule, ScheduleError> {
        let zone = zone(&self.timezone)?;
        let given = [&self.at, &self.after, &self.every, &self.cron]
            .iter()
            .filter(|form| form.is_some())
            .count();
        if given != 1 {
            return Err(ScheduleError::new(
                "give exactly one of `at`, `in`, `every` or `cron`",
            ));
        }
        if let Some(at) = &self.at {
            let at_ms = instant(at, &zone)?;
            if at_ms < now_ms {
                return Err(ScheduleError::new(format!(
                    "`at` {at} is in the past (now is {})",
                    words(now_ms, &self.timezone)
                )));
            }
            return Ok(Schedule::Once { at_ms });
        }
        if let Some(after) = &self.after {
            let delay = duration(after)?;
            return Ok(Schedule::Once {
                at_ms: now_ms.saturating_add(super::millis(delay)),
            });
        }
        if let Some(every) = &self.every {
            let interval = duration(every)?;
            if interval < min_interval {
                return Err(ScheduleError::new(format!(
                    "`every` must be at least {} seconds",
                    min_interval.as_secs()
                )));
            }
            return Ok(Schedule::Every {
                interval,
                anchor_ms: now_ms,
            });
        }
        let expression = self.cron.as_deref().unwrap_or_default().trim();
        let schedule = Schedule::Cron {
            expression: expression.to_owned(),
            timezone: self.timezone.clone(),
        };
        cron(expression)?;
        Ok(schedule)
    }
}

impl Schedule {
    /// The stored kind: `once`, `every` or `cron`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Once { .. } => "once",
            Self::Every { .. } => "every",
            Self::Cron { .. } => "cron",
        }
    }

    /// The stored specification: the instant, `interval_ms@anchor_ms`, or
    /// the expression (its zone is stored beside it).
    #[must_use]
    pub fn spec(&self) -> String {
        match self {
            Self::Once { at_ms } => at_ms.to_string(),
            Self::Every {
                interval,
                anchor_ms,
            } => format!("{}@{anchor_ms}", super::millis(*interval)),
            Self::Cron { expression, .. } => expression.clone(),
        }
    }

    /// A schedule read back from its kind, specification and zone.
    ///
    /// # Errors
    /// Stored text that is not a schedule.
    pub fn stored(kind: &str, spec: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let bad = || ScheduleError::new(format!("stored schedule {kind} {spec:?} is invalid"));
        match kind {
            "once" => Ok(Self::Once {
                at_ms: spec.parse().map_err(|_| bad())?,
            }),
            "every" => {
                let (interval, anchor) = spec.split_once('@').ok_or_else(bad)?;
                let interval: u64 = interval.parse().map_err(|_| bad())?;
                Ok(Self::Every {
                    interval: Duration::from_millis(interval.max(1)),
                    anchor_ms: anchor.parse().map_err(|_| bad())?,
                })
            }
            "cron" => {
                cron(spec)?;
                Ok(Self::Cron {
                    expression: spec.to_owned(),
                    timezone: timezone.to_owned(),
                })
            }
            _ => Err(bad()),
        }
    }

    /// The first run strictly after `after_ms`; `None` when there is none
    /// (a one-off run already past).
    #[must_use]
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Self::Once { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
            Self::Every {
                interval,
                anchor_ms,
            } => {
                let step = super::millis(*interval).max(1);
                let elapsed = after_ms.saturating_sub(*anchor_ms);
                let steps = if elapsed < 0 { 0 } else { elapsed / step };
                Some(anchor_ms.saturating_add((steps + 1).saturating_mul(step)))
            }
            Self::Cron {
                expression,
                timezone,
            } => next_cron(expression, timezone, after_ms),
        }
    }

    /// The schedule in words, with times in `timezone`: `once, at
    /// 2026-12-02 09:00 (Europe/Paris)`, `every 2h 30m`, `cron "0 9 * * 1-5"
    /// (Europe/Paris)`.
    #[must_use]
    pub fn describe(&self, timezone: &str) -> String {
        match self {
            Self::Once { at_ms } => format!("once, at {}", words(*at_ms, timezone)),
            Self::Every { interval, .. } => format!("every {}", span_words(*interval)),
            Self::Cron {
                expression,
                timezone,
            } => format!("cron \"{expression}\" ({timezone})"),
        }
    }
}

/// `at_ms` as a person reads it in `timezone`: `2026-12-02 09:00 (Europe/Paris)`.
#[must_use]
pub fn words(at_ms: i64, timezone: &str) -> String {
    let zone = TimeZone::get(timezone).unwrap_or(TimeZone::UTC);
    match Timestamp::from_millisecond(at_ms) {
        Ok(at) => format!(
            "{} ({timezone})",
            at.to_zoned_datetime(zone).strftime("%Y-%m-%d %H:%M")
        ),
        Err(_) => at_ms.to_string(),
    }
}

/// Whether `name` is a time zone this build knows.
#[must_use]
pub fn is_zone(name: &str) -> bool {
    TimeZone::get(name).is_ok()
}

fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    TimeZone::get(name).map_err(|_| {
        ScheduleError::new(format!(
            "unknown time zone `{name}`: use an IANA name such as Europe/Paris or America/New_York"
        ))
    })
}

/// An instant from RFC 3339, or a local date-time in `zone`.
fn instant(text: &str, zone: &TimeZone) -> Result<i64, ScheduleError> {
    let text = text.trim();
    if let Ok(at) = Timestamp::from_str(text) {
        return Ok(at.as_millisecond());
    }
    civil::DateTime::from_str(text)
        .ok()
        .and_then(|local| local.to_zoned_datetime(zone.clone()).ok())
        .map(|zoned| zoned.timestamp().as_millisecond())
        .ok_or_else(|| {
            ScheduleError::new(format!(
                "`at` {text:?} is not a time: use RFC 3339 (2026-12-02T09:00:00+01:00) or a local \
                 date-time (2026-12-02T09:00)"
            ))
        })
}

/// A duration such as `90s`, `2h30m`, `1d` (a day is 24 hours).
fn duration(text: &str) -> Result<Duration, ScheduleError> {
    let bad = || {
        ScheduleError::new(format!(
            "{text:?} is not a duration: write one like 90s, 45m, 2h30m or 1d"
        ))
    };
    let span = Span::from_str(text.trim()).map_err(|_| bad())?;
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| bad())?;
    Duration::try_from(signed).map_err(|_| bad())
}

/// A duration in words, in hours at most: `1h`, `1h 30m`, `45s`.
#[must_use]
pub fn span_words(interval: Duration) -> String {
    let secs = i64::try_from(interval.as_secs()).unwrap_or(i64::MAX);
    Span::new()
        .try_seconds(secs)
        .ok()
        .and_then(|span| {
            span.round(
                jiff::SpanRound::new()
                    .largest(jiff::Unit::Hour)
                    .days_are_24_hours(),
            )
            .ok()
        })
        .map_or_else(|| format!("{secs}s"), |span| format!("{span:#}"))
}

/// The five fields, checked, as the seven `jiff-cron` reads (seconds 0,
/// any year).
fn cron(expression: &str) -> Result<jiff_cron::Schedule, ScheduleError> {
    let fields = expression.split_whitespace().count();
    if fields != 5 {
        return Err(ScheduleError::new(format!(
            "a cron expression has five fields (minute hour day-of-month month day-of-week); \
             {expression:?} has {fields}"
        )));
    }
    jiff_cron::Schedule::from_str(&format!("0 {expression} *"))
        .map_err(|err| ScheduleError::new(format!("invalid cron expression {expression:?}: {err}")))
}

fn next_cron(expression: &str, timezone: &str, after_ms: i64) -> Option<i64> {
    let schedule = cron(expression).ok()?;
    let zone = jiff_cron::jiff::tz::TimeZone::get(timezone).ok()?;
    let after = jiff_cron::jiff::Timestamp::from_millisecond(after_ms)
        .ok()?
        .to_zoned(zone);
    schedule
        .after(after)
        .next()
        .map(|at| at.timestamp().as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000;

    fn request(timezone: &str) -> ScheduleRequest {
        ScheduleRequest {
            timezone: timezone.to_owned(),
            ..ScheduleRequest::default()
        }
    }

    fn at(text: &str) -> i64 {
        Timestamp::from_str(text).expect("a time").as_millisecond()
    }

    #[test]
    fn in_and_at_make_one_run() {
        let now = at("2026-12-01T12:00:00Z");
        let after = ScheduleRequest {
            after: Some("2h30m".to_owned()),
            ..request("UTC")
        };
        let once = after.parse(now, Duration::from_secs(300)).expect("valid");
        assert_eq!(once.next_after(now), Some(now + 150 * MINUTE));
        assert_eq!(once.next_after(now + 150 * MINUTE), None);
        let local = ScheduleRequest {
            at: Some("2026-12-02T09:00".to_owned()),
            ..request("Europe/Paris")
        };
        let once = local.parse(now, Duration::from_secs(300)).expect("valid");
        assert_eq!(once.next_after(now), Some(at("2026-12-02T08:00:00Z")));
    }

    #[test]
    fn every_first_fires_one_interval_after_creation_and_skips_missed_runs() {
        let now = at("2026-12-01T12:00:00Z");
        let every = ScheduleRequest {
            every: Some("10m".to_owned()),
            ..request("UTC")
        }
        .parse(now, Duration::from_secs(300))
        .expect("valid");
        assert_eq!(every.next_after(now), Some(now + 10 * MINUTE));
        // After a long outage the next run is the next one due, not a burst.
        assert_eq!(
            every.next_after(now + 95 * MINUTE),
            Some(now + 100 * MINUTE)
        );
        let stored = Schedule::stored(every.kind(), &every.spec(), "UTC").expect("reads back");
        assert_eq!(stored, every);
    }

    #[test]
    fn a_nine_oclock_cron_stays_at_nine_local_across_daylight_saving() {
        let schedule = Schedule::Cron {
            expression: "0 9 * * *".to_owned(),
            timezone: "Europe/Paris".to_owned(),
        };
        // Paris moves from UTC+2 to UTC+1 on 2026-10-25.
        let before = schedule
            .next_after(at("2026-10-24T00:00:00Z"))
            .expect("a run");
        assert_eq!(before, at("2026-10-24T07:00:00Z"));
        let after = schedule.next_after(before).expect("a run");
        assert_eq!(after, at("2026-10-25T08:00:00Z"));
    }

    #[test]
    fn bad_requests_are_errors_the_model_can_correct() {
        let now = at("2026-12-01T12:00:00Z");
        let min = Duration::from_secs(300);
        let cases = [
            (
                ScheduleRequest {
                    at: Some("tomorrow-ish".to_owned()),
                    ..request("UTC")
                },
                "not a time",
            ),
            (
                ScheduleRequest {
                    every: Some("30s".to_owned()),
                    ..request("UTC")
                },
                "at least 300 seconds",
            ),
            (
                ScheduleRequest {
                    after: Some("1h".to_owned()),
                    ..request("Mars/Olympus")
                },
                "unknown time zone",
            ),
            (
                ScheduleRequest {
                    cron: Some("0 0 9 * * *".to_owned()),
                    ..request("UTC")
                },
                "has 6",
            ),
            (
                ScheduleRequest {
                    at: Some("2026-11-30T09:00:00Z".to_owned()),
                    ..request("UTC")
                },
                "in the past",
            ),
            (request("UTC"), "exactly one"),
        ];
        for (request, expected) in cases {
            let err = request.parse(now, min).expect_err("refused").to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn schedules_read_in_words() {
        let every = Schedule::Every {
            interval: Duration::from_secs(9000),
            anchor_ms: 0,
        };
        assert_eq!(every.describe("UTC"), "every 2h 30m");
        assert_eq!(
            words(at("2026-12-02T08:00:00Z"), "Europe/Paris"),
            "2026-12-02 09:00 (Europe/Paris)"
        );
    }
}
