//! A topic and a subscription of one test's own.

use crate::{PROJECT, connection, unique};
use google_cloud_pubsub::client::{Publisher, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{DeadLetterPolicy, Message, Subscription};
use leasehold::Connection;

/// A topic and a subscription made for one test, deleted by [`Scratch::cleanup`].
pub struct Scratch {
    /// The connection to the emulator it was made on.
    pub connection: Connection,
    topic: String,
    /// The test's subscription (full name).
    pub subscription: String,
    /// A publisher on the test's topic.
    pub publisher: Publisher,
    topics: TopicAdmin,
    subscriptions: SubscriptionAdmin,
    created_topics: Vec<String>,
    created_subscriptions: Vec<String>,
}

impl Scratch {
    /// A new topic and a subscription on it, shaped by `configure` (ack deadline 10 s unless it
    /// says otherwise).
    pub async fn new(configure: impl FnOnce(Subscription) -> Subscription) -> Self {
        let mut scratch = Self::topic_only().await;
        scratch.subscribe(configure).await;
        scratch
    }

    /// A new topic and a subscription on it named `subscription` (full name), for a test that
    /// must know the name before the subscription exists (a push endpoint bound first).
    pub async fn named(
        subscription: &str,
        configure: impl FnOnce(Subscription) -> Subscription,
    ) -> Self {
        let mut scratch = Self::topic_only().await;
        scratch.subscription = subscription.to_string();
        scratch.subscribe(configure).await;
        scratch
    }

    /// A new topic with no subscription yet.
    async fn topic_only() -> Self {
        let connection = connection();
        let topics = connection.topic_admin().await.unwrap();
        let subscriptions = connection.subscription_admin().await.unwrap();
        let topic = format!("{PROJECT}/topics/{}", unique("t"));
        let subscription = format!("{PROJECT}/subscriptions/{}", unique("s"));
        let publisher = connection.publisher(&topic).await.unwrap();
        let mut scratch = Self {
            connection,
            topic: topic.clone(),
            subscription,
            publisher,
            topics,
            subscriptions,
            created_topics: Vec::new(),
            created_subscriptions: Vec::new(),
        };
        scratch.create_topic(&topic).await;
        scratch
    }

    /// Creates the test's subscription on its topic.
    async fn subscribe(&mut self, configure: impl FnOnce(Subscription) -> Subscription) {
        let spec = configure(
            Subscription::new()
                .set_name(&self.subscription)
                .set_topic(&self.topic)
                .set_ack_deadline_seconds(10),
        );
        self.create_subscription(spec).await;
    }

    /// Creates the topic `name` (full name), deleted by [`Scratch::cleanup`].
    pub async fn create_topic(&mut self, name: &str) {
        self.topics
            .create_topic()
            .set_name(name)
            .send()
            .await
            .unwrap();
        self.created_topics.push(name.to_string());
    }

    /// Creates the subscription `spec` describes, deleted by [`Scratch::cleanup`].
    pub async fn create_subscription(&mut self, spec: Subscription) {
        let name = spec.name.clone();
        self.subscriptions
            .create_subscription()
            .with_request(spec)
            .send()
            .await
            .unwrap();
        self.created_subscriptions.push(name);
    }

    /// Adds a dead-letter topic with `max_attempts`, and a subscription on it that the test can
    /// consume. Returns that subscription's name.
    pub async fn with_dead_letter_topic(
        configure: impl FnOnce(Subscription) -> Subscription,
        max_attempts: i32,
    ) -> (Self, String) {
        let name = format!("{PROJECT}/subscriptions/{}", unique("s"));
        Self::named_with_dead_letter_topic(&name, configure, max_attempts).await
    }

    /// [`with_dead_letter_topic`](Self::with_dead_letter_topic), the test's subscription named
    /// `subscription`.
    pub async fn named_with_dead_letter_topic(
        subscription: &str,
        configure: impl FnOnce(Subscription) -> Subscription,
        max_attempts: i32,
    ) -> (Self, String) {
        let mut scratch = Self::topic_only().await;
        scratch.subscription = subscription.to_string();
        // The dead-letter topic must exist before a subscription names it.
        let dead_topic = format!("{PROJECT}/topics/{}", unique("dlt"));
        scratch.create_topic(&dead_topic).await;
        scratch
            .subscribe(|s| {
                configure(
                    s.set_dead_letter_policy(
                        DeadLetterPolicy::new()
                            .set_dead_letter_topic(&dead_topic)
                            .set_max_delivery_attempts(max_attempts),
                    ),
                )
            })
            .await;
        let dead_subscription = format!("{PROJECT}/subscriptions/{}", unique("dls"));
        scratch
            .create_subscription(
                Subscription::new()
                    .set_name(&dead_subscription)
                    .set_topic(&dead_topic)
                    .set_ack_deadline_seconds(10),
            )
            .await;
        (scratch, dead_subscription)
    }

    /// The test's topic (full name).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Publishes `data` with `attributes`; returns the message id.
    pub async fn publish_with(&self, data: &str, attributes: &[(&str, &str)]) -> String {
        let m = Message::new().set_data(data.to_string()).set_attributes(
            attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        self.publisher.publish(m).await.unwrap()
    }

    /// Publishes `data` (with an ordering key when not empty); returns the message id.
    pub async fn publish(&self, data: &str, ordering_key: &str) -> String {
        let mut m = Message::new().set_data(data.to_string());
        if !ordering_key.is_empty() {
            m = m.set_ordering_key(ordering_key);
        }
        self.publisher.publish(m).await.unwrap()
    }

    /// Publishes every payload at once (the publisher batches them); returns the message ids.
    pub async fn publish_all(&self, payloads: impl IntoIterator<Item = String>) -> Vec<String> {
        let futures: Vec<_> = payloads
            .into_iter()
            .map(|p| self.publisher.publish(Message::new().set_data(p)))
            .collect();
        futures::future::join_all(futures)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
    }

    /// Deletes the test's subscription now (to make it vanish under a running consumer).
    pub async fn delete_subscription(&self) {
        self.subscriptions
            .delete_subscription()
            .set_subscription(&self.subscription)
            .send()
            .await
            .unwrap();
    }

    /// Deletes what the test created: the emulator keeps leasing messages of a closed stream
    /// until its subscription is deleted.
    pub async fn cleanup(self) {
        for s in self.created_subscriptions.iter().rev() {
            let _ = self
                .subscriptions
                .delete_subscription()
                .set_subscription(s)
                .send()
                .await;
        }
        for t in self.created_topics.iter().rev() {
            let _ = self.topics.delete_topic().set_topic(t).send().await;
        }
    }
}
