//! The state of one message's lease, as plain data with pure methods.
//!
//! [`LeaseActor`](crate::lease::actor::LeaseActor) turns its messages into calls here and carries out the
//! [`LeaseEffect`] each call returns. Time is passed in, so the rules are tested without a clock.

use crate::error::RetryAfterError;
use crate::rules::outcome::{Action, Decision, Fate, Outcome, decide};
use std::time::Duration;
use tokio::time::Instant;

/// The lease budget of one message: counted from receipt, `max_lease` long.
///
/// The client keeps extending the lease while Leasehold holds the message, until the budget is
/// spent; after that Pub/Sub redelivers it once the last extension runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseClock {
    received_at: Instant,
    max_lease: Duration,
}

impl LeaseClock {
    /// A budget of `max_lease` starting at `received_at`.
    pub(crate) fn new(received_at: Instant, max_lease: Duration) -> Self {
        Self {
            received_at,
            max_lease,
        }
    }

    /// How long a message held by the breaker may stay held before the end of this budget:
    /// a tenth of the budget, at most 30 s, so the nack reaches Pub/Sub before the lease lapses.
    pub(crate) fn hold_margin(&self) -> Duration {
        (self.max_lease / 10).min(Duration::from_secs(30))
    }

    /// When the message was received.
    pub(crate) fn received_at(&self) -> Instant {
        self.received_at
    }

    /// How long the lease has been held at `now`.
    pub(crate) fn held(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.received_at)
    }

    /// What remains of the budget at `now` (zero once spent).
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.max_lease
            .saturating_sub(now.saturating_duration_since(self.received_at))
    }

    /// When the budget runs out (a century on, for a `max_lease` beyond what an instant holds).
    pub(crate) fn deadline(&self) -> Instant {
        self.received_at
            .checked_add(self.max_lease)
            .unwrap_or_else(|| self.received_at + Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// Checks that the lease can be held for `delay` more, from `now`.
    pub(crate) fn check_hold(&self, delay: Duration, now: Instant) -> Result<(), RetryAfterError> {
        let remaining = self.remaining(now);
        if delay > remaining {
            return Err(RetryAfterError::DelayBeyondLease {
                requested: delay,
                remaining,
            });
        }
        Ok(())
    }
}

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    /// Waiting for the handler's outcome; the client extends the lease.
    Leased,
    /// `retry_after`: the lease is held (still extended, still outstanding) until this instant,
    /// then nacked.
    Holding {
        /// When the hold ends and the message is nacked.
        until: Instant,
    },
    /// The budget ran out before an outcome arrived: Pub/Sub will redeliver. An outcome that
    /// still arrives is sent (and, on exactly-once subscriptions, refused).
    Lapsed,
    /// The action was handed to the client (on exactly-once subscriptions, its confirmation to
    /// the ack sink); nothing more happens to this lease.
    Settled,
}

/// What the lease actor must do after a state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEffect {
    /// Hand this action to the client, count the message's fate, and give the message up (the
    /// lease actor then waits for its next one).
    Send(Action, Fate),
    /// Wake up after this long and call [`LeaseState::end_hold`].
    WaitHold(Duration),
    /// Record a lost lease (log and count); keep waiting for the outcome.
    LostLease,
    /// Nothing to do.
    None,
    /// A second outcome for a message already settled or holding: ignored, worth a warning.
    Duplicate,
}

/// One message's lease: its clock, its status and what decides a `drop()`.
#[derive(Debug, Clone)]
pub(crate) struct LeaseState {
    clock: LeaseClock,
    status: LeaseStatus,
    attempt: Option<u32>,
    limit: Option<u32>,
}

impl LeaseState {
    /// A fresh lease for a message delivered on `attempt`, under a dead-letter `limit`.
    pub(crate) fn new(clock: LeaseClock, attempt: Option<u32>, limit: Option<u32>) -> Self {
        Self {
            clock,
            status: LeaseStatus::Leased,
            attempt,
            limit,
        }
    }

    /// The current status.
    #[cfg(test)]
    pub(crate) fn status(&self) -> LeaseStatus {
        self.status
    }

    /// The lease budget.
    pub(crate) fn clock(&self) -> LeaseClock {
        self.clock
    }

    /// The delivery attempt Pub/Sub reported.
    pub(crate) fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// Whether this is the last attempt the dead-letter limit allows: a nack now is
    /// dead-lettered by Pub/Sub.
    pub(crate) fn is_last_attempt(&self) -> bool {
        matches!((self.attempt, self.limit), (Some(a), Some(l)) if a >= l)
    }

    /// The handler (or a settler) settled the message.
    pub(crate) fn on_outcome(&mut self, outcome: Outcome, now: Instant) -> LeaseEffect {
        match self.status {
            LeaseStatus::Leased | LeaseStatus::Lapsed => {}
            LeaseStatus::Holding { .. } | LeaseStatus::Settled => return LeaseEffect::Duplicate,
        }
        match decide(outcome, self.attempt, self.limit) {
            Decision::Now(action, fate) => {
                self.status = LeaseStatus::Settled;
                LeaseEffect::Send(action, fate)
            }
            Decision::HoldThenNack(delay) => {
                if self.status == LeaseStatus::Lapsed || self.clock.check_hold(delay, now).is_err()
                {
                    // The delay was checked when the outcome was built; time spent in transit
                    // cannot extend the budget, so a hold that no longer fits nacks now.
                    self.status = LeaseStatus::Settled;
                    return LeaseEffect::Send(Action::Nack, Fate::Retried);
                }
                self.status = LeaseStatus::Holding { until: now + delay };
                LeaseEffect::WaitHold(delay)
            }
            Decision::Nothing => LeaseEffect::None,
        }
    }

    /// A `retry_after` hold ends: its wait elapsed, or a stop began (the message goes back to
    /// Pub/Sub at once: the delay is lost, not the message). Nacked, unless no hold runs: a
    /// lease waiting for its handler keeps waiting through a stop's drain.
    pub(crate) fn end_hold(&mut self) -> LeaseEffect {
        match self.status {
            LeaseStatus::Holding { .. } => {
                self.status = LeaseStatus::Settled;
                LeaseEffect::Send(Action::Nack, Fate::Retried)
            }
            _ => LeaseEffect::None,
        }
    }

    /// The message is given back unrun, nacked now so that Pub/Sub redelivers it: released
    /// (`Fate::Released`: a stop began before any handler started on it) or its settlement
    /// right dropped unused (`Fate::Retried`: a job lost with its worker, a bug). Nothing,
    /// if it was settled already (the drain timeout passed first) or a hold runs.
    pub(crate) fn settle_unrun(&mut self, fate: Fate) -> LeaseEffect {
        match self.status {
            LeaseStatus::Leased | LeaseStatus::Lapsed => {
                self.status = LeaseStatus::Settled;
                LeaseEffect::Send(Action::Nack, fate)
            }
            _ => LeaseEffect::None,
        }
    }

    /// The drain timeout passed: whatever is not settled is nacked now, so Pub/Sub redelivers it
    /// instead of waiting for its lease to run out. A handler that finishes later is ignored.
    pub(crate) fn on_abandon(&mut self) -> LeaseEffect {
        match self.status {
            LeaseStatus::Settled => LeaseEffect::None,
            _ => {
                self.status = LeaseStatus::Settled;
                LeaseEffect::Send(Action::Nack, Fate::Retried)
            }
        }
    }

    /// The lease budget's deadline passed.
    pub(crate) fn on_budget_elapsed(&mut self) -> LeaseEffect {
        match self.status {
            LeaseStatus::Leased => {
                self.status = LeaseStatus::Lapsed;
                LeaseEffect::LostLease
            }
            // A hold never outlasts the budget (checked when it started); the hold's own timer
            // settles it.
            _ => LeaseEffect::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn state(attempt: Option<u32>, limit: Option<u32>) -> (LeaseState, Instant) {
        let t0 = Instant::now();
        (
            LeaseState::new(LeaseClock::new(t0, 60 * SECOND), attempt, limit),
            t0,
        )
    }

    #[test]
    fn remaining_counts_down_from_receipt() {
        let t0 = Instant::now();
        let clock = LeaseClock::new(t0, 60 * SECOND);
        assert_eq!(clock.remaining(t0), 60 * SECOND);
        assert_eq!(clock.remaining(t0 + 45 * SECOND), 15 * SECOND);
        assert_eq!(clock.remaining(t0 + 90 * SECOND), Duration::ZERO);
        assert_eq!(clock.deadline(), t0 + 60 * SECOND);
    }

    #[test]
    fn hold_within_the_remaining_lease_is_accepted() {
        let t0 = Instant::now();
        let clock = LeaseClock::new(t0, 60 * SECOND);
        assert_eq!(clock.check_hold(15 * SECOND, t0 + 45 * SECOND), Ok(()));
    }

    #[test]
    fn hold_beyond_the_remaining_lease_is_refused() {
        let t0 = Instant::now();
        let clock = LeaseClock::new(t0, 60 * SECOND);
        assert_eq!(
            clock.check_hold(16 * SECOND, t0 + 45 * SECOND),
            Err(RetryAfterError::DelayBeyondLease {
                requested: 16 * SECOND,
                remaining: 15 * SECOND
            })
        );
    }

    #[test]
    fn ack_settles_once() {
        let (mut s, t0) = state(None, None);
        assert_eq!(
            s.on_outcome(Outcome::ack(), t0),
            LeaseEffect::Send(Action::Ack, Fate::Acked)
        );
        assert_eq!(s.status(), LeaseStatus::Settled);
        assert_eq!(s.on_outcome(Outcome::retry(), t0), LeaseEffect::Duplicate);
    }

    #[test]
    fn retry_after_holds_then_nacks() {
        let (mut s, t0) = state(Some(1), Some(5));
        let now = t0 + 5 * SECOND;
        assert_eq!(
            s.on_outcome(Outcome::retry_after_unchecked(15 * SECOND), now),
            LeaseEffect::WaitHold(15 * SECOND)
        );
        assert_eq!(
            s.status(),
            LeaseStatus::Holding {
                until: now + 15 * SECOND
            }
        );
        // While holding, a second outcome is ignored and the budget timer does nothing.
        assert_eq!(s.on_outcome(Outcome::ack(), now), LeaseEffect::Duplicate);
        assert_eq!(s.on_budget_elapsed(), LeaseEffect::None);
        assert_eq!(s.end_hold(), LeaseEffect::Send(Action::Nack, Fate::Retried));
        assert_eq!(s.status(), LeaseStatus::Settled);
    }

    #[test]
    fn a_hold_that_no_longer_fits_nacks_now() {
        let (mut s, t0) = state(None, None);
        assert_eq!(
            s.on_outcome(
                Outcome::retry_after_unchecked(30 * SECOND),
                t0 + 50 * SECOND
            ),
            LeaseEffect::Send(Action::Nack, Fate::Retried)
        );
    }

    #[test]
    fn budget_elapsed_before_an_outcome_is_a_lost_lease_and_a_late_ack_is_still_sent() {
        let (mut s, t0) = state(None, None);
        assert_eq!(s.on_budget_elapsed(), LeaseEffect::LostLease);
        assert_eq!(s.status(), LeaseStatus::Lapsed);
        assert_eq!(s.on_budget_elapsed(), LeaseEffect::None);
        assert_eq!(
            s.on_outcome(Outcome::ack(), t0 + 61 * SECOND),
            LeaseEffect::Send(Action::Ack, Fate::Acked)
        );
    }

    #[test]
    fn drain_ends_a_hold_at_once_and_leaves_running_handlers_alone() {
        let (mut s, t0) = state(None, None);
        assert_eq!(s.end_hold(), LeaseEffect::None);
        assert_eq!(s.status(), LeaseStatus::Leased);
        s.on_outcome(Outcome::retry_after_unchecked(30 * SECOND), t0);
        assert_eq!(s.end_hold(), LeaseEffect::Send(Action::Nack, Fate::Retried));
        assert_eq!(s.end_hold(), LeaseEffect::None);
    }

    #[test]
    fn abandon_nacks_whatever_is_unsettled_once() {
        let (mut s, t0) = state(None, None);
        assert_eq!(
            s.on_abandon(),
            LeaseEffect::Send(Action::Nack, Fate::Retried)
        );
        assert_eq!(s.on_abandon(), LeaseEffect::None);
        assert_eq!(s.on_outcome(Outcome::ack(), t0), LeaseEffect::Duplicate);
    }

    #[test]
    fn release_nacks_an_unrun_message_once() {
        let (mut s, t0) = state(None, None);
        assert_eq!(
            s.settle_unrun(Fate::Released),
            LeaseEffect::Send(Action::Nack, Fate::Released)
        );
        assert_eq!(s.settle_unrun(Fate::Released), LeaseEffect::None);
        assert_eq!(s.on_outcome(Outcome::ack(), t0), LeaseEffect::Duplicate);
    }

    #[test]
    fn the_last_attempt_is_the_limit_or_beyond_and_needs_both() {
        assert!(state(Some(5), Some(5)).0.is_last_attempt());
        assert!(state(Some(6), Some(5)).0.is_last_attempt());
        assert!(!state(Some(4), Some(5)).0.is_last_attempt());
        assert!(!state(None, Some(5)).0.is_last_attempt());
        assert!(!state(Some(5), None).0.is_last_attempt());
    }

    #[test]
    fn drop_on_the_last_attempt_dead_letters() {
        let (mut s, t0) = state(Some(5), Some(5));
        assert_eq!(
            s.on_outcome(Outcome::drop(), t0),
            LeaseEffect::Send(Action::Nack, Fate::DeadLettered)
        );
    }

    #[test]
    fn deferred_keeps_the_lease() {
        let (mut s, t0) = state(None, None);
        assert_eq!(s.on_outcome(Outcome::deferred(), t0), LeaseEffect::None);
        assert_eq!(s.status(), LeaseStatus::Leased);
        assert_eq!(
            s.on_outcome(Outcome::retry(), t0),
            LeaseEffect::Send(Action::Nack, Fate::Retried)
        );
    }
}
