//! What a running subscription measures, readable at any time: counters, histograms of the
//! latencies that matter, and the last failures.
//!
//! Everything is kept in atomics (a histogram is a fixed set of buckets), so observing costs a
//! few atomic additions and reading never stops the consumer.

use crate::rules::pull_turn::PoolLoad;
pub(crate) use crate::status::breaker::BreakerGauge;
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

/// A copy of the counters at one moment.
///
/// They count deliveries, not messages: a message delivered five times before it is
/// dead-lettered counts five in `received`. Every delivery received is settled exactly once, in
/// one of the five counters of [`settled_by_outcome`](Self::settled_by_outcome): `acked`,
/// `retried`, `dropped`, `dead_lettered` or `released` (nacked unrun at a stop). A delivery read
/// while flow control and the read-ahead were full and given back at once is not received: it is
/// counted in `given_back` alone. The others
/// (`held`, `replayed`, `panics`, `decode_failures`, …) say why or how, not what became of the
/// delivery: a hold ends in `retried`, a replay in `acked`, `dropped` or `dead_lettered`.
/// Snapshots add up with `+`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Messages received from the stream (redeliveries count again), including those the client
    /// had buffered and a stop released unread (also counted in `released`); not those given
    /// back at once (`given_back`).
    pub received: u64,
    /// Settled with `ack()`.
    pub acked: u64,
    /// Nacked by `retry()`, by the end of a `retry_after` hold, by a panic or by a dropped
    /// settler.
    pub retried: u64,
    /// Lease holds started before a nack: a handler's `retry_after(d)`, and a transactional
    /// handler's wait after its store could not begin or commit (those also in
    /// `store_failures`). Not the messages the breaker holds: see
    /// [`BreakerReport::held`](crate::status::BreakerReport::held).
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
    /// Redeliveries of finished messages settled from the progress store (or the transactional
    /// store), without the handler.
    pub replayed: u64,
    /// Transactional handlers: transactions committed with their message's record.
    pub committed: u64,
    /// Transactional handlers: transactions that could not begin or commit (the message was
    /// retried).
    pub store_failures: u64,
    /// Transactional handlers: transactions the database aborted (each one; the handler ran
    /// again on a fresh transaction, or the message was retried when no rerun was left).
    pub store_aborts: u64,
    /// Messages nacked without running when a stop began: buffered in the client, or waiting in
    /// Leasehold for a worker or for their ordering key.
    pub released: u64,
    /// Deliveries given back (nacked) unrun, so that Pub/Sub hands them to a consumer with room:
    /// read while flow control had no room and what waits read ahead was full (the server sent
    /// beyond the stream's flow control), or waited read ahead until near the end of their lease
    /// budget. Never while the outage breaker is open. Not counted in `received` nor settled:
    /// each comes again, and is counted then. See
    /// [`Registration::max_read_ahead_messages`](crate::Registration::max_read_ahead_messages).
    pub given_back: u64,
    /// The most messages that waited read ahead at once.
    pub peak_read_ahead: u64,
    /// Registrations that dedupe on an attribute
    /// ([`Registration::dedupe_on`](crate::Registration::dedupe_on)): deliveries whose key was
    /// found in the progress store, settled with the recorded outcome without the handler (a
    /// copy of a message published twice, or a redelivery of one already finished); also
    /// counted in `replayed`.
    pub deduplicated: u64,
    /// Registrations that dedupe on an attribute: deliveries without it (or with it empty),
    /// whose progress is kept under their message id instead.
    pub dedupe_fallbacks: u64,
    /// Worker threads (or worker actors) that died and were started again. The messages their
    /// handlers were running were nacked (counted in `retried`) and come back.
    pub worker_restarts: u64,
    /// Leasehold actors that died: restarted workers, and the worker pool, the ack sink or the
    /// supervisor, after which the subscription fails (see `Subscription::state`).
    pub actor_failures: u64,
    /// Batch registrations: batches handed to the handler (their sizes are in
    /// [`Histograms::batch_size`]).
    pub batches: u64,
    /// Times the outage breaker tripped.
    pub breaker_trips: u64,
    /// Messages held by the breaker, or waiting for it to close, until their lease was about to
    /// run out: nacked then, and counted in `retried` too.
    pub breaker_expired: u64,
    /// Messages the breaker held when a stop began: nacked, and counted in `retried` too.
    pub breaker_released: u64,
}

impl StatsSnapshot {
    /// Deliveries settled so far, by what became of them, as `(label, count)`: `acked`,
    /// `retried`, `dropped`, `dead_lettered`, `released`. Every delivery settled is in exactly
    /// one of them; [`settled`](Self::settled) is their sum.
    pub fn settled_by_outcome(&self) -> [(&'static str, u64); 5] {
        [
            ("acked", self.acked),
            ("retried", self.retried),
            ("dropped", self.dropped),
            ("dead_lettered", self.dead_lettered),
            ("released", self.released),
        ]
    }

    /// Deliveries settled so far: `acked + retried + dropped + dead_lettered + released`. Once a
    /// subscription has stopped, every delivery it received is settled: `settled() == received`.
    pub fn settled(&self) -> u64 {
        self.settled_by_outcome().iter().map(|(_, n)| n).sum()
    }

    /// Deliveries received and not settled (`received - settled()`, or zero if more were counted
    /// settled than received): outstanding now, while the subscription runs; zero once it has
    /// stopped. After a stop, `settled() != received` in either direction would be a counting
    /// error (a message left in silence, or settled twice): compare the two to check both.
    pub fn unsettled(&self) -> u64 {
        self.received.saturating_sub(self.settled())
    }
}

/// Two snapshots added up, counter by counter (for instance the runs of one subscription before
/// and after a restart); `peak_outstanding` and `peak_read_ahead` are the higher of the two.
impl std::ops::Add for StatsSnapshot {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        // Destructured, so that a counter added later cannot be forgotten here.
        let Self {
            received,
            acked,
            retried,
            held,
            dropped,
            dead_lettered,
            decode_failures,
            panics,
            confirmed,
            failed_acks,
            lost_leases,
            stream_restarts,
            peak_outstanding,
            replayed,
            committed,
            store_failures,
            store_aborts,
            released,
            given_back,
            peak_read_ahead,
            deduplicated,
            dedupe_fallbacks,
            worker_restarts,
            actor_failures,
            batches,
            breaker_trips,
            breaker_expired,
            breaker_released,
        } = other;
        Self {
            received: self.received + received,
            acked: self.acked + acked,
            retried: self.retried + retried,
            held: self.held + held,
            dropped: self.dropped + dropped,
            dead_lettered: self.dead_lettered + dead_lettered,
            decode_failures: self.decode_failures + decode_failures,
            panics: self.panics + panics,
            confirmed: self.confirmed + confirmed,
            failed_acks: self.failed_acks + failed_acks,
            lost_leases: self.lost_leases + lost_leases,
            stream_restarts: self.stream_restarts + stream_restarts,
            peak_outstanding: self.peak_outstanding.max(peak_outstanding),
            replayed: self.replayed + replayed,
            committed: self.committed + committed,
            store_failures: self.store_failures + store_failures,
            store_aborts: self.store_aborts + store_aborts,
            released: self.released + released,
            given_back: self.given_back + given_back,
            peak_read_ahead: self.peak_read_ahead.max(peak_read_ahead),
            deduplicated: self.deduplicated + deduplicated,
            dedupe_fallbacks: self.dedupe_fallbacks + dedupe_fallbacks,
            worker_restarts: self.worker_restarts + worker_restarts,
            actor_failures: self.actor_failures + actor_failures,
            batches: self.batches + batches,
            breaker_trips: self.breaker_trips + breaker_trips,
            breaker_expired: self.breaker_expired + breaker_expired,
            breaker_released: self.breaker_released + breaker_released,
        }
    }
}

impl std::ops::AddAssign for StatsSnapshot {
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
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
    fn settled_counts_every_outcome_released_included() {
        let s = StatsSnapshot {
            received: 16,
            acked: 1,
            retried: 2,
            dropped: 3,
            dead_lettered: 4,
            released: 5,
            // Not outcomes: a hold ends in `retried`, a replay in `acked` or `dropped`; a delivery
            // given back is not received either.
            given_back: 6,
            held: 100,
            replayed: 100,
            ..StatsSnapshot::default()
        };
        assert_eq!(s.settled(), 15);
        assert_eq!(s.unsettled(), 1);
        assert_eq!(
            s.settled_by_outcome().map(|(label, _)| label),
            ["acked", "retried", "dropped", "dead_lettered", "released"]
        );
    }

    #[test]
    fn snapshots_add_counter_by_counter_and_keep_the_higher_peak() {
        let a = StatsSnapshot {
            received: 3,
            released: 2,
            peak_outstanding: 7,
            ..StatsSnapshot::default()
        };
        let b = StatsSnapshot {
            received: 4,
            released: 1,
            store_failures: 1,
            peak_outstanding: 5,
            ..StatsSnapshot::default()
        };
        let mut sum = a + b;
        assert_eq!(
            (
                sum.received,
                sum.released,
                sum.store_failures,
                sum.peak_outstanding
            ),
            (7, 3, 1, 7)
        );
        sum += b;
        assert_eq!((sum.received, sum.peak_outstanding), (11, 7));
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
