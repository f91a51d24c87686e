//! Requests in flight at the fake model, overall and per conversation (told
//! apart by its first message after the system prompt), and the most there
//! ever were: what the concurrency tests read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Requests in flight, overall and per prompt-cache key.
#[derive(Debug, Default)]
pub(crate) struct Load {
    now: usize,
    peak: usize,
    /// Per key: (in flight now, most at once).
    per_key: HashMap<String, (usize, usize)>,
}

impl Load {
    /// Most requests ever in flight at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }

    /// Most requests ever in flight at once for one key.
    pub(crate) fn peak_per_key(&self) -> usize {
        self.per_key
            .values()
            .map(|(_, peak)| *peak)
            .max()
            .unwrap_or(0)
    }
}

/// Counts a request in flight until dropped.
pub(crate) struct InFlight {
    load: Arc<Mutex<Load>>,
    key: String,
}

impl InFlight {
    pub(crate) fn enter(load: &Arc<Mutex<Load>>, key: String) -> Self {
        let mut guard = load.lock().expect("lock");
        guard.now += 1;
        guard.peak = guard.peak.max(guard.now);
        let entry = guard.per_key.entry(key.clone()).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(entry.0);
        drop(guard);
        Self {
            load: Arc::clone(load),
            key,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut guard = self.load.lock().expect("lock");
        guard.now -= 1;
        if let Some(entry) = guard.per_key.get_mut(&self.key) {
            entry.0 -= 1;
        }
    }
}
