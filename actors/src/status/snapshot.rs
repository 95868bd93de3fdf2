//! [`StatsSnapshot`]: a subscription's counters at one moment, what each counts, and how
//! snapshots add up. Plain data; `stats.rs` fills it from the live counters.
//!
//! May use nothing of `status`.

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
    /// [`Histograms::batch_size`](crate::status::Histograms::batch_size)).
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
