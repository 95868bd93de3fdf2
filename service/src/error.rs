//! The service's one error: why it could not run, or a replay could not start. Each variant
//! says what became of the messages.
//!
//! Uses [`crate::config`] (its [`ConfigError`]) and the runtime's errors.

use crate::config::ConfigError;
use leasehold::{StartError, error::ConnectError};

/// The service could not run.
///
/// When it fails before its subscriptions started, nothing was pulled; when one subscription
/// fails to start, those started before it are stopped (drained) first.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The configuration could not be read or applied.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A subscription is configured with no handler bound to its key.
    #[error("subscription {key} is configured, but no handler is bound to it")]
    NoHandler {
        /// Its key.
        key: String,
    },
    /// A handler is bound to a key that no subscription is configured under.
    #[error("a handler is bound to {key}, but no subscription is configured under that key")]
    NoSubscription {
        /// The key.
        key: String,
    },
    /// A subscription's schema, or its topic, cannot be read by the handler bound to it (the
    /// schema or its reader revision does not exist, is of another type, or the topic has
    /// another schema), or the schema service did not answer. Nothing of it was consumed.
    #[error("subscription {key}: its schema cannot be read")]
    Schema {
        /// Its key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold_schema::SchemaError,
    },
    /// The Pub/Sub clients could not be built.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A subscription could not start.
    #[error("subscription {key} could not start")]
    Start {
        /// Its key.
        key: String,
        /// Why.
        #[source]
        cause: StartError,
    },
    /// `replay` named a key no subscription is configured under. Nothing was consumed.
    #[error("no subscription is configured under {key} (configured: {})", configured.join(", "))]
    NotConfigured {
        /// The key.
        key: String,
        /// The keys configured.
        configured: Vec<String>,
    },
    /// `replay` has no subscription to replay from: neither `--from` nor the key's
    /// `dead_letter_subscription` names one. Nothing was consumed.
    #[error(
        "nothing to replay {key} from: name a subscription on its dead-letter topic{} with \
         --from, or as subscriptions.{key}.dead_letter_subscription",
        dead_letter_topic.as_ref().map(|t| format!(" ({t})")).unwrap_or_default()
    )]
    NoDeadLetterSubscription {
        /// The key.
        key: String,
        /// Its dead-letter topic, when the subscription could be read.
        dead_letter_topic: Option<String>,
    },
    /// The replay could not start (see the cause). Nothing was consumed.
    #[error("cannot replay the dead letters of {key}")]
    Replay {
        /// The key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold::error::ReplayError,
    },
    /// A subscription's outbox relay could not start (its publisher could not be built). The
    /// subscriptions started before it were drained and stopped; the outbox's rows wait.
    #[error("the outbox relay of subscription {key} could not start")]
    Relay {
        /// The subscription's key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold_relay::RelayError,
    },
    /// The HTTP address could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}
