//! Whether a push may come in: the endpoint's phase (not started, open, closed by a stop) and
//! its flow control, counted from the moment a push is admitted to the moment its message is
//! settled.
//!
//! Owns [`Gate`], a plain struct of pure decisions, and [`Refusal`]. Uses nothing else of this
//! crate.

/// Why a push was not admitted. It is answered at once with [`status`](Self::status) and runs
/// nothing; Pub/Sub counts it a nack, redelivers the message later and lowers its push rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The subscription has not opened its stream yet (it is starting): answered 503.
    #[error("the subscription is not started yet")]
    NotStarted,
    /// The subscription is stopping or stopped (a drain): answered 503.
    #[error("the subscription is stopping")]
    Stopping,
    /// The registration's breaker is open (its handler's dependency is down): answered 503, and
    /// Pub/Sub pushes more slowly until it closes.
    #[error("the breaker is open")]
    BreakerOpen,
    /// `max_outstanding_messages` or `max_outstanding_bytes` are in flight: answered 429.
    #[error("flow control: {messages} messages and {bytes} bytes in flight")]
    Full {
        /// Messages in flight when the push came.
        messages: usize,
        /// Payload bytes in flight when the push came.
        bytes: usize,
    },
}

impl Refusal {
    /// The HTTP status the push is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::NotStarted | Refusal::Stopping | Refusal::BreakerOpen => 503,
            Refusal::Full { .. } => 429,
        }
    }

    /// A short name for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NotStarted => "not_started",
            Refusal::Stopping => "stopping",
            Refusal::BreakerOpen => "breaker_open",
            Refusal::Full { .. } => "flow_control",
        }
    }
}

/// Where the endpoint is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotStarted,
    Open,
    Closed,
}

/// The endpoint's admission state. Every admitted push is released exactly once, when its
/// message is settled (or its handle dropped), whatever happened to the HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gate {
    phase: Phase,
    /// The breaker is open: pushes are refused until it closes.
    paused: bool,
    max_messages: usize,
    max_bytes: usize,
    messages: usize,
    bytes: usize,
}

impl Gate {
    /// Closed to pushes until [`open`](Self::open).
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::NotStarted,
            paused: false,
            max_messages: 0,
            max_bytes: 0,
            messages: 0,
            bytes: 0,
        }
    }

    /// The subscription opened its stream with these limits: pushes come in. A gate once
    /// closed stays closed.
    pub(crate) fn open(&mut self, max_messages: usize, max_bytes: usize) {
        if self.phase == Phase::NotStarted {
            self.phase = Phase::Open;
        }
        self.max_messages = max_messages.max(1);
        self.max_bytes = max_bytes.max(1);
    }

    /// The breaker opened (`true`) or closed.
    pub(crate) fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// A stop began: no push comes in any more.
    pub(crate) fn close(&mut self) {
        self.phase = Phase::Closed;
    }

    /// Whether a push may come in at all now (the subscription running), before its body is
    /// read; [`admit`](Self::admit) decides once its size is known.
    pub(crate) fn admit_check(&self) -> Result<(), Refusal> {
        match self.phase {
            Phase::NotStarted => Err(Refusal::NotStarted),
            Phase::Closed => Err(Refusal::Stopping),
            Phase::Open if self.paused => Err(Refusal::BreakerOpen),
            Phase::Open => Ok(()),
        }
    }

    /// Admits a push of `len` payload bytes, or says why not. A push alone is admitted whatever
    /// its size, as a pull stream would deliver it, so that no message is refused for ever.
    pub(crate) fn admit(&mut self, len: usize) -> Result<(), Refusal> {
        self.admit_check()?;
        let full = self.messages >= self.max_messages
            || (self.messages > 0 && self.bytes.saturating_add(len) > self.max_bytes);
        if full {
            return Err(Refusal::Full {
                messages: self.messages,
                bytes: self.bytes,
            });
        }
        self.messages += 1;
        self.bytes += len;
        Ok(())
    }

    /// An admitted push of `len` bytes was settled.
    pub(crate) fn release(&mut self, len: usize) {
        debug_assert!(self.messages > 0, "released more pushes than were admitted");
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(len);
    }

    /// Pushes admitted and not settled.
    pub(crate) fn in_flight(&self) -> usize {
        self.messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_comes_in_before_the_stream_opens_or_after_a_stop() {
        let mut gate = Gate::new();
        assert_eq!(gate.admit(1), Err(Refusal::NotStarted));
        gate.open(10, 100);
        assert_eq!(gate.admit(1), Ok(()));
        gate.close();
        assert_eq!(gate.admit(1), Err(Refusal::Stopping));
        gate.open(10, 100);
        assert_eq!(
            gate.admit(1),
            Err(Refusal::Stopping),
            "a closed gate stays closed"
        );
        assert_eq!(
            gate.in_flight(),
            1,
            "what was admitted is still owed its release"
        );
    }

    #[test]
    fn an_open_breaker_refuses_pushes_with_503_until_it_closes() {
        let mut gate = Gate::new();
        gate.open(10, 100);
        gate.pause(true);
        let refused = gate.admit(1).unwrap_err();
        assert_eq!((refused, refused.status()), (Refusal::BreakerOpen, 503));
        assert_eq!(refused.reason(), "breaker_open");
        gate.pause(false);
        assert_eq!(gate.admit(1), Ok(()));
        gate.pause(true);
        gate.close();
        assert_eq!(gate.admit(1), Err(Refusal::Stopping), "a stop wins");
    }

    #[test]
    fn at_the_message_limit_a_push_is_refused_until_one_is_settled() {
        let mut gate = Gate::new();
        gate.open(2, 1_000);
        assert_eq!(gate.admit(10), Ok(()));
        assert_eq!(gate.admit(10), Ok(()));
        assert_eq!(
            gate.admit(10),
            Err(Refusal::Full {
                messages: 2,
                bytes: 20
            })
        );
        gate.release(10);
        assert_eq!(gate.admit(10), Ok(()));
        assert_eq!(
            Refusal::Full {
                messages: 0,
                bytes: 0
            }
            .status(),
            429
        );
    }

    #[test]
    fn the_byte_limit_refuses_what_would_pass_it_but_never_a_push_alone() {
        let mut gate = Gate::new();
        gate.open(100, 50);
        assert_eq!(
            gate.admit(500),
            Ok(()),
            "alone, a push larger than the limit runs"
        );
        assert!(matches!(gate.admit(1), Err(Refusal::Full { .. })));
        gate.release(500);
        assert_eq!(gate.admit(30), Ok(()));
        assert!(matches!(gate.admit(30), Err(Refusal::Full { .. })));
        assert_eq!(gate.admit(20), Ok(()), "exactly at the limit is within it");
    }
}
