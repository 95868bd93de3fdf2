//! What a handler gets with each message: the delivery's details and the outcome constructors,
//! and the [`Settler`] that settles a message from elsewhere.

use crate::error::RetryAfterError;
use crate::lease::actor::{LeaseRef, SettleTo};
use crate::rules::lease_state::LeaseClock;
use crate::rules::outcome::Outcome;
use crate::status::stats::Stats;
use crate::store::progress::{ProgressStore, record_guarded};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// What every delivery of one subscription shares.
pub(crate) struct DeliveryContext {
    /// The subscription's name.
    pub(crate) subscription: Arc<str>,
    /// Where outcomes settled later are recorded. Weak: a delivery or a settler kept after the
    /// subscription stopped must not keep the store open.
    pub(crate) progress: Option<std::sync::Weak<dyn ProgressStore>>,
    /// The subscription's counters.
    pub(crate) stats: Arc<Stats>,
    /// The attribute the registration dedupes on ([`Registration::dedupe_on`](crate::Registration::dedupe_on)).
    pub(crate) dedupe_on: Option<Arc<str>>,
}

/// One delivery of a message: its metadata, and the constructors of the [`Outcome`] that settles
/// it.
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Delivery, Outcome, RetryAfterError};
/// # use std::time::Duration;
/// async fn handle(order: String, delivery: Delivery) -> Result<Outcome, RetryAfterError> {
///     if order.is_empty() {
///         return Ok(delivery.drop());
///     }
///     // Not ready yet: come back in a minute, keeping the lease meanwhile.
///     delivery.retry_after(Duration::from_secs(60))
/// }
/// ```
///
/// Pub/Sub may deliver a message more than once (always on at-least-once subscriptions, and
/// after a failed ack on exactly-once ones): use [`message_id`](Self::message_id) to make the
/// handler idempotent.
#[derive(Clone)]
pub struct Delivery {
    pub(crate) shared: Arc<DeliveryContext>,
    pub(crate) message_id: Arc<str>,
    pub(crate) attributes: HashMap<String, String>,
    pub(crate) ordering_key: String,
    pub(crate) publish_time: Option<SystemTime>,
    pub(crate) delivery_attempt: Option<u32>,
    pub(crate) clock: LeaseClock,
    /// The key its progress is kept under when the registration dedupes on an attribute it
    /// carries (`rules/dedupe.rs`); `None`: its message id. Holds an attribute's value: never
    /// logged.
    pub(crate) key: Option<Arc<str>>,
    /// Weak, and only for `settle_later` (the job's settlement right is what settles the
    /// message otherwise); a delivery copies it for free. `None` for a delivery built by hand for
    /// a test: its settler settles nothing.
    pub(crate) lease: Option<LeaseRef>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("subscription", &self.shared.subscription)
            .field("message_id", &self.message_id)
            .field("ordering_key", &self.ordering_key)
            .field("delivery_attempt", &self.delivery_attempt)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// The subscription's name and the message id, shared (for log lines).
    pub(crate) fn names(&self) -> (Arc<str>, Arc<str>) {
        (self.shared.subscription.clone(), self.message_id.clone())
    }

    /// The key the message's progress is kept under: its dedupe key `attribute=value` when its
    /// registration dedupes on an attribute
    /// ([`Registration::dedupe_on`](crate::Registration::dedupe_on)) and the message carries
    /// it, else its message id. In a batch handler's transaction, what names the message an
    /// outbox message is published for
    /// ([`OutboxMessage::for_message`](crate::store::OutboxMessage::for_message)). It holds an
    /// attribute's value: do not log it.
    pub fn progress_key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.message_id)
    }

    /// [`progress_key`](Self::progress_key), shared.
    pub(crate) fn progress_key_shared(&self) -> Arc<str> {
        self.key.as_ref().unwrap_or(&self.message_id).clone()
    }

    /// The value of the attribute the registration dedupes on
    /// ([`Registration::dedupe_on`](crate::Registration::dedupe_on)), when it does and the
    /// message carries it: what the message's progress is kept under instead of its message id.
    pub fn dedupe_key(&self) -> Option<&str> {
        self.key.as_ref()?;
        let attribute = self.shared.dedupe_on.as_deref()?;
        self.attributes.get(attribute).map(String::as_str)
    }

    /// The subscription the message came from.
    pub fn subscription(&self) -> &str {
        &self.shared.subscription
    }
    /// The message id Pub/Sub assigned; the same on every redelivery.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }
    /// The message's attributes.
    pub fn attributes(&self) -> &HashMap<String, String> {
        &self.attributes
    }
    /// The ordering key, empty when none.
    pub fn ordering_key(&self) -> &str {
        &self.ordering_key
    }
    /// When Pub/Sub accepted the message.
    pub fn publish_time(&self) -> Option<SystemTime> {
        self.publish_time
    }
    /// The delivery attempt (1 on the first delivery). Pub/Sub reports it only on subscriptions
    /// with a dead-letter policy.
    pub fn delivery_attempt(&self) -> Option<u32> {
        self.delivery_attempt
    }
    /// What remains of the lease budget (`max_lease` from receipt).
    pub fn remaining_lease(&self) -> Duration {
        self.clock.remaining(Instant::now())
    }

    /// Acknowledge: removed from the subscription.
    pub fn ack(&self) -> Outcome {
        Outcome::ack()
    }
    /// Nack: redelivered after the subscription's retry backoff, or dead-lettered by Pub/Sub.
    ///
    /// In a batch registration, the redelivery waits in a forming batch like any message: all of
    /// [`max_batch_wait`](crate::Registration::max_batch_wait) when it comes alone.
    pub fn retry(&self) -> Outcome {
        Outcome::retry()
    }
    /// Hold the lease for `delay` (the message still counts as outstanding), then nack.
    ///
    /// Refused with [`RetryAfterError::DelayBeyondLease`] when `delay` is longer than the lease that
    /// remains. If the process dies during the wait, the lease lapses and Pub/Sub redelivers: the
    /// delay is lost, not the message.
    pub fn retry_after(&self, delay: Duration) -> Result<Outcome, RetryAfterError> {
        retry_after(&self.clock, delay)
    }
    /// The dependency this handler needs (its database, an API) is down: with a
    /// [`Breaker`](crate::Breaker) on the registration, it trips at once, and this message is
    /// held in the process (its lease kept, no delivery attempt spent) and run again once a try
    /// after the cooldown succeeds. Without a breaker, the same as [`retry`](Self::retry).
    pub fn unavailable(&self) -> Outcome {
        Outcome::unavailable()
    }
    /// Acknowledge so it is never delivered again, except on the last attempt the dead-letter
    /// limit allows: there it is nacked, so Pub/Sub moves it to the dead-letter topic.
    pub fn drop(&self) -> Outcome {
        Outcome::drop()
    }

    /// Hands the settling of this message to someone else, such as another actor.
    ///
    /// Return the first element from the handler (it settles nothing) and send the [`Settler`]
    /// where the work goes; the lease is kept (and extended) until the settler is used. A settler
    /// dropped unused retries the message.
    pub fn settle_later(&self) -> (Outcome, Settler) {
        (
            Outcome::deferred(),
            Settler {
                // None for a delivery built by hand, or once the lease actor has ended; the
                // lease actor ignores the outcome of a message it settled already.
                lease: self.lease.as_ref().and_then(LeaseRef::settle_to),
                clock: self.clock,
                message_id: self.message_id.clone(),
                key: self.key.clone(),
                shared: self.shared.clone(),
            },
        )
    }
}

pub(crate) fn retry_after(clock: &LeaseClock, delay: Duration) -> Result<Outcome, RetryAfterError> {
    clock.check_hold(delay, Instant::now())?;
    Ok(Outcome::retry_after_unchecked(delay))
}

/// Settles one message from anywhere (another actor, another thread).
///
/// Obtained from [`Delivery::settle_later`]. Each method consumes the settler, so a message is
/// settled once; there is no way to hand it the deferred outcome `settle_later` returned. An
/// `ack()` or `drop()` is recorded in the progress store before it is sent, like an outcome a
/// handler returns, so a redelivery does not run the handler again. Dropping a settler without
/// settling nacks the message (it is retried), so a lost settler never strands a lease.
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Delivery, Outcome};
/// # use std::time::Duration;
/// async fn handle(_: String, delivery: Delivery) -> Outcome {
///     let (later, settler) = delivery.settle_later();
///     std::thread::spawn(move || {
///         // ... the work, elsewhere ...
///         if let Err(refused) = settler.retry_after(Duration::from_secs(30)) {
///             // Longer than the lease that remains: settle another way.
///             refused.into_settler().retry();
///         }
///     });
///     later
/// }
/// ```
#[must_use = "a settler dropped unused retries the message"]
pub struct Settler {
    lease: Option<SettleTo>,
    clock: LeaseClock,
    message_id: Arc<str>,
    /// The key its progress is kept under, when not its id: never logged.
    key: Option<Arc<str>>,
    shared: Arc<DeliveryContext>,
}

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settler")
            .field("message_id", &self.message_id)
            .field("settled", &self.lease.is_none())
            .finish_non_exhaustive()
    }
}

/// A [`Settler::retry_after`] that was refused: the delay is longer than the lease that remains.
///
/// The message is not settled yet: [`into_settler`](Self::into_settler) gives the settler back to
/// settle another way. Dropping this (as `?` does) drops the settler, which retries the message.
#[derive(Debug, thiserror::Error)]
#[error("the settler's retry_after was refused")]
pub struct RetryAfterRefused {
    #[source]
    error: RetryAfterError,
    /// Boxed: a `Result` whose error is this stays small.
    settler: Box<Settler>,
}

impl RetryAfterRefused {
    /// Why it was refused.
    pub fn error(&self) -> &RetryAfterError {
        &self.error
    }
    /// The settler, to settle the message another way.
    pub fn into_settler(self) -> Settler {
        *self.settler
    }
}

impl Settler {
    /// Acknowledge the message.
    pub fn ack(self) {
        self.finish(Outcome::ack());
    }
    /// Nack the message: redelivered after the subscription's retry backoff.
    pub fn retry(self) {
        self.finish(Outcome::retry());
    }
    /// Drop the message: acked, or nacked for the dead-letter topic on the last attempt.
    pub fn drop(self) {
        self.finish(Outcome::drop());
    }
    /// Hold the lease for `delay`, then nack. Refused, with the settler given back, when `delay`
    /// is longer than the lease that remains.
    pub fn retry_after(self, delay: Duration) -> Result<(), RetryAfterRefused> {
        match retry_after(&self.clock, delay) {
            Ok(outcome) => {
                self.finish(outcome);
                Ok(())
            }
            Err(error) => Err(RetryAfterRefused {
                error,
                settler: Box::new(self),
            }),
        }
    }
    /// What remains of the lease budget.
    pub fn remaining_lease(&self) -> Duration {
        self.clock.remaining(Instant::now())
    }

    fn finish(mut self, outcome: Outcome) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let store = self
            .shared
            .progress
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        let (Some(store), Some(completed)) = (store, outcome.completed()) else {
            lease.send(outcome);
            return;
        };
        // Recorded before it is sent, like a handler's outcome. The record runs where the settler
        // is used: on the caller's runtime, or here when there is none.
        let pending = PendingSettle(Some(lease));
        let (id, key) = (self.message_id.clone(), self.key.clone());
        let subscription = self.shared.subscription.clone();
        let stats = self.shared.stats.clone();
        let recorded = async move {
            record_guarded(
                &*store,
                &subscription,
                key.as_deref().unwrap_or(&id),
                &id,
                completed,
                &stats,
                &tracing::Span::current(),
            )
            .await;
            pending.settle(outcome);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(recorded)),
            Err(_) => futures::executor::block_on(recorded),
        }
    }
}

/// An outcome on its way to the lease once its record is kept; dropped on the way (its runtime
/// shut down), it retries the message.
struct PendingSettle(Option<SettleTo>);

impl PendingSettle {
    fn settle(mut self, outcome: Outcome) {
        if let Some(lease) = self.0.take() {
            lease.send(outcome);
        }
    }
}

impl Drop for PendingSettle {
    fn drop(&mut self) {
        if let Some(lease) = self.0.take() {
            lease.send(Outcome::retry());
        }
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            tracing::warn!(subscription = %self.shared.subscription, message_id = %self.message_id,
                "a settler was dropped without an outcome; the message is retried");
            lease.send(Outcome::retry());
        }
    }
}

/// The subscription some deliveries (a batch's) came from, for log lines; empty for none.
pub(crate) fn subscription_of<'a>(mut deliveries: impl Iterator<Item = &'a Delivery>) -> Arc<str> {
    deliveries
        .next()
        .map_or_else(|| Arc::from(""), |d| d.shared.subscription.clone())
}
