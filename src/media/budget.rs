//! The limits on how much a message and a person may send: the files of one
//! message add up to at most `media.max_message_bytes`, and the files one
//! principal sends in a UTC day to at most `media.principal_daily_bytes`,
//! counted in the database (`media_usage`) so the limit holds across
//! instances and restarts.
//!
//! Before a message's files are fetched, [`MediaBudget::allowance`] reads
//! what the sender has left today; [`super::Media::ingest`] refuses the
//! message as soon as the declared sizes, or the bytes fetched so far, pass
//! the [`Allowance`], before storing the file that passes it. Once all are
//! taken, [`MediaBudget::charge`] adds them to the day's count in one
//! statement that adds nothing when another instance's message got there
//! first.

use crate::domain::{MediaRef, PrincipalId};
use crate::media::settings::MediaSettings;
use crate::store::{Store, StoreError};

use super::Refusal;

/// What one message's files may add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// `media.max_message_bytes`.
    pub max_message_bytes: u64,
    /// `media.principal_daily_bytes` (0: none) and what the sender has
    /// sent today.
    pub daily: Option<(u64, u64)>,
}

impl Allowance {
    /// No daily budget; a message may hold up to `max_message_bytes`.
    #[must_use]
    pub fn per_message(max_message_bytes: u64) -> Self {
        Self {
            max_message_bytes,
            daily: None,
        }
    }

    /// Whether files adding up to `bytes` fit, or the refusal naming the
    /// limit they pass.
    ///
    /// # Errors
    /// The refusal, when they do not fit.
    pub fn check(&self, bytes: u64) -> Result<(), Refusal> {
        if bytes > self.max_message_bytes {
            return Err(Refusal::MessageTooLarge {
                limit: self.max_message_bytes,
            });
        }
        if let Some((limit, used)) = self.daily
            && used.saturating_add(bytes) > limit
        {
            return Err(Refusal::DailyBudget { limit });
        }
        Ok(())
    }
}

/// The UTC date of `ms` (milliseconds since the Unix epoch), `YYYY-MM-DD`.
#[must_use]
pub fn utc_day(ms: i64) -> String {
    crate::domain::day_label(ms.div_euclid(86_400_000))
}

/// The limits of `media` settings.
#[derive(Debug, Clone, Copy)]
pub struct MediaBudget {
    max_message_bytes: u64,
    principal_daily_bytes: u64,
}

impl MediaBudget {
    /// The limits of `settings`.
    #[must_use]
    pub fn new(settings: &MediaSettings) -> Self {
        Self {
            max_message_bytes: settings.max_message_bytes.into(),
            principal_daily_bytes: settings.principal_daily_bytes,
        }
    }

    /// What a message of `principal` may hold now.
    ///
    /// # Errors
    /// A database failure.
    pub async fn allowance(
        &self,
        store: &Store,
        principal: PrincipalId,
    ) -> Result<Allowance, StoreError> {
        let daily = if self.principal_daily_bytes == 0 {
            None
        } else {
            let day = utc_day(crate::domain::now_ms());
            let used = store.media().bytes_on(principal, &day).await?;
            Some((self.principal_daily_bytes, used))
        };
        Ok(Allowance {
            max_message_bytes: self.max_message_bytes,
            daily,
        })
    }

    /// Counts `files` in `principal`'s bytes of today; the refusal when
    /// they no longer fit (another message counted meanwhile).
    ///
    /// # Errors
    /// A database failure.
    pub async fn charge(
        &self,
        store: &Store,
        principal: PrincipalId,
        files: &[MediaRef],
    ) -> Result<Result<(), Refusal>, StoreError> {
        let bytes: u64 = files.iter().map(|file| file.size).sum();
        if self.principal_daily_bytes == 0 || bytes == 0 {
            return Ok(Ok(()));
        }
        let day = utc_day(crate::domain::now_ms());
        let added = store
            .media()
            .add_bytes(principal, &day, bytes, self.principal_daily_bytes)
            .await?;
        Ok(if added {
            Ok(())
        } else {
            Err(Refusal::DailyBudget {
                limit: self.principal_daily_bytes,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        // 2026-12-01T23:59:59.999Z and a millisecond later.
        assert_eq!(utc_day(1_796_169_599_999), "2026-12-01");
        assert_eq!(utc_day(1_796_169_600_000), "2026-12-02");
    }

    #[test]
    fn the_allowance_names_the_limit_passed() {
        let allowance = Allowance {
            max_message_bytes: 100,
            daily: Some((150, 60)),
        };
        assert_eq!(allowance.check(90), Ok(()));
        assert_eq!(
            allowance.check(101),
            Err(Refusal::MessageTooLarge { limit: 100 })
        );
        assert_eq!(
            allowance.check(91),
            Err(Refusal::DailyBudget { limit: 150 })
        );
        assert_eq!(Allowance::per_message(100).check(100), Ok(()));
    }
}
