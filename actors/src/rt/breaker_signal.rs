//! The breaker signal: whether a subscription's breaker is open, set by the worker pool and
//! awaited by the supervisor, which tells the connector (a push endpoint refuses pushes while it
//! is open). The pull loops do not wait at it: they keep reading, so that what Pub/Sub sends
//! comes under the client's lease management, and flow control bounds what waits.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// Open or not; every change wakes whoever awaits one.
#[derive(Debug, Default)]
pub(crate) struct BreakerSignal {
    open: AtomicBool,
    changed: Notify,
}

impl BreakerSignal {
    /// The breaker is now open (`true`) or closed.
    pub(crate) fn set(&self, open: bool) {
        if self.open.swap(open, Ordering::SeqCst) != open {
            self.changed.notify_waiters();
        }
    }

    /// Whether it is open.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Resolves with the new state once it is no longer `was`.
    pub(crate) async fn changed_from(&self, was: bool) -> bool {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let now = self.is_open();
            if now != was {
                return now;
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_change_wakes_the_one_who_waits_for_it() {
        let signal = std::sync::Arc::new(BreakerSignal::default());
        assert!(!signal.is_open());
        assert_eq!(signal.changed_from(true).now_or_never(), Some(false));
        let waiting = tokio::spawn({
            let signal = signal.clone();
            async move { signal.changed_from(false).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        signal.set(true);
        assert!(waiting.await.unwrap());
    }
}
