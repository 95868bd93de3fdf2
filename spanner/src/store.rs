//! The Spanner transactional store and the transaction a handler writes in, one role per file
//! under `store/`, bottom to top (each uses only those before it):
//!
//! - `error`: the client's errors as the runtime's `StoreError` (an abort is
//!   `StoreError::Aborted`);
//! - `records`: a claim row's key (a shard of the id first), its outcome, its insert;
//! - `transaction`: `SpannerTransaction`, the open transaction, the aborts it notes, and how it
//!   ends;
//! - `progress`: `SpannerStore`, its defaults and settings, connecting, reading claims, the
//!   wait before a run after an abort;
//! - `single`: `TransactionalStore`, one message's claim and commit;
//! - `batch`: `TransactionalBatchStore`, a batch's claim and commit;
//! - `plain`: `SpannerProgress`, the claims table as a plain `ProgressStore`;
//! - `outbox`: `SpannerTransaction::publish`, a row of the transactional outbox written with
//!   the commit;
//! - `relay`: `OutboxStore`, what a relay asks of the outbox table (leases in read-write
//!   transactions, sent, failed, the sweep, the backlog).
//!
//! From outside `store/` they use `error`, `endpoint`, `driver` and `schema`. This file only names the
//! public items, which the crate root re-exports.

mod batch;
mod error;
mod outbox;
mod plain;
mod progress;
mod records;
mod relay;
mod single;
mod transaction;

pub use plain::{DEFAULT_LOOKUP_TIMEOUT, SpannerProgress};
pub use progress::{DEFAULT_MAX_ABORTS, DEFAULT_SESSIONS, SpannerStore};
pub use transaction::SpannerTransaction;
