//! The topics and subscriptions of the end-to-end runs: one fresh pair per run, its messages
//! published before the side starts, deleted after it.
//!
//! Uses the emulator through Leasehold's [`Connection`] (its admin clients and publisher) and
//! the unique names of `leasehold-test-support`.

use google_cloud_pubsub::client::{SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{Message, Subscription as SubscriptionSpec};
use leasehold::Connection;
use leasehold_test_support::unique;

/// The admin clients and the publisher's connection of one emulator.
pub(crate) struct Admin {
    connection: Connection,
    topics: TopicAdmin,
    subscriptions: SubscriptionAdmin,
}

/// A topic and its subscription, made for one run.
pub(crate) struct Prepared {
    pub(crate) topic: String,
    pub(crate) subscription: String,
}

impl Admin {
    /// The admin clients for `connection`.
    pub(crate) async fn connect(connection: &Connection) -> Self {
        Self {
            topics: connection.topic_admin().await.unwrap(),
            subscriptions: connection.subscription_admin().await.unwrap(),
            connection: connection.clone(),
        }
    }

    /// A fresh topic and subscription (ack deadline 60 s) with `messages` 200-byte messages
    /// waiting.
    pub(crate) async fn prepare(&self, messages: usize, exactly_once: bool) -> Prepared {
        let id = unique("bench");
        let topic = format!("projects/leasehold-bench/topics/{id}");
        let subscription = format!("projects/leasehold-bench/subscriptions/{id}");
        self.topics
            .create_topic()
            .set_name(&topic)
            .send()
            .await
            .unwrap();
        self.subscriptions
            .create_subscription()
            .with_request(
                SubscriptionSpec::new()
                    .set_name(&subscription)
                    .set_topic(&topic)
                    .set_ack_deadline_seconds(60)
                    .set_enable_exactly_once_delivery(exactly_once),
            )
            .send()
            .await
            .unwrap();
        let publisher = self.connection.publisher(&topic).await.unwrap();
        let payload = bytes::Bytes::from(vec![b'x'; 200]);
        for chunk in (0..messages).collect::<Vec<_>>().chunks(2000) {
            let sent: Vec<_> = chunk
                .iter()
                .map(|_| publisher.publish(Message::new().set_data(payload.clone())))
                .collect();
            for r in futures::future::join_all(sent).await {
                r.unwrap();
            }
        }
        Prepared {
            topic,
            subscription,
        }
    }

    /// Deletes the subscription and its topic; a failure is ignored (the emulator forgets
    /// them when it stops).
    pub(crate) async fn cleanup(&self, made: Prepared) {
        let _ = self
            .subscriptions
            .delete_subscription()
            .set_subscription(&made.subscription)
            .send()
            .await;
        let _ = self
            .topics
            .delete_topic()
            .set_topic(&made.topic)
            .send()
            .await;
    }
}
