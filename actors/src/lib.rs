//! Leasehold's runtime: the actors that turn a handler's outcome into the right Pub/Sub action.
//!
//! This crate knows nothing of Google's client. It is written against three narrow traits in
//! [`source`]: a [`Connector`] that reads a subscription and opens a [`MessageSource`], and the
//! [`SettleHandle`] that acks or nacks one message. The `leasehold` crate implements them over
//! `google-cloud-pubsub`; unit tests here use in-memory fakes with paused time.
//!
//! # Layout
//! - [`supervisor`]: `SubscriptionActor`, one per subscription, and [`start`].
//! - [`lease`]: `LeaseActor`, one per outstanding message; its rules in [`lease_state`].
//! - `worker_pool.rs`: `WorkerPool`, hands messages to the worker threads; its scheduling rules in
//!   [`schedule`]. The workers themselves (`worker.rs`) run the handlers, one actor per thread.
//! - `ack_sink.rs`: `AckSink`, applies acks and nacks and awaits exactly-once confirmations.
//! - [`outcome`]: the outcome table as a pure function.
//! - [`delivery`], [`registration`]: the handler API. [`error`]: one error enum per boundary.
#![warn(missing_docs)]

mod ack_sink;
pub mod delivery;
pub mod error;
pub mod flow;
mod guard;
pub mod lease;
pub mod lease_state;
pub mod outcome;
pub mod progress;
pub mod registration;
pub mod schedule;
pub mod source;
pub mod stats;
pub mod supervisor;
mod tasks;
mod worker;
mod worker_pool;

#[cfg(test)]
mod fake;

pub use delivery::{Delivery, RetryAfterRefused, Settler};
pub use error::{AckFailure, DecodeError, PubSubError, ReadError, SourceError, StartError};
pub use flow::InFlight;
pub use outcome::{Action, Fate, Outcome};
pub use progress::{Completed, MemoryStore, ProgressStore, StoreError};
pub use registration::{FailurePolicy, IntoOutcome, Options, PanicPolicy, Registration};
pub use source::{
    Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
    SubscriptionInfo,
};
pub use stats::StatsSnapshot;
pub use supervisor::{State, Subscription, start};
pub use worker_pool::LoadReport;
