//! What a handler gets with each message: the delivery's details and the outcome constructors.

use crate::error::PubSubError;
use crate::lease::{LeaseActor, Settle};
use crate::lease_state::LeaseClock;
use crate::outcome::Outcome;
use actix::{Addr, WeakAddr};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// One delivery of a message: its metadata, and the constructors of the [`Outcome`] that settles
/// it.
///
/// ```no_run
/// # use leasehold_actors::{Delivery, Outcome, PubSubError};
/// # use std::time::Duration;
/// async fn handle(order: String, delivery: Delivery) -> Result<Outcome, PubSubError> {
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
#[derive(Debug, Clone)]
pub struct Delivery {
    pub(crate) subscription: Arc<str>,
    pub(crate) message_id: Arc<str>,
    pub(crate) attributes: HashMap<String, String>,
    pub(crate) ordering_key: String,
    pub(crate) publish_time: Option<SystemTime>,
    pub(crate) delivery_attempt: Option<u32>,
    pub(crate) clock: LeaseClock,
    /// Weak: the worker pool holds the address that settles; a delivery copies it for free.
    pub(crate) lease: WeakAddr<LeaseActor>,
}

impl Delivery {
    /// The subscription the message came from.
    pub fn subscription(&self) -> &str {
        &self.subscription
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
    pub fn retry(&self) -> Outcome {
        Outcome::retry()
    }
    /// Hold the lease for `delay` (the message still counts as outstanding), then nack.
    ///
    /// Refused with [`PubSubError::DelayBeyondLease`] when `delay` is longer than the lease that
    /// remains. If the process dies during the wait, the lease lapses and Pub/Sub redelivers: the
    /// delay is lost, not the message.
    pub fn retry_after(&self, delay: Duration) -> Result<Outcome, PubSubError> {
        retry_after(&self.clock, delay)
    }
    /// Acknowledge so it is never delivered again, except on the last attempt the dead-letter
    /// limit allows: there it is nacked, so Pub/Sub moves it to the dead-letter topic.
    pub fn drop(&self) -> Outcome {
        Outcome::drop()
    }

    /// Hands the settling of this message to someone else, such as another actor.
    ///
    /// Return the first element from the handler and send the [`Settler`] where the work goes;
    /// the lease is kept (and extended) until the settler is used. A settler dropped unused
    /// retries the message.
    pub fn settle_later(&self) -> (Outcome, Settler) {
        (
            Outcome::deferred(),
            Settler {
                // None when the message was settled already: the settler then does nothing.
                lease: self.lease.upgrade(),
                clock: self.clock,
            },
        )
    }
}

fn retry_after(clock: &LeaseClock, delay: Duration) -> Result<Outcome, PubSubError> {
    clock.check_hold(delay, Instant::now())?;
    Ok(Outcome::retry_after_unchecked(delay))
}

/// Settles one message from anywhere (another actor, another thread).
///
/// Obtained from [`Delivery::settle_later`]. The first outcome sent wins. Dropping a settler
/// without settling nacks the message (it is retried), so a lost settler never strands a lease.
#[derive(Debug)]
pub struct Settler {
    lease: Option<Addr<LeaseActor>>,
    clock: LeaseClock,
}

impl Settler {
    /// Settles the message with `outcome`.
    pub fn settle(mut self, outcome: Outcome) {
        if let Some(lease) = self.lease.take() {
            lease.do_send(Settle(outcome));
        }
    }
    /// Builds a `retry_after` outcome, refused when `delay` is longer than the lease that remains.
    pub fn retry_after(&self, delay: Duration) -> Result<Outcome, PubSubError> {
        retry_after(&self.clock, delay)
    }
    /// What remains of the lease budget.
    pub fn remaining_lease(&self) -> Duration {
        self.clock.remaining(Instant::now())
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            tracing::warn!("a settler was dropped without an outcome; the message is retried");
            lease.do_send(Settle(Outcome::retry()));
        }
    }
}
