//! What a replay takes, leaves and paces, and when it is over: plain data and pure methods, no
//! I/O and no clock of their own (every `now` is passed in).

use crate::error::InvalidOption;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant, SystemTime};

/// How long a replay waits, by default, for a message it has not seen before it ends: long
/// enough for a new stream to get the backlog's first messages from real Pub/Sub (a streaming
/// pull can take a few seconds to deliver), short enough that a drained subscription ends soon.
pub const DEFAULT_REPLAY_IDLE: Duration = Duration::from_secs(10);

/// The fastest rate a replay accepts, messages a second: the same bound as SQS's
/// `StartMessageMoveTask`. A replay without a rate takes messages as fast as the registration's
/// flow control lets them in.
pub const MAX_REPLAY_RATE: f64 = 10_000.0;

/// Which dead letters a replay takes. Every condition set must hold; a filter with none takes
/// every message. Only ids, attribute keys and values given here, and publish times are compared:
/// a filter never looks at a payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    ids: BTreeSet<String>,
    attributes: BTreeMap<String, String>,
    published_after: Option<SystemTime>,
    published_before: Option<SystemTime>,
}

impl Filter {
    /// A filter that takes every message.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes only the messages with these ids (the dead-letter copies' ids: the copy on the
    /// dead-letter topic has an id of its own). Called more than once, any of the ids.
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.ids.insert(id.into());
        self
    }

    /// Takes only the messages whose attribute `key` is exactly `value`. Called more than
    /// once, every pair must match.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }

    /// Takes only the messages published at or after `t` (the dead-letter copy's publish time:
    /// when Pub/Sub dead-lettered it).
    pub fn published_after(mut self, t: SystemTime) -> Self {
        self.published_after = Some(t);
        self
    }

    /// Takes only the messages published before `t`.
    pub fn published_before(mut self, t: SystemTime) -> Self {
        self.published_before = Some(t);
        self
    }

    /// Whether the filter takes every message.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Whether a message with this id, these attributes and this publish time is taken. A
    /// message without a publish time fails any time condition.
    pub fn matches(
        &self,
        id: &str,
        attributes: &std::collections::HashMap<String, String>,
        published: Option<SystemTime>,
    ) -> bool {
        (self.ids.is_empty() || self.ids.contains(id))
            && self
                .attributes
                .iter()
                .all(|(k, v)| attributes.get(k) == Some(v))
            && self
                .published_after
                .is_none_or(|after| published.is_some_and(|p| p >= after))
            && self
                .published_before
                .is_none_or(|before| published.is_some_and(|p| p < before))
    }

    fn validate(&self) -> Result<(), InvalidOption> {
        if let (Some(after), Some(before)) = (self.published_after, self.published_before)
            && after >= before
        {
            return Err(InvalidOption {
                option: "filter",
                problem: "selects nothing: published_after is not before published_before".into(),
            });
        }
        Ok(())
    }
}

/// How a replay runs: its rate, its maximum, its filter, whether it only lists, and how long it
/// waits for a message it has not seen before it ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    pub(crate) rate: Option<f64>,
    pub(crate) max: Option<u64>,
    pub(crate) filter: Filter,
    pub(crate) dry_run: bool,
    pub(crate) idle: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            rate: None,
            max: None,
            filter: Filter::new(),
            dry_run: false,
            idle: DEFAULT_REPLAY_IDLE,
        }
    }
}

impl ReplayOptions {
    /// Every message, as fast as flow control allows, handled, ending after
    /// [`DEFAULT_REPLAY_IDLE`] without a new message.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `per_second` messages handed to the handler a second (above 0, at most
    /// [`MAX_REPLAY_RATE`]); default: no limit but flow control.
    pub fn rate(mut self, per_second: f64) -> Self {
        self.rate = Some(per_second);
        self
    }

    /// At most `n` messages handed to the handler (at least 1); the run ends once they are
    /// settled. Default: no limit.
    pub fn max(mut self, n: u64) -> Self {
        self.max = Some(n);
        self
    }

    /// Only the messages the filter takes; the others are left on the dead-letter subscription
    /// (nacked at once) and counted as filtered.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// Lists each message the filter takes ([`Candidate`](crate::replay::Candidate)), runs no handler and settles
    /// nothing: each is nacked at once (on a dead-letter subscription with a dead-letter policy
    /// of its own, that nack costs one of its delivery attempts).
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The run ends when no message it would take (not seen before in the run, taken by the
    /// filter) arrived for `d` and nothing it took is still running (from 1 s to 10 min;
    /// default [`DEFAULT_REPLAY_IDLE`]). While dead letters keep arriving, a run ends only with
    /// a `max`, a cancel, or a filter that leaves the new ones out (`published_before` now).
    pub fn idle(mut self, d: Duration) -> Self {
        self.idle = d;
        self
    }

    /// Whether this is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The options checked, each against its range.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        if let Some(rate) = self.rate
            && !(rate > 0.0 && rate <= MAX_REPLAY_RATE)
        {
            return Err(InvalidOption {
                option: "rate",
                problem: format!(
                    "must be above 0 and at most {MAX_REPLAY_RATE} messages a second, not {rate}"
                ),
            });
        }
        if self.max == Some(0) {
            return Err(InvalidOption {
                option: "max",
                problem: "must be at least 1".into(),
            });
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.idle) {
            return Err(InvalidOption {
                option: "idle",
                problem: format!("must be from 1 s to 10 min, not {:?}", self.idle),
            });
        }
        self.filter.validate()
    }
}

/// What becomes of a message the replay's stream delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Handed to the handler (or, in a dry run, listed).
    Take,
    /// Taken before in this run, delivered again (it was nacked, or its lease ran out): nacked
    /// at once, never handed to the handler twice in one run.
    Again,
    /// The filter leaves it out: nacked at once.
    Filtered,
    /// The maximum was reached: nacked at once.
    OverMax,
    /// The run is ending (cancelled or over): nacked at once.
    Closed,
}

/// Counts of one run's admissions, read while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admitted {
    /// Distinct messages handed to the handler (in a dry run: listed).
    pub taken: u64,
    /// Distinct messages the filter left out.
    pub filtered: u64,
    /// Distinct messages not taken because the maximum was reached or the run was ending.
    pub not_taken: u64,
    /// Deliveries of a message already seen in this run, nacked at once.
    pub again: u64,
}

/// One run's memory of what it saw: each message is decided once, by its id.
#[derive(Debug)]
pub(crate) struct Ledger {
    seen: HashSet<String>,
    max: Option<u64>,
    closed: bool,
    counts: Admitted,
    last_new: Instant,
}

impl Ledger {
    pub(crate) fn new(max: Option<u64>, now: Instant) -> Self {
        Self {
            seen: HashSet::new(),
            max,
            closed: false,
            counts: Admitted::default(),
            last_new: now,
        }
    }

    /// Decides a delivery of message `id`; `taken_by_filter` is what the filter said.
    pub(crate) fn admit(&mut self, id: &str, taken_by_filter: bool, now: Instant) -> Admission {
        if self.seen.contains(id) {
            self.counts.again += 1;
            return Admission::Again;
        }
        self.seen.insert(id.to_owned());
        if !taken_by_filter {
            self.counts.filtered += 1;
            Admission::Filtered
        } else if self.closed {
            self.counts.not_taken += 1;
            Admission::Closed
        } else if self.max_reached() {
            self.counts.not_taken += 1;
            Admission::OverMax
        } else {
            // Only a message the run takes is news: dead letters that keep arriving but that
            // the filter leaves out (`published_before` the run's start, say) let it end.
            self.last_new = now;
            self.counts.taken += 1;
            Admission::Take
        }
    }

    /// Takes nothing more: a cancel, or the end.
    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    pub(crate) fn max_reached(&self) -> bool {
        self.max.is_some_and(|max| self.counts.taken >= max)
    }

    pub(crate) fn counts(&self) -> Admitted {
        self.counts
    }

    /// Whether the run is over: nothing taken is still unsettled (`unsettled`, as the runtime
    /// counts it), and either the maximum was reached or no message it would take (not seen
    /// before, taken by the filter) arrived for `idle`.
    pub(crate) fn over(&self, unsettled: u64, idle: Duration, now: Instant) -> bool {
        unsettled == 0 && (self.max_reached() || now.duration_since(self.last_new) >= idle)
    }
}

/// Spaces the messages handed out to at most one per `1 / rate`: the first at once, then each
/// at its slot (a slow handler's backlog is not made up for by a burst).
#[derive(Debug)]
pub(crate) struct Pacer {
    interval: Option<Duration>,
    next: Option<Instant>,
}

impl Pacer {
    pub(crate) fn new(rate: Option<f64>) -> Self {
        Self {
            interval: rate.map(|r| Duration::from_secs_f64(1.0 / r)),
            next: None,
        }
    }

    /// When the next message may go, reserving that slot.
    pub(crate) fn slot(&mut self, now: Instant) -> Instant {
        let Some(interval) = self.interval else {
            return now;
        };
        let slot = self.next.map_or(now, |next| next.max(now));
        self.next = Some(slot + interval);
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_empty_filter_takes_everything() {
        let f = Filter::new();
        assert!(f.is_empty());
        assert!(f.matches("1", &HashMap::new(), None));
    }

    #[test]
    fn a_filter_takes_what_every_condition_says() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let f = Filter::new()
            .message_id("a")
            .message_id("b")
            .attribute("kind", "order")
            .published_after(t0)
            .published_before(t0 + Duration::from_secs(10));
        let order = attrs(&[("kind", "order"), ("other", "x")]);
        assert!(f.matches("a", &order, Some(t0)));
        assert!(f.matches("b", &order, Some(t0 + Duration::from_secs(9))));
        assert!(!f.matches("c", &order, Some(t0)), "another id");
        assert!(
            !f.matches("a", &attrs(&[("kind", "refund")]), Some(t0)),
            "another value"
        );
        assert!(!f.matches("a", &HashMap::new(), Some(t0)), "no attribute");
        assert!(
            !f.matches("a", &order, Some(t0 - Duration::from_secs(1))),
            "before after"
        );
        assert!(
            !f.matches("a", &order, Some(t0 + Duration::from_secs(10))),
            "at before"
        );
        assert!(!f.matches("a", &order, None), "no publish time");
    }

    #[test]
    fn options_out_of_range_are_refused_by_name() {
        let bad = |o: ReplayOptions| o.validate().unwrap_err().option;
        assert_eq!(bad(ReplayOptions::new().rate(0.0)), "rate");
        assert_eq!(bad(ReplayOptions::new().rate(f64::NAN)), "rate");
        assert_eq!(bad(ReplayOptions::new().rate(20_000.0)), "rate");
        assert_eq!(bad(ReplayOptions::new().max(0)), "max");
        assert_eq!(
            bad(ReplayOptions::new().idle(Duration::from_millis(10))),
            "idle"
        );
        let t = SystemTime::UNIX_EPOCH;
        assert_eq!(
            bad(ReplayOptions::new().filter(Filter::new().published_after(t).published_before(t))),
            "filter"
        );
        assert!(ReplayOptions::new().rate(0.5).max(3).validate().is_ok());
    }

    #[test]
    fn each_message_is_decided_once_and_the_maximum_holds() {
        let t = Instant::now();
        let mut l = Ledger::new(Some(2), t);
        assert_eq!(l.admit("a", true, t), Admission::Take);
        assert_eq!(l.admit("a", true, t), Admission::Again);
        assert_eq!(l.admit("b", false, t), Admission::Filtered);
        assert_eq!(l.admit("b", true, t), Admission::Again, "decided once");
        assert!(!l.max_reached());
        assert_eq!(l.admit("c", true, t), Admission::Take);
        assert!(l.max_reached());
        assert_eq!(l.admit("d", true, t), Admission::OverMax);
        assert_eq!(
            l.counts(),
            Admitted {
                taken: 2,
                filtered: 1,
                not_taken: 1,
                again: 2
            }
        );
    }

    #[test]
    fn a_closed_ledger_takes_nothing() {
        let t = Instant::now();
        let mut l = Ledger::new(None, t);
        l.close();
        assert_eq!(l.admit("a", true, t), Admission::Closed);
        assert_eq!(l.counts().not_taken, 1);
    }

    #[test]
    fn a_run_is_over_when_settled_and_idle_or_at_its_maximum() {
        let t = Instant::now();
        let idle = Duration::from_secs(5);
        let mut l = Ledger::new(Some(1), t);
        assert!(!l.over(0, idle, t + Duration::from_secs(4)));
        assert!(
            l.over(0, idle, t + Duration::from_secs(5)),
            "idle since start"
        );
        l.admit("a", true, t + Duration::from_secs(4));
        assert!(!l.over(1, idle, t + Duration::from_secs(60)), "one running");
        assert!(
            l.over(0, idle, t + Duration::from_secs(4)),
            "at its maximum, settled"
        );

        let mut l = Ledger::new(None, t);
        l.admit("a", true, t + Duration::from_secs(3));
        l.admit("a", true, t + Duration::from_secs(7));
        assert!(
            l.over(0, idle, t + Duration::from_secs(8)),
            "a redelivery is not news"
        );
        l.admit("b", false, t + Duration::from_secs(7));
        assert!(
            l.over(0, idle, t + Duration::from_secs(8)),
            "nor is one the filter leaves out"
        );
    }

    #[test]
    fn the_pacer_spaces_slots_and_does_not_burst_after_a_pause() {
        let t = Instant::now();
        let mut p = Pacer::new(Some(4.0));
        let q = Duration::from_millis(250);
        assert_eq!(p.slot(t), t);
        assert_eq!(p.slot(t), t + q);
        assert_eq!(p.slot(t), t + 2 * q);
        let later = t + Duration::from_secs(10);
        assert_eq!(p.slot(later), later);
        assert_eq!(p.slot(later), later + q);
        let mut free = Pacer::new(None);
        assert_eq!(free.slot(t), t);
        assert_eq!(free.slot(t), t);
    }
}
