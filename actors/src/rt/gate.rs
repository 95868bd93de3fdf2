//! The pull gate: the breaker's pause of a subscription's pull loops. The worker pool shuts it
//! while the breaker is open; each pull loop checks it (one atomic load) before it takes room for
//! the next message, and waits for it to open again without closing its stream.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// Open unless a breaker shut it.
#[derive(Debug, Default)]
pub(crate) struct PullGate {
    shut: AtomicBool,
    opened: Notify,
}

impl PullGate {
    /// Shuts (`true`) or opens the gate; opening wakes every pull loop waiting at it.
    pub(crate) fn shut(&self, shut: bool) {
        let was = self.shut.swap(shut, Ordering::SeqCst);
        if was && !shut {
            self.opened.notify_waiters();
        }
    }

    /// Whether pulling waits.
    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(Ordering::Relaxed)
    }

    /// Resolves once the gate is open.
    pub(crate) async fn open(&self) {
        loop {
            let opened = self.opened.notified();
            let mut opened = std::pin::pin!(opened);
            opened.as_mut().enable();
            if !self.shut.load(Ordering::SeqCst) {
                return;
            }
            opened.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_shut_gate_holds_until_it_opens() {
        let gate = std::sync::Arc::new(PullGate::default());
        assert!(gate.open().now_or_never().is_some(), "open by default");
        gate.shut(true);
        assert!(gate.is_shut());
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.open().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        gate.shut(false);
        waiting.await.unwrap();
    }
}
