//! Unit-test handlers without Pub/Sub (feature `testing`).
//!
//! Two ways in:
//! - build a [`Delivery`] with [`delivery`] and call your handler function directly, comparing
//!   the [`Outcome`] it returns;
//! - run a whole [`Registration`] on a [`MemoryPubSub`]: publish [`TestMessage`]s and await the
//!   [`Action`] each ended in (decoding, failure and panic policies, ordering keys, the progress
//!   store and the dead-letter rule all apply as they would against Pub/Sub).
//!
//! ```
//! # extern crate leasehold_actors as leasehold;
//! use leasehold::testing::{MemoryPubSub, TestMessage, delivery};
//! use leasehold::{Action, Delivery, Outcome, Registration};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! async fn on_order(order: Order, d: Delivery) -> Outcome {
//!     if order.id == 0 { d.drop() } else { d.ack() }
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // The handler alone.
//!     assert_eq!(on_order(Order { id: 7 }, delivery().build()).await, Outcome::ack());
//!
//!     // The handler with everything around it.
//!     let pubsub = MemoryPubSub::new().dead_letter_after(5);
//!     let registration = Registration::json("projects/p/subscriptions/orders", on_order)
//!         .worker_threads(0);
//!     let subscription = leasehold::start(registration, pubsub.connector()).await?;
//!     assert_eq!(pubsub.publish(TestMessage::new(r#"{"id": 7}"#)).await, Action::Ack);
//!     // drop() on the last attempt nacks, for the dead-letter topic.
//!     let last = TestMessage::new(r#"{"id": 0}"#).attempt(5);
//!     assert_eq!(pubsub.publish(last).await, Action::Nack);
//!     // Not JSON: the default failure policy drops it (acks).
//!     assert_eq!(pubsub.publish(TestMessage::new("not json")).await, Action::Ack);
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```

use crate::delivery::{Delivery, DeliveryShared};
use crate::error::ReadError;
use crate::lease_state::LeaseClock;
use crate::options::DEFAULT_MAX_LEASE;
use crate::outcome::Action;
use crate::source::{
    Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
use crate::stats::Stats;
use crate::{Registration, SourceError};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::oneshot;
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
            shared: Arc::new(DeliveryShared {
                subscription: Arc::from(self.subscription),
                progress: None,
                stats: Arc::new(Stats::default()),
            }),
            message_id: Arc::from(self.message_id),
            attributes: self.attributes,
            ordering_key: self.ordering_key,
            publish_time: self.publish_time,
            delivery_attempt: self.delivery_attempt,
            clock: LeaseClock::new(Instant::now(), self.remaining_lease),
            lease: None,
        }
    }
}

/// A message to publish on a [`MemoryPubSub`].
#[derive(Debug, Clone)]
#[must_use = "a message does nothing until published"]
pub struct TestMessage {
    id: Option<String>,
    data: Bytes,
    attributes: HashMap<String, String>,
    ordering_key: String,
    attempt: Option<u32>,
}

impl TestMessage {
    /// A message with this payload (its id: the next number, unless [`id`](Self::id) says).
    pub fn new(data: impl Into<Bytes>) -> Self {
        Self {
            id: None,
            data: data.into(),
            attributes: HashMap::new(),
            ordering_key: String::new(),
            attempt: None,
        }
    }
    /// Its message id: the same id twice is a redelivery.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
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
    /// Its delivery attempt.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }
}

struct Inner {
    info: SubscriptionInfo,
    queue: async_channel::Sender<Received>,
    arrivals: async_channel::Receiver<Received>,
    /// Every read makes a new message with this payload.
    endless: Option<Bytes>,
    next_id: AtomicU64,
    acked: AtomicU64,
    nacked: AtomicU64,
}

/// An in-memory Pub/Sub subscription for tests and benchmarks: messages published here are
/// read by the registration started on its [`connector`](Self::connector), and each publish
/// resolves to the [`Action`] the message ended in.
#[derive(Clone)]
pub struct MemoryPubSub {
    inner: Arc<Inner>,
}

impl Default for MemoryPubSub {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryPubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPubSub")
            .field("info", &self.inner.info)
            .field("acked", &self.acked())
            .field("nacked", &self.nacked())
            .finish_non_exhaustive()
    }
}

impl MemoryPubSub {
    /// An at-least-once subscription without a dead-letter policy.
    pub fn new() -> Self {
        Self::with(
            SubscriptionInfo {
                exactly_once: false,
                max_delivery_attempts: None,
                ack_deadline: Duration::from_secs(10),
            },
            None,
        )
    }

    /// A subscription whose every read makes a new message with `payload`, without end: for
    /// benchmarks. Settled messages are counted ([`acked`](Self::acked),
    /// [`nacked`](Self::nacked)).
    pub fn endless(payload: impl Into<Bytes>) -> Self {
        let mut pubsub = Self::new();
        Arc::get_mut(&mut pubsub.inner)
            .expect("not shared yet")
            .endless = Some(payload.into());
        pubsub
    }

    fn with(info: SubscriptionInfo, endless: Option<Bytes>) -> Self {
        let (queue, arrivals) = async_channel::unbounded();
        Self {
            inner: Arc::new(Inner {
                info,
                queue,
                arrivals,
                endless,
                next_id: AtomicU64::new(1),
                acked: AtomicU64::new(0),
                nacked: AtomicU64::new(0),
            }),
        }
    }

    fn info_mut(&mut self) -> &mut SubscriptionInfo {
        &mut Arc::get_mut(&mut self.inner)
            .expect("configure a MemoryPubSub before using it")
            .info
    }

    /// The subscription has exactly-once delivery: acks and nacks are confirmed (always
    /// accepted).
    pub fn exactly_once(mut self) -> Self {
        self.info_mut().exactly_once = true;
        self
    }

    /// The subscription has a dead-letter policy of `attempts` delivery attempts.
    pub fn dead_letter_after(mut self, attempts: u32) -> Self {
        self.info_mut().max_delivery_attempts = Some(attempts);
        self
    }

    /// The connector to start a registration with (`start(registration, pubsub.connector())`).
    pub fn connector(&self) -> Rc<dyn Connector> {
        Rc::new(MemoryConnector(self.inner.clone()))
    }

    /// Publishes `message`; resolves to what it ended in once the subscription settled it: an
    /// ack, or a nack (retried, dead-lettered, or released by a stop).
    pub fn publish(&self, message: TestMessage) -> impl Future<Output = Action> + 'static {
        let (reply, settled) = oneshot::channel();
        let id = message.id.unwrap_or_else(|| {
            self.inner
                .next_id
                .fetch_add(1, Ordering::Relaxed)
                .to_string()
        });
        let received = Received {
            message_id: id,
            data: message.data,
            attributes: message.attributes,
            ordering_key: message.ordering_key,
            publish_time: Some(SystemTime::now()),
            delivery_attempt: message.attempt,
            handle: Box::new(MemoryHandle {
                inner: self.inner.clone(),
                reply: Some(reply),
            }),
        };
        let _ = self.inner.queue.try_send(received);
        async move { settled.await.unwrap_or(Action::Nack) }
    }

    /// Messages acked so far.
    pub fn acked(&self) -> u64 {
        self.inner.acked.load(Ordering::Relaxed)
    }

    /// Messages nacked so far (handles dropped unsettled included).
    pub fn nacked(&self) -> u64 {
        self.inner.nacked.load(Ordering::Relaxed)
    }
}

struct MemoryConnector(Arc<Inner>);

impl Connector for MemoryConnector {
    fn read_subscription<'a>(
        &'a self,
        _: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        let info = self.0.info.clone();
        async move { Ok(info) }.boxed_local()
    }

    fn open(&self, _: &StreamSettings) -> Box<dyn MessageSource> {
        Box::new(MemorySource {
            inner: self.0.clone(),
            arrivals: Box::pin(self.0.arrivals.clone()),
            reads: 0,
        })
    }
}

struct MemorySource {
    inner: Arc<Inner>,
    arrivals: std::pin::Pin<Box<async_channel::Receiver<Received>>>,
    reads: u64,
}

impl MemorySource {
    /// The next endless message.
    fn make(&self, payload: &Bytes) -> Received {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        Received {
            message_id: id.to_string(),
            data: payload.clone(),
            attributes: HashMap::new(),
            ordering_key: String::new(),
            publish_time: None,
            delivery_attempt: None,
            handle: Box::new(MemoryHandle {
                inner: self.inner.clone(),
                reply: None,
            }),
        }
    }
}

impl MessageSource for MemorySource {
    /// Cancel-safe: a message is taken (or made) only when the read resolves.
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        if let Some(payload) = self.inner.endless.clone() {
            self.reads += 1;
            // Yield now and then so the actors run between reads, as with a network stream.
            let yield_first = self.reads.is_multiple_of(64);
            return async move {
                if yield_first {
                    tokio::task::yield_now().await;
                }
                Some(Ok(self.make(&payload)))
            }
            .boxed_local();
        }
        async move { self.arrivals.recv().await.ok().map(Ok) }.boxed_local()
    }
}

/// Settles one in-memory message: counts it and tells its publisher.
#[derive(Debug)]
struct MemoryHandle {
    inner: Arc<Inner>,
    reply: Option<oneshot::Sender<Action>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryPubSub")
    }
}

impl MemoryHandle {
    fn settled(&mut self, action: Action) {
        let counter = match action {
            Action::Ack => &self.inner.acked,
            Action::Nack => &self.inner.nacked,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(action);
        }
    }
}

impl SettleHandle for MemoryHandle {
    fn settle(mut self: Box<Self>, action: Action) -> Confirmation {
        self.settled(action);
        if self.inner.info.exactly_once {
            Confirmation::Pending(async { Ok(()) }.boxed_local())
        } else {
            Confirmation::BestEffort
        }
    }
}

impl Drop for MemoryHandle {
    /// Dropped unsettled: a nack, as Google's client does.
    fn drop(&mut self) {
        if self.reply.is_some() {
            self.settled(Action::Nack);
        }
    }
}

/// Runs `registration` on a fresh [`MemoryPubSub`] for one message and returns what it ended
/// in: the shortest way to test a handler with its policies.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::testing::{TestMessage, outcome_of};
/// use leasehold::{Action, Delivery, Registration};
///
/// #[actix_rt::main]
/// async fn main() {
///     let registration = Registration::raw("projects/p/subscriptions/orders", |data, d: Delivery| async move {
///         if data.is_empty() { d.drop() } else { d.retry() }
///     });
///     assert_eq!(outcome_of(registration, TestMessage::new("x")).await, Action::Nack);
/// }
/// ```
pub async fn outcome_of(registration: Registration, message: TestMessage) -> Action {
    let pubsub = MemoryPubSub::new();
    let subscription = crate::start(registration.worker_threads(0), pubsub.connector())
        .await
        .expect("the registration starts on an in-memory subscription");
    let action = pubsub.publish(message).await;
    subscription.stop().await;
    action
}
