//! The narrow traits the actors are written against: where messages come from, how one is
//! settled, and how a subscription's configuration is read.
//!
//! The `leasehold` crate implements them over Google's official client; unit tests implement
//! them in memory.

use crate::error::{AckFailure, ReadError, SourceError};
pub use crate::rules::outcome::Action;
pub use crate::rules::supervision::dead_letter_limit;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use std::collections::HashMap;
use std::fmt::Debug;
use std::time::{Duration, SystemTime};

/// One message as the stream delivered it, with the handle that settles it. Its `Debug` shows
/// the payload's length, never the payload.
pub struct Received {
    /// The server-assigned message id.
    pub message_id: String,
    /// The payload.
    pub data: Bytes,
    /// The attributes.
    pub attributes: HashMap<String, String>,
    /// The ordering key, empty when none.
    pub ordering_key: String,
    /// When Pub/Sub accepted the message.
    pub publish_time: Option<SystemTime>,
    /// The delivery attempt, when the subscription has a dead-letter policy.
    pub delivery_attempt: Option<u32>,
    /// Settles the message. Dropping it unsettled nacks it.
    pub handle: Box<dyn SettleHandle>,
}

impl Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("message_id", &self.message_id)
            .field("data_len", &self.data.len())
            .field("ordering_key", &self.ordering_key)
            .field("delivery_attempt", &self.delivery_attempt)
            .finish_non_exhaustive()
    }
}

/// What settling a message with a [`SettleHandle`] leads to.
pub enum Confirmation {
    /// Best effort (at-least-once): the action was queued; nothing more will be known.
    BestEffort,
    /// Exactly-once: resolves when Pub/Sub accepts or refuses the action.
    Pending(LocalBoxFuture<'static, Result<(), AckFailure>>),
}

impl Debug for Confirmation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Confirmation::BestEffort => f.write_str("BestEffort"),
            Confirmation::Pending(_) => f.write_str("Pending"),
        }
    }
}

/// Acks or nacks one message. While it is alive, the client keeps extending the lease (within
/// `max_lease`); dropping it without calling [`settle`](Self::settle) nacks the message.
pub trait SettleHandle: Debug + Send + 'static {
    /// Sends the action. Exactly-once handles return a confirmation to await.
    fn settle(self: Box<Self>, action: Action) -> Confirmation;
}

/// A stream of messages from one subscription.
pub trait MessageSource: 'static {
    /// The next message; `None` when the stream has ended (after an error or a shutdown).
    ///
    /// Must be cancel-safe: a future dropped before it resolved (a stop began while it waited)
    /// must lose no message. Google's `MessageStream::next` is.
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>>;

    /// A future that shuts the stream down when first polled and resolves once the client has
    /// sent every ack and nack it still holds (Google's client: the stream's `ShutdownToken`).
    ///
    /// Taken when the stream opens; a stop awaits it after every message is settled and the
    /// source dropped, so the last acks have left the process when `stop()` returns. The default
    /// has nothing to wait for.
    fn shutdown(&self) -> LocalBoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// How the stream is opened: the registration's flow control and lease settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// The subscription, `projects/P/subscriptions/S`.
    pub subscription: String,
    /// This stream's share of the subscription's limit on messages outstanding (in handlers,
    /// queued or held): what it asks the server for, so that all the streams together ask for
    /// no more than the subscription's limit.
    pub max_outstanding_messages: usize,
    /// This stream's share of the subscription's limit on payload bytes outstanding.
    pub max_outstanding_bytes: usize,
    /// The subscription's limit on messages outstanding, all its streams together: what
    /// Leasehold enforces (a connector whose streams share one source, such as push, uses it).
    pub subscription_max_outstanding_messages: usize,
    /// The subscription's limit on payload bytes outstanding, all its streams together.
    pub subscription_max_outstanding_bytes: usize,
    /// The lease budget per message, from receipt.
    pub max_lease: Duration,
    /// How far each lease extension reaches (10 to 600 s, at most `max_lease`).
    pub max_lease_extension: Duration,
}

/// What Leasehold reads of a subscription once, at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionInfo {
    /// Exactly-once delivery is on.
    pub exactly_once: bool,
    /// The dead-letter policy's maximum delivery attempts, when there is a policy.
    pub max_delivery_attempts: Option<u32>,
    /// The subscription's ack deadline.
    pub ack_deadline: Duration,
    /// The topic the subscription is on, `projects/P/topics/T` (Pub/Sub says `_deleted-topic_`
    /// once it was deleted); `None` when the connector does not say.
    pub topic: Option<String>,
    /// The dead-letter policy's topic, `projects/P/topics/T`, when there is a policy.
    pub dead_letter_topic: Option<String>,
}

/// Opens streams and reads subscriptions: the connection to Pub/Sub.
pub trait Connector: 'static {
    /// Reads the subscription's configuration (needs `pubsub.subscriptions.get`), in one
    /// attempt: `start` retries transient failures itself, within its start timeout.
    fn read_subscription<'a>(
        &'a self,
        subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>>;

    /// Opens a stream of messages.
    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource>;

    /// Whether this connection goes to Pub/Sub's global endpoint, where exactly-once delivery
    /// holds only within one region.
    fn is_global_endpoint(&self) -> bool {
        false
    }

    /// The longest any message may be held from receipt, whatever the registration's
    /// `max_lease` says; `info` is the subscription as read at start (`None` when reading it was
    /// not permitted).
    ///
    /// `None` (the default) for a pull stream, whose leases the client extends. A push
    /// connector answers its push deadline: the response is the lease, and nothing extends it,
    /// so `retry_after` is refused beyond it and a handler that outlives it has lost its lease.
    fn lease_limit(&self, info: Option<&SubscriptionInfo>) -> Option<Duration> {
        let _ = info;
        None
    }

    /// The registration's breaker opened (`true`) or closed. A pull stream needs nothing (the
    /// default): it goes on reading while flow control has room, so that what Pub/Sub sends
    /// comes under the client's lease management, and what it reads waits, leased, until the
    /// breaker closes. A connector that is sent messages (push) refuses new ones while it is
    /// open.
    fn breaker_changed(&self, open: bool) {
        let _ = open;
    }
}

/// The message attribute in which Google's publishers put the W3C `traceparent` of their trace.
pub(crate) const TRACEPARENT_ATTRIBUTE: &str = "googclient_traceparent";
