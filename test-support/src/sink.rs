//! A plain subscriber on a topic the code under test publishes to (through the transactional
//! outbox's relay, say): a subscription of its own, with message ordering on, whose every
//! message is acked and recorded with its key attribute and ordering key. It counts what
//! reached Pub/Sub, copies included.

use crate::{PROJECT, Scratch, unique};
use google_cloud_pubsub::model::Subscription;
use leasehold::OUTBOX_KEY_ATTRIBUTE;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// One message that arrived.
#[derive(Debug, Clone)]
pub struct Arrived {
    /// Its message id.
    pub message_id: String,
    /// Its payload, as text.
    pub data: String,
    /// Its `leasehold-key` attribute, when it has one.
    pub key: Option<String>,
    /// Its ordering key (empty: none).
    pub ordering_key: String,
    /// Its other attributes.
    pub attributes: BTreeMap<String, String>,
    /// When it arrived.
    pub at: Instant,
}

/// The subscriber; stops when dropped. Its subscription is deleted with its [`Scratch`].
pub struct Sink {
    /// The subscription it reads (full name).
    pub subscription: String,
    arrived: Arc<Mutex<Vec<Arrived>>>,
    task: actix_rt::task::JoinHandle<()>,
}

impl Sink {
    /// A subscription on `topic` (which must exist), made through `scratch` (and deleted with
    /// it), read from now on.
    pub async fn on(scratch: &mut Scratch, topic: &str) -> Self {
        let subscription = format!("{PROJECT}/subscriptions/{}", unique("sink"));
        scratch
            .create_subscription(
                Subscription::new()
                    .set_name(&subscription)
                    .set_topic(topic)
                    .set_ack_deadline_seconds(10)
                    .set_enable_message_ordering(true),
            )
            .await;
        let subscriber = scratch.connection.subscriber().await.unwrap();
        let arrived: Arc<Mutex<Vec<Arrived>>> = Arc::default();
        let record = arrived.clone();
        let name = subscription.clone();
        let task = actix_rt::spawn(async move {
            let mut stream = subscriber.subscribe(&name).build();
            while let Some(next) = stream.next().await {
                let Ok((message, handler)) = next else {
                    continue;
                };
                let mut attributes: BTreeMap<String, String> =
                    message.attributes.into_iter().collect();
                record.lock().push(Arrived {
                    message_id: message.message_id,
                    data: String::from_utf8_lossy(&message.data).into_owned(),
                    key: attributes.remove(OUTBOX_KEY_ATTRIBUTE),
                    ordering_key: message.ordering_key,
                    attributes,
                    at: Instant::now(),
                });
                handler.ack();
            }
        });
        Self {
            subscription,
            arrived,
            task,
        }
    }

    /// Everything that arrived, in order.
    pub fn all(&self) -> Vec<Arrived> {
        self.arrived.lock().clone()
    }

    /// How many messages arrived, copies and redeliveries included.
    pub fn len(&self) -> usize {
        self.arrived.lock().len()
    }

    /// How many messages reached Pub/Sub: distinct message ids (copies count, redeliveries of
    /// one to this subscriber do not).
    pub fn messages(&self) -> usize {
        self.copies().values().sum()
    }

    /// Whether nothing arrived.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many copies of each key reached Pub/Sub: its distinct message ids (a redelivery of
    /// one copy to this subscriber is not another copy).
    pub fn copies(&self) -> BTreeMap<String, usize> {
        let mut ids: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for a in self.arrived.lock().iter() {
            ids.entry(a.key.clone().unwrap_or_default())
                .or_default()
                .insert(a.message_id.clone());
        }
        ids.into_iter().map(|(key, ids)| (key, ids.len())).collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
