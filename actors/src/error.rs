//! The error types, one per boundary.
//!
//! - [`PubSubError`]: what a handler sees when it asks for an outcome that cannot be honoured.
//! - [`StartError`]: what [`start`](crate::supervisor::start) returns when a subscription cannot
//!   be consumed at all.
//! - [`SourceError`]: what a message source (the Pub/Sub stream) reports to the supervisor.
//! - [`ReadError`]: what reading the subscription's configuration reports.
//! - [`AckFailure`]: why a confirmed ack or nack was refused (exactly-once subscriptions).
//! - [`DecodeError`]: why a payload could not be turned into the handler's type.

use std::time::Duration;

/// An outcome the handler asked for cannot be honoured.
///
/// The message is untouched by the refused call: the handler still owns it and must settle it
/// with another outcome (or it is retried when the handler returns without one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PubSubError {
    /// `retry_after(delay)` asked to hold the lease longer than the lease that remains.
    ///
    /// Nothing was done to the message; the handler may pick a shorter delay or `retry()`.
    #[error(
        "retry_after({requested:?}) is longer than the lease that remains ({remaining:?}); \
         choose a shorter delay or retry() now"
    )]
    DelayBeyondLease {
        /// The delay the handler asked for.
        requested: Duration,
        /// What remains of the lease budget (`max_lease` minus the time already held).
        remaining: Duration,
    },
}

/// A subscription cannot be consumed.
///
/// Nothing was pulled: no message was leased, so none is affected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The subscription does not exist. No message was pulled.
    #[error("subscription {0} does not exist")]
    NotFound(String),
    /// The subscription name is not of the form `projects/{project}/subscriptions/{name}`.
    /// No message was pulled.
    #[error(
        "invalid subscription name {0:?}: expected projects/PROJECT/subscriptions/NAME, \
         NAME 3 to 255 characters starting with a letter"
    )]
    InvalidName(String),
    /// The registration's options contradict each other or Pub/Sub's limits.
    /// No message was pulled.
    #[error("invalid registration: {0}")]
    InvalidOptions(String),
    /// The Pub/Sub client could not be built (credentials, endpoint). No message was pulled.
    #[error("cannot connect to Pub/Sub: {0}")]
    Connect(String),
    /// Reading the subscription failed for another reason (network, server).
    /// No message was pulled.
    #[error("cannot read subscription {subscription}: {reason}")]
    Read {
        /// The subscription.
        subscription: String,
        /// What the server or the transport said.
        reason: String,
    },
}

/// The stream of messages failed.
///
/// Messages already leased keep their leases and are settled as usual; the supervisor reopens the
/// stream with backoff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The stream ended with an error the client does not retry by itself. Leased messages are
    /// unaffected; the supervisor reopens the stream after a backoff.
    #[error("message stream failed: {0}")]
    Stream(String),
}

/// Reading the subscription's configuration failed.
///
/// Nothing was pulled yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The caller lacks `pubsub.subscriptions.get`. Leasehold goes on without the subscription's
    /// dead-letter limit: `drop()` acks unless the registration declares `max_attempts`.
    #[error("permission denied reading the subscription (needs pubsub.subscriptions.get): {0}")]
    PermissionDenied(String),
    /// The subscription does not exist; `start` fails with [`StartError::NotFound`].
    #[error("subscription not found: {0}")]
    NotFound(String),
    /// Any other failure; `start` fails with [`StartError::Read`].
    #[error("{0}")]
    Other(String),
}

/// A confirmed ack or nack was refused (exactly-once subscriptions).
///
/// For an ack, the message was not acknowledged and Pub/Sub redelivers it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckFailure {
    /// The lease was gone before the ack reached Pub/Sub. The message will be redelivered.
    #[error("the lease had expired; the message will be redelivered")]
    LeaseExpired,
    /// Pub/Sub refused the ack id (for example INVALID_ARGUMENT for a stale one), or the RPC
    /// failed. The message will be redelivered.
    #[error("Pub/Sub refused the ack: {0}")]
    Refused(String),
    /// The client shut down before the ack was sent or confirmed; the outcome is unknown and the
    /// message may be redelivered.
    #[error("the client shut down before confirming: {0}")]
    Shutdown(String),
}

/// The payload could not be decoded into the handler's type.
///
/// The message goes to the registration's [`FailurePolicy`](crate::FailurePolicy)
/// (by default: dropped, that is acked).
///
/// It says where decoding failed and what kind of failure it was, never what the payload held:
/// serde's own messages quote values (`invalid type: string "4111…", expected u64`), so they are
/// not kept, and neither logs nor this error can carry payload content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload is not valid JSON for the handler's type.
    #[error(
        "payload is not valid JSON for the handler's type: {category} error at line {line}, \
         column {column}"
    )]
    Json {
        /// What kind of failure: `syntax` (not JSON), `data` (JSON of the wrong shape or type),
        /// `eof` (cut short) or `io`.
        category: &'static str,
        /// The line of the payload where decoding failed (from 1).
        line: usize,
        /// The column where decoding failed (from 1).
        column: usize,
    },
}

impl DecodeError {
    /// The category and position of a serde_json error, without its text.
    pub(crate) fn json(error: &serde_json::Error) -> Self {
        use serde_json::error::Category;
        let category = match error.classify() {
            Category::Io => "io",
            Category::Syntax => "syntax",
            Category::Data => "data",
            Category::Eof => "eof",
        };
        Self::Json {
            category,
            line: error.line(),
            column: error.column(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_beyond_lease_names_both_durations() {
        let e = PubSubError::DelayBeyondLease {
            requested: Duration::from_secs(90),
            remaining: Duration::from_secs(30),
        };
        assert_eq!(
            e.to_string(),
            "retry_after(90s) is longer than the lease that remains (30s); \
             choose a shorter delay or retry() now"
        );
    }

    #[test]
    fn start_errors_say_what_to_fix() {
        assert_eq!(
            StartError::NotFound("projects/p/subscriptions/s".into()).to_string(),
            "subscription projects/p/subscriptions/s does not exist"
        );
        assert!(
            StartError::InvalidName("s".into())
                .to_string()
                .contains("expected projects/PROJECT/subscriptions/NAME")
        );
    }

    #[test]
    fn decode_errors_name_the_place_and_never_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Order {
            id: u64,
        }
        let e = serde_json::from_str::<Order>(r#"{"id": "card-4111"}"#).unwrap_err();
        let decoded = DecodeError::json(&e);
        assert_eq!(
            decoded.to_string(),
            "payload is not valid JSON for the handler's type: data error at line 1, column 18"
        );
        assert!(!format!("{decoded:?}").contains("4111"));
    }

    #[test]
    fn ack_failure_says_redelivered() {
        assert!(AckFailure::LeaseExpired.to_string().contains("redelivered"));
    }
}
