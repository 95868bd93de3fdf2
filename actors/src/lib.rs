//! Leasehold's runtime: the actors that turn a handler's outcome into the right Pub/Sub action.
//!
//! This crate knows nothing of Google's client. It is written against three narrow traits in
//! [`source`]: a [`source::Connector`] that reads a subscription and opens a
//! [`source::MessageSource`], and the [`source::SettleHandle`]
//! that acks or nacks one message. The `leasehold` crate implements them over
//! `google-cloud-pubsub` and re-exports this crate's API; most users depend on `leasehold`.
//!
//! What a handler author types is at the root; the rest is grouped by who uses it:
//! [`source`] for implementers of the source traits, [`store`] for progress stores and
//! transactions, [`status`] for what a running subscription reports, [`supervisor`] for
//! embedding the supervisor actor, [`replay`] for running a handler over its dead letters,
//! [`error`] for the error types (but [`RetryAfterRefused`],
//! which holds a [`Settler`], at the root), [`defaults`] for the options' defaults and limits.
//!
//! The code is grouped by role, bottom to top: `error.rs`, `rt/`, `rules/`, `status/`,
//! `source.rs`, `store/`, `lease/`, `api/`, `pool/`, `transactional/`, `supervisor/`,
//! `replay/`, `testing/` (the order `test-support/tests/layering.rs` checks). The one map of what lives where is
//! `ARCHITECTURE.md`.
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_code)]

pub mod error;
pub mod source;

mod api;
mod lease;
mod pool;
pub mod replay;
mod rt;
mod rules;
pub mod status;
pub mod store;
pub mod supervisor;
mod transactional;

// Also built for the crate's own unit tests, which run the actors on its `MemoryPubSub`.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;

/// Every default and limit of the options, each a named constant whose doc says why.
pub mod defaults {
    pub use crate::rules::breaker::{
        DEFAULT_BREAKER_CONSECUTIVE_FAILURES, DEFAULT_BREAKER_COOLDOWN,
        DEFAULT_BREAKER_FAILURE_RATIO, DEFAULT_BREAKER_MAX_COOLDOWN, DEFAULT_BREAKER_MIN_MESSAGES,
        DEFAULT_BREAKER_WINDOW, MAX_BREAKER_PERIOD, MIN_BREAKER_COOLDOWN,
    };
    pub use crate::rules::options::{
        DEFAULT_BREAKER_READ_AHEAD_FACTOR, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEALTH_PROBE_INTERVAL,
        DEFAULT_LIVENESS_TIMEOUT, DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_BATCH_MESSAGES,
        DEFAULT_MAX_BATCH_WAIT, DEFAULT_MAX_LEASE, DEFAULT_MAX_LEASE_EXTENSION,
        DEFAULT_MAX_OUTSTANDING_BYTES, DEFAULT_MAX_OUTSTANDING_MESSAGES, DEFAULT_START_TIMEOUT,
        DEFAULT_STREAMS, DEFAULT_WORKERS, EXACTLY_ONCE_MIN_LEASE_EXTENSION, MAX_BATCH_MESSAGES,
        MAX_BATCH_WAIT, MAX_FLOW_LIMIT, MAX_LEASE_EXTENSION, MIN_HEALTH_PROBE_INTERVAL,
        MIN_LEASE_EXTENSION, MIN_LIVENESS_TIMEOUT,
    };
    pub use crate::rules::supervision::{
        DEFAULT_MAX_DELIVERY_ATTEMPTS, RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX,
    };
    pub use crate::status::stats::{BATCH_SIZE_BUCKETS, HISTOGRAM_BUCKETS, RECENT_FAILURES};
    pub use crate::store::progress::{DEFAULT_MEMORY_CAPACITY, DEFAULT_TTL};
}

// What a handler author types.
pub use api::batch::{Batch, BatchItem, BatchOutcome, IntoBatchOutcome};
pub use api::decode::{Decoder, Preparing};
pub use api::delivery::{Delivery, RetryAfterRefused, Settler};
pub use api::handler::IntoOutcome;
pub use api::policy::{DecodeFailureFn, FailurePolicy, PanicPolicy};
pub use api::registration::Registration;
pub use error::{DecodeError, RetryAfterError, StartError};
pub use rules::breaker::Breaker;
pub use rules::options::Options;
pub use rules::outcome::Outcome;
pub use supervisor::entry::start;
/// The same as [`start`], under the name the `leasehold` crate gives to starting through any
/// [`source::Connector`] (its own `start` takes a `Connection`): examples written
/// with it read the same against either crate.
pub use supervisor::entry::start as start_with;
pub use supervisor::subscription::Subscription;
// What a transactional handler types to publish through the outbox, and what a consumer dedupes on.
pub use store::{OUTBOX_KEY_ATTRIBUTE, OutboxMessage};
