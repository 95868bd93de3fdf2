//! The outage breaker of one subscription: its settings ([`Breaker`]) and its state machine
//! ([`Circuit`]), plain data with pure methods; time is passed in.
//!
//! The worker pool (`pool/worker_pool.rs`) tells the circuit how each message it ran ended (a
//! [`Verdict`]) and carries out what the circuit says: hold a failed message instead of
//! settling it, start nothing new, try one held message after the cooldown, run the held ones
//! again once it closes. It may use `options` (for [`InvalidOption`]) and nothing above `rules`.

use crate::error::InvalidOption;
use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// The window the failure ratio is measured over, by default: long enough to hold the
/// [`DEFAULT_BREAKER_MIN_MESSAGES`] of a quiet subscription, short enough to forget a past
/// incident within a minute.
pub const DEFAULT_BREAKER_WINDOW: Duration = Duration::from_secs(60);
/// The fewest messages in the window before the ratio may trip the breaker, by default: a
/// ratio of a handful of messages says nothing.
pub const DEFAULT_BREAKER_MIN_MESSAGES: u32 = 20;
/// The share of failures in the window that trips the breaker, by default: half. A dependency
/// that is down fails nearly everything; a flaky one, or a few bad messages, far less.
pub const DEFAULT_BREAKER_FAILURE_RATIO: f64 = 0.5;
/// Failures of different messages in a row that trip the breaker, by default, whatever the
/// ratio: a quiet subscription may never reach the minimum.
pub const DEFAULT_BREAKER_CONSECUTIVE_FAILURES: u32 = 10;
/// The first cooldown after a trip, by default: a dependency that restarts is often back in
/// seconds.
pub const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(5);
/// The longest cooldown, by default: each failed try doubles the cooldown up to this, so a
/// long outage costs one try a minute.
pub const DEFAULT_BREAKER_MAX_COOLDOWN: Duration = Duration::from_secs(60);
/// The shortest cooldown accepted.
pub const MIN_BREAKER_COOLDOWN: Duration = Duration::from_millis(100);
/// The longest window or cooldown accepted: a held message's lease runs meanwhile.
pub const MAX_BREAKER_PERIOD: Duration = Duration::from_secs(3600);
/// How many of the messages that failed last the circuit remembers: a message among them that
/// fails again is not counted again.
const REMEMBERED_FAILURES: usize = 1024;
/// The window is counted in this many buckets, each a tenth of it: a message leaves the window
/// up to a tenth early.
const BUCKETS: u32 = 10;

/// An outage breaker's settings: what trips it and how long it stays open. Set it with
/// [`Registration::breaker`](crate::Registration::breaker); off unless set.
///
/// It trips when, over the last `window`, at least `min_messages` messages ended and
/// `failure_ratio` of them failed, or when `consecutive_failures` different messages failed in a
/// row, or at once when a handler returns [`Delivery::unavailable`](crate::Delivery::unavailable).
/// A failure is a handler's error, a panic, `retry()`, `retry_after`, a batch message left
/// without an outcome, or a transactional store that could not begin or commit (a conflict with
/// another transaction is not). An ack, a `drop()`, a payload that does not decode, a replayed
/// message and a `settle_later` deferral are not counted. A message that fails again counts once
/// (among the last 1,024 that failed), so one poison message among good ones does not trip it.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::Breaker;
/// use std::time::Duration;
/// let breaker = Breaker::new()
///     .failure_ratio(0.8)
///     .min_messages(50)
///     .cooldown(Duration::from_secs(2), Duration::from_secs(120));
/// assert_eq!(breaker.consecutive_failures, Some(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Breaker {
    /// How far back the failure ratio looks.
    pub window: Duration,
    /// The fewest messages ended in the window before the ratio may trip it.
    pub min_messages: u32,
    /// The share of failures (above 0, at most 1) in the window that trips it.
    pub failure_ratio: f64,
    /// Failures of different messages in a row that trip it; `None`: only the ratio.
    pub consecutive_failures: Option<u32>,
    /// The first cooldown after a trip, before one held message is tried.
    pub cooldown: Duration,
    /// The longest cooldown: each failed try doubles it up to this.
    pub max_cooldown: Duration,
    /// Messages that may wait read ahead while it is open, all streams together; `None`:
    /// [`DEFAULT_BREAKER_READ_AHEAD_FACTOR`](crate::defaults::DEFAULT_BREAKER_READ_AHEAD_FACTOR)
    /// times `max_outstanding_messages`.
    pub read_ahead_messages: Option<usize>,
    /// Their payload bytes; `None`: the registration's read-ahead bytes (by default
    /// `max_outstanding_bytes`).
    pub read_ahead_bytes: Option<usize>,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            window: DEFAULT_BREAKER_WINDOW,
            min_messages: DEFAULT_BREAKER_MIN_MESSAGES,
            failure_ratio: DEFAULT_BREAKER_FAILURE_RATIO,
            consecutive_failures: Some(DEFAULT_BREAKER_CONSECUTIVE_FAILURES),
            cooldown: DEFAULT_BREAKER_COOLDOWN,
            max_cooldown: DEFAULT_BREAKER_MAX_COOLDOWN,
            read_ahead_messages: None,
            read_ahead_bytes: None,
        }
    }
}

impl Breaker {
    /// A breaker with the default settings.
    pub fn new() -> Self {
        Self::default()
    }
    /// How far back the failure ratio looks: default [`DEFAULT_BREAKER_WINDOW`], 1 s to 1 h.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }
    /// The fewest messages in the window before the ratio may trip it: default
    /// [`DEFAULT_BREAKER_MIN_MESSAGES`], at least 1.
    pub fn min_messages(mut self, n: u32) -> Self {
        self.min_messages = n;
        self
    }
    /// The share of failures that trips it: default [`DEFAULT_BREAKER_FAILURE_RATIO`], above 0
    /// and at most 1.
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.failure_ratio = ratio;
        self
    }
    /// Failures of different messages in a row that trip it: default
    /// [`DEFAULT_BREAKER_CONSECUTIVE_FAILURES`], at least 1; `None` trips on the ratio only.
    pub fn consecutive_failures(mut self, n: Option<u32>) -> Self {
        self.consecutive_failures = n;
        self
    }
    /// The first cooldown and the longest: defaults [`DEFAULT_BREAKER_COOLDOWN`] and
    /// [`DEFAULT_BREAKER_MAX_COOLDOWN`]; from [`MIN_BREAKER_COOLDOWN`] to
    /// [`MAX_BREAKER_PERIOD`], the first no longer than the longest.
    pub fn cooldown(mut self, first: Duration, max: Duration) -> Self {
        self.cooldown = first;
        self.max_cooldown = max;
        self
    }
    /// What may wait read ahead while it is open (messages, payload bytes), all streams
    /// together: what the streams read while flow control has no room. Defaults:
    /// [`DEFAULT_BREAKER_READ_AHEAD_FACTOR`](crate::defaults::DEFAULT_BREAKER_READ_AHEAD_FACTOR)
    /// times `max_outstanding_messages`, and the registration's read-ahead bytes; 0 to
    /// [`MAX_FLOW_LIMIT`](crate::defaults::MAX_FLOW_LIMIT), and never below the registration's
    /// read-ahead bound (a lower one is raised to it).
    ///
    /// While the breaker is closed, a message read beyond the registration's bound
    /// ([`Registration::max_read_ahead_messages`](crate::Registration::max_read_ahead_messages))
    /// is given back at once so another consumer can run it. While it is open, a nack would
    /// come straight back and spend a delivery attempt each round: nothing is given back, what
    /// is read waits under this bound with its lease kept, and once it is full the streams stop
    /// reading until there is room or the breaker closes. What the server sends meanwhile waits
    /// unleased and comes again once its ack deadline passes, with an attempt counted.
    pub fn read_ahead(mut self, messages: usize, bytes: usize) -> Self {
        self.read_ahead_messages = Some(messages);
        self.read_ahead_bytes = Some(bytes);
        self
    }

    /// Checks every setting against its range.
    pub(crate) fn validate(&self) -> Result<(), InvalidOption> {
        let invalid = |option, problem: &str| {
            Err(InvalidOption {
                option,
                problem: problem.into(),
            })
        };
        let second = Duration::from_secs(1);
        if self.window < second || self.window > MAX_BREAKER_PERIOD {
            return invalid("breaker.window", "must be from 1 s to 1 h");
        }
        if self.min_messages == 0 {
            return invalid("breaker.min_messages", "must be at least 1");
        }
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return invalid("breaker.failure_ratio", "must be above 0 and at most 1");
        }
        if self.consecutive_failures == Some(0) {
            return invalid("breaker.consecutive_failures", "must be at least 1");
        }
        if self.cooldown < MIN_BREAKER_COOLDOWN || self.cooldown > MAX_BREAKER_PERIOD {
            return invalid("breaker.cooldown", "must be from 100 ms to 1 h");
        }
        if self.max_cooldown < self.cooldown || self.max_cooldown > MAX_BREAKER_PERIOD {
            return invalid(
                "breaker.max_cooldown",
                "must be at least the first cooldown and at most 1 h",
            );
        }
        Ok(())
    }

    /// The cooldown after `tries` failed tries since the trip.
    fn cooldown_after(&self, tries: u32) -> Duration {
        let factor = 2u32.saturating_pow(tries.min(31));
        self.cooldown
            .checked_mul(factor)
            .unwrap_or(self.max_cooldown)
            .min(self.max_cooldown)
    }
}

/// How one message's run ended, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not counted: an undecodable payload, a replay, a settler's deferral.
    Neutral,
    /// An ack or a `drop()` from the handler.
    Success,
    /// An error, a panic, `retry()`, `retry_after`, a store that failed.
    Failure,
    /// The handler said its dependency is down.
    Down,
}

/// Where a breaker is, as [`BreakerReport`](crate::status::BreakerReport) tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerState {
    /// Messages run; failures are counted.
    Closed,
    /// Tripped: nothing new is pulled or started, failed messages are held.
    Open,
    /// The cooldown is over: one message is tried.
    HalfOpen,
}

impl BreakerState {
    /// The state as a short label (`closed`, `open`, `half_open`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    /// Open until the cooldown ends.
    Open {
        until: Instant,
    },
    /// The cooldown ended; the readiness check runs.
    Checking,
    /// One message is tried: `None` until the pool picks it.
    HalfOpen {
        probe: Option<u64>,
    },
}

/// What changed with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing the pool acts on.
    None,
    /// It tripped (from closed): hold, start nothing new, wake at the end of this cooldown.
    Tripped(Duration),
    /// A try failed: open again for this (longer) cooldown.
    Reopened(Duration),
    /// The try succeeded: run what is held, resume pulling.
    Closed,
}

/// What to do at the end of a cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCooldown {
    /// Run the readiness check, then call [`Circuit::checked`].
    Check,
    /// Pick one message to try ([`Circuit::probing`]).
    Probe,
    /// The cooldown is not over (a stale timer).
    Wait,
}

/// One tenth of the window.
#[derive(Debug)]
struct Bucket {
    start: Instant,
    successes: u32,
    failures: u32,
}

/// The state machine of one subscription's breaker.
#[derive(Debug)]
pub(crate) struct Circuit {
    policy: Breaker,
    has_check: bool,
    phase: Phase,
    buckets: VecDeque<Bucket>,
    /// The last messages whose failure was counted, oldest first, and the same as a set: kept
    /// through trips and closes, so a message that fails again and again counts once.
    remembered: VecDeque<u64>,
    failed: FxHashSet<u64>,
    consecutive: u32,
    /// Failed tries since the trip: the next cooldown's exponent.
    tries: u32,
}

impl Circuit {
    /// A closed circuit; `has_check`: a readiness check runs before each try.
    pub(crate) fn new(policy: Breaker, has_check: bool) -> Self {
        Self {
            policy,
            has_check,
            phase: Phase::Closed,
            buckets: VecDeque::new(),
            remembered: VecDeque::new(),
            failed: FxHashSet::default(),
            consecutive: 0,
            tries: 0,
        }
    }

    /// The state, for reports.
    pub(crate) fn state(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } | Phase::Checking => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether a failure is held rather than settled, and nothing new starts.
    pub(crate) fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Whether the try's message is still to be picked.
    pub(crate) fn wants_probe(&self) -> bool {
        self.phase == Phase::HalfOpen { probe: None }
    }

    /// Message `id` is the one tried.
    pub(crate) fn probing(&mut self, id: u64) {
        if self.wants_probe() {
            self.phase = Phase::HalfOpen { probe: Some(id) };
        }
    }

    /// Message `id` ended with `verdict` at `now`.
    pub(crate) fn record(&mut self, verdict: Verdict, id: u64, now: Instant) -> Change {
        match self.phase {
            Phase::Closed => self.record_closed(verdict, id, now),
            Phase::HalfOpen { probe: Some(p) } if p == id => match verdict {
                Verdict::Success => {
                    self.close();
                    Change::Closed
                }
                Verdict::Failure | Verdict::Down => self.reopen(now),
                // Not a verdict on the dependency: another message is tried.
                Verdict::Neutral => {
                    self.phase = Phase::HalfOpen { probe: None };
                    Change::None
                }
            },
            // A message that was running when it tripped: held if it failed, not counted.
            _ => Change::None,
        }
    }

    fn record_closed(&mut self, verdict: Verdict, id: u64, now: Instant) -> Change {
        self.rotate(now);
        match verdict {
            Verdict::Neutral => Change::None,
            Verdict::Success => {
                self.current(now).successes += 1;
                self.consecutive = 0;
                Change::None
            }
            Verdict::Down => self.trip(now),
            // Failed before: one message failing again says nothing of the dependency.
            Verdict::Failure if self.failed.contains(&id) => Change::None,
            Verdict::Failure => {
                self.remember(id);
                let bucket = self.current(now);
                bucket.failures += 1;
                self.consecutive += 1;
                let (failures, total) = self.buckets.iter().fold((0u32, 0u32), |(f, t), b| {
                    (f + b.failures, t + b.failures + b.successes)
                });
                // With a little slack: 0.07 × 100 is 7.000000000000001 in floating point.
                let by_ratio = total >= self.policy.min_messages
                    && f64::from(failures) + 1e-9 >= self.policy.failure_ratio * f64::from(total);
                let in_a_row = self
                    .policy
                    .consecutive_failures
                    .is_some_and(|n| self.consecutive >= n);
                if by_ratio || in_a_row {
                    self.trip(now)
                } else {
                    Change::None
                }
            }
        }
    }

    /// The cooldown's timer fired at `now`.
    pub(crate) fn cooldown_over(&mut self, now: Instant) -> AfterCooldown {
        match self.phase {
            Phase::Open { until } if until <= now => {
                if self.has_check {
                    self.phase = Phase::Checking;
                    AfterCooldown::Check
                } else {
                    self.phase = Phase::HalfOpen { probe: None };
                    AfterCooldown::Probe
                }
            }
            _ => AfterCooldown::Wait,
        }
    }

    /// The readiness check answered: ready, a message is tried; not, open again.
    pub(crate) fn checked(&mut self, ready: bool, now: Instant) -> Change {
        if self.phase != Phase::Checking {
            return Change::None;
        }
        if ready {
            self.phase = Phase::HalfOpen { probe: None };
            Change::None
        } else {
            self.reopen(now)
        }
    }

    fn trip(&mut self, now: Instant) -> Change {
        self.tries = 0;
        let cooldown = self.policy.cooldown_after(0);
        self.phase = Phase::Open {
            until: now + cooldown,
        };
        self.forget();
        Change::Tripped(cooldown)
    }

    fn reopen(&mut self, now: Instant) -> Change {
        self.tries = self.tries.saturating_add(1);
        let cooldown = self.policy.cooldown_after(self.tries);
        self.phase = Phase::Open {
            until: now + cooldown,
        };
        Change::Reopened(cooldown)
    }

    fn close(&mut self) {
        self.phase = Phase::Closed;
        self.tries = 0;
        self.forget();
    }

    /// A fresh window: what was counted before a trip says nothing after it. (The messages
    /// that failed are still remembered.)
    fn forget(&mut self) {
        self.buckets.clear();
        self.consecutive = 0;
    }

    /// Remembers that message `id` failed, forgetting the oldest beyond the bound.
    fn remember(&mut self, id: u64) {
        if self.remembered.len() == REMEMBERED_FAILURES
            && let Some(oldest) = self.remembered.pop_front()
        {
            self.failed.remove(&oldest);
        }
        self.remembered.push_back(id);
        self.failed.insert(id);
    }

    /// Drops the buckets that left the window.
    fn rotate(&mut self, now: Instant) {
        let window = self.policy.window;
        while let Some(oldest) = self.buckets.front() {
            if oldest.start + window > now {
                break;
            }
            self.buckets.pop_front();
        }
    }

    /// The bucket `now` falls in.
    fn current(&mut self, now: Instant) -> &mut Bucket {
        let width = self.policy.window / BUCKETS;
        let fresh = self.buckets.back().is_none_or(|b| b.start + width <= now);
        if fresh {
            self.buckets.push_back(Bucket {
                start: now,
                successes: 0,
                failures: 0,
            });
        }
        self.buckets.back_mut().expect("just pushed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn circuit(policy: Breaker) -> (Circuit, Instant) {
        (Circuit::new(policy, false), Instant::now())
    }

    #[test]
    fn the_defaults_are_valid_and_each_range_is_checked() {
        assert_eq!(Breaker::new().validate(), Ok(()));
        let bad = [
            (
                Breaker::new().window(Duration::from_millis(10)),
                "breaker.window",
            ),
            (Breaker::new().min_messages(0), "breaker.min_messages"),
            (Breaker::new().failure_ratio(0.0), "breaker.failure_ratio"),
            (
                Breaker::new().failure_ratio(f64::NAN),
                "breaker.failure_ratio",
            ),
            (Breaker::new().failure_ratio(1.5), "breaker.failure_ratio"),
            (
                Breaker::new().consecutive_failures(Some(0)),
                "breaker.consecutive_failures",
            ),
            (
                Breaker::new().cooldown(Duration::from_millis(1), SECOND),
                "breaker.cooldown",
            ),
            (
                Breaker::new().cooldown(10 * SECOND, SECOND),
                "breaker.max_cooldown",
            ),
        ];
        for (breaker, option) in bad {
            assert_eq!(breaker.validate().unwrap_err().option, option);
        }
    }

    #[test]
    fn the_ratio_trips_only_once_the_window_holds_the_minimum() {
        let policy = Breaker::new()
            .min_messages(10)
            .failure_ratio(0.5)
            .consecutive_failures(None);
        let (mut c, t0) = circuit(policy);
        for id in 0..4 {
            assert_eq!(c.record(Verdict::Success, id, t0), Change::None);
        }
        for id in 4..8 {
            assert_eq!(c.record(Verdict::Failure, id, t0), Change::None, "8 < 10");
        }
        assert_eq!(c.record(Verdict::Success, 8, t0), Change::None);
        // 10 messages, 5 failed: half.
        assert_eq!(
            c.record(Verdict::Failure, 9, t0),
            Change::Tripped(DEFAULT_BREAKER_COOLDOWN)
        );
        assert_eq!(c.state(), BreakerState::Open);
        assert!(!c.is_closed());
    }

    #[test]
    fn what_left_the_window_is_not_counted() {
        let policy = Breaker::new()
            .min_messages(4)
            .failure_ratio(0.75)
            .consecutive_failures(None)
            .window(10 * SECOND);
        let (mut c, t0) = circuit(policy);
        for id in 0..3 {
            c.record(Verdict::Failure, id, t0);
        }
        // Eleven seconds on, those three are gone: one failure among one message does not
        // reach the minimum.
        assert_eq!(
            c.record(Verdict::Failure, 3, t0 + 11 * SECOND),
            Change::None
        );
        assert!(c.is_closed());
        for id in 4..7 {
            c.record(Verdict::Failure, id, t0 + 11 * SECOND);
        }
        assert_eq!(c.state(), BreakerState::Open, "four failures in the window");
    }

    #[test]
    fn consecutive_failures_trip_and_a_success_resets_them() {
        let (mut c, t0) = circuit(Breaker::new().consecutive_failures(Some(3)));
        c.record(Verdict::Failure, 1, t0);
        c.record(Verdict::Failure, 2, t0);
        c.record(Verdict::Success, 3, t0);
        c.record(Verdict::Failure, 4, t0);
        assert_eq!(c.record(Verdict::Failure, 5, t0), Change::None);
        assert!(matches!(
            c.record(Verdict::Failure, 6, t0),
            Change::Tripped(_)
        ));
    }

    #[test]
    fn a_poison_message_failing_again_and_again_does_not_trip_it() {
        let (mut c, t0) = circuit(Breaker::new().consecutive_failures(Some(3)).min_messages(5));
        // The same message redelivered ten times, nothing else arriving.
        for n in 0..10 {
            assert_eq!(
                c.record(Verdict::Failure, 42, t0 + n * SECOND),
                Change::None
            );
        }
        // And among good ones.
        for id in 100..200 {
            c.record(Verdict::Success, id, t0 + 10 * SECOND);
            c.record(Verdict::Failure, 42, t0 + 10 * SECOND);
        }
        assert!(c.is_closed());
    }

    #[test]
    fn a_message_failing_again_after_the_window_or_a_trip_still_counts_once() {
        let (mut c, t0) = circuit(
            Breaker::new()
                .consecutive_failures(Some(2))
                .min_messages(100),
        );
        // Redelivered every 61 s, longer than the window.
        for n in 0..5 {
            assert_eq!(
                c.record(Verdict::Failure, 42, t0 + n * 61 * SECOND),
                Change::None
            );
        }
        assert!(c.is_closed());
    }

    #[test]
    fn a_ratio_reached_exactly_trips_it_whatever_the_rounding() {
        // 0.07 × 100 is 7.000000000000001 in floating point.
        let (mut c, t0) = circuit(
            Breaker::new()
                .failure_ratio(0.07)
                .min_messages(100)
                .consecutive_failures(None),
        );
        for id in 0..93 {
            c.record(Verdict::Success, id, t0);
        }
        for id in 93..99 {
            assert_eq!(c.record(Verdict::Failure, id, t0), Change::None);
        }
        assert!(matches!(
            c.record(Verdict::Failure, 99, t0),
            Change::Tripped(_)
        ));
    }

    #[test]
    fn a_handler_saying_the_dependency_is_down_trips_it_at_once() {
        let (mut c, t0) = circuit(Breaker::new());
        c.record(Verdict::Success, 1, t0);
        assert!(matches!(c.record(Verdict::Down, 2, t0), Change::Tripped(_)));
    }

    #[test]
    fn neither_decode_failures_nor_replays_count() {
        let (mut c, t0) = circuit(Breaker::new().consecutive_failures(Some(1)).min_messages(1));
        for id in 0..100 {
            c.record(Verdict::Neutral, id, t0);
        }
        assert!(c.is_closed());
    }

    #[test]
    fn a_failed_try_reopens_with_a_doubled_cooldown_up_to_the_cap() {
        let policy = Breaker::new()
            .consecutive_failures(Some(1))
            .cooldown(2 * SECOND, 5 * SECOND);
        let (mut c, t0) = circuit(policy);
        assert_eq!(
            c.record(Verdict::Failure, 1, t0),
            Change::Tripped(2 * SECOND)
        );
        assert_eq!(c.cooldown_over(t0 + SECOND), AfterCooldown::Wait, "early");
        let mut now = t0 + 2 * SECOND;
        let mut cooldowns = Vec::new();
        for _ in 0..3 {
            assert_eq!(c.cooldown_over(now), AfterCooldown::Probe);
            assert_eq!(c.state(), BreakerState::HalfOpen);
            assert!(c.wants_probe());
            c.probing(1);
            // Another message's failure is not the try's.
            assert_eq!(c.record(Verdict::Failure, 7, now), Change::None);
            let Change::Reopened(next) = c.record(Verdict::Failure, 1, now) else {
                panic!("the try failed");
            };
            cooldowns.push(next);
            now += next;
        }
        assert_eq!(cooldowns, [4 * SECOND, 5 * SECOND, 5 * SECOND]);
        assert_eq!(c.cooldown_over(now), AfterCooldown::Probe);
        c.probing(1);
        assert_eq!(c.record(Verdict::Success, 1, now), Change::Closed);
        assert!(c.is_closed());
        // Closed afresh: the next trip starts from the first cooldown again.
        assert_eq!(
            c.record(Verdict::Failure, 2, now),
            Change::Tripped(2 * SECOND)
        );
    }

    #[test]
    fn a_neutral_try_picks_another_message() {
        let (mut c, t0) = circuit(Breaker::new().consecutive_failures(Some(1)));
        c.record(Verdict::Failure, 1, t0);
        c.cooldown_over(t0 + DEFAULT_BREAKER_COOLDOWN);
        c.probing(1);
        assert!(!c.wants_probe());
        assert_eq!(c.record(Verdict::Neutral, 1, t0), Change::None);
        assert!(c.wants_probe());
    }

    #[test]
    fn the_readiness_check_decides_before_a_message_is_spent() {
        let policy = Breaker::new()
            .consecutive_failures(Some(1))
            .cooldown(SECOND, 10 * SECOND);
        let mut c = Circuit::new(policy, true);
        let t0 = Instant::now();
        c.record(Verdict::Failure, 1, t0);
        assert_eq!(c.cooldown_over(t0 + SECOND), AfterCooldown::Check);
        assert_eq!(c.state(), BreakerState::Open, "still open while it checks");
        assert_eq!(c.checked(false, t0 + SECOND), Change::Reopened(2 * SECOND));
        assert_eq!(c.cooldown_over(t0 + 3 * SECOND), AfterCooldown::Check);
        assert_eq!(c.checked(true, t0 + 3 * SECOND), Change::None);
        assert!(c.wants_probe());
    }
}
