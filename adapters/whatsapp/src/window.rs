//! The 24-hour customer service window, as far as this process knows it.
//!
//! WhatsApp takes free-form messages to a person only within 24 hours of
//! their last message to the number; outside the window only an approved
//! template goes through. The Graph API is the source of truth (it refuses
//! a free-form message with the re-engagement error, and every instance
//! sees that), but `Contacts` remembers, per number and person, when they
//! last wrote (the message's own timestamp) and which message that was, so
//! that:
//!
//! - a reply known to fall outside the window goes straight to the
//!   template (its window is [`Window::Closed`]);
//! - a window the API reported closed stays closed here until the person
//!   writes again;
//! - the typing indicator and read receipt, which name the message they
//!   answer, know the person's latest message.
//!
//! A contact this process has not seen (after a restart, or handled by
//! another instance) is [`Window::Unknown`]: the reply is tried free-form
//! and the API decides. The memory is bounded ([`CONTACTS_CAPACITY`]):
//! contacts whose window closed are forgotten first.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the window stays open after the person's last message.
pub const WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Most contacts remembered at once.
pub const CONTACTS_CAPACITY: usize = 100_000;

/// The time, for the window (tests move it by hand).
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// What is known of a contact's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// They wrote within the last 24 hours.
    Open,
    /// They last wrote longer ago, or the API said so since.
    Closed,
    /// Nothing is known here; the API decides.
    Unknown,
}

#[derive(Debug, Clone)]
struct Contact {
    /// When they last wrote, in Unix seconds.
    last_inbound: u64,
    /// Their latest message's id, if they wrote since this process
    /// started.
    last_message: Option<String>,
    /// The API refused a free-form message since.
    closed: bool,
    /// A read receipt went out for `last_message`.
    read: bool,
}

/// Per number and person: when they last wrote.
pub(crate) struct Contacts {
    /// Keyed by (phone number id, wa_id). A std mutex: never held across
    /// an await.
    map: Mutex<HashMap<(String, String), Contact>>,
    capacity: usize,
}

impl Contacts {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// `person` wrote `message` to `number` at `sent` (Unix seconds, as the
    /// payload says; a later delivery of an older message changes nothing).
    pub(crate) fn inbound(&self, number: &str, person: &str, message: &str, sent: u64) {
        self.update(number, person, sent, |contact| {
            if sent >= contact.last_inbound {
                contact.last_inbound = sent;
                contact.last_message = Some(message.to_owned());
                contact.closed = false;
                contact.read = false;
            }
        });
    }

    /// The API refused a free-form message to `person`: their window is
    /// closed until they write again.
    pub(crate) fn close(&self, number: &str, person: &str) {
        self.update(number, person, 0, |contact| contact.closed = true);
    }

    /// Applies `change` to the contact, remembered from now on (as one who
    /// last wrote at `sent`) if it was not.
    fn update(&self, number: &str, person: &str, sent: u64, change: impl FnOnce(&mut Contact)) {
        let mut map = self.lock();
        let key = (number.to_owned(), person.to_owned());
        if !map.contains_key(&key) && map.len() >= self.capacity {
            evict(&mut map, sent);
        }
        let contact = map.entry(key).or_insert(Contact {
            last_inbound: sent,
            last_message: None,
            closed: false,
            read: false,
        });
        change(contact);
    }

    /// What is known of the window of `person` on `number` at `now`.
    pub(crate) fn window(&self, number: &str, person: &str, now: SystemTime) -> Window {
        let map = self.lock();
        match map.get(&(number.to_owned(), person.to_owned())) {
            None => Window::Unknown,
            Some(contact) if contact.closed => Window::Closed,
            Some(contact) if unix(now) >= contact.last_inbound + WINDOW.as_secs() => Window::Closed,
            Some(_) => Window::Open,
        }
    }

    /// The id of the latest message `person` wrote to `number`.
    pub(crate) fn last_message(&self, number: &str, person: &str) -> Option<String> {
        let map = self.lock();
        map.get(&(number.to_owned(), person.to_owned()))
            .and_then(|contact| contact.last_message.clone())
    }

    /// The id of the latest message `person` wrote to `number`, the first
    /// time it is asked for (a read receipt goes out once per message).
    pub(crate) fn unread(&self, number: &str, person: &str) -> Option<String> {
        let mut map = self.lock();
        let contact = map.get_mut(&(number.to_owned(), person.to_owned()))?;
        if contact.read {
            return None;
        }
        contact.read = true;
        contact.last_message.clone()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Contact>> {
        // Every critical section is one map operation: a panic cannot leave
        // the map half-updated.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Makes room: forgets every contact whose window closed before `now`,
/// or, when all are open, the one who wrote longest ago.
fn evict(map: &mut HashMap<(String, String), Contact>, now: u64) {
    let before = map.len();
    map.retain(|_, contact| contact.last_inbound + WINDOW.as_secs() > now);
    if map.len() < before {
        return;
    }
    let oldest = map
        .iter()
        .min_by_key(|(_, contact)| contact.last_inbound)
        .map(|(key, _)| key.clone());
    if let Some(key) = oldest {
        map.remove(&key);
    }
}

/// `time` in Unix seconds (0 before 1970).
pub(crate) fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_750_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_window_lasts_a_day_from_the_last_message() {
        let contacts = Contacts::new(10);
        assert_eq!(contacts.window("n", "p", at(T0)), Window::Unknown);
        contacts.inbound("n", "p", "m1", T0);
        assert_eq!(contacts.window("n", "p", at(T0 + 3600)), Window::Open);
        let day = WINDOW.as_secs();
        assert_eq!(contacts.window("n", "p", at(T0 + day - 1)), Window::Open);
        assert_eq!(contacts.window("n", "p", at(T0 + day)), Window::Closed);
        assert_eq!(contacts.window("other", "p", at(T0)), Window::Unknown);
    }

    #[test]
    fn a_window_the_api_closed_is_remembered_for_a_stranger_too() {
        let contacts = Contacts::new(10);
        contacts.close("n", "p");
        assert_eq!(contacts.window("n", "p", at(T0)), Window::Closed);
        assert_eq!(contacts.last_message("n", "p"), None);
        assert_eq!(contacts.unread("n", "p"), None);
        contacts.inbound("n", "p", "m1", T0);
        assert_eq!(contacts.window("n", "p", at(T0 + 1)), Window::Open);
    }

    #[test]
    fn an_older_message_delivered_late_moves_nothing() {
        let contacts = Contacts::new(10);
        contacts.inbound("n", "p", "m2", T0 + 60);
        contacts.inbound("n", "p", "m1", T0);
        assert_eq!(contacts.last_message("n", "p").as_deref(), Some("m2"));
    }

    #[test]
    fn each_message_is_marked_read_once() {
        let contacts = Contacts::new(10);
        assert_eq!(contacts.unread("n", "p"), None);
        contacts.inbound("n", "p", "m1", T0);
        assert_eq!(contacts.unread("n", "p").as_deref(), Some("m1"));
        assert_eq!(contacts.unread("n", "p"), None);
        contacts.inbound("n", "p", "m2", T0 + 1);
        assert_eq!(contacts.unread("n", "p").as_deref(), Some("m2"));
    }

    #[test]
    fn a_window_the_api_closed_opens_again_when_they_write() {
        let contacts = Contacts::new(10);
        contacts.inbound("n", "p", "m1", T0);
        contacts.close("n", "p");
        assert_eq!(contacts.window("n", "p", at(T0 + 1)), Window::Closed);
        contacts.inbound("n", "p", "m2", T0 + 2);
        assert_eq!(contacts.window("n", "p", at(T0 + 3)), Window::Open);
    }

    #[test]
    fn a_full_memory_forgets_closed_windows_first_then_the_oldest() {
        let contacts = Contacts::new(2);
        contacts.inbound("n", "old", "m", T0);
        contacts.inbound("n", "mid", "m", T0 + WINDOW.as_secs());
        contacts.inbound("n", "new", "m", T0 + WINDOW.as_secs() + 10);
        let now = at(T0 + WINDOW.as_secs() + 20);
        assert_eq!(contacts.window("n", "old", now), Window::Unknown);
        assert_eq!(contacts.window("n", "mid", now), Window::Open);
        contacts.inbound("n", "newest", "m", T0 + WINDOW.as_secs() + 30);
        assert_eq!(contacts.window("n", "mid", now), Window::Unknown);
        assert_eq!(contacts.window("n", "new", now), Window::Open);
    }
}
