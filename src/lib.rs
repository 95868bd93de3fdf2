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
//! The actors and the decisions live in the `leasehold-actors` crate, re-exported here. This
//! crate adds the adapter over Google's official client ([`google`]), the connection settings
//! ([`Connection`]) and a launcher for the local emulator ([`emulator`]).
#![warn(missing_docs)]

mod connection;
pub mod emulator;
pub mod google;
mod redb_store;

pub use connection::{ConnectError, Connection, EMULATOR_HOST_ENV};
pub use leasehold_actors::*;
pub use redb_store::RedbStore;

/// Starts consuming through any [`Connector`], such as an in-memory one in benchmarks.
pub use leasehold_actors::supervisor::start as start_with;

use std::rc::Rc;

/// Starts consuming `registration`'s subscription over `connection`.
///
/// Reads the subscription once (needs `pubsub.subscriptions.get`; without it, one warning and
/// `drop()` acks), then opens the stream. Must be called inside an actix system.
pub async fn start(
    registration: Registration,
    connection: &Connection,
) -> Result<Subscription, StartError> {
    let connector = google::GoogleConnector::new(connection)
        .await
        .map_err(|e| StartError::Connect(e.to_string()))?;
    leasehold_actors::start(registration, Rc::new(connector)).await
}

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
