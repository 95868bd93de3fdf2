//! The traits of a database where a handler's writes and the message's progress record commit
//! in one transaction: [`TransactionalStore`] for single messages, [`TransactionalBatchStore`]
//! for batches. The runners that use them are in `transactional/`.

use crate::error::StoreError;
use crate::rules::outcome::Completed;
use futures::future::LocalBoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// What [`TransactionalStore::begin`] found.
#[derive(Debug)]
pub enum Claim<T> {
    /// The message id is now claimed in this open transaction: run the handler in it.
    Claimed(T),
    /// The message was finished and committed before (by this replica or another): settle it
    /// again with this outcome, without running the handler.
    Finished(Completed),
}

/// A database where a handler's writes and the message's progress record commit together.
///
/// One store may serve many subscriptions: records are kept per subscription and message id.
/// Implemented by `leasehold_postgres::PostgresStore`; implement it for another database with
/// transactions and a unique key.
///
/// The futures run on the worker thread that handles the message and need not be `Send`.
pub trait TransactionalStore: Send + Sync + 'static {
    /// An open transaction, handed to the handler. Dropped without
    /// [`commit`](Self::commit) or [`rollback`](Self::rollback) (the handler's future was
    /// dropped: its worker stopped), it must end rolled back.
    type Transaction: 'static;

    /// Opens a transaction and claims `message_id` of `subscription` in it. Waits while another
    /// open transaction holds the claim; fails with [`StoreError`] when the database cannot be
    /// reached (the message is then retried).
    fn begin(
        &self,
        subscription: &str,
        message_id: &str,
    ) -> LocalBoxFuture<'static, Result<Claim<Self::Transaction>, StoreError>>;

    /// Records that the claimed message finished with `completed` and commits. Resolves when the
    /// commit is durable; an error means it may not have committed (the message is retried, and
    /// a redelivery finds the record if it did).
    fn commit(
        &self,
        transaction: Self::Transaction,
        completed: Completed,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>>;

    /// Rolls back: the handler's writes and the claim are undone.
    fn rollback(&self, transaction: Self::Transaction) -> LocalBoxFuture<'static, ()>;

    /// Whether the database answers, asked by the subscription's health probe every
    /// `health_probe_interval`: an error (or no answer within the probe's timeout) makes the
    /// subscription not ready. The default answers yes without asking.
    fn probe(&self) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether the database aborted `transaction` while the handler used it (a statement of
    /// the handler's failed with the database's abort): nothing of it can commit, whatever the
    /// handler returned, so the runtime rolls it back and treats it as [`StoreError::Aborted`]
    /// (the handler runs again when [`rerun_after`](Self::rerun_after) allows). The default
    /// says no: a store whose database does not abort transactions need not track it.
    fn aborted(&self, transaction: &Self::Transaction) -> bool {
        let _ = transaction;
        false
    }

    /// How long to wait, after the database aborted a message's transaction for the
    /// `aborts`-th time in a row ([`StoreError::Aborted`], or [`aborted`](Self::aborted)), before
    /// the handler runs again on a fresh transaction; `None` when it should not (the message is
    /// then retried at once). The runtime runs it again only while the wait leaves at least
    /// [`MIN_LEASE_FOR_RERUN`] of the message's lease. The default never runs a handler again.
    fn rerun_after(&self, aborts: u32) -> Option<Duration> {
        let _ = aborts;
        None
    }
}

/// The least of a message's lease that must remain after the wait for the handler to run again
/// on a fresh transaction after an abort ([`TransactionalStore::rerun_after`]): a run and a
/// commit must fit in what is left.
pub const MIN_LEASE_FOR_RERUN: Duration = Duration::from_secs(10);

/// What [`TransactionalBatchStore::begin_batch`] found of one message of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchClaim {
    /// Claimed in the batch's open transaction: the handler gets it.
    Claimed,
    /// Finished and committed before (by this replica or another): settled again with this
    /// outcome, without the handler.
    Finished(Completed),
    /// Claimed by another open transaction (another replica has it now): left out of the batch,
    /// and settled once that claim resolves (replayed if it committed, retried if not).
    Busy,
}

/// A batch's open transaction and what it found of each message.
#[derive(Debug)]
pub struct BatchClaims<T> {
    /// The open transaction; `None` when no message was claimed (nothing to run).
    pub transaction: Option<T>,
    /// One per message id asked for, in the same order.
    pub claims: Vec<BatchClaim>,
}

/// A [`TransactionalStore`] that claims a whole batch in one transaction: what
/// `Registration::transactional_json_batch` and `transactional_raw_batch` need.
///
/// Implemented by `leasehold_postgres::PostgresStore`.
pub trait TransactionalBatchStore: TransactionalStore {
    /// Opens a transaction and claims in it, in one statement, every one of `message_ids` (of
    /// `subscription`) that no other open transaction holds, without waiting for those that
    /// one does ([`BatchClaim::Busy`]); a message finished before is
    /// [`BatchClaim::Finished`]. Fails with [`StoreError`] when the database cannot be reached
    /// (every message of the batch is then retried).
    fn begin_batch(
        &self,
        subscription: &str,
        message_ids: &[Arc<str>],
    ) -> LocalBoxFuture<'static, Result<BatchClaims<Self::Transaction>, StoreError>>;

    /// Records the outcome of each message in `finished`, releases the claims in `released`
    /// (messages retried: a redelivery claims them again), and commits, all in one transaction.
    /// Resolves when the commit is durable; an error means it may not have committed (every
    /// message of the batch is retried, and a redelivery finds the records if it did).
    fn commit_batch(
        &self,
        transaction: Self::Transaction,
        finished: Vec<(Arc<str>, Completed)>,
        released: Vec<Arc<str>>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>>;
}
