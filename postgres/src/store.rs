//! The PostgreSQL transactional store and the transaction a handler writes in, one role per
//! file under `store/`, bottom to top (each uses only those before it):
//!
//! - `error`: `PostgresError`, and the driver's errors as the runtime's `StoreError`;
//! - `records`: what a progress record holds, and the conditions every statement shares;
//! - `transaction`: `PgTransaction`, the open transaction, and how it ends;
//! - `progress`: `PostgresStore`, its defaults and settings, connecting, reading and sweeping
//!   records;
//! - `claim`: what the single and the batch claim share (the advisory lock, the claimed record,
//!   the claim statement's transaction);
//! - `single`: `TransactionalStore`, one message's claim and commit;
//! - `batch`: `TransactionalBatchStore`, a batch's claim and commit;
//! - `outbox`: publishing through the transactional outbox, from a handler's transaction
//!   (`PgTransaction::publish`) or an application's own (`publish`);
//! - `relay`: `OutboxStore`, what a relay asks of the outbox table (leases, sent, failed,
//!   the sweep, the backlog, the wake-ups).
//!
//! From outside `store/` they use `schema` and `driver`. This file only names the public items,
//! which the crate root re-exports.

mod batch;
mod claim;
mod error;
mod outbox;
mod progress;
mod records;
mod relay;
mod single;
mod transaction;

pub use error::PostgresError;
pub use outbox::publish;
pub use progress::{DEFAULT_CLAIM_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TTL, PostgresStore};
pub use transaction::PgTransaction;
