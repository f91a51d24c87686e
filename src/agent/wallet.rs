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
    /// Estimated cost of every call of the task, in billionths of a dollar.
    cost_nanousd: i64,
    /// The budgets already warned about (bits of [`Budget`]).
    warned: u8,
}

/// The budgets whose 80 % mark is logged once per task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Model calls (the iteration wallet).
    Calls,
    Tokens,
    /// The principal's daily spend.
    Spend,
    /// The task's wall-clock time.
    Time,
}

impl Budget {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Calls => "model calls",
            Self::Tokens => "tokens",
            Self::Spend => "daily spend",
            Self::Time => "time",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Calls => 1,
            Self::Tokens => 2,
            Self::Spend => 4,
            Self::Time => 8,
        }
    }
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
                cost_nanousd: 0,
                warned: 0,
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

    /// Adds a call's estimated cost to the task's; returns the new total.
    pub fn add_cost(&self, nanousd: i64) -> i64 {
        let mut state = self.wallet.lock();
        state.cost_nanousd = state.cost_nanousd.saturating_add(nanousd);
        state.cost_nanousd
    }

    /// The task's estimated cost so far, in billionths of a dollar.
    pub fn task_cost(&self) -> i64 {
        self.wallet.lock().cost_nanousd
    }

    /// Model calls made so far by the whole task.
    pub fn task_calls(&self) -> u32 {
        self.wallet.lock().calls
    }

    /// The whole task's budget of model calls.
    pub fn task_budget(&self) -> u32 {
        self.wallet.lock().nodes[0].cap
    }

    /// True the first time `used` reaches 80 % of `limit` for this budget in
    /// this task (so the warning is logged once, not on every call after).
    pub fn first_past_80_percent(&self, budget: Budget, used: u64, limit: u64) -> bool {
        if limit == 0 || used.saturating_mul(5) < limit.saturating_mul(4) {
            return false;
        }
        let mut state = self.wallet.lock();
        let first = state.warned & budget.bit() == 0;
        state.warned |= budget.bit();
        first
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
    fn each_budget_warns_once_at_80_percent() {
        let purse = Wallet::open(10);
        let child = purse.child(2).expect("child");
        assert!(!purse.first_past_80_percent(Budget::Calls, 7, 10));
        assert!(child.first_past_80_percent(Budget::Calls, 8, 10));
        assert!(
            !purse.first_past_80_percent(Budget::Calls, 9, 10),
            "once per task"
        );
        assert!(purse.first_past_80_percent(Budget::Tokens, 80, 100));
        assert!(
            !purse.first_past_80_percent(Budget::Spend, 1, 0),
            "no limit, no warning"
        );
        assert_eq!(purse.add_cost(5), 5);
        assert_eq!(child.add_cost(7), 12);
        assert_eq!(purse.task_cost(), 12);
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
