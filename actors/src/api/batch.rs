//! Batch handlers' side of the API: the [`Batch`] a handler gets and the [`BatchOutcome`] it
//! returns, one outcome for each message.
//!
//! A batch registration (`Registration::json_batch`, `raw_batch`, `blocking_json_batch`,
//! `blocking_raw_batch`) hands its handler several messages at once, each with its own
//! [`Delivery`], and each is settled with its own outcome through the same rules as a single
//! message: the dead-letter-aware `drop()`, `retry_after`'s check against the lease,
//! exactly-once confirmations, the progress store. What forms a batch (at most
//! `max_batch_messages`, at most `max_batch_bytes`, waiting at most `max_batch_wait` after its
//! first message) is the registration's; see `Registration::json_batch`.

use crate::api::delivery::Delivery;
use crate::error::RetryAfterError;
use crate::rules::outcome::{Handled, Note, Outcome};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One message of a [`Batch`]: its decoded payload and its delivery.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchItem<T> {
    /// The payload, decoded.
    pub payload: T,
    /// The delivery: the message id, its attributes, and the outcome constructors.
    pub delivery: Delivery,
}

/// The messages a batch handler gets in one call, in the order they arrived (messages that share
/// an ordering key are never in two batches running at once, and come in publish order).
///
/// Payloads that did not decode are not in it: each went to the registration's failure policy
/// on its own. A batch is never empty.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::{Batch, BatchOutcome};
///
/// async fn save(batch: Batch<u64>) -> BatchOutcome {
///     let mut outcomes = BatchOutcome::new();
///     for item in &batch {
///         let outcome = if item.payload > 0 { item.delivery.ack() } else { item.delivery.drop() };
///         outcomes.set(&item.delivery, outcome);
///     }
///     outcomes
/// }
/// ```
#[derive(Debug)]
pub struct Batch<T> {
    items: Vec<BatchItem<T>>,
}

impl<T> Batch<T> {
    pub(crate) fn new(items: Vec<BatchItem<T>>) -> Self {
        Self { items }
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is none (never, for a batch a handler gets).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The messages.
    pub fn items(&self) -> &[BatchItem<T>] {
        &self.items
    }

    /// The messages, by value.
    pub fn into_items(self) -> Vec<BatchItem<T>> {
        self.items
    }

    /// The messages' payloads.
    pub fn payloads(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|item| &item.payload)
    }

    /// The messages' deliveries.
    pub fn deliveries(&self) -> impl Iterator<Item = &Delivery> {
        self.items.iter().map(|item| &item.delivery)
    }

    /// Iterates over the messages.
    pub fn iter(&self) -> std::slice::Iter<'_, BatchItem<T>> {
        self.items.iter()
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = BatchItem<T>;
    type IntoIter = std::vec::IntoIter<BatchItem<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Batch<T> {
    type Item = &'a BatchItem<T>;
    type IntoIter = std::slice::Iter<'a, BatchItem<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

/// What a batch handler settles each of its messages with.
///
/// [`ack`](Self::ack), [`retry`](Self::retry), [`retry_after`](Self::retry_after) and
/// [`drop`](Self::drop) give one message its outcome; [`set`](Self::set) gives it any outcome its
/// delivery built (`settle_later()`'s too); [`all`](Self::all) starts from one
/// outcome for every message not set on its own. A message left without an outcome (not set,
/// and no `all`) is **retried**, and logged at warn with its message id and counted among the
/// recent failures (`FailureKind::MissingOutcome`): never silently acked. Setting a message
/// twice keeps the last; an outcome for a message that is not in the batch is ignored (logged).
///
/// A `retry_after(d)` outcome was checked against the lease of the delivery that built it. Given
/// to another message (through `all`, or `set` with another delivery's outcome) whose lease has
/// less than `d` left, it retries that message at once (nack, counted in `retried`, not in
/// `held`), as any hold that no longer fits its lease does.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::{Batch, BatchOutcome, Outcome};
///
/// async fn save(batch: Batch<String>) -> BatchOutcome {
///     // Every message acked, but those the database refused: retried.
///     let mut outcomes = BatchOutcome::all(Outcome::ack());
///     for item in batch.iter().filter(|item| item.payload.is_empty()) {
///         outcomes.retry(&item.delivery);
///     }
///     outcomes
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "a batch's outcomes settle its messages only when the handler returns them"]
pub struct BatchOutcome {
    each: Vec<(Arc<str>, Outcome)>,
    rest: Option<Outcome>,
}

impl BatchOutcome {
    /// No outcome yet: set each message's.
    pub fn new() -> Self {
        Self::default()
    }

    /// `outcome` for every message not [`set`](Self::set) on its own.
    pub fn all(outcome: Outcome) -> Self {
        Self {
            each: Vec::new(),
            rest: Some(outcome),
        }
    }

    /// Settles the message of `delivery` with `outcome` (replacing an earlier one).
    pub fn set(&mut self, delivery: &Delivery, outcome: Outcome) -> &mut Self {
        self.each.push((delivery.message_id.clone(), outcome));
        self
    }

    /// Acks the message of `delivery`: `set(delivery, delivery.ack())`, naming it once.
    pub fn ack(&mut self, delivery: &Delivery) -> &mut Self {
        self.set(delivery, delivery.ack())
    }

    /// Retries the message of `delivery`: `set(delivery, delivery.retry())`.
    pub fn retry(&mut self, delivery: &Delivery) -> &mut Self {
        self.set(delivery, delivery.retry())
    }

    /// Drops the message of `delivery` (dead-lettered on its last attempt):
    /// `set(delivery, delivery.drop())`.
    pub fn drop(&mut self, delivery: &Delivery) -> &mut Self {
        self.set(delivery, delivery.drop())
    }

    /// Holds the message of `delivery` for `delay`, then retries it:
    /// `set(delivery, delivery.retry_after(delay)?)`. Refused, with nothing set, when `delay`
    /// is longer than the lease that remains (match it rather than `?` it in a batch handler:
    /// an `Err` from the handler retries every message of the batch).
    pub fn retry_after(
        &mut self,
        delivery: &Delivery,
        delay: Duration,
    ) -> Result<&mut Self, RetryAfterError> {
        Ok(self.set(delivery, delivery.retry_after(delay)?))
    }

    /// The outcome the message with `message_id` would be settled with: its own, or the one for
    /// all; `None` when it has none (it would be retried).
    pub fn outcome_of(&self, message_id: &str) -> Option<Outcome> {
        self.each
            .iter()
            .rev()
            .find(|(id, _)| &**id == message_id)
            .map(|(_, outcome)| *outcome)
            .or(self.rest)
    }

    /// What the worker settles: each outcome with what it counts.
    pub(crate) fn handled(self, note: Note) -> BatchHandled {
        BatchHandled {
            each: self
                .each
                .into_iter()
                .map(|(id, outcome)| (id, Handled { outcome, note }))
                .collect(),
            rest: self.rest.map(|outcome| Handled { outcome, note }),
        }
    }
}

/// What a batch handler settled its messages with, and what the worker counts for each: each
/// message's own, and one for every message without its own (`None`: such a message is
/// retried, as missing).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHandled {
    pub(crate) each: Vec<(Arc<str>, Handled)>,
    pub(crate) rest: Option<Handled>,
}

impl BatchHandled {
    /// Each message's outcome, in the order of `ids`: the last one set for it, else the one for
    /// all, else none (the message is then retried as missing); and how many of the outcomes
    /// set for single messages named none of `ids` (set for messages not in the batch).
    pub(crate) fn per_message<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> (Vec<Option<Handled>>, usize) {
        let mut own: HashMap<&str, Handled> = HashMap::with_capacity(self.each.len());
        for (id, h) in &self.each {
            own.insert(id, *h);
        }
        let mut found = 0;
        let resolved = ids
            .into_iter()
            .map(|id| own.get(id).copied().inspect(|_| found += 1).or(self.rest))
            .collect();
        (resolved, own.len() - found)
    }
}

/// What a batch handler may return: a [`BatchOutcome`], or a `Result` whose error retries every
/// message of the batch.
pub trait IntoBatchOutcome {
    /// Converts into the outcomes that settle the batch's messages.
    fn into_batch_outcome(self) -> BatchOutcome;

    /// Converts for one batch, so that a log line can name it, and says whether the handler
    /// failed. Implement [`into_batch_outcome`](Self::into_batch_outcome); this one calls it.
    #[doc(hidden)]
    fn into_batch_handled(self, _subscription: &str, _messages: usize) -> BatchHandled
    where
        Self: Sized,
    {
        self.into_batch_outcome().handled(Note::Ran)
    }
}

impl IntoBatchOutcome for BatchOutcome {
    fn into_batch_outcome(self) -> BatchOutcome {
        self
    }
}

impl<E: fmt::Display> IntoBatchOutcome for Result<BatchOutcome, E> {
    /// An error retries every message of the batch (nack); the error is logged at warn.
    fn into_batch_outcome(self) -> BatchOutcome {
        self.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "batch handler returned an error; every message is retried");
            BatchOutcome::all(Outcome::retry())
        })
    }

    fn into_batch_handled(self, subscription: &str, messages: usize) -> BatchHandled {
        match self {
            Ok(outcomes) => outcomes.handled(Note::Ran),
            Err(e) => {
                tracing::warn!(%subscription, messages, error = %e,
                    "batch handler returned an error; every message of the batch is retried");
                BatchOutcome::all(Outcome::retry()).handled(Note::HandlerError)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::delivery;

    #[test]
    fn the_last_outcome_set_wins_and_all_covers_the_rest() {
        let (a, b) = (
            delivery().message_id("a").build(),
            delivery().message_id("b").build(),
        );
        let mut outcomes = BatchOutcome::new();
        outcomes.set(&a, Outcome::retry()).set(&a, Outcome::ack());
        assert_eq!(outcomes.outcome_of("a"), Some(Outcome::ack()));
        assert_eq!(outcomes.outcome_of("b"), None, "left without one: retried");
        let mut all = BatchOutcome::all(Outcome::drop());
        all.set(&b, Outcome::retry());
        assert_eq!(all.outcome_of("a"), Some(Outcome::drop()));
        assert_eq!(all.outcome_of("b"), Some(Outcome::retry()));
    }

    #[test]
    fn the_shorthands_name_the_delivery_once() {
        let lease = std::time::Duration::from_secs(60);
        let d: Vec<Delivery> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| delivery().message_id(*id).remaining_lease(lease).build())
            .collect();
        let mut outcomes = BatchOutcome::new();
        outcomes.ack(&d[0]).retry(&d[1]).drop(&d[2]);
        let held = outcomes.retry_after(&d[3], Duration::from_secs(5)).is_ok();
        assert!(held, "a hold within the lease is accepted");
        assert_eq!(outcomes.outcome_of("a"), Some(d[0].ack()));
        assert_eq!(outcomes.outcome_of("b"), Some(d[1].retry()));
        assert_eq!(outcomes.outcome_of("c"), Some(d[2].drop()));
        assert_eq!(
            outcomes.outcome_of("d"),
            Some(d[3].retry_after(Duration::from_secs(5)).unwrap())
        );
        let mut refused = BatchOutcome::new();
        assert!(refused.retry_after(&d[3], lease * 2).is_err());
        assert_eq!(refused.outcome_of("d"), None, "a refused hold sets nothing");
    }

    #[test]
    fn an_error_retries_every_message() {
        let failed: Result<BatchOutcome, String> = Err("db down".into());
        let handled = failed.into_batch_handled("projects/p/subscriptions/s", 3);
        assert!(handled.each.is_empty());
        assert_eq!(
            handled.rest,
            Some(Handled {
                outcome: Outcome::retry(),
                note: Note::HandlerError
            })
        );
    }
}
