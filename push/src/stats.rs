//! What the push endpoint counts beyond what the runtime counts for every message: the pushes
//! it refused (by reason), the answers that came after the push deadline, and the answers
//! nobody was left to hear.
//!
//! Owns [`PushStats`]. Uses nothing else of this crate.

use std::sync::atomic::{AtomicU64, Ordering};

/// Every reason a push is refused, in the order [`PushStatsSnapshot::refused`] lists them.
pub const REFUSAL_REASONS: &[&str] = &[
    "unauthenticated",
    "forbidden",
    "keys_unavailable",
    "bad_request",
    "too_large",
    "not_started",
    "stopping",
    "flow_control",
    "breaker_open",
];

/// The endpoint's counters.
#[derive(Debug, Default)]
pub(crate) struct PushStats {
    refused: [AtomicU64; REFUSAL_REASONS.len()],
    late: AtomicU64,
    gone: AtomicU64,
}

impl PushStats {
    /// Counts a push refused for `reason` (one of [`REFUSAL_REASONS`]).
    pub(crate) fn refused(&self, reason: &'static str) {
        let i = REFUSAL_REASONS
            .iter()
            .position(|r| *r == reason)
            .expect("every refusal reason is listed");
        self.refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer given after the push deadline.
    pub(crate) fn late(&self) {
        self.late.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer whose request had already gone.
    pub(crate) fn gone(&self) {
        self.gone.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, in_flight: usize) -> PushStatsSnapshot {
        PushStatsSnapshot {
            refused: REFUSAL_REASONS
                .iter()
                .zip(&self.refused)
                .map(|(reason, n)| (*reason, n.load(Ordering::Relaxed)))
                .collect(),
            late: self.late.load(Ordering::Relaxed),
            gone: self.gone.load(Ordering::Relaxed),
            in_flight,
        }
    }
}

/// The push endpoint's counters at one instant. What happened to each admitted message
/// (acked, nacked, held, lost leases) is in the subscription's own
/// [`stats`](leasehold::Subscription::stats), as for a pull.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushStatsSnapshot {
    /// Pushes refused before anything ran, by reason ([`REFUSAL_REASONS`]), every reason listed.
    pub refused: Vec<(&'static str, u64)>,
    /// Answers given after the push deadline: Pub/Sub had already counted the push a nack and
    /// redelivers it (a handler slower than the subscription's ack deadline).
    pub late: u64,
    /// Answers whose request the server had already dropped (it stopped before the message
    /// was settled). A client that closes its connection is not seen here: actix-web runs the
    /// request to its end; a push answered after Pub/Sub gave up is counted in `late`.
    pub gone: u64,
    /// Pushes admitted and not yet answered.
    pub in_flight: usize,
}

impl PushStatsSnapshot {
    /// Pushes refused for `reason`; 0 for a reason that is not listed.
    pub fn refused(&self, reason: &str) -> u64 {
        self.refused
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// Pushes refused, all reasons together.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().map(|(_, n)| n).sum()
    }
}
