//! The push endpoint seen from the runtime: a [`Connector`] whose stream is the pushes the
//! endpoint admitted, and a [`SettleHandle`] per push that answers its held HTTP request.
//!
//! The runtime treats a push like a pulled message (the pool, ordering, the progress store, the
//! lease actor, the stats): only the connector knows that settling means answering a request,
//! and that the lease is the push deadline. Owns [`Shared`] (what the endpoint and the
//! connector share), [`PushConnector`], the push source and [`PushHandle`]. Uses the gate and
//! the stats.

use crate::gate::{Gate, Refusal};
use crate::stats::PushStats;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold::error::{ReadError, SourceError};
use leasehold::source::{
    Action, Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The push deadline when neither the configuration nor the subscription gives one: Pub/Sub's
/// default ack deadline.
pub const DEFAULT_PUSH_DEADLINE: Duration = Duration::from_secs(10);

/// What settling a push's message answers its request with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `ack()`, `drop()`: a success status, and Pub/Sub removes the message.
    Ack,
    /// `retry()`, a held `retry_after` ending, an `Err`, a panic, `drop()` on the last attempt,
    /// a lost lease: a failure status, and Pub/Sub redelivers or dead-letters.
    Nack,
    /// Let go unsettled (a stop released it before it ran): answered as a refusal to retry.
    Released,
}

/// What the endpoint and the connector share: the subscription served, the gate, the channel
/// of admitted pushes, the deadline and the counters.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) subscription: String,
    pub(crate) gate: Mutex<Gate>,
    pub(crate) sender: async_channel::Sender<Received>,
    receiver: async_channel::Receiver<Received>,
    /// Configured, else read from the subscription at start.
    configured_deadline: Option<Duration>,
    deadline: Mutex<Duration>,
    pub(crate) stats: PushStats,
}

impl Shared {
    pub(crate) fn new(subscription: String, configured_deadline: Option<Duration>) -> Arc<Self> {
        let (sender, receiver) = async_channel::unbounded();
        Arc::new(Self {
            subscription,
            gate: Mutex::new(Gate::new()),
            sender,
            receiver,
            configured_deadline,
            deadline: Mutex::new(configured_deadline.unwrap_or(DEFAULT_PUSH_DEADLINE)),
            stats: PushStats::default(),
        })
    }

    /// The push deadline in force.
    pub(crate) fn deadline(&self) -> Duration {
        *self.deadline.lock()
    }

    /// Admits a push of `len` payload bytes: the handle that answers it, and the receiver of
    /// the answer.
    pub(crate) fn admit(
        self: &Arc<Self>,
        message_id: &str,
        len: usize,
        arrived: Instant,
    ) -> Result<(PushHandle, oneshot::Receiver<Answer>), Refusal> {
        self.gate.lock().admit(len)?;
        let (answer, answered) = oneshot::channel();
        let handle = PushHandle {
            answer: Some(answer),
            shared: Arc::clone(self),
            message_id: message_id.to_string(),
            len,
            arrived,
            deadline: self.deadline(),
        };
        Ok((handle, answered))
    }

    /// A stop began: no push comes in, and what waits in the channel unread is let go.
    fn close(&self) {
        self.gate.lock().close();
        self.receiver.close();
        while let Ok(released) = self.receiver.try_recv() {
            drop(released);
        }
    }
}

/// Settles one pushed message by answering its request. Dropped unsettled, it answers
/// [`Answer::Released`]; either way it gives its room back to the gate exactly once.
#[derive(Debug)]
pub(crate) struct PushHandle {
    answer: Option<oneshot::Sender<Answer>>,
    shared: Arc<Shared>,
    message_id: String,
    len: usize,
    /// When the request came in: the deadline counts from there.
    arrived: Instant,
    deadline: Duration,
}

impl PushHandle {
    fn answer(&mut self, answer: Answer) {
        let Some(sender) = self.answer.take() else {
            return;
        };
        self.shared.gate.lock().release(self.len);
        let took = self.arrived.elapsed();
        if took > self.deadline {
            self.shared.stats.late();
            tracing::warn!(subscription = %self.shared.subscription,
                message_id = %self.message_id, ?took, deadline = ?self.deadline, ?answer,
                "push answered after its deadline: Pub/Sub has already counted it a nack and \
                 redelivers it (the handler is slower than the subscription's ack deadline)");
        }
        if sender.send(answer).is_err() {
            self.shared.stats.gone();
            tracing::debug!(subscription = %self.shared.subscription,
                message_id = %self.message_id, ?answer,
                "the push's request was gone before its answer");
        }
    }
}

impl SettleHandle for PushHandle {
    fn settle(mut self: Box<Self>, action: Action) -> Confirmation {
        self.answer(match action {
            Action::Ack => Answer::Ack,
            Action::Nack => Answer::Nack,
        });
        // Push has no exactly-once delivery: an answer is all Pub/Sub hears.
        Confirmation::BestEffort
    }
}

impl Drop for PushHandle {
    fn drop(&mut self) {
        self.answer(Answer::Released);
    }
}

/// The connector a push registration starts with: the subscription is read through `inner`
/// (its dead-letter policy and ack deadline, and the health probe), and the stream is what the
/// endpoint admits.
pub(crate) struct PushConnector {
    pub(crate) inner: Rc<dyn Connector>,
    pub(crate) shared: Arc<Shared>,
}

impl Connector for PushConnector {
    fn read_subscription<'a>(
        &'a self,
        subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        self.inner.read_subscription(subscription)
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        // Every stream of the subscription reads the one endpoint: the gate admits up to the
        // subscription's limits, not one stream's share.
        self.shared.gate.lock().open(
            settings.subscription_max_outstanding_messages,
            settings.subscription_max_outstanding_bytes,
        );
        Box::new(PushSource {
            receiver: self.shared.receiver.clone(),
            shared: Arc::clone(&self.shared),
        })
    }

    fn is_global_endpoint(&self) -> bool {
        self.inner.is_global_endpoint()
    }

    /// The breaker opened: new pushes are answered 503 at once (Pub/Sub pushes more slowly),
    /// until it closes.
    fn breaker_changed(&self, open: bool) {
        self.shared.gate.lock().pause(open);
    }

    fn lease_limit(&self, info: Option<&SubscriptionInfo>) -> Option<Duration> {
        let deadline = match (self.shared.configured_deadline, info) {
            (Some(configured), Some(info)) if configured > info.ack_deadline => {
                tracing::warn!(subscription = %self.shared.subscription, ?configured,
                    ack_deadline = ?info.ack_deadline,
                    "the configured push deadline is longer than the subscription's ack \
                     deadline, which is how long Pub/Sub waits: answers past it come too late");
                configured
            }
            (Some(configured), _) => configured,
            (None, Some(info)) if !info.ack_deadline.is_zero() => info.ack_deadline,
            (None, _) => {
                tracing::warn!(subscription = %self.shared.subscription,
                    deadline = ?DEFAULT_PUSH_DEADLINE,
                    "the push deadline is unknown (the subscription could not be read and none \
                     is configured): assuming Pub/Sub's default ack deadline");
                DEFAULT_PUSH_DEADLINE
            }
        };
        *self.shared.deadline.lock() = deadline;
        Some(deadline)
    }
}

impl std::fmt::Debug for PushConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushConnector")
            .field("subscription", &self.shared.subscription)
            .finish_non_exhaustive()
    }
}

/// The pushes the endpoint admitted, read by the supervisor like a pull stream.
struct PushSource {
    receiver: async_channel::Receiver<Received>,
    shared: Arc<Shared>,
}

impl MessageSource for PushSource {
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        // `recv` is cancel-safe: a push stays in the channel until it is taken.
        self.receiver.recv().map(|r| r.ok().map(Ok)).boxed_local()
    }

    fn shutdown(&self) -> LocalBoxFuture<'static, ()> {
        // Polled once when a stop begins: the endpoint closes to new pushes at once.
        let shared = Arc::clone(&self.shared);
        async move { shared.close() }.boxed_local()
    }
}
