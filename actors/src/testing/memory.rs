//! The in-memory Pub/Sub ([`MemoryPubSub`]): messages published to it, their fates, and
//! [`outcome_of`] to run one message through a registration.

use crate::Registration;
use crate::error::AckFailure;
use crate::error::SourceError;
use crate::rules::outcome::Action;
use crate::source::{Connector, Received, StreamSettings, SubscriptionInfo};
use crate::testing::source::*;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

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
    /// use leasehold::{Delivery, Registration, error::AckFailure, source::Action};
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
                topic: None,
                dead_letter_topic: None,
            },
            None,
        )
    }

    /// A subscription whose every read makes a new message with `payload`, without end: for
    /// benchmarks. Settled messages are counted ([`acked`](Self::acked),
    /// [`nacked`](Self::nacked)). Like Pub/Sub's server, each stream has no more than its
    /// `max_outstanding_messages` out unsettled: a read waits for room beyond that.
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
                acked_target: AtomicU64::new(u64::MAX),
                acked_reached: tokio::sync::Notify::new(),
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

    /// Messages published (or nacked back) that no stream has read yet.
    pub fn unread(&self) -> usize {
        self.inner.queue.len()
    }

    /// Messages acked so far (acks whose confirmation failed included).
    pub fn acked(&self) -> u64 {
        self.inner.acked.load(Ordering::Relaxed)
    }

    /// Resolves once `count` messages were acked, woken by the ack that reaches it: how a
    /// benchmark learns that its run is over without polling [`acked`](Self::acked). One wait at
    /// a time: a second call moves the count waited for.
    pub async fn acked_reach(&self, count: u64) {
        self.inner.acked_target.store(count, Ordering::SeqCst);
        // A wake-up left by an earlier wait only costs one more look at the count.
        while self.acked() < count {
            self.inner.acked_reached.notified().await;
        }
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
    /// use leasehold::error::{Cause, Code, ReadError};
    /// use leasehold::{Delivery, Registration};
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
    /// use leasehold::error::{Cause, ReadError};
    /// use leasehold::{Delivery, Registration, StartError};
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
    /// use leasehold::error::{Cause, Code, SourceError};
    /// use leasehold::{Delivery, Registration, source::Action};
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
/// use leasehold::{Delivery, Registration, source::Action};
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

/// Runs `registration` on a fresh [`MemoryPubSub`] for one message and returns what it ended
/// in: the shortest way to test a handler with its policies.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::testing::{TestMessage, outcome_of};
/// use leasehold::{Delivery, Registration, source::Action};
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
