//! Leasehold's runtime: the actors that turn a handler's outcome into the right Pub/Sub action.
//!
//! This crate knows nothing of Google's client. It is written against three narrow traits: a
//! [`Connector`] that reads a subscription and opens a [`MessageSource`], and the
//! [`SettleHandle`] that acks or nacks one message. The `leasehold` crate implements them over
//! `google-cloud-pubsub`; unit tests here use in-memory fakes with paused time.
//!
//! The public surface is what is re-exported below, by name; every module is private, so that
//! the actors can change without breaking their users.
//!
//! # Layout
//! - `supervisor.rs`: [`SubscriptionActor`], one per subscription; `subscription.rs`: the
//!   [`Subscription`] handle and [`start`]; `pull.rs`: the pull loops; `rules.rs`: the
//!   supervisor's decisions as plain functions.
//! - `lease.rs`: `LeaseActor`, one per outstanding message; its rules in `lease_state.rs`.
//! - `worker_pool.rs`: `WorkerPool`, hands messages to the worker threads; its scheduling rules
//!   in `schedule.rs`. The workers themselves (`worker.rs`) run the handlers, one actor per
//!   thread; `guard.rs` guards every call into user code.
//! - `ack_sink.rs`: `AckSink`, applies acks and nacks and awaits exactly-once confirmations.
//! - `outcome.rs`: the outcome table as a pure function.
//! - `delivery.rs`, `registration.rs`: the handler API. `error.rs`: one error enum per boundary.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ack_sink;
mod batch;
mod batcher;
mod children;
mod crew;
mod delivery;
mod drain;
mod error;
mod flow;
mod guard;
mod handler;
mod health;
mod job;
mod job_queue;
mod lease;
mod lease_state;
mod leases;
mod lifeline;
mod options;
#[cfg(feature = "otel")]
mod otel;
mod outcome;
mod policy;
mod progress;
mod pull;
mod registration;
mod rules;
mod schedule;
mod settle_right;
mod shared;
mod source;
mod span;
mod start;
mod stats;
mod subscription;
mod supervisor;
mod tasks;
mod transactional;
mod transactional_batch;
mod worker;
mod worker_pool;

// Also built for the crate's own unit tests, which run the actors on its `MemoryPubSub`.
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;

/// Every default and limit of the options, each a named constant whose doc says why.
pub mod defaults {
    pub use crate::options::{
        DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEALTH_PROBE_INTERVAL, DEFAULT_LIVENESS_TIMEOUT,
        DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_BATCH_MESSAGES, DEFAULT_MAX_BATCH_WAIT,
        DEFAULT_MAX_LEASE, DEFAULT_MAX_LEASE_EXTENSION, DEFAULT_MAX_OUTSTANDING_BYTES,
        DEFAULT_MAX_OUTSTANDING_MESSAGES, DEFAULT_START_TIMEOUT, DEFAULT_STREAMS, DEFAULT_WORKERS,
        EXACTLY_ONCE_MIN_LEASE_EXTENSION, MAX_BATCH_MESSAGES, MAX_BATCH_WAIT, MAX_FLOW_LIMIT,
        MAX_LEASE_EXTENSION, MIN_HEALTH_PROBE_INTERVAL, MIN_LEASE_EXTENSION, MIN_LIVENESS_TIMEOUT,
    };
    pub use crate::progress::{DEFAULT_MEMORY_CAPACITY, DEFAULT_TTL};
    pub use crate::rules::{RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX};
    pub use crate::stats::{BATCH_SIZE_BUCKETS, HISTOGRAM_BUCKETS, RECENT_FAILURES};
}

pub use batch::{Batch, BatchItem, BatchOutcome, IntoBatchOutcome};
pub use delivery::{Delivery, RetryAfterRefused, Settler};
pub use error::{
    AckFailure, Cause, Code, DecodeError, InvalidOption, PubSubError, ReadError, RetryAfterError,
    SourceError, StartError,
};
pub use flow::InFlight;
pub use handler::IntoOutcome;
pub use options::Options;
pub use outcome::{Action, Outcome};
pub use policy::{DecodeFailureFn, FailurePolicy, PanicPolicy};
pub use progress::{Completed, MemoryStore, ProgressStore, StoreError};
pub use registration::Registration;
pub use shared::{Connectivity, Failure, Health, HealthReason, Role, State, SupervisionEvent};
pub use source::{
    Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
pub use stats::{
    FailureKind, FailureRecord, HistogramSnapshot, Histograms, LoadReport, StatsSnapshot,
};
pub use subscription::Subscription;
/// The same as [`start`], under the name the `leasehold` crate gives to starting through any
/// [`Connector`] (its own `start` takes a `Connection`): examples written with it read the same
/// against either crate.
pub use supervisor::start as start_with;
pub use supervisor::{Stop, SubscriptionActor, start};
pub use transactional::{
    BatchClaim, BatchClaims, Claim, TransactionalBatchStore, TransactionalStore,
};
