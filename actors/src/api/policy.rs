//! What becomes of a message whose payload does not decode ([`FailurePolicy`]) or whose handler
//! panics ([`PanicPolicy`]).

use crate::api::delivery::Delivery;
use crate::error::DecodeError;
use crate::rules::outcome::Outcome;
use std::fmt;
use std::sync::Arc;

/// A custom decision for payloads that do not decode.
pub type DecodeFailureFn = dyn Fn(&Delivery, &DecodeError) -> Outcome + Send + Sync;

/// What happens to a message whose payload does not decode into the handler's type.
///
/// Whatever the policy, each such payload is counted in `decode_failures` and logged at warn
/// with the message id and where decoding failed (for example `data error at line 1, column
/// 18`), never the payload nor serde's text, which quotes values (see
/// [`DecodeError`](crate::DecodeError)).
#[derive(Clone, Default)]
pub enum FailurePolicy {
    /// Drop it (ack; dead-lettered on the last attempt): the default.
    #[default]
    Drop,
    /// Retry it (nack): useful while a new payload version rolls out.
    Retry,
    /// Decide per message, on a worker thread. A function that panics is logged and counted as
    /// a panic, and the message is settled by the [`PanicPolicy`]. Build it with
    /// [`FailurePolicy::custom`].
    Custom(Arc<DecodeFailureFn>),
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Drop => f.write_str("Drop"),
            Self::Retry => f.write_str("Retry"),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl FailurePolicy {
    /// A policy that decides per message with `decide`.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::{FailurePolicy, Outcome};
    /// // Retry the first three deliveries (a new payload version may be rolling out), then drop.
    /// let policy = FailurePolicy::custom(|delivery, _error| {
    ///     if delivery.delivery_attempt().unwrap_or(1) < 3 { Outcome::retry() } else { Outcome::drop() }
    /// });
    /// # let _ = policy;
    /// ```
    pub fn custom(
        decide: impl Fn(&Delivery, &DecodeError) -> Outcome + Send + Sync + 'static,
    ) -> Self {
        Self::Custom(Arc::new(decide))
    }

    pub(crate) fn outcome(&self, delivery: &Delivery, error: &DecodeError) -> Outcome {
        match self {
            Self::Drop => Outcome::drop(),
            Self::Retry => Outcome::retry(),
            Self::Custom(f) => f(delivery, error),
        }
    }
}

/// What happens to a message whose handler panics. The worker keeps serving either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PanicPolicy {
    /// Retry it (nack), so it is redelivered.
    #[default]
    Retry,
    /// Drop it (ack; dead-lettered on the last attempt).
    Drop,
}

impl PanicPolicy {
    pub(crate) fn outcome(self) -> Outcome {
        match self {
            Self::Retry => Outcome::retry(),
            Self::Drop => Outcome::drop(),
        }
    }
}
