//! What a handler's outcome becomes: the decision table, as a pure function (`decide`).
//! The table itself: README.md#outcomes.

use crate::rules::breaker::Verdict;
use std::time::Duration;

/// How a handler settles a message.
///
/// Built by [`Delivery`](crate::Delivery) (`ack()`, `retry()`, `retry_after(d)`, `drop()`) or by a
/// [`Settler`](crate::Settler); `retry_after` is checked against the remaining lease there, which
/// is why this type has no public constructor for it.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::Outcome;
/// let outcome = Outcome::ack();
/// assert_eq!(format!("{outcome:?}"), "Outcome(Ack)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an outcome settles nothing until the handler returns it"]
pub struct Outcome(pub(crate) OutcomeKind);

/// The kinds of outcome. Crate-internal so that a hold is always checked against the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutcomeKind {
    /// Acknowledge.
    Ack,
    /// Nack now.
    Retry,
    /// Hold the lease for this long, then nack.
    RetryAfter(Duration),
    /// Never again, unless this is the last attempt (then dead-letter).
    Drop,
    /// The handler's dependency is down: trips the breaker (and the message is held); without
    /// one, a retry.
    Unavailable,
    /// The handler handed the message to a [`Settler`](crate::Settler); the worker sends nothing.
    Deferred,
}

impl Outcome {
    /// Acknowledge: Pub/Sub removes the message from the subscription.
    pub fn ack() -> Self {
        Self(OutcomeKind::Ack)
    }
    /// Nack: Pub/Sub redelivers after the subscription's retry backoff, or dead-letters it when
    /// its policy says so.
    pub fn retry() -> Self {
        Self(OutcomeKind::Retry)
    }
    /// Acknowledge so it never comes back, except on the last delivery attempt the dead-letter
    /// limit allows, where it is nacked so that Pub/Sub moves it to the dead-letter topic.
    pub fn drop() -> Self {
        Self(OutcomeKind::Drop)
    }
    /// The handler's dependency (its database, an API) is down: with a
    /// [`Breaker`](crate::Breaker), it trips at once and the message is held in the process,
    /// its lease kept and no delivery attempt spent, until a try succeeds; without one, the
    /// same as [`retry`](Self::retry).
    pub fn unavailable() -> Self {
        Self(OutcomeKind::Unavailable)
    }
    /// What the progress store keeps of this outcome: only finished work (ack, drop).
    pub(crate) fn completed(self) -> Option<Completed> {
        match self.0 {
            OutcomeKind::Ack => Some(Completed::Acked),
            OutcomeKind::Drop => Some(Completed::Dropped),
            _ => None,
        }
    }
    /// The outcome that settles a redelivery of a finished message again.
    pub(crate) fn replay(completed: Completed) -> Self {
        match completed {
            Completed::Acked => Self::ack(),
            Completed::Dropped => Self::drop(),
        }
    }
    pub(crate) fn deferred() -> Self {
        Self(OutcomeKind::Deferred)
    }
    /// Whether a settler settles the message instead.
    pub(crate) fn is_deferred(self) -> bool {
        self.0 == OutcomeKind::Deferred
    }
    /// How the breaker counts this outcome of a handler that ran.
    pub(crate) fn verdict(self) -> Verdict {
        match self.0 {
            OutcomeKind::Ack | OutcomeKind::Drop => Verdict::Success,
            OutcomeKind::Retry | OutcomeKind::RetryAfter(_) => Verdict::Failure,
            OutcomeKind::Unavailable => Verdict::Down,
            OutcomeKind::Deferred => Verdict::Neutral,
        }
    }
    pub(crate) fn retry_after_unchecked(delay: Duration) -> Self {
        Self(OutcomeKind::RetryAfter(delay))
    }
}

/// What Pub/Sub is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Acknowledge the message.
    Ack,
    /// Negatively acknowledge: redeliver (or dead-letter) now.
    Nack,
}

/// The decision for one outcome: what to do, and what it means, for logs and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Send this action now.
    Now(Action, Fate),
    /// Keep holding the lease for this long, then nack.
    HoldThenNack(Duration),
    /// Nothing to send: someone else settles the message.
    Nothing,
}

/// What became of a message, in the words of the outcome table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// `ack()`.
    Acked,
    /// `retry()`, or a hold that ended.
    Retried,
    /// `drop()` before the last attempt: acked.
    Dropped,
    /// `drop()` on the last attempt: nacked so Pub/Sub dead-letters it.
    DeadLettered,
    /// Nacked without running: a stop began while it waited for a worker.
    Released,
}

impl Fate {
    /// The fate as a span attribute's value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fate::Acked => "acked",
            Fate::Retried => "retried",
            Fate::Dropped => "dropped",
            Fate::DeadLettered => "dead_lettered",
            Fate::Released => "released",
        }
    }
}

/// Turns an outcome into a decision.
///
/// `attempt` is the delivery attempt Pub/Sub reported (none when the subscription has no
/// dead-letter policy); `limit` is the last attempt allowed (the registration's `max_attempts`, or
/// the subscription's dead-letter policy).
pub(crate) fn decide(outcome: Outcome, attempt: Option<u32>, limit: Option<u32>) -> Decision {
    match outcome.0 {
        OutcomeKind::Ack => Decision::Now(Action::Ack, Fate::Acked),
        OutcomeKind::Retry | OutcomeKind::Unavailable => Decision::Now(Action::Nack, Fate::Retried),
        OutcomeKind::RetryAfter(d) if d.is_zero() => Decision::Now(Action::Nack, Fate::Retried),
        OutcomeKind::RetryAfter(d) => Decision::HoldThenNack(d),
        OutcomeKind::Drop => match (attempt, limit) {
            (Some(a), Some(l)) if a >= l => Decision::Now(Action::Nack, Fate::DeadLettered),
            _ => Decision::Now(Action::Ack, Fate::Dropped),
        },
        OutcomeKind::Deferred => Decision::Nothing,
    }
}

/// What a handler settled its message with, and what else the worker counts.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    pub(crate) outcome: Outcome,
    pub(crate) note: Note,
}

/// What the worker counts for one handled message, besides its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// The handler ran and returned an outcome.
    Ran,
    /// The handler returned an error: the message is retried.
    HandlerError,
    /// A transactional handler's transaction committed with the message's record.
    Committed,
    /// A transactional store found the message finished: settled again, the handler not run.
    Replayed,
    /// A transactional store could not begin or commit: the message is retried.
    StoreFailed,
    /// A transactional store's conflict with another transaction (`StoreError::Busy`): counted
    /// as a store failure and retried, but not an outage, so not a failure for the breaker.
    Conflict,
    /// A claim another transaction held turned out unfinished: retried, counted nowhere.
    Contended,
    /// A transactional handler panicked (its transaction was rolled back): the panic policy
    /// settles the message.
    Panicked,
}

impl Handled {
    pub(crate) fn ran(outcome: Outcome) -> Self {
        Self {
            outcome,
            note: Note::Ran,
        }
    }

    /// How the breaker counts this run: a replay is not a run; an error, a panic and a store
    /// that failed are failures; otherwise the outcome says.
    pub(crate) fn verdict(&self) -> Verdict {
        match self.note {
            Note::Replayed | Note::Conflict | Note::Contended => Verdict::Neutral,
            Note::HandlerError | Note::StoreFailed | Note::Panicked => Verdict::Failure,
            Note::Ran | Note::Committed => self.outcome.verdict(),
        }
    }
}

/// How a finished message was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// The handler returned `ack()`.
    Acked,
    /// The handler returned `drop()` (acked, or dead-lettered on the last attempt).
    Dropped,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn ack_acks_whatever_the_attempt() {
        for (attempt, limit) in [(None, None), (Some(5), Some(5)), (Some(1), Some(5))] {
            assert_eq!(
                decide(Outcome::ack(), attempt, limit),
                Decision::Now(Action::Ack, Fate::Acked)
            );
        }
    }

    #[test]
    fn retry_nacks_even_on_the_last_attempt() {
        assert_eq!(
            decide(Outcome::retry(), Some(5), Some(5)),
            Decision::Now(Action::Nack, Fate::Retried)
        );
    }

    #[test]
    fn retry_after_holds_then_nacks() {
        assert_eq!(
            decide(
                Outcome::retry_after_unchecked(15 * SECOND),
                Some(1),
                Some(5)
            ),
            Decision::HoldThenNack(15 * SECOND)
        );
        assert_eq!(
            decide(Outcome::retry_after_unchecked(Duration::ZERO), None, None),
            Decision::Now(Action::Nack, Fate::Retried)
        );
    }

    #[test]
    fn drop_acks_before_the_last_attempt() {
        assert_eq!(
            decide(Outcome::drop(), Some(4), Some(5)),
            Decision::Now(Action::Ack, Fate::Dropped)
        );
    }

    #[test]
    fn drop_on_the_last_attempt_nacks_for_the_dead_letter_topic() {
        assert_eq!(
            decide(Outcome::drop(), Some(5), Some(5)),
            Decision::Now(Action::Nack, Fate::DeadLettered)
        );
        // Past the limit (a registration limit lower than the subscription's) still nacks.
        assert_eq!(
            decide(Outcome::drop(), Some(7), Some(5)),
            Decision::Now(Action::Nack, Fate::DeadLettered)
        );
    }

    #[test]
    fn drop_without_attempt_or_limit_acks() {
        assert_eq!(
            decide(Outcome::drop(), None, Some(5)),
            Decision::Now(Action::Ack, Fate::Dropped)
        );
        assert_eq!(
            decide(Outcome::drop(), Some(5), None),
            Decision::Now(Action::Ack, Fate::Dropped)
        );
    }

    #[test]
    fn deferred_sends_nothing() {
        assert_eq!(decide(Outcome::deferred(), None, None), Decision::Nothing);
    }
}
