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

use crate::api::decode::Decoder;
use crate::api::delivery::{Delivery, retry_after};
use crate::api::handler::{self, DecodePayload, ErasedHandler, HandlerKind, IntoOutcome, Started};
use crate::api::registration::Registration;
use crate::error::Chain;
use crate::error::StoreError;
use crate::rt::guard::{Guarded, Panicked};
use crate::rules::lease_state::LeaseClock;
use crate::rules::outcome::Outcome;
use crate::rules::outcome::{Handled, Note};
use crate::store::{Claim, MIN_LEASE_FOR_RERUN, TransactionalStore};
use bytes::Bytes;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// A registration's store, with its run of consecutive failures.
pub(crate) struct Transactional<S> {
    pub(crate) store: S,
    /// Store calls that failed in a row (reset by a claim that succeeds).
    failures: AtomicU32,
    /// Transactions the database aborted: the subscription's `store_aborts`.
    pub(crate) aborts: Arc<AtomicU64>,
}

impl<S> Transactional<S> {
    pub(crate) fn new(store: S) -> Self {
        Self {
            store,
            failures: AtomicU32::new(0),
            aborts: Arc::default(),
        }
    }
}

impl<S: TransactionalStore> Transactional<S> {
    /// The database aborted a transaction for the `aborts`-th time in a row: counted, and how
    /// long to wait before the handler runs again (`None`: it does not; the message is retried).
    pub(crate) fn rerun_after(&self, aborts: u32, clock: &LeaseClock) -> Option<Duration> {
        self.aborts.fetch_add(1, Ordering::Relaxed);
        let remaining = clock.remaining(tokio::time::Instant::now());
        self.store
            .rerun_after(aborts)
            .filter(|delay| delay.saturating_add(MIN_LEASE_FOR_RERUN) <= remaining)
    }
}

/// The delivery as a transactional handler gets it: its [`settle_later`](Delivery::settle_later)
/// settler settles nothing. The message is settled after the commit or the rollback, by the
/// runner; a settler used before (an ack of writes about to be rolled back) or after would
/// settle it out of turn.
pub(crate) fn unsettling(mut delivery: Delivery) -> Delivery {
    delivery.lease = None;
    delivery
}

/// The error a statement's abort, seen by [`TransactionalStore::aborted`], stands for.
pub(crate) fn aborted_in_handler() -> StoreError {
    StoreError::Aborted(crate::error::Cause::message(
        "the database aborted the transaction while the handler used it",
    ))
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

/// What a failed store call was for, in its log line.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failed<'a> {
    /// One message, by its id.
    Message(&'a str),
    /// A batch of this many messages.
    Batch(usize),
}

impl<S> Transactional<S> {
    /// A store call failed: the message is retried. A conflict ([`StoreError::Busy`], or an
    /// abort with no rerun left) at once;
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
        let hold = self.hold_after(step, error, subscription, Failed::Message(message_id));
        Handled {
            outcome: held(hold, clock),
            note: conflict_or_failure(error),
        }
    }

    /// How long to hold messages whose store call failed before their nack (`None`: nack at
    /// once, a conflict), counted and logged once for `what` (one message, or a batch).
    pub(crate) fn hold_after(
        &self,
        step: &str,
        error: &StoreError,
        subscription: &str,
        what: Failed<'_>,
    ) -> Option<Duration> {
        // A message is logged by its id; a batch by its size (no message id stands for it).
        let (message_id, batch_size) = match what {
            Failed::Message(id) => (Some(id), None),
            Failed::Batch(n) => (None, Some(n)),
        };
        if let StoreError::Busy(_) | StoreError::Aborted(_) = error {
            tracing::info!(%subscription, message_id, batch_size, error = %Chain(error),
                "{step} (a conflict with another transaction); the message is retried");
            return None;
        }
        let run = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let delay = store_retry_delay(run);
        if run == 1 || run.is_multiple_of(100) {
            tracing::warn!(%subscription, message_id, batch_size, error = %Chain(error),
                failures_in_a_row = run, ?delay,
                "{step}; retried after the delay (store failures in a row are logged at warn \
                 once in a hundred)");
        } else {
            tracing::debug!(%subscription, message_id, batch_size, error = %Chain(error),
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

/// How a store's error is noted: a conflict is not an outage.
pub(crate) fn conflict_or_failure(error: &StoreError) -> Note {
    match error {
        StoreError::Busy(_) | StoreError::Aborted(_) => Note::Conflict,
        _ => Note::StoreFailed,
    }
}

/// Runs one message through a transaction: claim, handler, commit or roll back; after an abort
/// by the database, again on a fresh transaction while the store's `rerun_after` and the lease
/// allow.
async fn in_transaction<S, H>(
    shared: Arc<Transactional<S>>,
    delivery: Delivery,
    mut handler: H,
) -> Handled
where
    S: TransactionalStore,
    H: AsyncFnMut(Delivery, &mut S::Transaction) -> Handled,
{
    let names = delivery.names();
    let clock = delivery.clock;
    // A copy for the runs after an abort, only kept when the store may ask for one.
    let spare = shared
        .store
        .rerun_after(1)
        .is_some()
        .then(|| delivery.clone());
    let mut next = Some(delivery);
    let mut aborts = 0;
    loop {
        let delivery = match next.take() {
            Some(delivery) => delivery,
            None => spare.clone().expect("a rerun keeps a spare delivery"),
        };
        let error = match attempt(&shared, delivery, &mut handler).await {
            Ok(handled) => return handled,
            Err(error) => error,
        };
        aborts += 1;
        let (subscription, message_id) = &names;
        match shared.rerun_after(aborts, &clock) {
            Some(delay) if spare.is_some() => {
                tracing::debug!(%subscription, %message_id, aborts, ?delay,
                    error = %Chain(&error),
                    "the database aborted the transaction; the handler runs again on a new one");
                tokio::time::sleep(delay).await;
            }
            _ => {
                let step = "the database aborted the transaction, with no rerun left";
                return shared.failed(step, &error, &names, &clock);
            }
        }
    }
}

/// One run: claim, handler, commit or roll back. `Err` only for an abort by the database
/// ([`StoreError::Aborted`], from a store call or seen by [`TransactionalStore::aborted`]);
/// every other end is the message's outcome.
async fn attempt<S, H>(
    shared: &Transactional<S>,
    delivery: Delivery,
    handler: &mut H,
) -> Result<Handled, StoreError>
where
    S: TransactionalStore,
    H: AsyncFnMut(Delivery, &mut S::Transaction) -> Handled,
{
    let store = &shared.store;
    let names = delivery.names();
    let (subscription, message_id) = &names;
    let clock = delivery.clock;
    // Claimed under its progress key: its message id, or its dedupe key (never logged).
    let key = delivery.progress_key_shared();
    let mut transaction = match store.begin(subscription, &key).await {
        Ok(Claim::Claimed(transaction)) => {
            shared.succeeded();
            transaction
        }
        Ok(Claim::Finished(completed)) => {
            shared.succeeded();
            tracing::debug!(%subscription, %message_id, ?completed,
                "finished and committed before: settled again without running the handler");
            return Ok(Handled {
                outcome: Outcome::replay(completed),
                note: Note::Replayed,
            });
        }
        Err(error @ StoreError::Aborted(_)) => return Err(error),
        Err(error) => {
            let step = "could not open a transaction and claim the message";
            return Ok(shared.failed(step, &error, &names, &clock));
        }
    };
    // The handler's panic is caught here so that its transaction is rolled back, not dropped.
    let handled = Guarded::new(Box::pin(handler(unsettling(delivery), &mut transaction))).await;
    let handled = match handled {
        Ok(handled) => handled,
        Err(Panicked) => {
            store.rollback(transaction).await;
            return Ok(Handled {
                outcome: Outcome::retry(),
                note: Note::Panicked,
            });
        }
    };
    if store.aborted(&transaction) {
        // Whatever the handler returned, it saw a transaction that cannot commit.
        store.rollback(transaction).await;
        return Err(aborted_in_handler());
    }
    if handled.outcome.is_deferred() {
        tracing::error!(%subscription, %message_id,
            "settle_later is not supported in a transactional handler: its transaction ends \
             when the handler returns; rolled back, and the message is retried");
        store.rollback(transaction).await;
        return Ok(Handled {
            outcome: Outcome::retry(),
            note: Note::HandlerError,
        });
    }
    let Some(completed) = handled.outcome.completed() else {
        store.rollback(transaction).await;
        return Ok(handled);
    };
    match store.commit(transaction, completed).await {
        Ok(()) => Ok(Handled {
            outcome: handled.outcome,
            note: Note::Committed,
        }),
        Err(error @ StoreError::Aborted(_)) => Err(error),
        Err(error) => Ok(shared.failed("the transaction did not commit", &error, &names, &clock)),
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
    /// [`ProgressStore`](crate::store::ProgressStore) is off, and
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
        Self::transactional(subscription.into(), store, handler::json::<T>, handler)
    }

    /// A handler of raw payload bytes whose writes commit in one transaction with the message's
    /// progress record: [`transactional_json`](Self::transactional_json) without the decoding.
    pub fn transactional_raw<S, H, O>(subscription: impl Into<String>, store: S, handler: H) -> Self
    where
        S: TransactionalStore,
        H: AsyncFn(Bytes, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        Self::transactional(subscription.into(), store, handler::raw, handler)
    }

    /// A handler of payloads decoded by `decoder` whose writes commit in one transaction with
    /// the message's progress record: [`transactional_json`](Self::transactional_json) with a
    /// decoder of your own (see [`decoded`](Self::decoded)). What the decoder fetches first is
    /// awaited before the transaction opens.
    pub fn transactional_decoded<D, S, H, O>(
        subscription: impl Into<String>,
        store: S,
        decoder: D,
        handler: H,
    ) -> Self
    where
        D: Decoder,
        S: TransactionalStore,
        H: AsyncFn(D::Output, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        let decoder = Arc::new(decoder);
        let decode = handler::by_decoder(decoder.clone());
        Self::transactional(subscription.into(), store, decode, handler).decoding_with(&decoder)
    }

    /// A registration whose payloads `decode` decodes for `handler`, each message in a
    /// transaction of the store shared by all of them.
    fn transactional<T, S, H, O>(
        subscription: String,
        store: S,
        decode: impl DecodePayload<T>,
        handler: H,
    ) -> Self
    where
        T: 'static,
        S: TransactionalStore,
        H: AsyncFn(T, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        let handler = Arc::new(handler);
        let decode = Arc::new(decode);
        Self::with_transactional_store(subscription, store, |store| {
            ErasedHandler::One(Arc::new(move |data: Bytes, delivery| {
                match decode(data.clone(), &delivery) {
                    Ok(value) => {
                        let (handler, aborts) = (handler.clone(), store.clone());
                        let decode = decode.clone();
                        // The first run takes the decoded payload; a run after an abort decodes it
                        // again (it decoded once: it decodes the same way).
                        let mut first = Some(value);
                        let run = async move |delivery: Delivery, tx: &mut S::Transaction| {
                            let (s, id) = delivery.names();
                            let value = match first.take() {
                                Some(value) => value,
                                None => match decode(data.clone(), &delivery) {
                                    Ok(value) => value,
                                    Err(error) => {
                                        tracing::error!(subscription = %s, message_id = %id, %error,
                                        "the payload decoded once but not again; retried");
                                        return Handled {
                                            outcome: Outcome::retry(),
                                            note: Note::HandlerError,
                                        };
                                    }
                                },
                            };
                            let returned = handler(value, delivery, tx).await;
                            if aborts.store.aborted(tx) {
                                // Run again (or retried) by the runner, which logs it: whatever
                                // the handler returned (its error is the abort) is not logged.
                                return Handled {
                                    outcome: Outcome::retry(),
                                    note: Note::HandlerError,
                                };
                            }
                            returned.into_outcome_for(&s, &id)
                        };
                        Started::Running(in_transaction(store.clone(), delivery, run).boxed_local())
                    }
                    Err(error) => Started::Undecodable(Box::new(error), delivery),
                }
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
        let aborts = store.aborts.clone();
        let mut registration = Self::new(subscription, HandlerKind::Async, handler(store));
        registration.progress = None;
        registration.store_aborts = Some(aborts);
        registration.store_probe = Some(Arc::new(move || weak.upgrade().map(|s| s.store.probe())));
        registration
    }
}
