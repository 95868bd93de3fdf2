//! A job's place in the worker pool ([`Ticket`]), and what a job keeps to run again and gives
//! back unsettled when a breaker is set ([`Rerun`], [`Returned`]). Plain data: the worker fills
//! them, the pool reads them. May use `api` (the delivery), `lease` (the right) and `rules`.

use crate::api::delivery::Delivery;
use crate::lease::settle_right::SettleRight;
use crate::rules::breaker::Verdict;
use crate::rules::outcome::Outcome;
use bytes::Bytes;
use std::sync::Arc;

/// A job's place in the worker pool: its ordering key and progress key. A worker gives it back
/// when the job ends (or is lost with the worker), so the pool frees the place and starts what
/// waited for it. The message's outcome went to the lease actor, but with a breaker: the ticket
/// says how the run ended, and a failed job comes back in it unsettled.
#[derive(Debug)]
pub(crate) struct Ticket {
    /// The message's ordering key.
    pub(crate) key: String,
    /// The key its progress is kept under: its message id, or its dedupe key (an attribute's
    /// value: never logged; the job's delivery has the message id).
    pub(crate) id: Arc<str>,
    /// How the run ended, for the breaker (neutral without one).
    pub(crate) verdict: Verdict,
    /// With a breaker: the failed job, its message not settled yet.
    pub(crate) back: Option<Box<Returned>>,
}

impl Ticket {
    /// The place of the message kept under `id` with ordering key `key`.
    pub(crate) fn new(key: String, id: Arc<str>) -> Self {
        Self {
            key,
            id,
            verdict: Verdict::Neutral,
            back: None,
        }
    }
}

/// A failed job given back to the pool unsettled (a breaker is set): what runs it again, its
/// right, and the outcome that settles it if the pool does not hold it. Its `Debug` shows no
/// payload.
pub(crate) struct Returned {
    pub(crate) delivery: Delivery,
    pub(crate) data: Bytes,
    pub(crate) span: tracing::Span,
    pub(crate) right: SettleRight,
    pub(crate) outcome: Outcome,
}

/// What a job keeps to run again (a breaker is set): the handler takes the originals.
pub(crate) struct Rerun {
    pub(crate) delivery: Delivery,
    pub(crate) data: Bytes,
}

impl Rerun {
    /// A copy of the job's delivery and payload, when failures are held (a breaker is set).
    pub(crate) fn keep(holds_failures: bool, delivery: &Delivery, data: &Bytes) -> Option<Self> {
        holds_failures.then(|| Self {
            delivery: delivery.clone(),
            data: data.clone(),
        })
    }
}

impl std::fmt::Debug for Returned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Returned")
            .field("message_id", &self.delivery.message_id)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}
