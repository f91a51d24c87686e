//! One iteration wallet per task, shared with every sub-agent.
//!
//! A task (handling one user message) gets a budget of model calls. The top
//! agent holds a [`Purse`] over the whole budget; a sub-agent started by
//! `delegate` gets a child purse whose cap is *reserved* from its parent at
//! creation (at most half of what the parent has left after keeping its
//! reserve) and whose unused part returns to the parent when the child ends.
//! Because reservations are taken under one lock, however deep or wide the
//! delegation (parallel children included), the task's calls never exceed the
//! budget and a parent always keeps its reserve to read the results and
//! finish. Every purse keeps one call back for a final tool-less summary.

use std::sync::{Arc, Mutex, MutexGuard};

/// What a model call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// An ordinary step; allowed while the purse can still afford its final
    /// summary afterwards.
    Step,
    /// The last, tool-less call that summarises when the budget is spent.
    Final,
}

/// The shared budget of one task.
#[derive(Debug)]
pub struct Wallet {
    /// One lock for the whole tree: spends and reservations are rare (one per
    /// model call) and tiny, and a single lock makes the accounting exact.
    state: Mutex<WalletState>,
}

#[derive(Debug)]
struct WalletState {
    nodes: Vec<Node>,
    calls: u32,
    /// Input plus output tokens of every call of the task.
    tokens: u64,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    parent: Option<usize>,
    cap: u32,
    /// Own calls plus what is reserved for (or was spent by) children.
    used: u32,
    closed: bool,
}

/// One agent's right to spend from the wallet.
#[derive(Debug)]
pub struct Purse {
    wallet: Arc<Wallet>,
    node: usize,
}

impl Wallet {
    /// A wallet of `budget` model calls and the top agent's purse over it.
    pub fn open(budget: u32) -> Purse {
        let wallet = Arc::new(Self {
            state: Mutex::new(WalletState {
                nodes: vec![Node {
                    parent: None,
                    cap: budget,
                    used: 0,
                    closed: false,
                }],
                calls: 0,
                tokens: 0,
            }),
        });
        Purse { wallet, node: 0 }
    }

    fn lock(&self) -> MutexGuard<'_, WalletState> {
        // A poisoned lock means a panic while accounting; the numbers are
        // still consistent (every update is a single assignment).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Purse {
    /// Takes one model call from the purse. Returns false when the purse
    /// cannot afford it.
    pub fn try_spend(&self, kind: CallKind) -> bool {
        let mut state = self.wallet.lock();
        let node = state.nodes[self.node];
        let keep_back = match kind {
            CallKind::Step => 1,
            CallKind::Final => 0,
        };
        if node.closed || node.used + 1 + keep_back > node.cap {
            return false;
        }
        state.nodes[self.node].used += 1;
        state.calls += 1;
        true
    }

    /// A purse for a sub-agent: reserves at most half of what this purse has
    /// left after keeping `reserve` calls for itself. `None` when that leaves
    /// the child fewer than two calls (a step and a summary).
    pub fn child(&self, reserve: u32) -> Option<Self> {
        let mut state = self.wallet.lock();
        let node = state.nodes[self.node];
        if node.closed {
            return None;
        }
        let available = node.cap.saturating_sub(node.used).saturating_sub(reserve);
        let cap = available / 2;
        if cap < 2 {
            return None;
        }
        state.nodes[self.node].used += cap;
        state.nodes.push(Node {
            parent: Some(self.node),
            cap,
            used: 0,
            closed: false,
        });
        let node = state.nodes.len() - 1;
        Some(Self {
            wallet: Arc::clone(&self.wallet),
            node,
        })
    }

    /// Calls this purse may still make (steps and the final summary).
    pub fn remaining(&self) -> u32 {
        let state = self.wallet.lock();
        let node = state.nodes[self.node];
        node.cap.saturating_sub(node.used)
    }

    /// Adds a call's tokens to the task's count; returns the new total.
    pub fn add_tokens(&self, tokens: u64) -> u64 {
        let mut state = self.wallet.lock();
        state.tokens = state.tokens.saturating_add(tokens);
        state.tokens
    }

    /// Model calls made so far by the whole task.
    pub fn task_calls(&self) -> u32 {
        self.wallet.lock().calls
    }
}

impl Drop for Purse {
    /// Returns a child's unused reservation to its parent.
    fn drop(&mut self) {
        let mut state = self.wallet.lock();
        let node = state.nodes[self.node];
        if node.closed {
            return;
        }
        state.nodes[self.node].closed = true;
        if let Some(parent) = node.parent {
            let unused = node.cap.saturating_sub(node.used);
            let parent = &mut state.nodes[parent];
            parent.used = parent.used.saturating_sub(unused);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purse_keeps_one_call_for_its_summary() {
        let purse = Wallet::open(3);
        assert!(purse.try_spend(CallKind::Step));
        assert!(purse.try_spend(CallKind::Step));
        assert!(!purse.try_spend(CallKind::Step));
        assert!(purse.try_spend(CallKind::Final));
        assert!(!purse.try_spend(CallKind::Final));
        assert_eq!(purse.task_calls(), 3);
    }

    #[test]
    fn a_child_gets_half_of_what_remains_after_the_reserve() {
        let parent = Wallet::open(90);
        let child = parent.child(2).expect("child");
        assert_eq!(child.remaining(), 44);
        assert_eq!(parent.remaining(), 46);
        drop(child);
        assert_eq!(parent.remaining(), 90);
    }

    #[test]
    fn unused_reservations_return_to_the_parent() {
        let parent = Wallet::open(20);
        let child = parent.child(2).expect("child");
        assert!(child.try_spend(CallKind::Step));
        assert!(child.try_spend(CallKind::Final));
        drop(child);
        assert_eq!(parent.remaining(), 18);
    }

    #[test]
    fn wide_and_deep_delegation_never_exceeds_the_budget_or_starves_the_parent() {
        let root = Wallet::open(90);
        let mut all = Vec::new();
        // Open as many children and grandchildren as will fit, then spend
        // everything they hold.
        while let Some(child) = root.child(2) {
            while let Some(grandchild) = child.child(2) {
                all.push(grandchild);
            }
            all.push(child);
        }
        for purse in &all {
            while purse.try_spend(CallKind::Step) {}
            purse.try_spend(CallKind::Final);
        }
        drop(all);
        assert!(root.remaining() >= 2, "the parent kept its reserve");
        while root.try_spend(CallKind::Step) {}
        assert!(root.try_spend(CallKind::Final));
        assert_eq!(root.task_calls(), 90);
    }

    #[test]
    fn concurrent_children_cannot_overspend() {
        let root = Arc::new(Wallet::open(90));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let root = Arc::clone(&root);
                std::thread::spawn(move || {
                    if let Some(child) = root.child(2) {
                        while child.try_spend(CallKind::Step) {}
                        child.try_spend(CallKind::Final);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("thread");
        }
        while root.try_spend(CallKind::Step) {}
        assert!(root.try_spend(CallKind::Final));
        assert!(root.task_calls() <= 90);
    }
}
