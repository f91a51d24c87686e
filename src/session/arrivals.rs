//! Platform events being taken in: a redelivery of an event whose files are
//! still being fetched (Feishu retries a webhook the gateway was slow to
//! answer; Discord's catch-up can meet the live event) waits for the first
//! delivery to be recorded, and is then a duplicate, instead of downloading
//! the files again and counting them twice against the sender's daily
//! budget. This holds within one instance; across instances the database's
//! unique event key still records the event once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// The events being taken in on this instance.
#[derive(Debug, Default)]
pub struct Arrivals {
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one event as being taken in; dropped once it is recorded (or
/// refused).
#[must_use = "the event is held only while the guard lives"]
pub struct Arrival<'a> {
    arrivals: &'a Arrivals,
    key: String,
    entry: Arc<tokio::sync::Mutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Arrivals {
    /// Holds the event `event_id` of `platform`'s `account`, after any
    /// delivery of it already being taken in has let go of it.
    pub async fn hold(&self, platform: &str, account: &str, event_id: &str) -> Arrival<'_> {
        let key = format!("{platform}\u{0}{account}\u{0}{event_id}");
        let entry = Arc::clone(
            self.lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(()))),
        );
        let guard = Arc::clone(&entry).lock_owned().await;
        Arrival {
            arrivals: self,
            key,
            entry,
            guard: Some(guard),
        }
    }

    /// How many events are held or waited for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut held = self.arrivals.lock();
        // The map's reference and ours: nobody else waits for the event.
        if Arc::strong_count(&self.entry) == 2 {
            held.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_second_delivery_waits_for_the_first_and_the_entry_goes_with_the_last() {
        let arrivals = Arc::new(Arrivals::default());
        let first = arrivals.hold("feishu", "app", "ev-1").await;
        let other = arrivals.hold("feishu", "app", "ev-2").await;
        let waiting = {
            let arrivals = Arc::clone(&arrivals);
            tokio::spawn(async move {
                let _second = arrivals.hold("feishu", "app", "ev-1").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the redelivery waits");
        drop(other);
        assert_eq!(arrivals.len(), 1, "ev-2 let go; ev-1 still held");
        drop(first);
        waiting.await.expect("the redelivery goes on");
        assert_eq!(arrivals.len(), 0, "nothing left behind");
    }
}
