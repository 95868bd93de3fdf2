//! What a subscription reads ahead: messages its pull loops took from the stream while flow
//! control had no room, waiting in order for it. Plain data with pure methods; the pull loops
//! (`supervisor/pull.rs`) share one [`ReadAhead`] and carry out what it decides.
//!
//! Why read ahead at all: Google's client puts a message under lease management (extending its
//! lease) only when it is read, so a message the server sent while every permit was taken would
//! otherwise wait unleased and come again, with an attempt counted, once its ack deadline passed.
//! Pub/Sub's service honours each stream's flow control (each stream asks for its share of the
//! limits, [`share`]), so there little is ever read ahead; the emulator sends everything.
//!
//! The rule, with the breaker closed: what fits under the bound waits; what is read beyond it is
//! given back at once (nacked), so that another consumer can run it now rather than this one
//! later. But a nack spends a delivery attempt: a message on the last attempt its subscription's
//! dead-letter policy allows would be dead-lettered unrun, so it waits under the larger bound of
//! the breaker instead (given back only past that). With the breaker open, a nack would come
//! straight back and spend an attempt each round, the attempts the breaker exists to save:
//! nothing is given back; what is read waits under the breaker's bound
//! ([`Breaker::read_ahead`](crate::Breaker::read_ahead)), and once that is full the pull loops
//! stop reading until there is room or the breaker closes.
//!
//! May use: nothing above `rules`.

/// A bound on what waits: messages and their payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

/// What becomes of a message read while flow control had no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It waits, in order, for room under flow control.
    Wait,
    /// It is given back (nacked) at once: the bound is reached and the breaker is closed.
    GiveBack,
    /// It is given back, and it was on its last delivery attempt: Pub/Sub dead-letters it.
    GiveBackLast,
}

/// What waits now, and the most that ever did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
    pub(crate) peak_messages: usize,
}

/// The read-ahead of one subscription, all its streams together.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    /// While the breaker is closed (or there is none).
    closed: Bound,
    /// While the breaker is open: at least `closed`.
    open: Bound,
    now: Waiting,
}

impl ReadAhead {
    /// The bound `closed` while the breaker is closed, `open` while it is open (raised to
    /// `closed` where it is lower).
    pub(crate) fn new(closed: Bound, open: Bound) -> Self {
        Self {
            closed,
            open: Bound {
                messages: open.messages.max(closed.messages),
                bytes: open.bytes.max(closed.bytes),
            },
            now: Waiting::default(),
        }
    }

    /// Whether a pull loop may read one more message while flow control has no room. With the
    /// breaker closed, always (what is beyond the bound is given back); with it open, while
    /// what waits is under the breaker's bound (by count and bytes: the message read may go past
    /// the bytes by its own size).
    pub(crate) fn may_read(&self, breaker_open: bool) -> bool {
        !breaker_open
            || (self.now.messages < self.open.messages && self.now.bytes < self.open.bytes)
    }

    /// A message of `len` payload bytes was read while flow control had no room, on the last
    /// delivery attempt its dead-letter policy allows or not: it waits (and is counted) or is
    /// given back. A payload larger than the whole bound waits when nothing else does, as flow
    /// control lets one run alone.
    pub(crate) fn admit(
        &mut self,
        len: usize,
        breaker_open: bool,
        last_attempt: bool,
    ) -> Admission {
        let admitted = if self.fits(self.closed, len) || breaker_open {
            Admission::Wait
        } else if !last_attempt {
            Admission::GiveBack
        } else if self.fits(self.open, len) {
            Admission::Wait
        } else {
            Admission::GiveBackLast
        };
        if admitted != Admission::Wait {
            return admitted;
        }
        self.now.messages += 1;
        self.now.bytes = self.now.bytes.saturating_add(len);
        self.now.peak_messages = self.now.peak_messages.max(self.now.messages);
        Admission::Wait
    }

    /// Whether one more message of `len` bytes fits under `bound`.
    fn fits(&self, bound: Bound, len: usize) -> bool {
        self.now.messages < bound.messages
            && (self.now.messages == 0 || self.now.bytes.saturating_add(len) <= bound.bytes)
    }

    /// A waiting message of `len` payload bytes left: it got room, or was given back or released.
    pub(crate) fn left(&mut self, len: usize) {
        self.now.messages = self.now.messages.saturating_sub(1);
        self.now.bytes = self.now.bytes.saturating_sub(len);
    }

    /// What waits now, and the peak.
    pub(crate) fn waiting(&self) -> Waiting {
        self.now
    }
}

/// Stream `stream`'s share of a subscription-wide limit `total` split over `streams` streams:
/// as even as whole numbers allow, adding up to `total` (each at least 1, so a limit below the
/// number of streams adds up to the number of streams).
pub(crate) fn share(total: usize, streams: usize, stream: usize) -> usize {
    let streams = streams.max(1);
    let extra = usize::from(stream < total % streams);
    (total / streams + extra).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSED: Bound = Bound {
        messages: 3,
        bytes: 100,
    };
    const OPEN: Bound = Bound {
        messages: 5,
        bytes: 1000,
    };

    #[test]
    fn with_the_breaker_closed_what_is_beyond_the_bound_is_given_back() {
        let mut ahead = ReadAhead::new(CLOSED, OPEN);
        assert!(ahead.may_read(false));
        for _ in 0..3 {
            assert_eq!(ahead.admit(10, false, false), Admission::Wait);
        }
        assert!(ahead.may_read(false), "read on, to give back");
        assert_eq!(ahead.admit(10, false, false), Admission::GiveBack);
        assert_eq!(
            ahead.waiting(),
            Waiting {
                messages: 3,
                bytes: 30,
                peak_messages: 3
            }
        );
        ahead.left(10);
        assert_eq!(ahead.admit(10, false, false), Admission::Wait);
    }

    #[test]
    fn bytes_bound_too_but_a_payload_larger_than_the_bound_waits_alone() {
        let mut ahead = ReadAhead::new(CLOSED, OPEN);
        assert_eq!(ahead.admit(60, false, false), Admission::Wait);
        assert_eq!(
            ahead.admit(60, false, false),
            Admission::GiveBack,
            "120 > 100"
        );
        ahead.left(60);
        assert_eq!(ahead.admit(5000, false, false), Admission::Wait, "alone");
        assert_eq!(ahead.admit(1, false, false), Admission::GiveBack);
    }

    #[test]
    fn with_the_breaker_open_nothing_is_given_back_and_reading_stops_at_its_bound() {
        let mut ahead = ReadAhead::new(CLOSED, OPEN);
        for _ in 0..5 {
            assert!(ahead.may_read(true));
            assert_eq!(ahead.admit(10, true, false), Admission::Wait);
        }
        assert!(
            !ahead.may_read(true),
            "stops reading at the breaker's bound"
        );
        assert!(ahead.may_read(false), "closed again: reads, and gives back");
        assert_eq!(ahead.admit(10, false, false), Admission::GiveBack);
        assert_eq!(ahead.waiting().peak_messages, 5);
        for _ in 0..5 {
            ahead.left(10);
        }
        assert_eq!(ahead.waiting().messages, 0);
        assert_eq!(ahead.waiting().peak_messages, 5, "the peak stays");
    }

    #[test]
    fn with_the_breaker_open_its_bytes_bound_stops_reading_too() {
        let mut ahead = ReadAhead::new(CLOSED, OPEN);
        assert_eq!(ahead.admit(999, true, false), Admission::Wait);
        assert!(ahead.may_read(true));
        assert_eq!(
            ahead.admit(50, true, false),
            Admission::Wait,
            "past by its own size"
        );
        assert!(!ahead.may_read(true));
    }

    #[test]
    fn a_message_on_its_last_attempt_waits_within_the_breakers_bound_rather_than_be_dead_lettered()
    {
        let mut ahead = ReadAhead::new(CLOSED, OPEN);
        for _ in 0..3 {
            assert_eq!(ahead.admit(10, false, false), Admission::Wait);
        }
        assert_eq!(ahead.admit(10, false, false), Admission::GiveBack);
        assert_eq!(ahead.admit(10, false, true), Admission::Wait, "4 of 5");
        assert_eq!(ahead.admit(10, false, true), Admission::Wait, "5 of 5");
        assert_eq!(ahead.admit(10, false, true), Admission::GiveBackLast);
        assert_eq!(ahead.waiting().messages, 5);
    }

    #[test]
    fn an_open_bound_below_the_closed_one_is_raised_to_it() {
        let mut ahead = ReadAhead::new(
            CLOSED,
            Bound {
                messages: 1,
                bytes: 1,
            },
        );
        for _ in 0..3 {
            assert!(ahead.may_read(true));
            assert_eq!(ahead.admit(10, true, false), Admission::Wait);
        }
        assert!(!ahead.may_read(true));
    }

    #[test]
    fn shares_add_up_to_the_limit_and_differ_by_one_at_most() {
        for (total, streams) in [(1000, 1), (1000, 3), (10, 4), (7, 7), (100, 6)] {
            let shares: Vec<usize> = (0..streams).map(|s| share(total, streams, s)).collect();
            assert_eq!(
                shares.iter().sum::<usize>(),
                total,
                "{total} over {streams}"
            );
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1, "{shares:?}");
        }
        assert_eq!(share(2, 5, 4), 1, "at least one each");
        assert_eq!(share(1000, 3, 0), 334);
        assert_eq!(share(1000, 3, 2), 333);
    }
}
