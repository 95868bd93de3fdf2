//! Leasehold: a consumer runtime for Google Cloud Pub/Sub on actix.
//!
//! Register a handler for a subscription; for each message it returns one outcome, and Leasehold
//! turns that outcome into exactly the right Pub/Sub action:
//!
//! | outcome | what Pub/Sub sees |
//! |---|---|
//! | `ack()` | acknowledged |
//! | `retry()` | nack: redelivered after the subscription's retry backoff, or dead-lettered |
//! | `retry_after(d)` | the lease is held for `d`, then nack; refused when `d` is longer than the lease that remains |
//! | `drop()` | acknowledged, except on the last allowed attempt: nacked, so Pub/Sub dead-letters it |
//!
//! ```no_run
//! use leasehold::{Connection, Delivery, Outcome, Registration};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! async fn on_order(order: Order, delivery: Delivery) -> Outcome {
//!     if order.id == 0 { delivery.drop() } else { delivery.ack() }
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let registration = Registration::json("projects/p/subscriptions/orders", on_order);
//!     let subscription = leasehold::start(registration, &Connection::from_env()).await?;
//!     actix_rt::signal::ctrl_c().await?;
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```
//!
//! # Layout
//! The actors and the decisions live in the `leasehold-actors` crate; the items below are
//! re-exported from it by name. This crate adds the adapter over Google's official client, the
//! connection settings ([`Connection`]), the persistent progress store
//! ([`store::RedbStore`]) and a launcher for the local emulator ([`emulator`]).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod connection;
pub mod emulator;
mod google;
mod redb_store;

/// The actix version Leasehold runs on: a
/// [`supervisor::SubscriptionActor`] is started with its
/// [`Actor::start`](actix::Actor::start).
pub use actix;
pub use connection::Connection;
/// Unit-test handlers without Pub/Sub (feature `testing`).
#[cfg(feature = "testing")]
pub use leasehold_actors::testing;
pub use leasehold_actors::{
    Batch, BatchItem, BatchOutcome, DecodeError, DecodeFailureFn, Delivery, FailurePolicy,
    IntoBatchOutcome, IntoOutcome, Options, Outcome, PanicPolicy, Registration, RetryAfterError,
    Settler, StartError, Subscription, defaults,
};

/// Every error type, one per boundary; each variant's doc says what became of the messages.
pub mod error {
    pub use crate::connection::ConnectError;
    pub use crate::emulator::EmulatorError;
    pub use leasehold_actors::RetryAfterRefused;
    pub use leasehold_actors::error::{
        AckFailure, Cause, Code, DecodeError, InvalidOption, PubSubError, ReadError,
        RetryAfterError, SourceError, StartError, StoreError,
    };
}

/// The traits between the runtime and Pub/Sub, for those who implement them (an in-memory
/// source in tests, another transport); [`Connection`] implements them over Google's client.
pub mod source {
    pub use leasehold_actors::source::{
        Action, Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
        SubscriptionInfo,
    };
}

/// Where finished messages are remembered ([`store::ProgressStore`]: in memory,
/// or on disk with [`store::RedbStore`]), and the transactions a handler's writes
/// commit in ([`store::TransactionalStore`]; PostgreSQL's is in
/// `leasehold-postgres`).
pub mod store {
    pub use crate::redb_store::RedbStore;
    pub use leasehold_actors::store::{
        BatchClaim, BatchClaims, Claim, Completed, MemoryStore, ProgressStore, StoreError,
        TransactionalBatchStore, TransactionalStore,
    };
}

/// What a running subscription reports: counters, histograms, load, state, health and the
/// supervision events its watchers hear.
pub mod status {
    pub use leasehold_actors::status::{
        Connectivity, Failure, FailureKind, FailureRecord, Health, HealthReason, HistogramSnapshot,
        Histograms, InFlight, LoadReport, Role, State, StatsSnapshot, SupervisionEvent,
    };
}

/// The supervisor as an actor of your own system: [`supervisor::SubscriptionActor`]
/// to start with actix's `Actor::start` and supervise, [`supervisor::Stop`] to drain it.
pub mod supervisor {
    pub use leasehold_actors::supervisor::{Stop, SubscriptionActor};
}

// Our own crates (code, tests, examples, doc comments and READMEs) must not use these
// paths: they are for code written against 0.1 and go soon; write the module paths.
/// The paths of 0.1's flat root, kept one release so code written against them still builds;
/// use the grouped modules. They are removed in the release after next.
#[doc(hidden)]
pub use {
    connection::{ConnectError, EMULATOR_HOST_ENV},
    error::{
        AckFailure, Cause, Code, InvalidOption, PubSubError, ReadError, RetryAfterRefused,
        SourceError,
    },
    source::{
        Action, Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
        SubscriptionInfo,
    },
    status::{
        Connectivity, Failure, FailureKind, FailureRecord, Health, HealthReason, HistogramSnapshot,
        Histograms, InFlight, LoadReport, Role, State, StatsSnapshot, SupervisionEvent,
    },
    store::{
        BatchClaim, BatchClaims, Claim, Completed, MemoryStore, ProgressStore, RedbStore,
        StoreError, TransactionalBatchStore, TransactionalStore,
    },
    supervisor::{Stop, SubscriptionActor},
};

/// Starts consuming through any [`source::Connector`]: one built by [`Connection::connect`] and shared
/// by several subscriptions, or your own (an in-memory one in tests).
pub use leasehold_actors::start as start_with;

/// Starts consuming `registration`'s subscription over `connection`, in the current actix
/// system.
///
/// Builds the clients for `connection` (use [`Connection::connect`] and [`start_with`] to share
/// them between subscriptions), reads the subscription once (needs `pubsub.subscriptions.get`;
/// without it, one warning and `drop()` acks), retrying transient failures within the
/// registration's start timeout, then opens the streams.
///
/// ```no_run
/// # use leasehold::{Connection, Delivery, Registration};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///     d.ack()
/// });
/// let subscription = leasehold::start(registration, &Connection::from_env()).await?;
/// subscription.stop().await;
/// # Ok(()) }
/// ```
pub async fn start(
    registration: Registration,
    connection: &Connection,
) -> Result<Subscription, StartError> {
    let connector = connection.connect().await.map_err(|e| match e {
        error::ConnectError::Client { endpoint, cause } => StartError::Connect { endpoint, cause },
    })?;
    leasehold_actors::start(registration, connector).await
}

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
