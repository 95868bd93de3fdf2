//! Counters a running subscription keeps, readable at any time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Live counters of one subscription's consumer. Cloned handles share them.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) received: AtomicU64,
    pub(crate) acked: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) held: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) decode_failures: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) confirmed: AtomicU64,
    pub(crate) failed_acks: AtomicU64,
    pub(crate) lost_leases: AtomicU64,
    pub(crate) stream_restarts: AtomicU64,
    pub(crate) peak_outstanding: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) worker_restarts: AtomicU64,
    pub(crate) actor_failures: AtomicU64,
    /// Gauges the worker pool keeps current, for [`load`](crate::Subscription::load).
    pub(crate) running: AtomicUsize,
    pub(crate) waiting: AtomicUsize,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Messages received from the stream (redeliveries count again).
    pub received: u64,
    /// Settled with `ack()`.
    pub acked: u64,
    /// Nacked by `retry()`, by the end of a `retry_after` hold, by a panic or by a dropped
    /// settler.
    pub retried: u64,
    /// `retry_after` holds started.
    pub held: u64,
    /// `drop()` before the last attempt: acked.
    pub dropped: u64,
    /// `drop()` on the last attempt: nacked for the dead-letter topic.
    pub dead_lettered: u64,
    /// Payloads that did not decode (then handled by the failure policy).
    pub decode_failures: u64,
    /// Panics in your code: a handler (its message then settled by the panic policy), a custom
    /// failure policy (likewise) or the progress store (the call counts as failed). The worker
    /// goes on either way.
    pub panics: u64,
    /// Acks and nacks Pub/Sub confirmed (exactly-once subscriptions only).
    pub confirmed: u64,
    /// Acks and nacks Pub/Sub refused (exactly-once subscriptions only).
    pub failed_acks: u64,
    /// Leases whose budget (`max_lease`) ran out before an outcome.
    pub lost_leases: u64,
    /// Times the stream was reopened after it failed.
    pub stream_restarts: u64,
    /// The most messages outstanding at once (received, not yet settled).
    pub peak_outstanding: u64,
    /// Redeliveries of finished messages settled from the progress store, without the handler.
    pub replayed: u64,
    /// Messages nacked without running when a stop began: buffered in the client, or waiting in
    /// Leasehold for a worker or for their ordering key.
    pub released: u64,
    /// Worker threads (or worker actors) that died and were started again. The messages their
    /// handlers were running were nacked (counted in `retried`) and come back.
    pub worker_restarts: u64,
    /// Leasehold actors that died: restarted workers, and the worker pool, the ack sink or the
    /// supervisor, after which the subscription fails (see `Subscription::state`).
    pub actor_failures: u64,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads all counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            received: r(&self.received),
            acked: r(&self.acked),
            retried: r(&self.retried),
            held: r(&self.held),
            dropped: r(&self.dropped),
            dead_lettered: r(&self.dead_lettered),
            decode_failures: r(&self.decode_failures),
            panics: r(&self.panics),
            confirmed: r(&self.confirmed),
            failed_acks: r(&self.failed_acks),
            lost_leases: r(&self.lost_leases),
            stream_restarts: r(&self.stream_restarts),
            peak_outstanding: r(&self.peak_outstanding),
            replayed: r(&self.replayed),
            released: r(&self.released),
            worker_restarts: r(&self.worker_restarts),
            actor_failures: r(&self.actor_failures),
        }
    }
}
