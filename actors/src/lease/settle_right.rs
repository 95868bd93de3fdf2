//! The right to settle one message, as a value.
//!
//! When a message arrives, `LeaseContext::hand_over` gives it to a lease actor and hands out
//! exactly one [`SettleRight`]: the supervisor puts it in the message's `Dispatch` to the worker
//! pool, the pool keeps it with the job in its schedule and hands it to the workers' queue, and
//! the worker that runs the handler uses it, consuming it, to settle the message with its lease
//! actor ([`settle`](SettleRight::settle), or [`release`](SettleRight::release) when a stop
//! began before the handler ran). Nothing else can settle the message on that path, and no strong
//! address of the lease actor travels along it (the `Delivery` holds a weak one, for
//! `settle_later`). A worker sends the settlements of one turn together, at its end, on one
//! channel to the lease actors' thread, where [`deliver`] hands each to its lease actor.
//!
//! Dropped unused anywhere (a job lost with a worker that died, a dispatch the pool never read,
//! a bug), the right settles the message all the same: its lease actor hears where it was
//! dropped, nacks the message (counted in `retried`) and logs a warning naming the message and
//! the place. A lost right means a redelivery, never a stranded lease.
//!
//! Underneath it is the sending end of a one-shot channel whose receiving end the lease actor
//! awaits: settling allocates nothing.

use crate::rules::outcome::Outcome;
use tokio::sync::oneshot;

/// Where a settlement right was when it was dropped unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// On its way from the supervisor to the worker pool.
    Dispatched,
    /// In the worker pool, waiting for a worker, for its ordering key, or for a running
    /// delivery of the same message.
    Scheduled,
    /// In the workers' queue, handed out and not yet taken.
    Queued,
    /// With a worker: its handler running, or its outcome being recorded.
    Running,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Place::Dispatched => "on its way to the worker pool",
            Place::Scheduled => "in the worker pool's schedule",
            Place::Queued => "in the workers' queue",
            Place::Running => "with a worker (its handler running or its outcome being recorded)",
        })
    }
}

/// What a settlement right told its lease actor.
#[derive(Debug)]
pub(crate) enum Settlement {
    /// The handler, the progress store's replay or a policy settled the message.
    Outcome(Outcome),
    /// A stop began before a handler started on it: nacked, unrun.
    Released,
    /// The handler handed the message to a `Settler` (`settle_later`), whose outcome comes to
    /// the lease actor as a message of its own.
    Deferred,
    /// The right was dropped unused, here.
    Dropped(Place),
}

impl Settlement {
    /// What an outcome tells the lease actor (`settle_later`'s deferred outcome hands the
    /// message to the settler).
    pub(crate) fn of(outcome: Outcome) -> Self {
        if outcome.is_deferred() {
            Self::Deferred
        } else {
            Self::Outcome(outcome)
        }
    }
}

/// The right to settle one message with its lease actor. Consumed by settling; dropped unused,
/// it nacks the message (see the module doc).
#[must_use = "a settlement right dropped unused nacks its message (counted, logged)"]
#[derive(Debug)]
pub(crate) struct SettleRight {
    to_lease: Option<oneshot::Sender<Settlement>>,
    place: Place,
}

impl SettleRight {
    /// A right, and the end its lease actor awaits.
    pub(crate) fn new() -> (Self, oneshot::Receiver<Settlement>) {
        let (to_lease, from_right) = oneshot::channel();
        (
            Self {
                to_lease: Some(to_lease),
                place: Place::Dispatched,
            },
            from_right,
        )
    }

    /// The right moved on: a drop from here on names `place`.
    pub(crate) fn moved_to(&mut self, place: Place) {
        self.place = place;
    }

    /// A stop began before a handler started on the message: nack it, unrun.
    pub(crate) fn release(self) {
        self.settle(Settlement::Released);
    }

    /// Tells the lease actor how the message ended (consuming the right): an outcome
    /// ([`Settlement::of`]), or released.
    pub(crate) fn settle(mut self, settlement: Settlement) {
        if let Some(to_lease) = self.to_lease.take() {
            // Refused only when the message's `Held` was given up: its lease actor settled it
            // already (a stop past its drain timeout) or its arbiter ended (its handle nacked
            // the message). The actor itself may live on, holding another message.
            let _ = to_lease.send(settlement);
        }
    }
}

/// Where workers send the settlements of their turn: one channel to the lease actors' thread,
/// where [`deliver`] hands each to its lease actor. Sent straight from a worker thread, each
/// settlement would wake its lease actor's task from afar, and every remote wake takes the
/// lock of the runtime's remote queue, which the lease actors' thread takes too to pop it: with
/// handlers that finish at once, the two threads would contend for it on every message (the
/// pipeline falls from about 240,000 to 140,000 msg/s, measured). The channel is lock-free, and
/// a worker sends the settlements of its turn in one batch, which wakes that thread once.
pub(crate) type Settlements = tokio::sync::mpsc::UnboundedSender<Vec<(SettleRight, Settlement)>>;

/// Delivers what comes on the settlements channel, each to its lease actor, on the current
/// thread (the lease actors'); ends when every worker has let go of its sender.
pub(crate) async fn deliver(
    mut settled: tokio::sync::mpsc::UnboundedReceiver<Vec<(SettleRight, Settlement)>>,
) {
    while let Some(turn) = settled.recv().await {
        for (right, settlement) in turn {
            right.settle(settlement);
        }
    }
}

impl Drop for SettleRight {
    fn drop(&mut self) {
        if let Some(to_lease) = self.to_lease.take() {
            let _ = to_lease.send(Settlement::Dropped(self.place));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_consumes_the_right_and_sends_once() {
        let (right, mut lease) = SettleRight::new();
        right.settle(Settlement::of(Outcome::ack()));
        assert!(matches!(lease.try_recv(), Ok(Settlement::Outcome(o)) if o == Outcome::ack()));
        let (right, mut lease) = SettleRight::new();
        right.release();
        assert!(matches!(lease.try_recv(), Ok(Settlement::Released)));
    }

    #[test]
    fn a_right_dropped_unused_says_where() {
        let (mut right, mut lease) = SettleRight::new();
        right.moved_to(Place::Queued);
        drop(right);
        assert!(matches!(
            lease.try_recv(),
            Ok(Settlement::Dropped(Place::Queued))
        ));
    }

    #[test]
    fn a_deferred_outcome_hands_the_message_to_the_settler() {
        let (right, mut lease) = SettleRight::new();
        right.settle(Settlement::of(Outcome::deferred()));
        assert!(matches!(lease.try_recv(), Ok(Settlement::Deferred)));
    }
}
