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
//! connection settings ([`Connection`]), the persistent progress store ([`RedbStore`]) and a
//! launcher for the local emulator ([`emulator`]).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod connection;
pub mod emulator;
mod google;
mod redb_store;

/// The actix version Leasehold runs on: a [`SubscriptionActor`] is started with its
/// [`Actor::start`](actix::Actor::start).
pub use actix;
pub use connection::{ConnectError, Connection, EMULATOR_HOST_ENV};
/// Unit-test handlers without Pub/Sub (feature `testing`).
#[cfg(feature = "testing")]
pub use leasehold_actors::testing;
pub use leasehold_actors::{
    AckFailure, Action, Batch, BatchClaim, BatchClaims, BatchItem, BatchOutcome, Cause, Claim,
    Code, Completed, Confirmation, Connectivity, Connector, DecodeError, DecodeFailureFn, Delivery,
    Failure, FailureKind, FailurePolicy, FailureRecord, Health, HealthReason, HistogramSnapshot,
    Histograms, InFlight, IntoBatchOutcome, IntoOutcome, InvalidOption, LoadReport, MemoryStore,
    MessageSource, Options, Outcome, PanicPolicy, ProgressStore, PubSubError, ReadError, Received,
    Registration, RetryAfterError, RetryAfterRefused, Role, SettleHandle, Settler, SourceError,
    StartError, State, StatsSnapshot, Stop, StoreError, StreamSettings, Subscription,
    SubscriptionActor, SubscriptionInfo, SupervisionEvent, TransactionalBatchStore,
    TransactionalStore, defaults,
};
pub use redb_store::RedbStore;

/// Starts consuming through any [`Connector`]: one built by [`Connection::connect`] and shared
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
        ConnectError::Client { endpoint, cause } => StartError::Connect { endpoint, cause },
    })?;
    leasehold_actors::start(registration, connector).await
}

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
