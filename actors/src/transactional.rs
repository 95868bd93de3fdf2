//! Handlers whose side effects commit in one transaction with the message's progress record.
//!
//! For each message the runtime
//! 1. opens a transaction in the store and claims the message id in it ([`TransactionalStore::begin`]).
//!    A message finished before is settled again with its recorded outcome and the handler does
//!    not run; a claim another replica holds in a transaction still open waits for that
//!    transaction to end;
//! 2. runs the handler with the transaction: its writes go in it;
//! 3. on `ack()` or `drop()`, records the outcome and commits ([`TransactionalStore::commit`]);
//!    on anything else (`retry()`, `retry_after(d)`, an error, a panic) rolls back;
//! 4. only then sends the ack or nack (confirmed on exactly-once subscriptions).
//!
//! So the handler's writes in that transaction happen once per message whatever Pub/Sub does:
//! a redelivery of a committed message finds the record, a crash before the commit leaves
//! nothing behind, and two replicas given the same message cannot both commit (the claim is one
//! row; the second waits, then finds it finished). What the handler does outside the
//! transaction (an HTTP call, a message published) stays at-least-once.

use crate::delivery::{Delivery, retry_after};
use crate::error::{Chain, DecodeError};
use crate::guard::{Guarded, Panicked};
use crate::handler::{ErasedHandler, HandlerKind, IntoOutcome, Started};
use crate::lease_state::LeaseClock;
use crate::outcome::Outcome;
use crate::outcome::{Handled, Note};
use crate::progress::{Completed, StoreError};
use crate::registration::Registration;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
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
}

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

/// A registration's store, with its run of consecutive failures.
pub(crate) struct Transactional<S> {
    pub(crate) store: S,
    /// Store calls that failed in a row (reset by a claim that succeeds).
    failures: AtomicU32,
}

impl<S> Transactional<S> {
    pub(crate) fn new(store: S) -> Self {
        Self {
            store,
            failures: AtomicU32::new(0),
        }
    }
}

/// A retry, held `hold` first (never longer than what remains of the lease).
pub(crate) fn held(hold: Option<Duration>, clock: &LeaseClock) -> Outcome {
    hold.and_then(|delay| {
        let delay = delay.min(clock.remaining(tokio::time::Instant::now()));
        retry_after(clock, delay).ok()
    })
    .unwrap_or_else(Outcome::retry)
}

/// How long a message whose store call failed is held before its nack, after `n` failures in a
/// row: 100 ms, doubling, at most 10 s. Without it a database outage turns every message into
/// an immediate nack and redelivery, as fast as Pub/Sub can send them.
pub(crate) fn store_retry_delay(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(7);
    Duration::from_millis((100u64 << doublings).min(10_000))
}

impl<S> Transactional<S> {
    /// A store call failed: the message is retried. A conflict ([`StoreError::Busy`]) at once;
    /// anything else is an outage: held a while before its nack (longer with each failure in a
    /// row), logged at warn for the first of a run and once in a hundred after.
    pub(crate) fn failed(
        &self,
        step: &str,
        error: &StoreError,
        delivery: &(Arc<str>, Arc<str>),
        clock: &LeaseClock,
    ) -> Handled {
        let (subscription, message_id) = delivery;
        let hold = self.hold_after(step, error, subscription, message_id);
        Handled {
            outcome: held(hold, clock),
            note: Note::StoreFailed,
        }
    }

    /// How long to hold messages whose store call failed before their nack (`None`: nack at
    /// once, a conflict), counted and logged once for `what` (a message id, or a batch).
    pub(crate) fn hold_after(
        &self,
        step: &str,
        error: &StoreError,
        subscription: &str,
        what: &dyn fmt::Display,
    ) -> Option<Duration> {
        if let StoreError::Busy(_) = error {
            tracing::info!(%subscription, message_id = %what, error = %Chain(error),
                "{step} (a conflict with another transaction); the message is retried");
            return None;
        }
        let run = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let delay = store_retry_delay(run);
        if run == 1 || run.is_multiple_of(100) {
            tracing::warn!(%subscription, message_id = %what, error = %Chain(error),
                failures_in_a_row = run, ?delay,
                "{step}; retried after the delay (store failures in a row are logged at warn \
                 once in a hundred)");
        } else {
            tracing::debug!(%subscription, message_id = %what, error = %Chain(error),
                failures_in_a_row = run, ?delay, "{step}; retried");
        }
        Some(delay)
    }

    pub(crate) fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }
}

/// Runs one message through a transaction: claim, handler, commit or roll back.
async fn in_transaction<S, H>(
    shared: Arc<Transactional<S>>,
    delivery: Delivery,
    handler: H,
) -> Handled
where
    S: TransactionalStore,
    H: AsyncFnOnce(Delivery, &mut S::Transaction) -> Handled,
{
    let store = &shared.store;
    let names = delivery.names();
    let (subscription, message_id) = &names;
    let clock = delivery.clock;
    let mut transaction = match store.begin(subscription, message_id).await {
        Ok(Claim::Claimed(transaction)) => {
            shared.succeeded();
            transaction
        }
        Ok(Claim::Finished(completed)) => {
            shared.succeeded();
            tracing::debug!(%subscription, %message_id, ?completed,
                "finished and committed before: settled again without running the handler");
            return Handled {
                outcome: Outcome::replay(completed),
                note: Note::Replayed,
            };
        }
        Err(error) => {
            let step = "could not open a transaction and claim the message";
            return shared.failed(step, &error, &names, &clock);
        }
    };
    // The handler's panic is caught here so that its transaction is rolled back, not dropped.
    let handled = Guarded::new(Box::pin(handler(delivery, &mut transaction))).await;
    let handled = match handled {
        Ok(handled) => handled,
        Err(Panicked) => {
            store.rollback(transaction).await;
            return Handled {
                outcome: Outcome::retry(),
                note: Note::Panicked,
            };
        }
    };
    if handled.outcome.is_deferred() {
        tracing::error!(%subscription, %message_id,
            "settle_later is not supported in a transactional handler: its transaction ends \
             when the handler returns; rolled back, and the message is retried");
        store.rollback(transaction).await;
        return Handled {
            outcome: Outcome::retry(),
            note: Note::HandlerError,
        };
    }
    let Some(completed) = handled.outcome.completed() else {
        store.rollback(transaction).await;
        return handled;
    };
    match store.commit(transaction, completed).await {
        Ok(()) => Handled {
            outcome: handled.outcome,
            note: Note::Committed,
        },
        Err(error) => shared.failed("the transaction did not commit", &error, &names, &clock),
    }
}

impl Registration {
    /// A handler of JSON payloads decoded into `T` whose writes commit in one transaction with
    /// the message's progress record, before the ack is sent: effectively once for the effects
    /// written in that transaction, across replicas and crashes. See
    /// [`TransactionalStore`] for the steps.
    ///
    /// The handler gets the open transaction; it writes its effects there and returns
    /// an outcome (or a `Result`, whose error rolls back and retries). `ack()` and `drop()`
    /// commit; `retry()`, `retry_after(d)`, an error or a panic roll back.
    /// [`settle_later`](Delivery::settle_later) is not supported here (the transaction ends
    /// when the handler returns): it is rolled back and retried. Payloads that do not decode
    /// go to the failure policy without a transaction.
    ///
    /// Transactional registrations keep progress in their store: the default in-memory
    /// [`ProgressStore`](crate::ProgressStore) is off, and
    /// [`progress_store`](Self::progress_store) is refused by [`validate`](Self::validate).
    pub fn transactional_json<T, S, H, O>(
        subscription: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalStore,
        H: AsyncFn(T, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        let handler = Arc::new(handler);
        Self::transactional(subscription.into(), store, move |store, data, delivery| {
            match serde_json::from_slice::<T>(&data) {
                Ok(value) => {
                    let handler = handler.clone();
                    let run = async move |delivery: Delivery, tx: &mut S::Transaction| {
                        let (s, id) = delivery.names();
                        handler(value, delivery, tx).await.into_outcome_for(&s, &id)
                    };
                    Started::Running(in_transaction(store, delivery, run).boxed_local())
                }
                Err(e) => Started::Undecodable(DecodeError::json(&e), delivery),
            }
        })
    }

    /// A handler of raw payload bytes whose writes commit in one transaction with the message's
    /// progress record: [`transactional_json`](Self::transactional_json) without the decoding.
    pub fn transactional_raw<S, H, O>(subscription: impl Into<String>, store: S, handler: H) -> Self
    where
        S: TransactionalStore,
        H: AsyncFn(Bytes, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        let handler = Arc::new(handler);
        Self::transactional(subscription.into(), store, move |store, data, delivery| {
            let handler = handler.clone();
            let run = async move |delivery: Delivery, tx: &mut S::Transaction| {
                let (s, id) = delivery.names();
                handler(data, delivery, tx).await.into_outcome_for(&s, &id)
            };
            Started::Running(in_transaction(store, delivery, run).boxed_local())
        })
    }

    /// A registration whose messages go through `start`, with the store shared by all of them.
    fn transactional<S: TransactionalStore>(
        subscription: String,
        store: S,
        start: impl Fn(Arc<Transactional<S>>, Bytes, Delivery) -> Started + Send + Sync + 'static,
    ) -> Self {
        Self::with_transactional_store(subscription, store, |store| {
            ErasedHandler::One(Arc::new(move |data, delivery| {
                start(store.clone(), data, delivery)
            }))
        })
    }

    /// A registration whose handler (made by `handler`) shares the store; the registration
    /// keeps no progress store of its own (the transaction records) and probes this one.
    pub(crate) fn with_transactional_store<S: TransactionalStore>(
        subscription: String,
        store: S,
        handler: impl FnOnce(Arc<Transactional<S>>) -> ErasedHandler,
    ) -> Self {
        let store = Arc::new(Transactional::new(store));
        // Weak: a stopped subscription keeps no store alive.
        let weak = Arc::downgrade(&store);
        let mut registration = Self::new(subscription, HandlerKind::Async, handler(store));
        registration.progress = None;
        registration.store_probe = Some(Arc::new(move || weak.upgrade().map(|s| s.store.probe())));
        registration
    }
}
