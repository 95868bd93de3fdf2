//! Deliveries and batches built by hand, to call a handler function directly.

use crate::api::batch::{Batch, BatchItem};
use crate::api::delivery::{Delivery, DeliveryContext};
use crate::rules::lease_state::LeaseClock;
use crate::rules::options::DEFAULT_MAX_LEASE;
use crate::status::stats::Stats;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Builds a [`Delivery`] to call a handler with directly.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct DeliveryBuilder {
    subscription: String,
    message_id: String,
    attributes: HashMap<String, String>,
    ordering_key: String,
    publish_time: Option<SystemTime>,
    delivery_attempt: Option<u32>,
    remaining_lease: Duration,
}

/// A delivery of message `1` on `projects/test/subscriptions/test`, first attempt unknown, a
/// full lease: change what the handler looks at.
pub fn delivery() -> DeliveryBuilder {
    DeliveryBuilder {
        subscription: "projects/test/subscriptions/test".into(),
        message_id: "1".into(),
        attributes: HashMap::new(),
        ordering_key: String::new(),
        publish_time: None,
        delivery_attempt: None,
        remaining_lease: DEFAULT_MAX_LEASE,
    }
}

impl DeliveryBuilder {
    /// The subscription it came from.
    pub fn subscription(mut self, name: impl Into<String>) -> Self {
        self.subscription = name.into();
        self
    }
    /// Its message id.
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = id.into();
        self
    }
    /// One more attribute.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }
    /// Its ordering key.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = key.into();
        self
    }
    /// When it was published.
    pub fn publish_time(mut self, at: SystemTime) -> Self {
        self.publish_time = Some(at);
        self
    }
    /// Its delivery attempt (as on a subscription with a dead-letter policy).
    pub fn delivery_attempt(mut self, attempt: u32) -> Self {
        self.delivery_attempt = Some(attempt);
        self
    }
    /// What remains of its lease, for `retry_after` checks.
    pub fn remaining_lease(mut self, remaining: Duration) -> Self {
        self.remaining_lease = remaining;
        self
    }
    /// The delivery. Its [`settle_later`](Delivery::settle_later) settler settles nothing.
    pub fn build(self) -> Delivery {
        Delivery {
            shared: Arc::new(DeliveryContext {
                subscription: Arc::from(self.subscription),
                progress: None,
                stats: Arc::new(Stats::default()),
                dedupe_on: None,
            }),
            message_id: Arc::from(self.message_id),
            attributes: self.attributes,
            ordering_key: self.ordering_key,
            publish_time: self.publish_time,
            delivery_attempt: self.delivery_attempt,
            clock: LeaseClock::new(Instant::now(), self.remaining_lease),
            key: None,
            lease: None,
        }
    }
}

/// A [`Batch`] of these payloads, each with its delivery, to call a batch handler with directly.
/// Give each delivery its own [`message_id`](DeliveryBuilder::message_id): outcomes are kept by
/// message id.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::testing::{batch, delivery};
/// use leasehold::{Batch, BatchOutcome, Outcome};
///
/// async fn on_numbers(batch: Batch<u64>) -> BatchOutcome {
///     let mut outcomes = BatchOutcome::new();
///     for item in &batch {
///         let d = &item.delivery;
///         outcomes.set(d, if item.payload > 0 { d.ack() } else { d.drop() });
///     }
///     outcomes
/// }
///
/// # futures::executor::block_on(async {
/// let numbers = batch([
///     (7, delivery().message_id("a").build()),
///     (0, delivery().message_id("b").build()),
/// ]);
/// let outcomes = on_numbers(numbers).await;
/// assert_eq!(outcomes.outcome_of("a"), Some(Outcome::ack()));
/// assert_eq!(outcomes.outcome_of("b"), Some(Outcome::drop()));
/// # });
/// ```
pub fn batch<T>(items: impl IntoIterator<Item = (T, Delivery)>) -> Batch<T> {
    Batch::new(
        items
            .into_iter()
            .map(|(payload, delivery)| BatchItem { payload, delivery })
            .collect(),
    )
}
