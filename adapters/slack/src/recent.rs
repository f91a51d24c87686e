//! [`Recent`]: the events this process handed to the core lately, so that
//! Slack's second delivery of a message — a retry, or the `message` event
//! it sends beside the `app_mention` of the same message, both with the
//! same event id — is not submitted again: it waits for the first one's
//! outcome instead (or takes it, once known).
//!
//! Only an outcome of success is kept: after a failure (or a hand-off that
//! ended without one) the next delivery submits again. This is an optimisation within one process; the core's
//! own deduplication by event id stays what guarantees one answer across
//! instances and restarts.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::bounded::Bounded;

/// How long an outcome is kept: past Slack's last retry (about 5 minutes
/// after the first delivery).
const KEPT_FOR: Duration = Duration::from_secs(15 * 60);

/// How many events are kept at most.
const CAPACITY: usize = 4096;

/// An event's outcome: `None` while it is being recorded, then whether it
/// was.
type Outcome = watch::Receiver<Option<bool>>;

/// Who hands an event to the core.
pub(crate) enum Claim {
    /// This delivery: it reports the outcome through the sender.
    First(watch::Sender<Option<bool>>),
    /// An earlier delivery, whose outcome this one takes.
    Repeat(Outcome),
}

/// Outcomes by (account, event id).
pub(crate) struct Recent {
    outcomes: Mutex<Bounded<(String, String), Outcome>>,
}

impl Recent {
    pub fn new() -> Self {
        Self {
            outcomes: Mutex::new(Bounded::new(CAPACITY, KEPT_FOR)),
        }
    }

    /// Claims the event `key`: the first delivery (or the first since one
    /// failed) hands it to the core, later ones wait for that.
    pub fn claim(&self, key: (String, String)) -> Claim {
        let mut outcomes = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(outcome) = outcomes.get(&key) {
            let value = *outcome.borrow();
            // Recorded, or being recorded by a hand-off that still runs.
            let pending = value.is_none() && outcome.has_changed().is_ok();
            if value == Some(true) || pending {
                return Claim::Repeat(outcome);
            }
        }
        let (report, outcome) = watch::channel(None);
        outcomes.insert(key, outcome);
        Claim::First(report)
    }
}

/// Whether the earlier delivery's event was recorded, waiting up to
/// `patience` to know.
pub(crate) async fn recorded(mut outcome: Outcome, patience: Duration) -> bool {
    let known = tokio::time::timeout(patience, outcome.wait_for(Option::is_some)).await;
    matches!(known, Ok(Ok(value)) if *value == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (String, String) {
        ("T1".to_owned(), "C1:1.1".to_owned())
    }

    #[tokio::test]
    async fn a_repeat_takes_the_first_outcome() {
        let recent = Recent::new();
        let Claim::First(report) = recent.claim(key()) else {
            panic!("the first claim");
        };
        let Claim::Repeat(outcome) = recent.claim(key()) else {
            panic!("a repeat");
        };
        report.send_replace(Some(true));
        assert!(recorded(outcome, Duration::from_secs(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_failure_the_next_delivery_submits_again() {
        let recent = Recent::new();
        let Claim::First(report) = recent.claim(key()) else {
            panic!("the first claim");
        };
        let Claim::Repeat(waiting) = recent.claim(key()) else {
            panic!("a repeat");
        };
        assert!(
            !recorded(waiting.clone(), Duration::from_millis(10)).await,
            "not known yet"
        );
        report.send_replace(Some(false));
        assert!(!recorded(waiting, Duration::from_secs(1)).await);
        assert!(matches!(recent.claim(key()), Claim::First(_)));
    }

    #[test]
    fn a_hand_off_that_ended_without_an_outcome_is_a_failure() {
        let recent = Recent::new();
        let Claim::First(report) = recent.claim(key()) else {
            panic!("the first claim");
        };
        drop(report);
        assert!(matches!(recent.claim(key()), Claim::First(_)));
    }
}
