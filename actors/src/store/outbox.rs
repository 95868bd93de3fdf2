//! The transactional outbox, as the stores and the relay share it: the message a transaction
//! publishes ([`OutboxMessage`]), the key attribute every such message carries
//! ([`OUTBOX_KEY_ATTRIBUTE`]), the rows a relay leases ([`OutboxRow`]) and the trait a database
//! implements for the relay ([`OutboxStore`]). The stores (`leasehold-postgres`,
//! `leasehold-spanner`) write the rows in their transactions; the relay (`leasehold-relay`)
//! sends them.

use crate::error::{OutboxError, StoreError};
use crate::rules::outbox::{Places, check_message, check_topic};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use futures::stream::LocalBoxStream;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The attribute every message sent through the outbox carries: a key that is the same on every
/// copy of it (a relay that died after Pub/Sub took a row and before it marked it sent sends it
/// again), so that a consumer that dedupes on it handles it once.
///
/// A consumer dedupes on it with `.dedupe_on(leasehold::OUTBOX_KEY_ATTRIBUTE)` on its
/// [`Registration`](crate::Registration). Its value is, unless the publisher gave its own
/// ([`OutboxMessage::key`]), `<source subscription>/<source message id>/<place>`: the message
/// the handler ran for and the place of this publish among that run's publishes for it (from
/// 0), the same at every run. When the handler's registration dedupes on an attribute and the
/// message carries it, the middle part is `sha256:` and the hex digest of its dedupe key
/// instead, the same for every copy of that message; from a transaction that is not a
/// handler's, a random key fixed when the row is written.
pub const OUTBOX_KEY_ATTRIBUTE: &str = "leasehold-key";

/// A message to publish through the transactional outbox: written to the outbox in the open
/// transaction, sent by a relay once (and only if) that transaction commits.
///
/// ```
/// use leasehold_actors::store::OutboxMessage;
/// let message = OutboxMessage::new("projects/p/topics/confirmations", r#"{"order":7}"#)
///     .attribute("kind", "OrderConfirmed")
///     .ordering_key("customer-42");
/// assert_eq!(message.topic(), "projects/p/topics/confirmations");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an outbox message is sent only once it is published in a transaction"]
pub struct OutboxMessage {
    topic: String,
    data: Bytes,
    attributes: Vec<(String, String)>,
    ordering_key: String,
    key: Option<String>,
    source: Option<String>,
}

impl OutboxMessage {
    /// A message of `data` for `topic` (`projects/P/topics/T`).
    pub fn new(topic: impl Into<String>, data: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            data: data.into(),
            attributes: Vec::new(),
            ordering_key: String::new(),
            key: None,
            source: None,
        }
    }

    /// A message whose payload is `value` as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(
        topic: impl Into<String>,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self::new(topic, serde_json::to_vec(value)?))
    }

    /// Adds an attribute. [`OUTBOX_KEY_ATTRIBUTE`] is refused when the message is published:
    /// set the key with [`key`](Self::key).
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((name.into(), value.into()));
        self
    }

    /// Its ordering key: the relay sends one key's messages of one topic in the order their
    /// transactions committed, one after the other (and the topic's subscribers with message
    /// ordering get them in that order).
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = key.into();
        self
    }

    /// Its own value of [`OUTBOX_KEY_ATTRIBUTE`] (1 to 1,024 bytes) instead of the default: a
    /// key from the payload (an order number) dedupes copies the default would not (a
    /// dead-lettered message replayed has a new message id, so its default keys are new).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// In a batch handler's transaction: the message of the batch this one is published for,
    /// which its default key is derived from: its
    /// [`delivery.progress_key()`](crate::Delivery::progress_key) (its message id, or its dedupe
    /// key when the registration dedupes on an attribute). A message id works too when the
    /// registration does not dedupe.
    pub fn for_message(mut self, message_id: impl Into<String>) -> Self {
        self.source = Some(message_id.into());
        self
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Its payload.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Checks it as Pub/Sub would and gives it its key: its own, or the default for the
    /// transaction `publisher` (the next place of its source message, or a random key outside
    /// handlers). What a store calls before it writes the row.
    pub fn prepare(self, publisher: Publisher<'_>) -> Result<PreparedMessage, OutboxError> {
        check_topic(&self.topic)?;
        check_message(
            OUTBOX_KEY_ATTRIBUTE,
            &self.attributes,
            &self.ordering_key,
            self.key.as_deref(),
            self.data.len(),
        )?;
        let key = match (self.key, publisher) {
            (Some(key), _) => key,
            (None, Publisher::Application) => random_key(),
            (
                None,
                Publisher::Handler {
                    subscription,
                    claimed,
                    places,
                },
            ) => {
                let source = match (&self.source, claimed) {
                    (Some(id), _) if claimed.iter().any(|c| **c == **id) => id.as_str(),
                    (Some(_), _) => {
                        return Err(OutboxError::Invalid(
                            "for_message names a message this transaction did not claim \
                             (name it by its delivery.progress_key())"
                                .into(),
                        ));
                    }
                    (None, [only]) => only,
                    (None, _) => {
                        return Err(OutboxError::NoSource {
                            claimed: claimed.len(),
                        });
                    }
                };
                places.next_key(subscription, source)
            }
        };
        let (names, values) = self.attributes.into_iter().unzip();
        Ok(PreparedMessage {
            topic: self.topic,
            data: self.data,
            attribute_names: names,
            attribute_values: values,
            ordering_key: self.ordering_key,
            key,
        })
    }
}

/// A key no other row has: 128 random bits, in hex.
fn random_key() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Who publishes: a handler's transaction (its default keys derive from the messages it
/// claimed) or an application's transaction of its own.
#[derive(Debug)]
pub enum Publisher<'a> {
    /// A handler's transaction.
    Handler {
        /// The subscription it consumes.
        subscription: &'a str,
        /// The message ids it claimed (one, or a batch's).
        claimed: &'a [Arc<str>],
        /// The places handed out so far in this transaction.
        places: &'a mut Places,
    },
    /// A transaction that is not a handler's: without a key of its own, a message gets a
    /// random one, fixed in its row.
    Application,
}

/// An outbox message checked and keyed: what a store writes in its row.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PreparedMessage {
    /// Its topic.
    pub topic: String,
    /// Its payload.
    pub data: Bytes,
    /// Its attributes' names, in order, without the key.
    pub attribute_names: Vec<String>,
    /// Their values.
    pub attribute_values: Vec<String>,
    /// Its ordering key (empty: none).
    pub ordering_key: String,
    /// Its value of [`OUTBOX_KEY_ATTRIBUTE`].
    pub key: String,
}

/// A committed outbox row, leased to a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxRow {
    /// The row's id in its table.
    pub id: i64,
    /// The topic.
    pub topic: String,
    /// The payload.
    pub data: Bytes,
    /// The attributes, without the key.
    pub attributes: Vec<(String, String)>,
    /// The ordering key (empty: none).
    pub ordering_key: String,
    /// Its place in its ordering key's commit order (0 without a key).
    pub seq: i64,
    /// Its value of [`OUTBOX_KEY_ATTRIBUTE`].
    pub key: String,
    /// When it was written (the database's clock).
    pub created_at: SystemTime,
    /// Sends that failed before this lease.
    pub attempts: u32,
}

impl OutboxRow {
    /// A row; for stores and tests.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: i64,
        topic: String,
        data: Bytes,
        attributes: Vec<(String, String)>,
        ordering_key: String,
        seq: i64,
        key: String,
        created_at: SystemTime,
        attempts: u32,
    ) -> Self {
        Self {
            id,
            topic,
            data,
            attributes,
            ordering_key,
            seq,
            key,
            created_at,
            attempts,
        }
    }
}

/// A row whose send failed: when it may be tried again, and why (a short word, kept in the row
/// for people: never a payload or an attribute's value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRow {
    /// The row's id.
    pub id: i64,
    /// How long from now before a relay may lease it again.
    pub retry_after: Duration,
    /// Why, as the relay counts it (`unavailable`, `topic_missing`, ...).
    pub reason: &'static str,
}

/// The rows waiting to be sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Committed rows not sent yet (leased ones included).
    pub pending: u64,
    /// How long the oldest of them has waited, by the database's clock.
    pub oldest: Option<Duration>,
}

/// A database whose transactions write outbox rows, as a relay sees it: lease the rows ready to
/// send, mark them sent or failed, give back what it did not send, delete old sent rows, and
/// say when a commit may have added rows.
///
/// Implemented by `leasehold_postgres::PostgresStore` and `leasehold_spanner::SpannerStore`;
/// the relay is `leasehold_relay::Relay`. The futures need not be `Send`.
pub trait OutboxStore: Send + Sync + 'static {
    /// Leases to `owner`, for `lease`, up to `limit` rows that are committed, unsent, not
    /// leased by a live lease and not waiting for a retry; of an ordering key, only the run of
    /// rows from its first unsent one on (`leasehold_actors::store::leasable`), so that no
    /// two relays hold one key's rows and they are sent in commit order. In the order to send.
    fn lease(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> LocalBoxFuture<'static, Result<Vec<OutboxRow>, StoreError>>;

    /// Marks the rows `ids` sent (whoever holds their lease now: they reached Pub/Sub).
    fn mark_sent(&self, ids: Vec<i64>) -> LocalBoxFuture<'static, Result<(), StoreError>>;

    /// Ends the leases of rows whose send failed: each counts one more attempt and waits its
    /// `retry_after`. Never deletes a row.
    fn mark_failed(
        &self,
        failed: Vec<FailedRow>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>>;

    /// Ends `owner`'s leases of `ids` without a send (a relay stopping before it sent them).
    fn release(
        &self,
        owner: &str,
        ids: Vec<i64>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>>;

    /// Deletes at most `limit` rows sent more than `retention` ago; how many.
    fn sweep(
        &self,
        retention: Duration,
        limit: usize,
    ) -> LocalBoxFuture<'static, Result<u64, StoreError>>;

    /// How many rows wait and how old the oldest is.
    fn backlog(&self) -> LocalBoxFuture<'static, Result<Backlog, StoreError>>;

    /// Yields whenever a commit may have added rows: this process's own commits, and where the
    /// database can tell, other processes' (PostgreSQL's `LISTEN`). A relay also polls, so a
    /// store that can tell nothing may return a stream that never yields.
    fn wakeups(&self) -> LocalBoxStream<'static, ()>;
}

/// What a store's transactions tell this process's relays when a commit wrote outbox rows: a
/// counter each relay watches.
#[derive(Debug, Clone)]
pub struct CommitSignal {
    commits: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for CommitSignal {
    fn default() -> Self {
        Self {
            commits: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl CommitSignal {
    /// A commit wrote outbox rows: every relay watching wakes.
    pub fn committed(&self) {
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A stream that yields after each [`committed`](Self::committed) since the last item
    /// (several commits between two polls yield once).
    pub fn watch(&self) -> LocalBoxStream<'static, ()> {
        let mut commits = self.commits.subscribe();
        commits.mark_unchanged();
        Box::pin(futures::stream::unfold(commits, |mut commits| async move {
            commits.changed().await.ok()?;
            Some(((), commits))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn publish(
        message: OutboxMessage,
        claimed: &[Arc<str>],
        places: &mut Places,
    ) -> Result<PreparedMessage, OutboxError> {
        message.prepare(Publisher::Handler {
            subscription: "projects/p/subscriptions/s",
            claimed,
            places,
        })
    }

    #[test]
    fn a_handlers_messages_are_keyed_by_their_source_and_place() {
        let mut places = Places::default();
        let one: [Arc<str>; 1] = [Arc::from("7")];
        let m = || OutboxMessage::new("projects/p/topics/events", "x").attribute("a", "b");
        let first = publish(m(), &one, &mut places).unwrap();
        assert_eq!(first.key, "projects/p/subscriptions/s/7/0");
        assert_eq!(
            (first.attribute_names, first.attribute_values),
            (vec!["a".to_string()], vec!["b".to_string()])
        );
        assert_eq!(
            publish(m(), &one, &mut places).unwrap().key,
            "projects/p/subscriptions/s/7/1"
        );
        assert_eq!(
            publish(m().key("order-9"), &one, &mut places).unwrap().key,
            "order-9"
        );
    }

    #[test]
    fn a_batch_needs_the_source_of_each_message() {
        let mut places = Places::default();
        let two: [Arc<str>; 2] = [Arc::from("1"), Arc::from("2")];
        let m = || OutboxMessage::new("projects/p/topics/events", "x");
        assert_eq!(
            publish(m(), &two, &mut places),
            Err(OutboxError::NoSource { claimed: 2 })
        );
        assert_eq!(
            publish(m().for_message("2"), &two, &mut places)
                .unwrap()
                .key,
            "projects/p/subscriptions/s/2/0"
        );
        assert!(matches!(
            publish(m().for_message("3"), &two, &mut places),
            Err(OutboxError::Invalid(_))
        ));
    }

    #[test]
    fn a_batch_that_dedupes_names_its_messages_by_their_dedupe_keys() {
        // What a batch transaction claims when its registration dedupes on `event-id`:
        // `Delivery::progress_key()` of each message.
        let mut places = Places::default();
        let two: [Arc<str>; 2] = [Arc::from("event-id=1"), Arc::from("event-id=2")];
        let m = || OutboxMessage::new("projects/p/topics/events", "x");
        let key = publish(m().for_message("event-id=2"), &two, &mut places)
            .unwrap()
            .key;
        assert!(
            key.starts_with("projects/p/subscriptions/s/sha256:") && key.ends_with("/0"),
            "{key}"
        );
        assert!(!key.contains("event-id"), "the dedupe key stays out: {key}");
        let Err(OutboxError::Invalid(why)) = publish(m().for_message("m-2"), &two, &mut places)
        else {
            panic!("a message id the batch did not claim under is refused");
        };
        assert!(why.contains("progress_key"), "{why}");
    }

    #[test]
    fn outside_handlers_a_message_gets_a_random_key() {
        let m = || OutboxMessage::new("projects/p/topics/events", "x");
        let a = m().prepare(Publisher::Application).unwrap().key;
        let b = m().prepare(Publisher::Application).unwrap().key;
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(
            OutboxMessage::new("t", "x")
                .prepare(Publisher::Application)
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_commit_wakes_every_watcher_once_for_what_came_before() {
        let signal = CommitSignal::default();
        let mut first = signal.watch();
        let mut second = signal.clone().watch();
        signal.committed();
        signal.committed();
        assert_eq!(first.next().await, Some(()));
        assert_eq!(second.next().await, Some(()));
        assert!(
            futures::poll!(first.next()).is_pending(),
            "two commits, one wake-up"
        );
    }
}
