//! What a relay counts, in atomics its handle reads at any time: rows sent, send failures by
//! reason, the backlog it last read, the store's failures, the rows swept.
//!
//! May use `rules`.

use crate::rules::failure::{FAILURE_KINDS, FailureKind};
use leasehold::store::Backlog;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A relay's counters, shared by its loop and its handle.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    sent: AtomicU64,
    failures: [AtomicU64; FAILURE_KINDS.len()],
    store_failures: AtomicU64,
    swept: AtomicU64,
    rounds: AtomicU64,
    pending: AtomicU64,
    /// The oldest pending row's age in milliseconds, plus one (0: none).
    oldest_ms: AtomicU64,
    backlog_read: AtomicBool,
    stopped: AtomicBool,
}

impl Counters {
    pub(crate) fn round(&self, sent: usize, failures: &[u64; FAILURE_KINDS.len()]) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.sent.fetch_add(sent as u64, Ordering::Relaxed);
        for (counter, n) in self.failures.iter().zip(failures) {
            counter.fetch_add(*n, Ordering::Relaxed);
        }
    }

    pub(crate) fn store_failed(&self) {
        self.store_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn swept(&self, n: u64) {
        self.swept.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn backlog(&self, backlog: Backlog) {
        self.pending.store(backlog.pending, Ordering::Relaxed);
        let oldest = backlog.oldest.map_or(0, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1) + 1
        });
        self.oldest_ms.store(oldest, Ordering::Relaxed);
        self.backlog_read.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RelayStats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let oldest = load(&self.oldest_ms);
        RelayStats {
            sent: load(&self.sent),
            send_failures: self.failures.iter().map(load).sum(),
            failures: FAILURE_KINDS
                .iter()
                .zip(&self.failures)
                .map(|(kind, n)| (*kind, load(n)))
                .collect(),
            store_failures: load(&self.store_failures),
            swept: load(&self.swept),
            rounds: load(&self.rounds),
            pending: load(&self.pending),
            oldest_pending: (oldest > 0).then(|| Duration::from_millis(oldest - 1)),
            backlog_read: self.backlog_read.load(Ordering::Relaxed),
            stopped: self.stopped.load(Ordering::Relaxed),
        }
    }
}

/// What a relay did since it started ([`Relay::stats`](crate::Relay::stats)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayStats {
    /// Rows Pub/Sub took (each counted once per send: a row sent again after a relay died
    /// counts again in the relay that sent it again).
    pub sent: u64,
    /// Rows whose send failed (each failure of a row counts): kept, and tried again.
    pub send_failures: u64,
    /// The send failures by kind, every kind listed.
    pub failures: Vec<(FailureKind, u64)>,
    /// Calls into the store that failed (a lease, a mark, a sweep, a backlog read).
    pub store_failures: u64,
    /// Sent rows deleted past the retention.
    pub swept: u64,
    /// Rounds that leased at least one row.
    pub rounds: u64,
    /// Rows committed and not sent yet, as last read (every relay of the store sees them all).
    pub pending: u64,
    /// How long the oldest of them has waited, as last read.
    pub oldest_pending: Option<Duration>,
    /// Whether the backlog was read at least once (`pending` means something).
    pub backlog_read: bool,
    /// Whether the relay has stopped.
    pub stopped: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_what_was_counted() {
        let c = Counters::default();
        c.round(3, &[1, 0, 2, 0, 0]);
        c.backlog(Backlog {
            pending: 7,
            oldest: Some(Duration::from_millis(1500)),
        });
        let s = c.snapshot();
        assert_eq!((s.sent, s.send_failures, s.rounds, s.pending), (3, 3, 1, 7));
        assert_eq!(s.oldest_pending, Some(Duration::from_millis(1500)));
        assert_eq!(s.failures[2], (FailureKind::PermissionDenied, 2));
        c.backlog(Backlog::default());
        assert_eq!(c.snapshot().oldest_pending, None);
    }
}
