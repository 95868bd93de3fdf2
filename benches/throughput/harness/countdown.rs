//! The completion signal of the Rust sides: a count that wakes the measurement when it reaches
//! its target, so that no side polls for the end of its run.
//!
//! Uses tokio's `Notify` and nothing else of this benchmark.

use std::sync::atomic::{AtomicU64, Ordering};

/// A count that says when it reaches its target: how a Rust side learns that its run is over,
/// without polling. Counting costs an atomic increment and a comparison per message; a poll of
/// `stats()` every 2 ms instead costs the one-stream plain loop about 5 µs per message, more
/// than a third of its CPU.
pub(crate) struct Countdown {
    count: AtomicU64,
    target: u64,
    reached: tokio::sync::Notify,
}

impl Countdown {
    pub(crate) fn new(target: u64) -> Self {
        Self {
            count: AtomicU64::new(0),
            target,
            reached: tokio::sync::Notify::new(),
        }
    }

    /// Counts one; the count that reaches the target wakes [`reached`](Self::reached).
    pub(crate) fn count(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            // Kept as a permit when no one waits yet: the wake-up is not lost.
            self.reached.notify_one();
        }
    }

    /// Resolves once the target is reached.
    pub(crate) async fn reached(&self) {
        self.reached.notified().await;
    }
}
