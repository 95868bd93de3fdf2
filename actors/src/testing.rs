//! Unit-test handlers without Pub/Sub (feature `testing`).
//!
//! Two ways in:
//! - build a [`Delivery`] with [`delivery`] and call your handler function directly, comparing
//!   the [`Outcome`](crate::Outcome) it returns (a batch handler: build its [`Batch`] with
//!   [`batch`] and read each message's outcome with
//!   [`BatchOutcome::outcome_of`](crate::BatchOutcome::outcome_of));
//! - run a whole [`Registration`] on a [`MemoryPubSub`]: publish [`TestMessage`]s and await the
//!   [`Action`] each ended in (decoding, failure and panic policies, ordering keys, the progress
//!   store and the dead-letter rule all apply as they would against Pub/Sub).
//!
//! A [`MemoryPubSub`] can also misbehave, to test what a subscription does then: script the
//! answers to reads of the subscription ([`ReadAnswer`]), fail a stream, have Pub/Sub refuse a
//! message's confirmed ack. Leasehold's own actor tests run on it.
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
//!     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
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
//!
//! A batch registration runs on it the same way; publish the messages of a batch together:
//!
//! ```
//! # extern crate leasehold_actors as leasehold;
//! use leasehold::testing::{MemoryPubSub, TestMessage};
//! use leasehold::{Action, Batch, BatchOutcome, Registration};
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let registration = Registration::json_batch("projects/p/subscriptions/orders",
//!         |batch: Batch<u64>| async move {
//!             let mut outcomes = BatchOutcome::new();
//!             for item in &batch {
//!                 let d = &item.delivery;
//!                 outcomes.set(d, if item.payload > 0 { d.ack() } else { d.retry() });
//!             }
//!             outcomes
//!         })
//!         .max_batch_messages(2)
//!         .worker_threads(0);
//!     let pubsub = MemoryPubSub::new();
//!     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
//!     let (one, zero) = (pubsub.publish(TestMessage::new("1")), pubsub.publish(TestMessage::new("0")));
//!     assert_eq!((one.await, zero.await), (Action::Ack, Action::Nack));
//!     assert_eq!(subscription.stats().batches, 1);
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```

use crate::batch::{Batch, BatchItem};
use crate::delivery::{Delivery, DeliveryShared};
use crate::error::{AckFailure, ReadError};
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
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::sync::Notify;
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

/// A message to publish on a [`MemoryPubSub`].
#[derive(Debug, Clone)]
#[must_use = "a message does nothing until published"]
pub struct TestMessage {
    id: Option<String>,
    data: Bytes,
    attributes: HashMap<String, String>,
    ordering_key: String,
    attempt: Option<u32>,
    confirmation_failure: Option<AckFailure>,
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
            confirmation_failure: None,
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
    /// On an [exactly-once](MemoryPubSub::exactly_once) subscription, Pub/Sub refuses this
    /// message's ack or nack with `failure` (the subscription counts it in `failed_acks`). The
    /// [`Published`] still resolves to the action sent. The in-memory Pub/Sub does not redeliver
    /// by itself: publish the message again with the same [`id`](Self::id) to play the
    /// redelivery. On an at-least-once subscription nothing is confirmed, and this changes
    /// nothing.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::testing::{MemoryPubSub, TestMessage};
    /// use leasehold::{AckFailure, Action, Delivery, Registration};
    ///
    /// #[actix_rt::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let pubsub = MemoryPubSub::new().exactly_once();
    ///     let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///         d.ack()
    ///     })
    ///     .worker_threads(0);
    ///     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
    ///     let refused = TestMessage::new("x").confirmation_fails(AckFailure::LeaseExpired);
    ///     assert_eq!(pubsub.publish(refused).await, Action::Ack);
    ///     while subscription.stats().failed_acks == 0 {
    ///         actix_rt::task::yield_now().await;
    ///     }
    ///     subscription.stop().await;
    ///     assert_eq!(subscription.stats().confirmed, 0);
    ///     Ok(())
    /// }
    /// ```
    pub fn confirmation_fails(mut self, failure: AckFailure) -> Self {
        self.confirmation_failure = Some(failure);
        self
    }
}

/// What one read of the subscription's configuration answers: see
/// [`MemoryPubSub::script_reads`] and [`MemoryPubSub::answer_reads`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ReadAnswer {
    /// The subscription's configuration, as the [`MemoryPubSub`] was built (exactly-once, the
    /// dead-letter policy).
    Configuration,
    /// The read fails with this error (`NotFound`: the subscription was deleted;
    /// `PermissionDenied`; `Other` with a code such as `Unavailable`: an outage).
    Error(ReadError),
    /// The read never answers, like an endpoint that accepts the call and goes silent.
    NoAnswer,
}

/// The answers to the next reads of the subscription, then the answer to every read after them.
struct ReadScript {
    next: VecDeque<ReadAnswer>,
    then: ReadAnswer,
}

/// One stream opened on the in-memory subscription.
struct OpenStream {
    /// What it was opened with.
    settings: StreamSettings,
    /// The error its next read returns (set by `fail_stream`).
    failure: Mutex<Option<SourceError>>,
    /// Wakes a read that waits for a message when a failure is set.
    failed: Notify,
    /// It returned its failure, or it was dropped: it reads nothing more.
    ended: AtomicBool,
}

impl OpenStream {
    /// Sets the error its next read returns, unless it has ended.
    fn fail(&self, error: SourceError) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        *self.failure.lock() = Some(error);
        self.failed.notify_one();
        true
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
    reads: AtomicU64,
    read_script: Mutex<ReadScript>,
    /// Every stream opened, in order.
    streams: Mutex<Vec<Arc<OpenStream>>>,
}

/// An in-memory Pub/Sub subscription for tests and benchmarks: messages published here are
/// read by the registration started on its [`connector`](Self::connector), and each publish
/// resolves to the [`Action`] the message ended in.
///
/// Every stream the registration opens reads the one queue of published messages, in the order
/// they were published. To test what a handler's subscription does when Pub/Sub misbehaves, a
/// test can script the answers to reads of the subscription ([`script_reads`](Self::script_reads)),
/// fail a stream ([`fail_stream`](Self::fail_stream)) and have Pub/Sub refuse a message's
/// confirmed ack ([`TestMessage::confirmation_fails`]); [`reads`](Self::reads) and
/// [`opened_streams`](Self::opened_streams) say what the subscription asked of it.
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
            .field("reads", &self.reads())
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
                reads: AtomicU64::new(0),
                read_script: Mutex::new(ReadScript {
                    next: VecDeque::new(),
                    then: ReadAnswer::Configuration,
                }),
                streams: Mutex::new(Vec::new()),
            }),
        }
    }

    fn info_mut(&mut self) -> &mut SubscriptionInfo {
        &mut Arc::get_mut(&mut self.inner)
            .expect("configure a MemoryPubSub before using it")
            .info
    }

    /// The subscription has exactly-once delivery: acks and nacks are confirmed (accepted,
    /// unless the message says [`confirmation_fails`](TestMessage::confirmation_fails)).
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

    /// Publishes `message`: it is queued at once, for the next stream read. The [`Published`]
    /// resolves to what it ended in once the subscription settled it: an ack, or a nack
    /// (retried, dead-lettered, or released by a stop); [`Published::action`] tells without
    /// waiting.
    pub fn publish(&self, message: TestMessage) -> Published {
        let fate = Arc::new(Fate::default());
        let id = message.id.unwrap_or_else(|| {
            self.inner
                .next_id
                .fetch_add(1, Ordering::Relaxed)
                .to_string()
        });
        let received = Received {
            message_id: id.clone(),
            data: message.data,
            attributes: message.attributes,
            ordering_key: message.ordering_key,
            publish_time: Some(SystemTime::now()),
            delivery_attempt: message.attempt,
            handle: Box::new(PublishedHandle {
                inner: self.inner.clone(),
                fate: Some(fate.clone()),
                confirmation_failure: message.confirmation_failure,
            }),
        };
        let _ = self.inner.queue.try_send(received);
        Published {
            message_id: id,
            fate,
        }
    }

    /// Messages acked so far (acks whose confirmation failed included).
    pub fn acked(&self) -> u64 {
        self.inner.acked.load(Ordering::Relaxed)
    }

    /// Messages nacked so far (published messages whose handle was dropped unsettled
    /// included).
    pub fn nacked(&self) -> u64 {
        self.inner.nacked.load(Ordering::Relaxed)
    }

    /// The next reads of the subscription's configuration answer `answers`, one each, in order,
    /// in place of any scripted before and not read yet. The reads after them answer as
    /// [`answer_reads`](Self::answer_reads) says: the configuration, unless told otherwise.
    ///
    /// `start` reads the subscription (and retries what an outage returns, within its start
    /// timeout); a running subscription reads it again at every health probe.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::testing::{MemoryPubSub, ReadAnswer};
    /// use leasehold::{Cause, Code, Delivery, ReadError, Registration};
    ///
    /// #[actix_rt::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     // start's retries wait, on the paused clock (tokio's `test-util` feature)
    ///     tokio::time::pause();
    ///     let pubsub = MemoryPubSub::new().dead_letter_after(5);
    ///     let outage = ReadError::Other {
    ///         code: Some(Code::Unavailable),
    ///         cause: Cause::message("connection refused"),
    ///     };
    ///     pubsub.script_reads([ReadAnswer::Error(outage.clone()), ReadAnswer::Error(outage)]);
    ///     let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///         d.ack()
    ///     });
    ///     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
    ///     // Two failures retried, then the configuration.
    ///     assert_eq!(pubsub.reads(), 3);
    ///     assert_eq!(subscription.max_attempts(), Some(5));
    ///     subscription.stop().await;
    ///     Ok(())
    /// }
    /// ```
    pub fn script_reads(&self, answers: impl IntoIterator<Item = ReadAnswer>) {
        let mut script = self.inner.read_script.lock();
        script.next.clear();
        script.next.extend(answers);
    }

    /// Every read of the subscription's configuration answers `answer` from now on, once the
    /// [scripted](Self::script_reads) answers are used up. [`ReadAnswer::Configuration`] (the
    /// default) answers the configuration again.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::testing::{MemoryPubSub, ReadAnswer};
    /// use leasehold::{Cause, Delivery, ReadError, Registration, StartError};
    ///
    /// #[actix_rt::main]
    /// async fn main() {
    ///     let pubsub = MemoryPubSub::new();
    ///     pubsub.answer_reads(ReadAnswer::Error(ReadError::NotFound(Cause::message("deleted"))));
    ///     let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///         d.ack()
    ///     });
    ///     let refused = leasehold::start_with(registration, pubsub.connector()).await.unwrap_err();
    ///     assert!(matches!(refused, StartError::NotFound { .. }));
    /// }
    /// ```
    pub fn answer_reads(&self, answer: ReadAnswer) {
        self.inner.read_script.lock().then = answer;
    }

    /// Reads of the subscription's configuration so far, answered or not.
    pub fn reads(&self) -> u64 {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// The settings each stream opened so far asked for, in the order they opened: a stream
    /// reopened after a failure is one more.
    pub fn opened_streams(&self) -> Vec<StreamSettings> {
        let streams = self.inner.streams.lock();
        streams.iter().map(|s| s.settings.clone()).collect()
    }

    /// Fails stream `index` (counted from 0 in the order the streams opened, as in
    /// [`opened_streams`](Self::opened_streams)) with `error`: its next read returns the error
    /// and it ends, as a streaming pull does when Pub/Sub or the network closes it. Messages it
    /// had delivered keep their leases; messages not read yet stay queued for the other streams
    /// and for the one the subscription reopens. Returns whether that stream was open (a stream
    /// that failed already or was closed is left alone).
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::testing::{MemoryPubSub, TestMessage};
    /// use leasehold::{Action, Cause, Code, Delivery, Registration, SourceError};
    ///
    /// #[actix_rt::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     // the reopening backoff waits on the paused clock (tokio's `test-util` feature)
    ///     tokio::time::pause();
    ///     let pubsub = MemoryPubSub::new();
    ///     let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///         d.ack()
    ///     })
    ///     .worker_threads(0);
    ///     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
    ///     assert_eq!(pubsub.publish(TestMessage::new("before")).await, Action::Ack);
    ///     let reset = SourceError::Stream {
    ///         code: Some(Code::Unavailable),
    ///         cause: Cause::message("connection reset"),
    ///     };
    ///     assert!(pubsub.fail_stream(0, reset));
    ///     // The subscription reopens the stream and goes on.
    ///     assert_eq!(pubsub.publish(TestMessage::new("after")).await, Action::Ack);
    ///     assert_eq!(pubsub.opened_streams().len(), 2);
    ///     assert_eq!(subscription.stats().stream_restarts, 1);
    ///     subscription.stop().await;
    ///     Ok(())
    /// }
    /// ```
    pub fn fail_stream(&self, index: usize, error: SourceError) -> bool {
        let streams = self.inner.streams.lock();
        streams.get(index).is_some_and(|stream| stream.fail(error))
    }

    /// Fails every open stream with `error`, as an outage would (see
    /// [`fail_stream`](Self::fail_stream)); returns how many it failed.
    pub fn fail_open_streams(&self, error: SourceError) -> usize {
        let streams = self.inner.streams.lock();
        streams
            .iter()
            .filter(|stream| stream.fail(error.clone()))
            .count()
    }
}

/// A published message's fate: resolves to the [`Action`] the subscription settled it with,
/// and tells it without waiting ([`action`](Self::action)). Returned by
/// [`MemoryPubSub::publish`]; the message is published whether or not this is awaited.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::testing::{MemoryPubSub, TestMessage};
/// use leasehold::{Action, Delivery, Registration};
///
/// #[actix_rt::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let pubsub = MemoryPubSub::new();
///     let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///         d.retry_after(std::time::Duration::from_secs(5))
///     })
///     .worker_threads(0);
///     let subscription = leasehold::start_with(registration, pubsub.connector()).await?;
///     let published = pubsub.publish(TestMessage::new("x").id("m1"));
///     assert_eq!(published.message_id(), "m1");
///     assert_eq!(published.action(), None, "not settled yet");
///     // A stop nacks the held message at once.
///     while subscription.stats().held == 0 {
///         actix_rt::task::yield_now().await;
///     }
///     subscription.stop().await;
///     assert_eq!(published.action(), Some(Action::Nack));
///     assert_eq!(published.await, Action::Nack);
///     Ok(())
/// }
/// ```
#[must_use = "the message is published either way; this tells what it ended in"]
pub struct Published {
    message_id: String,
    fate: Arc<Fate>,
}

impl Published {
    /// The action the message was settled with, or `None` while it is not settled. A message
    /// whose handle was dropped unsettled was nacked, as with Google's client.
    pub fn action(&self) -> Option<Action> {
        self.fate.action.get().copied()
    }

    /// Its message id.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("message_id", &self.message_id)
            .field("action", &self.action())
            .finish()
    }
}

impl Future for Published {
    type Output = Action;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Action> {
        if let Some(action) = self.action() {
            return Poll::Ready(action);
        }
        self.fate.waker.register(cx.waker());
        // Settled between the look and the registration: the wake may have gone to no one.
        match self.action() {
            Some(action) => Poll::Ready(action),
            None => Poll::Pending,
        }
    }
}

/// What became of one published message, shared by its handle and its [`Published`].
#[derive(Default)]
struct Fate {
    action: OnceLock<Action>,
    waker: AtomicWaker,
}

struct MemoryConnector(Arc<Inner>);

impl Connector for MemoryConnector {
    fn read_subscription<'a>(
        &'a self,
        _: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        self.0.reads.fetch_add(1, Ordering::Relaxed);
        let answer = {
            let mut script = self.0.read_script.lock();
            script
                .next
                .pop_front()
                .unwrap_or_else(|| script.then.clone())
        };
        match answer {
            ReadAnswer::Configuration => {
                let info = self.0.info.clone();
                async move { Ok(info) }.boxed_local()
            }
            ReadAnswer::Error(error) => async move { Err(error) }.boxed_local(),
            ReadAnswer::NoAnswer => futures::future::pending().boxed_local(),
        }
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        let stream = Arc::new(OpenStream {
            settings: settings.clone(),
            failure: Mutex::new(None),
            failed: Notify::new(),
            ended: AtomicBool::new(false),
        });
        self.0.streams.lock().push(stream.clone());
        Box::new(MemorySource {
            inner: self.0.clone(),
            arrivals: Box::pin(self.0.arrivals.clone()),
            stream,
            reads: 0,
        })
    }
}

struct MemorySource {
    inner: Arc<Inner>,
    arrivals: std::pin::Pin<Box<async_channel::Receiver<Received>>>,
    stream: Arc<OpenStream>,
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
        async move {
            let stream = &self.stream;
            if stream.ended.load(Ordering::Acquire) {
                return None;
            }
            loop {
                if let Some(error) = stream.failure.lock().take() {
                    stream.ended.store(true, Ordering::Release);
                    return Some(Err(error));
                }
                tokio::select! {
                    // A failure wins over a message that is ready too.
                    biased;
                    () = stream.failed.notified() => {}
                    message = self.arrivals.recv() => return message.ok().map(Ok),
                }
            }
        }
        .boxed_local()
    }
}

impl Drop for MemorySource {
    fn drop(&mut self) {
        self.stream.ended.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryPubSub")
    }
}

/// Settles one endless message: counts it.
#[derive(Debug)]
struct MemoryHandle {
    inner: Arc<Inner>,
}

impl SettleHandle for MemoryHandle {
    fn settle(self: Box<Self>, action: Action) -> Confirmation {
        count(&self.inner, action);
        if self.inner.info.exactly_once {
            Confirmation::Pending(async { Ok(()) }.boxed_local())
        } else {
            Confirmation::BestEffort
        }
    }
}

fn count(inner: &Inner, action: Action) {
    let counter = match action {
        Action::Ack => &inner.acked,
        Action::Nack => &inner.nacked,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Settles one published message: counts it, tells its [`Published`], and answers its
/// confirmation as the message says.
struct PublishedHandle {
    inner: Arc<Inner>,
    /// `None` once settled.
    fate: Option<Arc<Fate>>,
    confirmation_failure: Option<AckFailure>,
}

impl std::fmt::Debug for PublishedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishedHandle")
            .field("settled", &self.fate.is_none())
            .finish_non_exhaustive()
    }
}

impl PublishedHandle {
    fn settled(&mut self, action: Action) {
        if let Some(fate) = self.fate.take() {
            count(&self.inner, action);
            let _ = fate.action.set(action);
            fate.waker.wake();
        }
    }
}

impl SettleHandle for PublishedHandle {
    fn settle(mut self: Box<Self>, action: Action) -> Confirmation {
        self.settled(action);
        if !self.inner.info.exactly_once {
            return Confirmation::BestEffort;
        }
        let answer = match self.confirmation_failure.take() {
            Some(failure) => Err(failure),
            None => Ok(()),
        };
        Confirmation::Pending(async move { answer }.boxed_local())
    }
}

impl Drop for PublishedHandle {
    /// Dropped unsettled: a nack, as Google's client does.
    fn drop(&mut self) {
        self.settled(Action::Nack);
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
