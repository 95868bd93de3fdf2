//! Effectively-once Pub/Sub handlers for [Leasehold]: the handler's writes and the message's
//! progress record commit in one PostgreSQL transaction, shared by every replica.
//!
//! ```no_run
//! use leasehold::{Connection, Delivery, Outcome, Registration};
//! use leasehold_postgres::{PgTransaction, PostgresStore};
//!
//! #[derive(serde::Deserialize)]
//! struct Payment { order: i64, cents: i64 }
//!
//! async fn on_payment(
//!     payment: Payment,
//!     delivery: Delivery,
//!     tx: &mut PgTransaction,
//! ) -> Result<Outcome, leasehold_postgres::tokio_postgres::Error> {
//!     // In the message's transaction: committed once, whatever Pub/Sub redelivers.
//!     tx.execute(
//!         "UPDATE orders SET paid_cents = paid_cents + $2 WHERE id = $1",
//!         &[&payment.order, &payment.cents],
//!     )
//!     .await?;
//!     Ok(delivery.ack())
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let store = PostgresStore::connect("postgres://app@db/app").await?;
//!     let registration = Registration::transactional_json(
//!         "projects/p/subscriptions/payments",
//!         store,
//!         on_payment,
//!     );
//!     let subscription = leasehold::start(registration, &Connection::from_env()).await?;
//!     actix_rt::signal::ctrl_c().await?;
//!     subscription.stop().await;
//!     Ok(())
//! }
//! ```
//!
//! For writes in bulk, `Registration::transactional_json_batch` (or `transactional_raw_batch`)
//! gives the handler a batch of messages and one transaction for all of them: one statement
//! claims the batch, one records every message's outcome with the commit (see
//! [`PostgresStore`]).
//!
//! What is effectively once: the writes the handler makes through the transaction it is given.
//! What stays at-least-once: everything else the handler does (an HTTP call, a message it
//! publishes, a write on another connection); pass [`Delivery::message_id`] downstream as an
//! idempotency key.
//!
//! [Leasehold]: https://docs.rs/leasehold
//! [`Delivery::message_id`]: leasehold_actors::Delivery::message_id
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod driver;
mod local;
mod schema;
mod store;

/// The connection pool: build one yourself (TLS, sizes) for [`PostgresStore::with_pool`].
pub use deadpool_postgres;
pub use driver::manager;
pub use local::{DATABASE_URL_ENV, LaunchError, LocalPostgres, POSTGRES_BIN_ENV, PostgresHost};
pub use store::{
    DEFAULT_CLAIM_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TTL, PgTransaction, PostgresError,
    PostgresStore,
};
/// The driver the transaction speaks: [`PgTransaction`] dereferences to its client.
pub use tokio_postgres;
