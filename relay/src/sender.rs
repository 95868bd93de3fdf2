//! Where rows leave for Pub/Sub: the narrow `Sender` trait the relay's loop is written against
//! (so that it is unit-tested on a fake), and its implementation over Google's official
//! publisher (`google-cloud-pubsub`), one `Publisher` per topic on one shared channel.
//!
//! May use `rules`.

use crate::rules::failure::FailureKind;
use crate::rules::round::Sent;
use futures::future::LocalBoxFuture;
use google_cloud_gax::retry_policy::RetryPolicyExt;
use google_cloud_pubsub::client::{BasePublisher, Publisher};
use google_cloud_pubsub::error::PublishError;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::retry_policy::RetryableErrors;
use leasehold::Connection;
use leasehold::error::{Code, ConnectError};
use leasehold::store::{OUTBOX_KEY_ATTRIBUTE, OutboxRow};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Sends a round's rows.
pub(crate) trait Sender {
    /// Publishes `rows` in their order (one ordering key's rows one after the other, as the
    /// lease gave them) and answers for each, in the same order, within about `timeout`.
    fn send<'a>(
        &'a self,
        rows: &'a [OutboxRow],
        timeout: Duration,
    ) -> LocalBoxFuture<'a, Vec<Sent>>;
}

/// Google's publisher: a `Publisher` per topic (each batches and keeps one ordering key's
/// messages in order) over one [`BasePublisher`] channel. Its retry policy retries transient
/// errors within the relay's `send_timeout`, so a send ends (and is counted) rather than
/// waiting past its lease.
pub(crate) struct GoogleSender {
    base: BasePublisher,
    publishers: RefCell<HashMap<String, Publisher>>,
}

/// The most a publisher waits to fill a batch: the relay hands it a whole round at once, so a
/// longer wait only adds latency.
const BATCH_DELAY: Duration = Duration::from_millis(1);

impl GoogleSender {
    /// The channel to `connection`'s Pub/Sub (no call made yet).
    pub(crate) async fn connect(
        connection: &Connection,
        send_timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let base = connection
            .base_publisher(|builder| {
                builder.with_retry_policy(RetryableErrors.with_time_limit(send_timeout))
            })
            .await?;
        Ok(Self {
            base,
            publishers: RefCell::default(),
        })
    }

    fn publisher(&self, topic: &str) -> Publisher {
        self.publishers
            .borrow_mut()
            .entry(topic.to_string())
            .or_insert_with(|| {
                self.base
                    .publisher(topic)
                    .set_delay_threshold(BATCH_DELAY)
                    .set_message_count_threshold(1000)
                    .build()
            })
            .clone()
    }
}

/// The message a row becomes: its payload, attributes and ordering key, and its key.
fn message(row: &OutboxRow) -> Message {
    let attributes = row
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([(OUTBOX_KEY_ATTRIBUTE.to_string(), row.key.clone())]);
    let mut message = Message::new()
        .set_data(row.data.clone())
        .set_attributes(attributes);
    if !row.ordering_key.is_empty() {
        message = message.set_ordering_key(row.ordering_key.clone());
    }
    message
}

/// What a publish's error means for its row.
fn kind(error: &PublishError) -> FailureKind {
    match error {
        PublishError::OrderingKeyPaused => FailureKind::OrderingKeyPaused,
        PublishError::Rpc(e) => e.status().map_or(FailureKind::Unavailable, |s| {
            FailureKind::of_code(Code::from_i32(s.code as i32))
        }),
        _ => FailureKind::Unavailable,
    }
}

impl Sender for GoogleSender {
    fn send<'a>(
        &'a self,
        rows: &'a [OutboxRow],
        timeout: Duration,
    ) -> LocalBoxFuture<'a, Vec<Sent>> {
        Box::pin(async move {
            let sends: Vec<_> = rows
                .iter()
                .map(|row| self.publisher(&row.topic).publish(message(row)))
                .collect();
            // A little past the publisher's own limit: its answer (an exhausted retry) comes
            // first when it can.
            let answered = tokio::time::timeout(
                timeout + Duration::from_secs(2),
                futures::future::join_all(sends),
            )
            .await;
            let Ok(answers) = answered else {
                return vec![Err(FailureKind::Unavailable); rows.len()];
            };
            let mut paused = BTreeSet::new();
            let sent: Vec<Sent> = rows
                .iter()
                .zip(answers)
                .map(|(row, answer)| match answer {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        if !row.ordering_key.is_empty() {
                            paused.insert((row.topic.as_str(), row.ordering_key.as_str()));
                        }
                        Err(kind(&e))
                    }
                })
                .collect();
            // The key's rows wait in the outbox now: the publisher may take the key again.
            for (topic, key) in paused {
                self.publisher(topic).resume_publish(key);
            }
            sent
        })
    }
}
