//! [`Bounded`]: a small in-memory map that holds at most a number of
//! entries, each for at most a while: senders' display names, and the
//! parts of replies a failed send already delivered. When full, entries
//! past their time go first, then the oldest.
//!
//! Shared behind a std mutex by its users: every operation is a few map
//! operations and never spans an await.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// At most `capacity` entries, each kept for `ttl`.
#[derive(Debug)]
pub(crate) struct Bounded<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
    ttl: Duration,
}

impl<K: Eq + Hash + Clone, V: Clone> Bounded<K, V> {
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            ttl,
        }
    }

    /// The value under `key`, unless it is older than the TTL.
    pub fn get(&self, key: &K) -> Option<V> {
        let (value, at) = self.entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    /// Takes the value under `key` out, unless it is older than the TTL.
    pub fn take(&mut self, key: &K) -> Option<V> {
        let (value, at) = self.entries.remove(key)?;
        (at.elapsed() < self.ttl).then_some(value)
    }

    /// Keeps `value` under `key` from now on.
    pub fn insert(&mut self, key: K, value: V) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let ttl = self.ttl;
            self.entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if self.entries.len() >= self.capacity
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(key, _)| key.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (value, Instant::now()));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn the_oldest_entry_goes_when_full() {
        let mut map = Bounded::new(2, MINUTE);
        map.insert("a", 1);
        map.insert("b", 2);
        map.insert("c", 3);
        assert_eq!(map.len(), 2);
        assert_eq!(map.get(&"a"), None);
        assert_eq!(map.get(&"b"), Some(2));
        map.insert("b", 20);
        assert_eq!(map.len(), 2, "replacing does not evict");
        assert_eq!(map.take(&"b"), Some(20));
        assert_eq!(map.get(&"b"), None);
    }

    #[test]
    fn entries_expire() {
        let mut map = Bounded::new(2, Duration::ZERO);
        map.insert("a", 1);
        assert_eq!(map.get(&"a"), None);
        assert_eq!(map.take(&"a"), None);
    }
}
