//! [`Bounded`]: a small map that forgets its oldest entries past a
//! capacity, for what the sender remembers in this process only (parts of
//! a reply already sent, and what each recent message said).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A map of at most `capacity` entries; inserting past it forgets the
/// oldest. Shared behind its own std mutex (never held across an await).
pub(crate) struct Bounded<V> {
    inner: Mutex<Inner<V>>,
    capacity: usize,
}

struct Inner<V> {
    map: HashMap<String, V>,
    /// Keys in insertion order; may hold keys taken since.
    order: VecDeque<String>,
}

impl<V> Bounded<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
            capacity: capacity.max(1),
        }
    }

    /// Remembers `value` under `key`, forgetting the oldest entries past
    /// the capacity.
    pub(crate) fn insert(&self, key: String, value: V) {
        let mut inner = self.lock();
        if inner.map.insert(key.clone(), value).is_none() {
            inner.order.push_back(key);
        }
        while inner.map.len() > self.capacity {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            inner.map.remove(&oldest);
        }
        // Keys taken since they were inserted linger in `order`; compact it
        // before it outgrows the map by much.
        if inner.order.len() > 2 * self.capacity {
            let Inner { map, order } = &mut *inner;
            order.retain(|key| map.contains_key(key));
        }
    }

    /// Forgets and returns the entry under `key`.
    pub(crate) fn take(&self, key: &str) -> Option<V> {
        self.lock().map.remove(key)
    }

    fn lock(&self) -> MutexGuard<'_, Inner<V>> {
        // Each critical section is a few map operations that cannot panic
        // half-way; a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<V: Clone> Bounded<V> {
    /// The entry under `key`, kept.
    pub(crate) fn get(&self, key: &str) -> Option<V> {
        self.lock().map.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entries_go_first() {
        let memory = Bounded::new(2);
        memory.insert("a".to_owned(), 1);
        memory.insert("b".to_owned(), 2);
        memory.insert("c".to_owned(), 3);
        assert_eq!(memory.get("a"), None);
        assert_eq!(memory.get("b"), Some(2));
        assert_eq!(memory.take("c"), Some(3));
        assert_eq!(memory.take("c"), None);
    }

    #[test]
    fn taken_keys_do_not_pile_up() {
        let memory = Bounded::new(3);
        for n in 0..100 {
            memory.insert(format!("k{n}"), n);
            memory.take(&format!("k{n}"));
        }
        assert!(memory.lock().order.len() <= 6);
        memory.insert("x".to_owned(), 1);
        assert_eq!(memory.get("x"), Some(1));
    }
}
