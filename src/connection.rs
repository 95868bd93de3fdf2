//! Where Pub/Sub is and how to authenticate: real GCP with application-default credentials, or
//! the emulator with anonymous credentials.

use google_cloud_auth::credentials::{Credentials, anonymous};
use google_cloud_pubsub::builder::publisher::BasePublisherBuilder;
use google_cloud_pubsub::client::{
    BasePublisher, Publisher, Subscriber, SubscriptionAdmin, TopicAdmin,
};
use leasehold_actors::error::Cause;
use leasehold_actors::source::Connector;
use std::rc::Rc;

/// The environment variable the Pub/Sub tools read for the emulator's `host:port`.
pub const EMULATOR_HOST_ENV: &str = "PUBSUB_EMULATOR_HOST";

/// Pub/Sub's global endpoint, the client's default.
const GLOBAL_ENDPOINT: &str = "https://pubsub.googleapis.com";

/// The client could not be built.
///
/// Nothing was pulled or published; fix the configuration and start again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Building a client failed (for example: no application-default credentials).
    #[error("cannot build the Pub/Sub client for {endpoint}")]
    Client {
        /// The endpoint the client was for.
        endpoint: String,
        /// What the client said.
        #[source]
        cause: Cause,
    },
}

/// Applies a connection's endpoint and credentials to one of the client builders (they share
/// these methods but no trait) and builds the client.
macro_rules! configured {
    ($connection:expr, $builder:expr) => {{
        let connection = $connection;
        let mut builder = $builder;
        if let Some(endpoint) = &connection.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(credentials) = connection.credentials() {
            builder = builder.with_credentials(credentials);
        }
        builder.build().await.map_err(|e| connection.error(e))
    }};
}

/// How to reach Pub/Sub.
///
/// ```no_run
/// use leasehold::Connection;
/// // PUBSUB_EMULATOR_HOST when set, else real Pub/Sub with application-default credentials.
/// let connection = Connection::from_env();
/// // Exactly-once delivery holds within one region: use a locational endpoint for it.
/// let regional = Connection::gcp().with_endpoint("https://us-central1-pubsub.googleapis.com");
/// # let _ = (connection, regional);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    endpoint: Option<String>,
    anonymous: bool,
}

impl Connection {
    /// Real Pub/Sub on the global endpoint, with application-default credentials.
    ///
    /// Google's client finds them: `gcloud auth application-default login`, a service account
    /// through `GOOGLE_APPLICATION_CREDENTIALS`, or the metadata server on GCP. The account
    /// needs `pubsub.subscriptions.consume` and, to read the dead-letter limit,
    /// `pubsub.subscriptions.get` (what happens without it:
    /// [`Registration::max_attempts`](crate::Registration::max_attempts)).
    pub fn gcp() -> Self {
        Self {
            endpoint: None,
            anonymous: false,
        }
    }

    /// The emulator at `host` (`host:port`, or a full `http://host:port`), without credentials.
    pub fn emulator(host: &str) -> Self {
        let endpoint = if host.contains("://") {
            host.to_string()
        } else {
            format!("http://{host}")
        };
        Self {
            endpoint: Some(endpoint),
            anonymous: true,
        }
    }

    /// The emulator when `PUBSUB_EMULATOR_HOST` is set, else [`Connection::gcp`] (its doc says
    /// which credentials and permissions real Pub/Sub needs). Which one was chosen is logged
    /// once, at info.
    pub fn from_env() -> Self {
        let connection = match std::env::var(EMULATOR_HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => Self::emulator(host.trim()),
            _ => Self::gcp(),
        };
        static LOGGED: std::sync::Once = std::sync::Once::new();
        LOGGED.call_once(|| {
            if connection.anonymous {
                tracing::info!(
                    endpoint = connection.endpoint(),
                    "{EMULATOR_HOST_ENV} is set: using the Pub/Sub emulator"
                );
            } else {
                tracing::info!(
                    endpoint = connection.endpoint(),
                    "{EMULATOR_HOST_ENV} is not set: using Pub/Sub with application-default \
                     credentials"
                );
            }
        });
        connection
    }

    /// Uses `endpoint` instead of the global one (a locational or private endpoint).
    ///
    /// On an exactly-once subscription reached through the global endpoint
    /// ([`is_global`](Self::is_global)), Leasehold warns once at start: exactly-once delivery
    /// holds within one region only, so use a locational endpoint
    /// (`https://us-central1-pubsub.googleapis.com`).
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(GLOBAL_ENDPOINT)
    }

    /// Whether this is the emulator (anonymous credentials): what [`emulator`](Self::emulator)
    /// and [`from_env`](Self::from_env) with `PUBSUB_EMULATOR_HOST` set make.
    pub fn is_emulator(&self) -> bool {
        self.anonymous
    }

    /// Whether this is Pub/Sub's global endpoint, where exactly-once delivery holds only within
    /// one region.
    pub fn is_global(&self) -> bool {
        self.endpoint().trim_end_matches('/') == GLOBAL_ENDPOINT
    }

    fn credentials(&self) -> Option<Credentials> {
        self.anonymous.then(|| anonymous::Builder::new().build())
    }

    fn error(&self, e: impl std::error::Error + Send + Sync + 'static) -> ConnectError {
        ConnectError::Client {
            endpoint: self.endpoint().to_string(),
            cause: Cause::new(e),
        }
    }

    /// The clients one or several subscriptions consume through, built once: pass it to
    /// [`start_with`](crate::start_with) for each registration (or let [`start`](crate::start)
    /// build one per subscription).
    ///
    /// ```no_run
    /// # use leasehold::{Connection, Delivery, Registration};
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let connector = Connection::from_env().connect().await?;
    /// let ack = |_, d: Delivery| async move { d.ack() };
    /// let orders = leasehold::start_with(
    ///     Registration::raw("projects/p/subscriptions/orders", ack),
    ///     connector.clone(),
    /// )
    /// .await?;
    /// let refunds = leasehold::start_with(
    ///     Registration::raw("projects/p/subscriptions/refunds", ack),
    ///     connector,
    /// )
    /// .await?;
    /// # let _ = (orders, refunds);
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<Rc<dyn Connector>, ConnectError> {
        Ok(Rc::new(crate::google::GoogleConnector::new(self).await?))
    }

    /// A subscriber client.
    pub async fn subscriber(&self) -> Result<Subscriber, ConnectError> {
        configured!(self, Subscriber::builder())
    }

    /// A subscription admin client (create, read, delete subscriptions).
    pub async fn subscription_admin(&self) -> Result<SubscriptionAdmin, ConnectError> {
        configured!(self, SubscriptionAdmin::builder())
    }

    /// A topic admin client (create, delete topics).
    pub async fn topic_admin(&self) -> Result<TopicAdmin, ConnectError> {
        configured!(self, TopicAdmin::builder())
    }

    /// A publisher for `topic` (`projects/P/topics/T`).
    pub async fn publisher(&self, topic: &str) -> Result<Publisher, ConnectError> {
        configured!(self, Publisher::builder(topic))
    }

    /// One channel for the publishers of many topics (`base.publisher(topic).build()`), with
    /// this connection's endpoint and credentials; `configure` sets the rest of its builder (a
    /// retry policy, say). What `leasehold-relay` sends through.
    pub async fn base_publisher(
        &self,
        configure: impl FnOnce(BasePublisherBuilder) -> BasePublisherBuilder,
    ) -> Result<BasePublisher, ConnectError> {
        configured!(self, configure(BasePublisher::builder()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulator_hosts_become_plain_http_endpoints() {
        let c = Connection::emulator("localhost:8085");
        assert_eq!(c.endpoint(), "http://localhost:8085");
        assert!(!c.is_global());
        assert!(c.is_emulator());
        assert!(!Connection::gcp().is_emulator());
        assert_eq!(
            Connection::emulator("http://127.0.0.1:9").endpoint(),
            "http://127.0.0.1:9"
        );
    }

    #[test]
    fn gcp_is_global_until_given_a_locational_endpoint() {
        assert!(Connection::gcp().is_global());
        let regional = Connection::gcp().with_endpoint("https://us-east1-pubsub.googleapis.com");
        assert!(!regional.is_global());
    }
}
