//! A schema, a topic and a subscription of one test's own, and a handler that keeps what it got.

use apache_avro::Schema as AvroSchema;
use apache_avro::types::Value;
use google_cloud_pubsub::client::{Publisher, SchemaService, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{
    Encoding, Message, Schema, SchemaSettings, Subscription, Topic, schema,
};
use leasehold::error::DecodeError;
use leasehold::{Connection, Delivery, FailurePolicy, Outcome, Registration};
use leasehold_test_support::{PROJECT, connection, eventually_showing, unique};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// The attributes Pub/Sub stamps on a schema topic's messages.
pub const NAME: &str = "googclient_schemaname";
pub const REVISION: &str = "googclient_schemarevisionid";
pub const ENCODING: &str = "googclient_schemaencoding";

/// A schema (Avro, on the emulator's schema service, when the test has one), a topic, with
/// that schema or plain, and a subscription on it.
pub struct Scene {
    pub connection: Connection,
    pub schema: String,
    pub topic: String,
    pub subscription: String,
    pub publisher: Publisher,
    schemas: Option<SchemaService>,
    topics: TopicAdmin,
    subscriptions: SubscriptionAdmin,
}

async fn schema_service() -> SchemaService {
    SchemaService::builder()
        .with_endpoint(connection().endpoint())
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap()
}

/// An Avro schema's definition, for the schema service.
fn avro(definition: &str) -> Schema {
    Schema::new()
        .set_type(schema::Type::Avro)
        .set_definition(definition)
}

impl Scene {
    /// An Avro schema whose first revision is `definition` (its id returned), and a topic that
    /// validates with it in `encoding` (`None`: a plain topic).
    pub async fn avro(definition: &str, encoding: Option<Encoding>) -> (Self, String) {
        let client = schema_service().await;
        let name = format!("{PROJECT}/schemas/{}", unique("sch"));
        let created = client
            .create_schema()
            .set_parent(PROJECT)
            .set_schema_id(name.rsplit('/').next().unwrap())
            .set_schema(avro(definition))
            .send()
            .await
            .unwrap();
        let scene = Self::with_topic(name, Some(client), encoding).await;
        (scene, created.revision_id)
    }

    /// A plain topic, for messages stamped by hand as `schema`'s.
    pub async fn plain(schema: &str) -> Self {
        Self::with_topic(schema.to_string(), None, None).await
    }

    async fn with_topic(
        schema: String,
        schemas: Option<SchemaService>,
        encoding: Option<Encoding>,
    ) -> Self {
        let connection = connection();
        let topics = connection.topic_admin().await.unwrap();
        let subscriptions = connection.subscription_admin().await.unwrap();
        let topic = format!("{PROJECT}/topics/{}", unique("t"));
        let mut spec = Topic::new().set_name(&topic);
        if let Some(encoding) = encoding {
            spec = spec.set_schema_settings(
                SchemaSettings::new()
                    .set_schema(&schema)
                    .set_encoding(encoding),
            );
        }
        topics
            .create_topic()
            .with_request(spec)
            .send()
            .await
            .unwrap();
        let subscription = format!("{PROJECT}/subscriptions/{}", unique("s"));
        subscriptions
            .create_subscription()
            .with_request(
                Subscription::new()
                    .set_name(&subscription)
                    .set_topic(&topic)
                    .set_ack_deadline_seconds(10),
            )
            .send()
            .await
            .unwrap();
        let publisher = connection.publisher(&topic).await.unwrap();
        Self {
            connection,
            schema,
            topic,
            subscription,
            publisher,
            schemas,
            topics,
            subscriptions,
        }
    }

    /// Commits a revision; returns its id.
    pub async fn commit(&self, definition: &str) -> String {
        let client = self.schemas.as_ref().expect("a schema on the emulator");
        client
            .commit_schema()
            .set_name(&self.schema)
            .set_schema(avro(definition))
            .send()
            .await
            .unwrap()
            .revision_id
    }

    /// Publishes `data` with `attributes`; returns the message id.
    pub async fn publish(
        &self,
        data: impl Into<bytes::Bytes>,
        attributes: &[(&str, &str)],
    ) -> String {
        let message = Message::new().set_data(data.into()).set_attributes(
            attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        self.publisher.publish(message).await.unwrap()
    }

    /// Deletes the subscription, the topic and the schema.
    pub async fn cleanup(self) {
        let _ = self
            .subscriptions
            .delete_subscription()
            .set_subscription(&self.subscription)
            .send()
            .await;
        let _ = self
            .topics
            .delete_topic()
            .set_topic(&self.topic)
            .send()
            .await;
        if let Some(client) = &self.schemas {
            let _ = client.delete_schema().set_name(&self.schema).send().await;
        }
    }
}

/// Avro revision 1: an order with a note (which has a default).
pub const V1: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"note","type":"string","default":""}]}"#;
/// Avro revision 2: the note removed, a quantity added with a default.
pub const V2: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"qty","type":"int","default":1}]}"#;
/// What the handler reads every revision as (revision 1, the reader).
#[derive(Debug, serde::Deserialize)]
pub struct Order {
    pub id: i64,
    pub note: String,
}

/// A payload of `definition` with these fields, in `encoding`.
fn payload(definition: &str, fields: &[(&str, Value)], json: &str, encoding: &Encoding) -> Vec<u8> {
    match encoding {
        Encoding::Json => json.as_bytes().to_vec(),
        _ => {
            let schema = AvroSchema::parse_str(definition).unwrap();
            let record = Value::Record(
                fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            );
            apache_avro::to_avro_datum(&schema, record).unwrap()
        }
    }
}

pub fn v1(id: i64, encoding: &Encoding) -> Vec<u8> {
    let json = format!(r#"{{"id":{id},"note":"n{id}"}}"#);
    let fields = [
        ("id", Value::Long(id)),
        ("note", Value::String(format!("n{id}"))),
    ];
    payload(V1, &fields, &json, encoding)
}

pub fn v2(id: i64, encoding: &Encoding) -> Vec<u8> {
    let json = format!(r#"{{"id":{id},"qty":3}}"#);
    payload(
        V2,
        &[("id", Value::Long(id)), ("qty", Value::Int(3))],
        &json,
        encoding,
    )
}

/// What the handler got (each payload's id and the revision its message was written with) and
/// what the failure policy got, shared with the test.
#[derive(Clone, Default)]
pub struct Seen {
    pub handled: Arc<Mutex<Vec<(i64, String)>>>,
    pub refused: Arc<Mutex<Vec<DecodeError>>>,
    /// Each Avro order's note, by id.
    pub notes: Arc<Mutex<Vec<(i64, String)>>>,
}

impl Seen {
    /// The handler: keeps the id and the message's revision, acks.
    pub fn keep(&self, id: i64, delivery: &Delivery) -> Outcome {
        let revision = delivery
            .attributes()
            .get(REVISION)
            .cloned()
            .unwrap_or_default();
        self.handled.lock().push((id, revision));
        delivery.ack()
    }

    /// Keeps an order's note.
    pub fn note(&self, id: i64, note: &str) {
        self.notes.lock().push((id, note.to_string()));
    }

    /// A failure policy that keeps each error and drops the message.
    pub fn policy(&self) -> FailurePolicy {
        let refused = self.refused.clone();
        FailurePolicy::custom(move |_, error| {
            refused.lock().push(error.clone());
            Outcome::drop()
        })
    }

    /// The ids handled, sorted.
    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.handled.lock().iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids
    }

    /// Waits until the handler got exactly `ids` and the failure policy `refused` messages.
    pub async fn wait_for(&self, ids: &[i64], refused: usize) {
        eventually_showing(
            "the messages handled and refused",
            Duration::from_secs(30),
            || self.ids() == ids && self.refused.lock().len() == refused,
            || format!("{:?}, refused {:?}", self.ids(), self.refused.lock()),
        )
        .await;
    }

    /// The handled ids written with `revision`, sorted.
    pub fn ids_of(&self, revision: &str) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .handled
            .lock()
            .iter()
            .filter(|(_, r)| r == revision)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// Starts a subscription of `scene` decoding Avro orders with `decoder`, its handler and
/// policy `seen`'s.
pub async fn consume(
    scene: &Scene,
    decoder: impl leasehold::Decoder<Output = Order>,
    seen: &Seen,
) -> leasehold::Subscription {
    let handler = seen.clone();
    let registration = Registration::decoded(
        &scene.subscription,
        decoder,
        move |order: Order, d: Delivery| {
            handler.note(order.id, &order.note);
            std::future::ready(handler.keep(order.id, &d))
        },
    )
    .failure_policy(seen.policy());
    leasehold::start(registration, &scene.connection)
        .await
        .unwrap()
}
