//! The error types, one per boundary. Each variant's doc says what happened to the messages.
//!
//! - [`RetryAfterError`] (also named [`PubSubError`]): a `retry_after` whose hold cannot be
//!   honoured.
//! - [`StartError`]: what [`start`](crate::start) returns when a subscription cannot be consumed
//!   at all.
//! - [`ReplayError`]: what [`replay`](crate::replay::replay) returns when a replay of dead
//!   letters cannot start.
//! - [`InvalidOption`]: an option of a [`Registration`](crate::Registration) out of its range,
//!   reported by `Registration::validate` and by `start`.
//! - [`ReadError`]: what reading the subscription's configuration reports (a [`Connector`]).
//! - [`SourceError`]: what a message source (the Pub/Sub stream) reports to the supervisor.
//! - [`AckFailure`]: why a confirmed ack or nack was refused (exactly-once subscriptions).
//! - [`DecodeError`]: why a payload could not be turned into the handler's type.
//! - [`StoreError`]: a progress store could not be read or written.
//! - [`OutboxError`]: a message could not be written to the transactional outbox.
//!
//! The root crate adds `ConnectError` (a client could not be built) and `EmulatorError` (the
//! emulator launcher failed).
//!
//! Errors from Pub/Sub or the transport keep their cause as the [`source`](std::error::Error::source)
//! (shared, so the errors stay `Clone`) and their gRPC [`Code`] when there is one.
//!
//! [`Connector`]: crate::source::Connector

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// An error and its causes, for a log line: `error: cause: cause of the cause`.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// A gRPC status code, as Pub/Sub reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// OK (0).
    Ok,
    /// CANCELLED (1).
    Cancelled,
    /// UNKNOWN (2).
    Unknown,
    /// INVALID_ARGUMENT (3): on exactly-once subscriptions, a stale ack id.
    InvalidArgument,
    /// DEADLINE_EXCEEDED (4).
    DeadlineExceeded,
    /// NOT_FOUND (5).
    NotFound,
    /// ALREADY_EXISTS (6).
    AlreadyExists,
    /// PERMISSION_DENIED (7).
    PermissionDenied,
    /// RESOURCE_EXHAUSTED (8).
    ResourceExhausted,
    /// FAILED_PRECONDITION (9).
    FailedPrecondition,
    /// ABORTED (10).
    Aborted,
    /// OUT_OF_RANGE (11).
    OutOfRange,
    /// UNIMPLEMENTED (12).
    Unimplemented,
    /// INTERNAL (13).
    Internal,
    /// UNAVAILABLE (14).
    Unavailable,
    /// DATA_LOSS (15).
    DataLoss,
    /// UNAUTHENTICATED (16).
    Unauthenticated,
}

impl Code {
    /// The code with this number; `Unknown` for a number gRPC does not define.
    pub fn from_i32(code: i32) -> Self {
        const ALL: [Code; 17] = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        usize::try_from(code)
            .ok()
            .and_then(|i| ALL.get(i).copied())
            .unwrap_or(Code::Unknown)
    }
}

/// The error an error came from, shared so that errors stay `Clone`. Its text is the cause's;
/// [`source`](std::error::Error::source) goes on down the chain. Two causes are equal when their
/// texts are.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    /// Keeps `error` as a cause.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
    /// A cause that is only a message.
    pub fn message(message: impl Into<String>) -> Self {
        #[derive(Debug)]
        struct Message(String);
        impl fmt::Display for Message {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for Message {}
        Self(Arc::new(Message(message.into())))
    }
    /// The error itself, to downcast.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// A `retry_after` was refused: the hold it asks for cannot be honoured
/// ([`Delivery::retry_after`](crate::Delivery::retry_after),
/// [`Settler::retry_after`](crate::Settler::retry_after)).
///
/// The message is untouched by the refused call: the handler still owns it and must settle it
/// with another outcome (or it is retried when the handler returns without one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryAfterError {
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

/// An alias of [`RetryAfterError`], for code that names it so (`PubSubError::DelayBeyondLease`
/// is `RetryAfterError::DelayBeyondLease`). Write `RetryAfterError`: the error is a refused
/// `retry_after`, not a failure of Pub/Sub.
pub type PubSubError = RetryAfterError;

/// A subscription cannot be consumed.
///
/// Nothing was pulled: no message was leased, so none is affected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The subscription does not exist. No message was pulled.
    #[error("subscription {subscription} does not exist")]
    NotFound {
        /// The subscription.
        subscription: String,
        /// What the server said.
        #[source]
        cause: Cause,
    },
    /// The subscription name is not of the form `projects/{project}/subscriptions/{name}`.
    /// No message was pulled.
    #[error(
        "invalid subscription name {0:?}: expected projects/PROJECT/subscriptions/NAME, \
         NAME 3 to 255 characters starting with a letter"
    )]
    InvalidName(String),
    /// An option of the registration is out of its range. No message was pulled.
    #[error("invalid registration: {0}")]
    InvalidOption(#[source] InvalidOption),
    /// There is no actix system on this thread: start a subscription inside one
    /// (`#[actix_rt::main]`, `#[actix_rt::test]`, `actix_rt::System::new().block_on(..)`).
    /// Nothing was pulled.
    #[error(
        "no actix system on this thread: start subscriptions inside one (#[actix_rt::main], \
         #[actix_rt::test])"
    )]
    NoActixSystem,
    /// The Pub/Sub client could not be built (credentials, endpoint). No message was pulled.
    #[error("cannot connect to Pub/Sub at {endpoint}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        cause: Cause,
    },
    /// The subscription could not be read within the start timeout (nothing answers at the
    /// endpoint, or it answers too slowly). No message was pulled.
    #[error(
        "cannot read subscription {subscription}: no answer within {after:?} (the start \
         timeout; is the endpoint right?)"
    )]
    Timeout {
        /// The subscription.
        subscription: String,
        /// The start timeout.
        after: Duration,
        /// The last failure seen, if any.
        #[source]
        last: Option<Cause>,
    },
    /// Reading the subscription failed for another reason (network, server).
    /// No message was pulled.
    #[error("cannot read subscription {subscription}")]
    Read {
        /// The subscription.
        subscription: String,
        /// The gRPC code, when the server answered with one.
        code: Option<Code>,
        /// What the server or the transport said.
        #[source]
        cause: Cause,
    },
}

/// A replay of dead letters could not start. Nothing was taken from either subscription: no
/// handler ran and every dead letter is where it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A replay option is out of its range (`rate`, `max`, `idle`, `filter`). Nothing was taken.
    #[error("invalid replay: {0}")]
    InvalidOption(#[source] InvalidOption),
    /// The registration's subscription has no dead-letter policy: there is no dead-letter topic
    /// to replay from. Nothing was taken.
    #[error("subscription {subscription} has no dead-letter policy: there is nothing to replay")]
    NoDeadLetterPolicy {
        /// The registration's subscription.
        subscription: String,
    },
    /// The subscription to replay from does not exist (create one on the dead-letter topic).
    /// Nothing was taken.
    #[error(
        "dead-letter subscription {subscription} does not exist: create a subscription on \
         {dead_letter_topic} to replay from"
    )]
    DeadLetterSubscriptionNotFound {
        /// The subscription named to replay from.
        subscription: String,
        /// The dead-letter topic it should be on.
        dead_letter_topic: String,
    },
    /// The subscription to replay from is on another topic than the dead-letter topic: running
    /// the handler over it would consume messages that were never dead-lettered. Nothing was
    /// taken.
    #[error(
        "subscription {subscription} is on {topic}, not on {dead_letter_topic}, the dead-letter \
         topic of {source_subscription}"
    )]
    NotOnDeadLetterTopic {
        /// The subscription named to replay from.
        subscription: String,
        /// The topic it is on.
        topic: String,
        /// The dead-letter topic of the registration's subscription.
        dead_letter_topic: String,
        /// The registration's subscription.
        source_subscription: String,
    },
    /// One of the two subscriptions could not be read (`pubsub.subscriptions.get` is needed on
    /// both: a replay will not guess its dead-letter topic). Nothing was taken.
    #[error("cannot read subscription {subscription} to check the replay")]
    Read {
        /// The subscription.
        subscription: String,
        /// Why.
        #[source]
        cause: ReadError,
    },
    /// The replay's consumer could not start on the dead-letter subscription (or a name is not
    /// a full `projects/P/subscriptions/S`). Nothing was taken.
    #[error("the replay could not start")]
    Start(#[source] StartError),
}

/// An option of a [`Registration`](crate::Registration) out of its range. Nothing was pulled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option} {problem}")]
pub struct InvalidOption {
    /// The option, as its setter is named (`workers`, `max_lease`, ...).
    pub option: &'static str,
    /// What is wrong with it.
    pub problem: String,
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
    #[error("message stream failed")]
    Stream {
        /// The gRPC code, when there is one.
        code: Option<Code>,
        /// What the client said.
        #[source]
        cause: Cause,
    },
}

/// Reading the subscription's configuration failed.
///
/// Nothing was pulled yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The caller lacks `pubsub.subscriptions.get`. Leasehold goes on without the subscription's
    /// dead-letter limit: `drop()` acks unless the registration declares `max_attempts`.
    #[error("permission denied reading the subscription (needs pubsub.subscriptions.get)")]
    PermissionDenied(#[source] Cause),
    /// The subscription does not exist; `start` fails with [`StartError::NotFound`].
    #[error("subscription not found")]
    NotFound(#[source] Cause),
    /// Any other failure; `start` retries it within the start timeout, then fails with
    /// [`StartError::Read`] or [`StartError::Timeout`].
    #[error("reading the subscription failed")]
    Other {
        /// The gRPC code, when there is one.
        code: Option<Code>,
        /// What the server or the transport said.
        #[source]
        cause: Cause,
    },
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
    #[error("Pub/Sub refused the ack; the message will be redelivered")]
    Refused {
        /// The gRPC code, when there is one.
        code: Option<Code>,
        /// What Pub/Sub or the transport said.
        #[source]
        cause: Cause,
    },
    /// The client shut down before the ack was sent or confirmed; the outcome is unknown and the
    /// message may be redelivered.
    #[error("the client shut down before confirming; the message may be redelivered")]
    Shutdown(#[source] Cause),
}

/// The payload could not be decoded into the handler's type.
///
/// The message goes to the registration's [`FailurePolicy`](crate::FailurePolicy)
/// (by default: dropped, that is acked), except on [`Unavailable`](Self::Unavailable): what
/// decoding needed could not be fetched, and the message is retried.
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
    /// The payload does not decode with its Pub/Sub schema (Avro or Protocol Buffers): its schema
    /// attributes are missing or name another schema, its revision is unknown or cannot be
    /// read as the reader's, or its bytes do not fit the revision or the handler's type. The
    /// message goes to the registration's [`FailurePolicy`](crate::FailurePolicy).
    ///
    /// Every field is schema metadata, never a payload value.
    #[error("{}", schema_text(schema, revision, field.as_deref(), problem))]
    Schema {
        /// The schema (`projects/P/schemas/S`) the registration reads.
        schema: String,
        /// The revision the message was written with, once known to exist; what stands in for
        /// one that is not (`unknown`, `none`) otherwise.
        revision: String,
        /// Where in the message it failed (`items[2].price`), when known.
        field: Option<String>,
        /// What went wrong, in words that quote no value.
        problem: String,
    },
    /// What decoding needs could not be had now: the schema service did not answer, or refused,
    /// when the message's schema revision was fetched. The message is **not** sent to the
    /// failure policy: it is held `retry_in` (no longer than its lease allows) and then nacked,
    /// so Pub/Sub redelivers it; the decoder says how often it logs.
    #[error("{what} could not be fetched; the message is retried")]
    Unavailable {
        /// What could not be fetched (`revision 1a2b3c4d of projects/p/schemas/orders`).
        what: String,
        /// How long to hold the message before its nack (the decoder's next try).
        retry_in: std::time::Duration,
        /// What the service or the transport said.
        #[source]
        cause: Cause,
    },
}

/// `DecodeError::Schema`'s text: `projects/p/schemas/orders, revision 1a2b3c4d, field
/// items[2].price: ...`.
fn schema_text(schema: &str, revision: &str, field: Option<&str>, problem: &str) -> String {
    match field {
        Some(field) => format!("{schema}, revision {revision}, field {field}: {problem}"),
        None => format!("{schema}, revision {revision}: {problem}"),
    }
}

impl DecodeError {
    /// Whether the message is retried rather than sent to the failure policy
    /// ([`Unavailable`](Self::Unavailable)).
    pub fn is_retried(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

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

/// The store could not be read or written.
///
/// A failed lookup runs the handler (at-least-once, as without a store); a failed record still
/// sends the handler's outcome (the work is done), so a redelivery may run the handler again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backing database failed; the cause says how. A transactional handler's message is
    /// held a while before its nack (longer with each failure in a row), as in an outage.
    #[error("progress store failed")]
    Backend(#[source] Cause),
    /// Another transaction holds what this one needs (a transactional store's claim held by
    /// another replica past the claim timeout, a lock timeout, a deadlock or serialization
    /// failure). The message is retried at once; it does not count as an outage.
    #[error("the progress store is busy with this message elsewhere")]
    Busy(#[source] Cause),
    /// The database aborted the transaction (Spanner aborts one of two transactions that want
    /// the same lock, and may abort any at commit): nothing of it committed. A transactional
    /// handler is run again on a fresh transaction, as many times as its store's
    /// `rerun_after` allows within the lease, each abort counted in `store_aborts`; past that
    /// the message is retried at once, counted in `store_failures` but not as an outage.
    #[error("the database aborted the transaction")]
    Aborted(#[source] Cause),
}

/// A message could not be written to the transactional outbox
/// ([`OutboxMessage`](crate::store::OutboxMessage), through a store's transaction).
///
/// Nothing of it was written. The handler's transaction is still open: return the error (or
/// any outcome but `ack()`/`drop()`) and it rolls back, so nothing the handler wrote commits
/// and the message is retried; an invalid message is refused the same way at every run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The message breaks one of Pub/Sub's rules (a topic name, an attribute, a size), checked
    /// before it is written so that the relay never holds a row Pub/Sub would refuse for good.
    #[error("outbox message refused: {0}")]
    Invalid(String),
    /// A batch transaction holds several messages and the outbox message names neither its
    /// source ([`OutboxMessage::for_message`](crate::store::OutboxMessage::for_message)) nor a
    /// key of its own: its default key would not be the same at every run.
    #[error(
        "outbox message in a batch of {claimed} messages without for_message(id) or key(..): \
         its default key needs the message it is published for"
    )]
    NoSource {
        /// The messages the batch's transaction claimed.
        claimed: usize,
    },
    /// The database refused the write; the cause says how. The transaction is usually aborted
    /// with it: the handler's outcome rolls back (a retry).
    #[error("the outbox row could not be written")]
    Database(#[source] Cause),
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
    fn start_errors_say_what_to_fix_and_keep_their_cause() {
        let not_found = StartError::NotFound {
            subscription: "projects/p/subscriptions/s".into(),
            cause: Cause::message("Resource not found (resource=s)."),
        };
        assert_eq!(
            not_found.to_string(),
            "subscription projects/p/subscriptions/s does not exist"
        );
        let source = std::error::Error::source(&not_found).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("Resource not found (resource=s)."));
        assert!(
            StartError::InvalidName("s".into())
                .to_string()
                .contains("expected projects/PROJECT/subscriptions/NAME")
        );
        let invalid = StartError::InvalidOption(InvalidOption {
            option: "workers",
            problem: "must be at least 1".into(),
        });
        assert_eq!(
            invalid.to_string(),
            "invalid registration: workers must be at least 1"
        );
        assert_eq!(
            std::error::Error::source(&invalid).unwrap().to_string(),
            "workers must be at least 1"
        );
        let timeout = StartError::Timeout {
            subscription: "projects/p/subscriptions/s".into(),
            after: Duration::from_secs(10),
            last: None,
        };
        assert_eq!(
            timeout.to_string(),
            "cannot read subscription projects/p/subscriptions/s: no answer within 10s (the \
             start timeout; is the endpoint right?)"
        );
    }

    #[test]
    fn a_cause_keeps_the_chain_and_compares_by_text() {
        let io = std::io::Error::other("connection refused");
        let cause = Cause::new(io);
        assert_eq!(cause.to_string(), "connection refused");
        assert!(cause.get().downcast_ref::<std::io::Error>().is_some());
        assert_eq!(cause, Cause::message("connection refused"));
        assert_eq!(Code::from_i32(5), Code::NotFound);
        assert_eq!(Code::from_i32(99), Code::Unknown);
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
    fn schema_decode_errors_name_the_schema_the_revision_and_the_field() {
        let refused = DecodeError::Schema {
            schema: "projects/p/schemas/orders".into(),
            revision: "1a2b3c4d".into(),
            field: Some("items[2].price".into()),
            problem: "expected an integer, found a string".into(),
        };
        assert_eq!(
            refused.to_string(),
            "projects/p/schemas/orders, revision 1a2b3c4d, field items[2].price: expected an \
             integer, found a string"
        );
        assert!(!refused.is_retried());
        let outage = DecodeError::Unavailable {
            what: "revision 1a2b3c4d of projects/p/schemas/orders".into(),
            retry_in: Duration::from_secs(1),
            cause: Cause::message("connection refused"),
        };
        assert_eq!(
            outage.to_string(),
            "revision 1a2b3c4d of projects/p/schemas/orders could not be fetched; the message is \
             retried"
        );
        assert!(outage.is_retried());
        assert_eq!(
            std::error::Error::source(&outage).unwrap().to_string(),
            "connection refused"
        );
    }

    #[test]
    fn ack_failure_says_redelivered() {
        assert!(AckFailure::LeaseExpired.to_string().contains("redelivered"));
    }
}
