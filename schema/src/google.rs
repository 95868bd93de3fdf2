//! Google's schema service behind [`RevisionSource`] ([`GoogleSchemas`], on
//! `google-cloud-pubsub`'s `SchemaService` client), and what a subscription's topic says about
//! its schema ([`TopicSchema`], through the admin clients). The only file that calls Google's
//! client.
//!
//! On Google's emulator the client's own transport cannot get a schema: it sends the request's
//! `view` as a number (`view=2`), which the emulator (0.8.20) cannot map ("Unmapped enum value")
//! and never answers. There the client runs on [`EmulatorStub`], which makes the same request
//! with the view by name.

use crate::attributes::Encoding;
use crate::error::{FetchError, SchemaError};
use crate::source::{Revision, RevisionSource, SchemaType};
use futures::future::BoxFuture;
use google_cloud_gax::error::rpc::Code;
use google_cloud_gax::options::RequestOptionsBuilder;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_pubsub::client::SchemaService;
use google_cloud_pubsub::model::schema;
use leasehold::Connection;
use leasehold::error::Cause;
use std::time::Duration;

/// How long one fetch of a revision may take; the cache tries again after its backoff.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema service of Pub/Sub (or of the emulator), through Google's client: one attempt per
/// fetch, within [`FETCH_TIMEOUT`]. Built by [`Schemas::connect`](crate::Schemas::connect).
#[derive(Debug, Clone)]
pub struct GoogleSchemas {
    client: SchemaService,
}

impl GoogleSchemas {
    /// The schema service `connection` reaches: the emulator's without credentials, Pub/Sub's
    /// with application-default credentials (the account needs `pubsub.schemas.get`).
    pub async fn connect(connection: &Connection) -> Result<Self, SchemaError> {
        if connection.is_emulator() {
            let stub = EmulatorStub {
                http: reqwest::Client::new(),
                endpoint: connection.endpoint().trim_end_matches('/').to_string(),
            };
            return Ok(Self {
                client: SchemaService::from_stub(stub),
            });
        }
        let client = SchemaService::builder()
            .with_endpoint(connection.endpoint())
            .build()
            .await
            .map_err(|e| SchemaError::Client(Cause::new(e)))?;
        Ok(Self { client })
    }
}

impl RevisionSource for GoogleSchemas {
    fn revision(
        &self,
        schema: &str,
        revision: Option<&str>,
    ) -> BoxFuture<'static, Result<Revision, FetchError>> {
        let name = match revision {
            Some(id) => format!("{schema}@{id}"),
            None => schema.to_string(),
        };
        // No view: a get without one answers every field, the definition included. (Google's
        // emulator, 0.8.20, never answers a get whose view is set: the client sends it as
        // `view=2`.)
        let call = self
            .client
            .get_schema()
            .set_name(name)
            .with_retry_policy(NeverRetry)
            .with_attempt_timeout(FETCH_TIMEOUT)
            .send();
        Box::pin(async move {
            let found = call.await.map_err(|e| match e.status().map(|s| s.code) {
                // A revision id the service cannot even parse is no revision of it either.
                Some(Code::NotFound | Code::InvalidArgument) => FetchError::NotFound,
                _ => FetchError::Unavailable(Cause::new(e)),
            })?;
            let schema_type = match found.r#type {
                schema::Type::Avro => SchemaType::Avro,
                schema::Type::ProtocolBuffer => SchemaType::ProtocolBuffer,
                other => {
                    return Err(FetchError::Unavailable(Cause::message(format!(
                        "the schema service answered a schema of an unknown type ({other:?})"
                    ))));
                }
            };
            Ok(Revision::new(
                found.name,
                found.revision_id,
                schema_type,
                found.definition,
            ))
        })
    }
}

/// The schema service's `GetSchema` on Google's emulator, for the official client
/// ([`SchemaService::from_stub`]): the request its REST transport makes, with the view by name
/// (`view=FULL`), which the emulator reads. Everything else the client may do is refused.
#[derive(Debug)]
struct EmulatorStub {
    http: reqwest::Client,
    endpoint: String,
}

impl google_cloud_pubsub::stub::SchemaService for EmulatorStub {
    fn get_schema(
        &self,
        request: google_cloud_pubsub::model::GetSchemaRequest,
        _options: google_cloud_gax::options::RequestOptions,
    ) -> impl Future<
        Output = google_cloud_pubsub::Result<
            google_cloud_gax::response::Response<google_cloud_pubsub::model::Schema>,
        >,
    > + Send {
        use google_cloud_gax::error::Error;
        use google_cloud_gax::error::rpc::Status;
        let call = self
            .http
            .get(format!("{}/v1/{}", self.endpoint, request.name))
            .query(&[("view", "FULL")])
            .timeout(FETCH_TIMEOUT)
            .send();
        async move {
            let response = call.await.map_err(|e| match e.is_timeout() {
                true => Error::timeout(e),
                false => Error::io(e),
            })?;
            let status = response.status();
            let body = response.bytes().await.map_err(Error::io)?;
            let code = match status.as_u16() {
                200 => {
                    return serde_json::from_slice(&body)
                        .map(google_cloud_gax::response::Response::from)
                        .map_err(Error::deser);
                }
                400 => Code::InvalidArgument,
                403 => Code::PermissionDenied,
                404 => Code::NotFound,
                _ => Code::Unavailable,
            };
            let message = String::from_utf8_lossy(&body).into_owned();
            Err(Error::service(
                Status::default().set_code(code).set_message(message),
            ))
        }
    }
}

/// What a subscription's topic says about its schema: [`topic_schema`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicSchema {
    /// The topic.
    pub topic: String,
    /// Its schema (`projects/P/schemas/S`; `_deleted-schema_` once deleted), if it has one.
    pub schema: Option<String>,
    /// How its messages are encoded, when it has a schema.
    pub encoding: Option<Encoding>,
    /// The oldest revision it accepts (empty: the first).
    pub first_revision_id: String,
    /// The newest revision it accepts (empty: the latest).
    pub last_revision_id: String,
}

impl TopicSchema {
    /// Checks that this topic's messages are readable with `schema`: the topic has that schema,
    /// with an encoding the decoders read (`BINARY` or `JSON`, both read by every decoder of
    /// this crate).
    pub fn readable_with(&self, subscription: &str, schema: &str) -> Result<Encoding, SchemaError> {
        let refused = |problem: String| SchemaError::Topic {
            subscription: subscription.to_string(),
            schema: schema.to_string(),
            problem,
        };
        match (&self.schema, self.encoding) {
            (None, _) => Err(refused(format!("{} has no schema", self.topic))),
            (Some(other), _) if other != schema => {
                Err(refused(format!("{} has the schema {other}", self.topic)))
            }
            (Some(_), None) => Err(refused(format!(
                "{} has no encoding a decoder reads (neither BINARY nor JSON)",
                self.topic
            ))),
            (Some(_), Some(encoding)) => Ok(encoding),
        }
    }
}

/// The schema settings of `subscription`'s topic, read through `connection`'s admin clients
/// (`pubsub.subscriptions.get`, `pubsub.topics.get`).
pub async fn topic_schema(
    connection: &Connection,
    subscription: &str,
) -> Result<TopicSchema, SchemaError> {
    let client = |e: leasehold::error::ConnectError| SchemaError::Client(Cause::new(e));
    let unavailable = |what: String| {
        move |e: google_cloud_pubsub::Error| SchemaError::Unavailable {
            what,
            cause: Cause::new(e),
        }
    };
    let subscriptions = connection.subscription_admin().await.map_err(client)?;
    let topic = subscriptions
        .get_subscription()
        .set_subscription(subscription)
        .send()
        .await
        .map_err(unavailable(format!("the subscription {subscription}")))?
        .topic;
    let topics = connection.topic_admin().await.map_err(client)?;
    let settings = topics
        .get_topic()
        .set_topic(&topic)
        .send()
        .await
        .map_err(unavailable(format!("the topic {topic}")))?
        .schema_settings
        .filter(|s| !s.schema.is_empty());
    Ok(match settings {
        None => TopicSchema {
            topic,
            schema: None,
            encoding: None,
            first_revision_id: String::new(),
            last_revision_id: String::new(),
        },
        Some(settings) => TopicSchema {
            topic,
            encoding: match settings.encoding {
                google_cloud_pubsub::model::Encoding::Binary => Some(Encoding::Binary),
                google_cloud_pubsub::model::Encoding::Json => Some(Encoding::Json),
                _ => None,
            },
            schema: Some(settings.schema),
            first_revision_id: settings.first_revision_id,
            last_revision_id: settings.last_revision_id,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(schema: Option<&str>, encoding: Option<Encoding>) -> TopicSchema {
        TopicSchema {
            topic: "projects/p/topics/t".into(),
            schema: schema.map(str::to_string),
            encoding,
            first_revision_id: String::new(),
            last_revision_id: String::new(),
        }
    }

    #[test]
    fn a_topic_is_readable_with_its_own_schema_in_either_encoding() {
        let s = "projects/p/schemas/orders";
        let sub = "projects/p/subscriptions/orders";
        assert_eq!(
            topic(Some(s), Some(Encoding::Json)).readable_with(sub, s),
            Ok(Encoding::Json)
        );
        assert_eq!(
            topic(None, None)
                .readable_with(sub, s)
                .unwrap_err()
                .to_string(),
            "the topic of projects/p/subscriptions/orders cannot be read with \
             projects/p/schemas/orders: projects/p/topics/t has no schema"
        );
        assert!(
            topic(Some("projects/p/schemas/other"), Some(Encoding::Binary))
                .readable_with(sub, s)
                .is_err()
        );
        assert!(topic(Some(s), None).readable_with(sub, s).is_err());
    }
}
