//! What a dry run lists of a dead letter: its id, its publish time, the attributes Pub/Sub adds
//! when it dead-letters a message, its attribute keys and its size. Never a payload, never the
//! value of an attribute the publisher set.

use crate::source::Received;
use std::time::SystemTime;

/// The attribute in which Pub/Sub records how many times the message was delivered on the
/// source subscription before it was dead-lettered.
pub const SOURCE_DELIVERY_COUNT: &str = "CloudPubSubDeadLetterSourceDeliveryCount";
/// The attribute naming the source subscription (its short name).
pub const SOURCE_SUBSCRIPTION: &str = "CloudPubSubDeadLetterSourceSubscription";
/// The attribute naming the source subscription's project.
pub const SOURCE_SUBSCRIPTION_PROJECT: &str = "CloudPubSubDeadLetterSourceSubscriptionProject";
/// The attribute holding the original message's publish time on its topic.
pub const SOURCE_TOPIC_PUBLISH_TIME: &str = "CloudPubSubDeadLetterSourceTopicPublishTime";

/// The attributes Pub/Sub adds to a dead-lettered copy: shown by a dry run, since they are
/// Pub/Sub's, not the publisher's.
pub const DEAD_LETTER_ATTRIBUTES: [&str; 4] = [
    SOURCE_DELIVERY_COUNT,
    SOURCE_SUBSCRIPTION,
    SOURCE_SUBSCRIPTION_PROJECT,
    SOURCE_TOPIC_PUBLISH_TIME,
];

/// One dead letter as a dry run lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The copy's message id on the dead-letter topic (not the original's: Pub/Sub gives the
    /// copy an id of its own).
    pub message_id: String,
    /// When the copy was published to the dead-letter topic.
    pub publish_time: Option<SystemTime>,
    /// The source subscription's delivery count when it was dead-lettered.
    pub source_delivery_count: Option<u32>,
    /// The source subscription, `projects/P/subscriptions/S` when Pub/Sub named both.
    pub source_subscription: Option<String>,
    /// The original message's publish time, as Pub/Sub wrote it.
    pub source_publish_time: Option<String>,
    /// The keys of the publisher's attributes, sorted (their values are never listed).
    pub attribute_keys: Vec<String>,
    /// The payload's size in bytes.
    pub size: usize,
}

impl Candidate {
    pub(crate) fn of(message: &Received) -> Self {
        let attribute = |key: &str| message.attributes.get(key).cloned();
        let source_subscription = match (
            attribute(SOURCE_SUBSCRIPTION_PROJECT),
            attribute(SOURCE_SUBSCRIPTION),
        ) {
            (Some(project), Some(name)) if !name.contains('/') => {
                Some(format!("projects/{project}/subscriptions/{name}"))
            }
            (_, name) => name,
        };
        let mut attribute_keys: Vec<String> = message
            .attributes
            .keys()
            .filter(|k| !DEAD_LETTER_ATTRIBUTES.contains(&k.as_str()))
            .cloned()
            .collect();
        attribute_keys.sort();
        Self {
            message_id: message.message_id.clone(),
            publish_time: message.publish_time,
            source_delivery_count: attribute(SOURCE_DELIVERY_COUNT).and_then(|n| n.parse().ok()),
            source_subscription,
            source_publish_time: attribute(SOURCE_TOPIC_PUBLISH_TIME),
            attribute_keys,
            size: message.data.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Action, Confirmation, SettleHandle};

    #[derive(Debug)]
    struct Unused;
    impl SettleHandle for Unused {
        fn settle(self: Box<Self>, _: Action) -> Confirmation {
            Confirmation::BestEffort
        }
    }

    #[test]
    fn a_candidate_names_pub_subs_attributes_and_only_the_keys_of_the_publishers() {
        let attributes = [
            (SOURCE_DELIVERY_COUNT, "5"),
            (SOURCE_SUBSCRIPTION, "orders"),
            (SOURCE_SUBSCRIPTION_PROJECT, "shop"),
            (SOURCE_TOPIC_PUBLISH_TIME, "2026-12-01T10:00:00.000Z"),
            ("tenant", "secret-tenant"),
            ("kind", "order"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let message = Received {
            message_id: "42".into(),
            data: bytes::Bytes::from_static(b"private payload"),
            attributes,
            ordering_key: String::new(),
            publish_time: None,
            delivery_attempt: None,
            handle: Box::new(Unused),
        };
        let c = Candidate::of(&message);
        assert_eq!(c.message_id, "42");
        assert_eq!(c.source_delivery_count, Some(5));
        assert_eq!(
            c.source_subscription.as_deref(),
            Some("projects/shop/subscriptions/orders")
        );
        assert_eq!(c.attribute_keys, ["kind", "tenant"]);
        assert_eq!(c.size, 15);
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret-tenant") && !shown.contains("private"));
    }
}
