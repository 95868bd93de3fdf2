//! Leasehold: a consumer runtime for Google Cloud Pub/Sub on actix.
//!
//! Register a handler for a subscription; for each message it returns one outcome, and Leasehold
//! turns that outcome into exactly the right Pub/Sub action: `ack()` acks; `retry()` nacks, so
//! Pub/Sub redelivers the message after the subscription's retry backoff (or dead-letters it);
//! `retry_after(d)` holds the lease for `d`, then nacks (refused when `d` is longer than the
//! lease that remains); `drop()` acks, except on the last attempt the dead-letter limit allows,
//! where it nacks so that Pub/Sub moves the message to the dead-letter topic. The full table,
//! with what each outcome does in a batch and when the process dies, is in README.md's
//! "Outcomes" section; each outcome's details are on [`Delivery`].
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
//!
//! # Logs and traces
//! Logs go through `tracing`. A span per message carries `subscription`, `message_id` and
//! `attempt`; outcomes are events at debug, and failed acks, lost leases, panics and stream
//! restarts are events at warn or error, each naming the message or the subscription.
//!
//! The span follows OpenTelemetry's messaging conventions for Pub/Sub: it is named
//! `<subscription id> process` (`orders process` for `projects/p/subscriptions/orders`), with
//! `messaging.system = gcp_pubsub`, `messaging.destination.name`, `messaging.message.id`,
//! `messaging.gcp_pubsub.message.delivery_attempt`, `messaging.gcp_pubsub.message.ordering_key`
//! and the result as `messaging.gcp_pubsub.result` (`acked`, `retried`, `dropped`,
//! `dead_lettered`, `released`). The settle is an event in it, and so is a refused
//! exactly-once confirmation (`failed ack`); a batch's span is described on
//! [`Registration::json_batch`]. The spans are at debug level, so a subscriber at info builds
//! none. [`Registration::trace_sample_ratio`] traces a share of the messages (and always
//! those whose publisher sampled its trace); with the `otel` feature, the span's parent is the
//! publisher's span, read from the `googclient_traceparent` attribute.
//!
//! No payload or attribute value is put in a span, a metric or a log line (tests publish a
//! secret in both and look for it), and credentials never pass through Leasehold: Google's
//! client reads them. The service's configuration of traces is in `service/README.md`.
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
#[cfg(feature = "testing")]
pub use leasehold_actors::testing;
pub use leasehold_actors::{
    Batch, BatchItem, BatchOutcome, Breaker, DecodeError, DecodeFailureFn, Decoder, Delivery,
    FailurePolicy, IntoBatchOutcome, IntoOutcome, OUTBOX_KEY_ATTRIBUTE, Options, OutboxMessage,
    Outcome, PanicPolicy, Preparing, Registration, RetryAfterError, Settler, StartError,
    Subscription, defaults,
};

/// Every error type, one per boundary; each variant's doc says what became of the messages.
///
/// Each error enum is `#[non_exhaustive]` ([`error::InvalidOption`], the option and the problem,
/// is a plain struct). Errors from Pub/Sub or the transport keep their cause as
/// [`source()`](std::error::Error::source) (a shared [`error::Cause`], so the errors stay
/// `Clone`) and their gRPC [`error::Code`] when there is one. [`error::PubSubError`] is an alias
/// of [`RetryAfterError`]. Besides the runtime's errors, this crate adds
/// [`error::ConnectError`] (a client could not be built) and the emulator launcher's
/// [`emulator::EmulatorError`].
pub mod error {
    pub use crate::connection::ConnectError;
    pub use crate::emulator::EmulatorError;
    pub use leasehold_actors::RetryAfterRefused;
    pub use leasehold_actors::error::{
        AckFailure, Cause, Code, DecodeError, InvalidOption, OutboxError, PubSubError, ReadError,
        ReplayError, RetryAfterError, SourceError, StartError, StoreError,
    };
}

/// The traits between the runtime and Pub/Sub, for those who implement them (an in-memory
/// source in tests, another transport); [`Connection`] implements them over Google's client.
pub mod source {
    pub use leasehold_actors::source::{
        Action, Confirmation, Connector, MessageSource, Received, SettleHandle, StreamSettings,
        SubscriptionInfo, dead_letter_limit,
    };
}

/// Where finished messages are remembered ([`store::ProgressStore`]: in memory,
/// or on disk with [`store::RedbStore`]), the transactions a handler's writes
/// commit in ([`store::TransactionalStore`]; PostgreSQL's is in
/// `leasehold-postgres`), and the transactional outbox those transactions publish through
/// ([`store::OutboxStore`], sent by `leasehold-relay`).
pub mod store {
    pub use crate::redb_store::RedbStore;
    pub use leasehold_actors::store::{
        Backlog, BatchClaim, BatchClaims, Candidate, Claim, CommitSignal, Completed, FailedRow,
        MAX_KEY_BYTES, MemoryStore, OUTBOX_KEY_ATTRIBUTE, OutboxError, OutboxMessage, OutboxRow,
        OutboxStore, Places, PreparedMessage, ProgressStore, Publisher, StoreError,
        TransactionalBatchStore, TransactionalStore, leasable, loggable_key,
    };
}

/// What a running subscription reports: counters, histograms, load, state, health and the
/// supervision events its watchers hear.
pub mod status {
    pub use leasehold_actors::status::{
        BreakerReport, BreakerState, Connectivity, Failure, FailureKind, FailureRecord, Health,
        HealthReason, HistogramSnapshot, Histograms, InFlight, LoadReport, Role, State,
        StatsSnapshot, SupervisionEvent,
    };
}

/// Dead letters replayed through a registration's own handler, from a subscription on its
/// dead-letter topic, without republishing: [`replay::replay`] with [`replay::ReplayOptions`]
/// (rate, maximum, [`replay::Filter`], dry run), over a connector from [`Connection::connect`].
///
/// ```no_run
/// # use leasehold::{Connection, Delivery, Registration};
/// # use leasehold::replay::{self, ReplayOptions};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///     d.ack()
/// });
/// let connector = Connection::from_env().connect().await?;
/// let run = replay::replay(
///     registration,
///     "projects/p/subscriptions/orders-dead-letters",
///     ReplayOptions::new().rate(50.0).max(1_000),
///     connector,
/// )
/// .await?;
/// let end = run.finished().await;
/// println!("replayed {}, still failing {}, left {}", end.replayed, end.still_failing, end.left());
/// # Ok(()) }
/// ```
pub mod replay {
    pub use leasehold_actors::replay::*;
}

/// The supervisor as an actor of your own system: [`supervisor::SubscriptionActor`]
/// to start with actix's `Actor::start` and supervise, [`supervisor::Stop`] to drain it.
pub mod supervisor {
    pub use leasehold_actors::supervisor::{Stop, SubscriptionActor};
}

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

/// The breaker's manual's examples, likewise.
#[doc = include_str!("../docs/breaker.md")]
#[cfg(doctest)]
pub struct BreakerDoctests;

/// The dedupe manual's examples, likewise.
#[doc = include_str!("../docs/dedupe.md")]
#[cfg(doctest)]
pub struct DedupeDoctests;
