//! The errors of this crate, one per boundary: [`SchemaError`] when a decoder is built (at
//! start: nothing was consumed), [`FetchError`] when a [`RevisionSource`] fetches a revision.
//! What a message that does not decode becomes is `leasehold::DecodeError`'s.
//!
//! [`RevisionSource`]: crate::RevisionSource

use leasehold::error::Cause;

/// A schema decoder could not be built, or a subscription's topic cannot be read by it: the
/// subscription does not start, and nothing was consumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The schema service has no such schema, or no such revision of it.
    #[error("{what} does not exist")]
    NotFound {
        /// The schema or the revision (`revision 1a2b3c4d of projects/p/schemas/orders`).
        what: String,
    },
    /// The schema is of another type than the decoder reads (an Avro decoder on a Protocol
    /// Buffers schema).
    #[error("{schema} is a {found} schema; this decoder reads {expected} schemas")]
    WrongType {
        /// The schema.
        schema: String,
        /// Its type.
        found: &'static str,
        /// The type the decoder reads.
        expected: &'static str,
    },
    /// The revision's definition does not parse (or, for Protocol Buffers, does not define
    /// one top-level message).
    #[error("{what} does not parse: {problem}")]
    Invalid {
        /// The revision.
        what: String,
        /// What the parser said about the definition (never about a message).
        problem: String,
    },
    /// The schema service could not be reached, or refused (a missing permission:
    /// `pubsub.schemas.get`).
    #[error("cannot fetch {what} from the schema service")]
    Unavailable {
        /// What was asked for.
        what: String,
        /// What the service or the transport said.
        #[source]
        cause: Cause,
    },
    /// The subscription's topic cannot be read with this schema: it has no schema, another
    /// schema, or an encoding no decoder reads.
    #[error("the topic of {subscription} cannot be read with {schema}: {problem}")]
    Topic {
        /// The subscription.
        subscription: String,
        /// The schema the decoder reads.
        schema: String,
        /// What its topic has instead.
        problem: String,
    },
    /// A Pub/Sub client (the schema service's, the admin's) could not be built.
    #[error("cannot build the schema service's client")]
    Client(#[source] Cause),
}

/// A revision could not be fetched ([`RevisionSource::revision`](crate::RevisionSource::revision)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The schema service has no such schema or revision (deleted, never committed). The
    /// messages written with it go to the registration's failure policy; the answer is kept
    /// for [`MISSING_TTL`](crate::defaults::MISSING_TTL) before it is asked again.
    #[error("no such schema or revision")]
    NotFound,
    /// The service could not be reached, or refused (any other answer). The messages written
    /// with it are retried (held, then nacked); it is asked again after a backoff.
    #[error("the schema service did not give the revision")]
    Unavailable(#[source] Cause),
}
