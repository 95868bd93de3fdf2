//! What a running subscription measures, readable at any time: counters, histograms of the
//! latencies that matter, and the last failures.
//!
//! Everything is kept in atomics (a histogram is a fixed set of buckets), so observing costs a
//! few atomic additions and reading never stops the consumer.

use crate::rules::pull_turn::PoolLoad;
pub(crate) use crate::status::breaker::BreakerGauge;
use crate::status::snapshot::StatsSnapshot;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

/// The upper bounds of every histogram's buckets, in seconds: a millisecond to an hour, about
/// three per decade.
pub const HISTOGRAM_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 1800.0, 3600.0,
];

/// The upper bounds of the batch-size histogram's buckets, in messages.
pub const BATCH_SIZE_BUCKETS: [f64; 10] =
    [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// How many failures [`Subscription::recent_failures`](crate::Subscription::recent_failures)
/// keeps: the newest.
pub const RECENT_FAILURES: usize = 50;

/// A histogram of durations in fixed buckets ([`HISTOGRAM_BUCKETS`]).
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Per bucket (not cumulative); the last is everything above the highest bound.
    counts: [AtomicU64; HISTOGRAM_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    pub(crate) fn observe(&self, d: Duration) {
        let seconds = d.as_secs_f64();
        let bucket = HISTOGRAM_BUCKETS
            .iter()
            .position(|&upper| seconds <= upper)
            .unwrap_or(HISTOGRAM_BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(HISTOGRAM_BUCKETS.len());
        for (i, upper) in HISTOGRAM_BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            buckets.push((*upper, cumulative));
        }
        let count = cumulative + self.counts[HISTOGRAM_BUCKETS.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count,
            sum: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A histogram of counts in fixed buckets ([`BATCH_SIZE_BUCKETS`]): batch sizes.
#[derive(Debug, Default)]
pub(crate) struct CountHistogram {
    /// Per bucket (not cumulative); the last is everything above the highest bound.
    counts: [AtomicU64; BATCH_SIZE_BUCKETS.len() + 1],
    sum: AtomicU64,
}

impl CountHistogram {
    pub(crate) fn observe_count(&self, n: u64) {
        let bucket = BATCH_SIZE_BUCKETS
            .iter()
            .position(|&upper| n as f64 <= upper)
            .unwrap_or(BATCH_SIZE_BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(BATCH_SIZE_BUCKETS.len());
        for (i, upper) in BATCH_SIZE_BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            buckets.push((*upper, cumulative));
        }
        let count = cumulative + self.counts[BATCH_SIZE_BUCKETS.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count,
            sum: self.sum.load(Ordering::Relaxed) as f64,
        }
    }
}

/// A histogram at one moment, as Prometheus exposes one.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HistogramSnapshot {
    /// `(upper bound, observations at or below it)`, cumulative, in bound order: seconds for
    /// the latencies, messages for the batch size.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation.
    pub count: u64,
    /// Their sum (seconds, or messages).
    pub sum: f64,
}

/// The latency histograms of one subscription.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Histograms {
    /// How long handlers ran (decode and handler, without waiting for a worker).
    pub handler: HistogramSnapshot,
    /// From publication (Pub/Sub's publish time) to the message's ack or nack.
    pub publish_to_settle: HistogramSnapshot,
    /// How long Leasehold held each lease: from receipt to the ack or nack.
    pub lease_held: HistogramSnapshot,
    /// On exactly-once subscriptions, from sending an ack or nack to Pub/Sub's answer.
    pub confirmation: HistogramSnapshot,
    /// Batch registrations: how many messages each batch handed to the handler had (in
    /// messages, not seconds; buckets [`BATCH_SIZE_BUCKETS`]).
    pub batch_size: HistogramSnapshot,
}

/// What went wrong with one message, as [`FailureRecord`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The handler panicked.
    Panic,
    /// The payload did not decode.
    DecodeFailure,
    /// The handler returned an error.
    HandlerError,
    /// Pub/Sub refused a confirmed ack or nack.
    FailedAck,
    /// The lease budget ran out before an outcome.
    LostLease,
    /// `drop()` on the last attempt: sent to the dead-letter topic.
    DeadLettered,
    /// A transactional store could not begin or commit the message's transaction: retried.
    StoreFailure,
    /// A batch handler gave the message no outcome: retried.
    MissingOutcome,
    /// Nacked on the last attempt the dead-letter limit allows (a retry, a `retry_after`, an
    /// error, a panic, or a release at a stop): Pub/Sub dead-letters it.
    RetriedOnLastAttempt,
}

impl FailureKind {
    /// The kind as a short label (`panic`, `decode_failure`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Panic => "panic",
            Self::DecodeFailure => "decode_failure",
            Self::HandlerError => "handler_error",
            Self::FailedAck => "failed_ack",
            Self::LostLease => "lost_lease",
            Self::DeadLettered => "dead_lettered",
            Self::StoreFailure => "store_failure",
            Self::MissingOutcome => "missing_outcome",
            Self::RetriedOnLastAttempt => "retried_on_last_attempt",
        }
    }
}

/// One recent failure: which message, which attempt, what kind. Never the payload, never an
/// error's text (it may quote a payload).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureRecord {
    /// When it happened.
    pub at: SystemTime,
    /// The message id.
    pub message_id: String,
    /// The delivery attempt, when Pub/Sub reports one.
    pub attempt: Option<u32>,
    /// What went wrong.
    pub kind: FailureKind,
}

/// Live counters of one subscription's consumer. Cloned handles share them.
#[derive(Debug, Default)]
pub(crate) struct Stats {
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
    pub(crate) given_back: AtomicU64,
    pub(crate) deduplicated: AtomicU64,
    pub(crate) dedupe_fallbacks: AtomicU64,
    pub(crate) worker_restarts: AtomicU64,
    pub(crate) actor_failures: AtomicU64,
    pub(crate) committed: AtomicU64,
    pub(crate) store_failures: AtomicU64,
    /// Shared with the transactional registration's runner, which counts its aborts there.
    pub(crate) store_aborts: Arc<AtomicU64>,
    /// Gauges the worker pool keeps current, for [`load`](crate::Subscription::load).
    pub(crate) running: AtomicUsize,
    pub(crate) waiting: AtomicUsize,
    /// Streams open now (not waiting to reopen).
    pub(crate) open_streams: AtomicUsize,
    /// `retry_after` holds running now.
    pub(crate) holding: AtomicUsize,
    /// What waits read ahead now (messages, payload bytes), and the most messages that did.
    pub(crate) read_ahead: AtomicUsize,
    pub(crate) read_ahead_bytes: AtomicUsize,
    pub(crate) peak_read_ahead: AtomicU64,
    /// The age of the oldest lease, in milliseconds, as the supervisor last measured it.
    pub(crate) oldest_lease_ms: AtomicU64,
    pub(crate) handler_seconds: Histogram,
    pub(crate) publish_to_settle_seconds: Histogram,
    pub(crate) lease_held_seconds: Histogram,
    pub(crate) confirmation_seconds: Histogram,
    /// Batch registrations: batches handed to the handler, and their sizes.
    pub(crate) batches: AtomicU64,
    pub(crate) batch_size: CountHistogram,
    /// The breaker: its state ([`BreakerGauge`]), messages it holds, its trips, the held
    /// messages nacked near their lease's end and at a stop, and its open periods.
    pub(crate) breaker: BreakerGauge,
    pub(crate) breaker_trips: AtomicU64,
    pub(crate) breaker_expired: AtomicU64,
    pub(crate) breaker_released: AtomicU64,
    recent_failures: Mutex<VecDeque<FailureRecord>>,
}

/// How many messages are with the workers, and how many wait for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadReport {
    /// Messages handed to a worker whose handler has not finished (for a batch registration,
    /// also the messages of the batch forming).
    pub running: usize,
    /// Messages waiting for a worker or for their ordering key.
    pub waiting: usize,
    /// Messages read while flow control had no room, waiting for it (their leases kept; not
    /// outstanding yet), all streams together: see
    /// [`Registration::max_read_ahead_messages`](crate::Registration::max_read_ahead_messages).
    pub read_ahead: usize,
    /// Their payload bytes.
    pub read_ahead_bytes: usize,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The worker pool's load as it last published it, for a turn of a pull loop.
    pub(crate) fn pool_load(&self) -> PoolLoad {
        PoolLoad {
            running: self.running.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    /// Keeps a failure among the recent ones.
    pub(crate) fn failed(&self, message_id: &str, attempt: Option<u32>, kind: FailureKind) {
        let mut recent = self.recent_failures.lock();
        if recent.len() == RECENT_FAILURES {
            recent.pop_front();
        }
        recent.push_back(FailureRecord {
            at: SystemTime::now(),
            message_id: message_id.to_string(),
            attempt,
            kind,
        });
    }

    /// The newest failures, oldest first.
    pub(crate) fn recent_failures(&self) -> Vec<FailureRecord> {
        self.recent_failures.lock().iter().cloned().collect()
    }

    /// The latency histograms now.
    pub(crate) fn histograms(&self) -> Histograms {
        Histograms {
            handler: self.handler_seconds.snapshot(),
            publish_to_settle: self.publish_to_settle_seconds.snapshot(),
            lease_held: self.lease_held_seconds.snapshot(),
            confirmation: self.confirmation_seconds.snapshot(),
            batch_size: self.batch_size.snapshot(),
        }
    }

    /// Reads all counters.
    pub(crate) fn snapshot(&self) -> StatsSnapshot {
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
            given_back: r(&self.given_back),
            peak_read_ahead: r(&self.peak_read_ahead),
            deduplicated: r(&self.deduplicated),
            dedupe_fallbacks: r(&self.dedupe_fallbacks),
            worker_restarts: r(&self.worker_restarts),
            actor_failures: r(&self.actor_failures),
            committed: r(&self.committed),
            store_failures: r(&self.store_failures),
            store_aborts: r(&self.store_aborts),
            batches: r(&self.batches),
            breaker_trips: r(&self.breaker_trips),
            breaker_expired: r(&self.breaker_expired),
            breaker_released: r(&self.breaker_released),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_cumulatively_and_sums_in_seconds() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(2));
        h.observe(Duration::from_millis(40));
        h.observe(Duration::from_secs(7200));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert!((s.sum - 7200.042).abs() < 1e-6, "{}", s.sum);
        let at = |bound: f64| s.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(0.001), 0);
        assert_eq!(at(0.0025), 1);
        assert_eq!(at(0.05), 2);
        assert_eq!(at(3600.0), 2, "above the highest bound: only in the count");
    }

    #[test]
    fn only_the_newest_failures_are_kept() {
        let stats = Stats::default();
        for n in 0..RECENT_FAILURES + 5 {
            stats.failed(&n.to_string(), Some(1), FailureKind::Panic);
        }
        let recent = stats.recent_failures();
        assert_eq!(recent.len(), RECENT_FAILURES);
        assert_eq!(recent[0].message_id, "5");
    }
}
