//! Effectively-once batches: a batch handler whose writes for the whole batch commit in one
//! transaction with every message's progress record.
//!
//! For each batch the runtime
//! 1. opens one transaction and claims every message id of the batch in it, in one statement
//!    ([`TransactionalBatchStore::begin_batch`]): a message finished before is replayed with its
//!    recorded outcome and left out; a message whose claim another open transaction holds
//!    (another replica has it now) is left out too, and settled once that claim resolves (its
//!    single-message claim waits for it: replayed if it committed, retried if not);
//! 2. runs the handler on the claimed messages with the transaction: it writes in bulk there;
//! 3. records the outcome of every message finished with `ack()` or `drop()`, releases the
//!    claims of the others, and commits, in one transaction
//!    ([`TransactionalBatchStore::commit_batch`]); when no message finished, or the handler
//!    failed or panicked, it rolls back instead;
//! 4. only then settles each message (acks confirmed on exactly-once subscriptions).
//!
//! A batch commits as one: the writes the handler made for a message it then retries commit
//! with the others (write only for the messages you ack or drop). A failed begin or commit
//! holds and retries every message of the batch, as for single messages.

use crate::api::batch::{Batch, BatchHandled, BatchItem, IntoBatchOutcome};
use crate::api::delivery::{Delivery, subscription_of};
use crate::api::handler::{
    BatchCall, BatchRun, BatchStarted, Decode, ErasedHandler, Handing, decode_batch, raw_items,
};
use crate::api::registration::Registration;
use crate::error::StoreError;
use crate::rt::guard::{Guarded, Panicked};
use crate::rules::lease_state::LeaseClock;
use crate::rules::outcome::{Handled, Note, Outcome};
use crate::store::{BatchClaim, BatchClaims, Claim, TransactionalBatchStore};
use crate::transactional::single::{
    Failed, Transactional, aborted_in_handler, conflict_or_failure, held,
};
use bytes::Bytes;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use std::sync::Arc;

impl Registration {
    /// A batch handler of JSON payloads decoded into `T` whose writes commit in one
    /// transaction with every message's progress record, before the acks are sent: effectively
    /// once for the effects written in that transaction **for the messages acked or dropped**,
    /// across replicas and crashes, at one transaction per batch. See the steps on
    /// [`TransactionalBatchStore`].
    ///
    /// The handler gets the batch of claimed messages (a message finished before is replayed
    /// without it; one another replica holds now is left out and settled when that claim
    /// resolves: such waits run one at a time beside the batch) and the open transaction, writes there (one multi-row statement for the
    /// batch is the point), and returns a [`BatchOutcome`](crate::BatchOutcome). Messages
    /// acked or dropped are recorded and the transaction commits; the claims of the others
    /// are released. The batch commits as one: a write made for a message that is then
    /// retried commits too, so write only for the messages you ack or drop. An `Err` or a
    /// panic rolls the whole batch back and retries every message (a panic by the panic
    /// policy); `settle_later` is not supported (rolled back, retried). Batches form as for
    /// [`json_batch`](Self::json_batch), with the same options.
    pub fn transactional_json_batch<T, S, H, O>(
        subscription: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<T>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        Self::transactional_batch(subscription.into(), store, decode_batch::<T>, handler)
    }

    /// A batch handler of raw payload bytes whose writes commit in one transaction with the
    /// batch's records: [`transactional_json_batch`](Self::transactional_json_batch) without
    /// the decoding.
    pub fn transactional_raw_batch<S, H, O>(
        subscription: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<Bytes>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        Self::transactional_batch(subscription.into(), store, raw_items, handler)
    }

    /// A batch registration on `store`: each batch decoded by `decode`, and its claimed
    /// messages handed to `handler` in the batch's transaction.
    fn transactional_batch<T, S, H, O>(
        subscription: String,
        store: S,
        decode: Decode<T>,
        handler: H,
    ) -> Self
    where
        T: 'static,
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<T>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        let handler = Arc::new(handler);
        Self::with_transactional_store(subscription, store, |store| {
            ErasedHandler::Batch(Arc::new(move |messages: Vec<(Bytes, Delivery)>| {
                // A copy for the runs after an abort, only kept when the store may ask for one:
                // those decode the payloads of the messages they run again.
                let spare = store
                    .store
                    .rerun_after(1)
                    .is_some()
                    .then(|| messages.clone());
                let redecode: Redecode<T> = Box::new(move |ids: &[Arc<str>]| {
                    let again = spare
                        .iter()
                        .flatten()
                        .filter(|(_, delivery)| ids.contains(&delivery.message_id))
                        .cloned()
                        .collect();
                    decode(again).0
                });
                let (items, undecodable) = decode(messages);
                let handler = handler.clone();
                let run = async move |batch: Batch<T>, tx: &mut S::Transaction| {
                    let n = batch.len();
                    let subscription = subscription_of(batch.deliveries());
                    handler(batch, tx)
                        .await
                        .into_batch_handled(&subscription, n)
                };
                start(store.clone(), items, undecodable, run, redecode)
            }))
        })
    }
}

/// The batch's messages of these ids, decoded again, for a run after an abort (none when the
/// store never asks for one).
type Redecode<T> = Box<dyn Fn(&[Arc<str>]) -> Vec<BatchItem<T>>>;

/// Starts the transaction of a batch (when any payload decoded).
fn start<S, T, H>(
    store: Arc<Transactional<S>>,
    items: Vec<BatchItem<T>>,
    undecodable: Vec<(crate::error::DecodeError, Delivery)>,
    run: H,
    redecode: Redecode<T>,
) -> BatchStarted
where
    S: TransactionalBatchStore,
    T: 'static,
    H: AsyncFnMut(Batch<T>, &mut S::Transaction) -> BatchHandled + 'static,
{
    let run = (!items.is_empty()).then(|| {
        Box::new(move |handing: Handing| {
            BatchRun::Running(in_transaction(store, items, run, handing, redecode).boxed_local())
        }) as BatchCall
    });
    BatchStarted { undecodable, run }
}

/// A message of the batch: its id and its lease, for when it must be held before a retry.
type Member = (Arc<str>, LeaseClock);

/// Runs one batch through one transaction: claim, handler, commit or roll back; the messages
/// another transaction held wait for that claim meanwhile.
async fn in_transaction<S, T, H>(
    shared: Arc<Transactional<S>>,
    items: Vec<BatchItem<T>>,
    handler: H,
    handing: Handing,
    redecode: Redecode<T>,
) -> BatchHandled
where
    S: TransactionalBatchStore,
    H: AsyncFnMut(Batch<T>, &mut S::Transaction) -> BatchHandled,
{
    let store = &shared.store;
    let subscription = items[0].delivery.shared.subscription.clone();
    let ids: Vec<Arc<str>> = items
        .iter()
        .map(|item| item.delivery.message_id.clone())
        .collect();
    let claims = match store.begin_batch(&subscription, &ids).await {
        Ok(claims) => {
            shared.succeeded();
            claims
        }
        Err(error) => {
            // An abort here is retried as a conflict: nothing ran yet, a redelivery claims anew.
            let step = "could not open a transaction and claim the batch";
            let members: Vec<Member> = items.iter().map(member).collect();
            return failed(&shared, step, &error, &subscription, &members);
        }
    };
    let BatchClaims {
        transaction,
        claims,
    } = claims;
    let mut each = Vec::with_capacity(items.len());
    let (mut claimed, mut busy) = (Vec::new(), Vec::new());
    for (item, claim) in items.into_iter().zip(claims) {
        match claim {
            BatchClaim::Claimed => claimed.push(item),
            BatchClaim::Finished(completed) => each.push((
                item.delivery.message_id.clone(),
                Handled {
                    outcome: Outcome::replay(completed),
                    note: Note::Replayed,
                },
            )),
            BatchClaim::Busy => busy.push(member(&item)),
        }
    }
    // The messages another transaction holds wait for those claims beside the batch, one at a
    // time: one pooled connection per batch, not one per message (another replica's batch
    // commits its claims together, so after the first wait the rest answer at once). When a wait
    // fails (the claim timeout), the rest are held and retried without waiting in turn.
    let waits = async {
        let mut waited = Vec::with_capacity(busy.len());
        let mut busy = busy.into_iter();
        while let Some(member) = busy.next() {
            match settle_busy(&shared, &subscription, &member).await {
                Ok(handled) => waited.push((member.0, handled)),
                Err(error) => {
                    let step = "could not claim a message another transaction held";
                    let rest: Vec<Member> = std::iter::once(member).chain(busy).collect();
                    waited.extend(failed(&shared, step, &error, &subscription, &rest).each);
                    break;
                }
            }
        }
        waited
    };
    // The handler gets the claimed messages, if any: only then is the batch handed out.
    if transaction.is_some() && !claimed.is_empty() {
        handing(claimed.len());
    }
    let run = async {
        match transaction {
            Some(tx) if !claimed.is_empty() => {
                run(&shared, &subscription, tx, claimed, handler, redecode).await
            }
            Some(tx) => {
                store.rollback(tx).await;
                Vec::new()
            }
            None => Vec::new(),
        }
    };
    let (waited, ran) = futures::future::join(waits, run).await;
    each.extend(ran);
    each.extend(waited);
    BatchHandled { each, rest: None }
}

/// The handler on the claimed messages, then the commit (or the rollback): each message's
/// outcome, with what it counts. After an abort by the database, the messages are claimed again
/// on a fresh transaction and the handler runs again on those still unfinished, while the
/// store's `rerun_after` and the shortest lease of the batch allow.
async fn run<S, T, H>(
    shared: &Transactional<S>,
    subscription: &Arc<str>,
    mut tx: S::Transaction,
    mut claimed: Vec<BatchItem<T>>,
    mut handler: H,
    redecode: Redecode<T>,
) -> Vec<(Arc<str>, Handled)>
where
    S: TransactionalBatchStore,
    H: AsyncFnMut(Batch<T>, &mut S::Transaction) -> BatchHandled,
{
    let store = &shared.store;
    // What the claims after an abort found settled already (replayed, or held elsewhere).
    let mut found = Vec::new();
    let mut aborts = 0;
    loop {
        let members: Vec<Member> = claimed.iter().map(member).collect();
        let error = match once(shared, subscription, tx, claimed, &mut handler, &members).await {
            Ok(mut each) => {
                each.extend(found);
                return each;
            }
            Err(error) => error,
        };
        aborts += 1;
        let shortest = members
            .iter()
            .map(|(_, clock)| *clock)
            .min_by_key(|clock| clock.remaining(tokio::time::Instant::now()))
            .expect("a batch runs with a message at least");
        let Some(delay) = shared.rerun_after(aborts, &shortest) else {
            let step = "the database aborted the batch's transaction, with no rerun left";
            let mut each = failed(shared, step, &error, subscription, &members).each;
            each.extend(found);
            return each;
        };
        tracing::debug!(%subscription, batch_size = members.len(), aborts, ?delay,
            error = %crate::error::Chain(&error),
            "the database aborted the batch's transaction; the handler runs again on a new one");
        tokio::time::sleep(delay).await;
        let ids: Vec<Arc<str>> = members.iter().map(|(id, _)| id.clone()).collect();
        let claims = match store.begin_batch(subscription, &ids).await {
            Ok(claims) => claims,
            Err(error) => {
                let step = "could not claim the batch again after an abort";
                let mut each = failed(shared, step, &error, subscription, &members).each;
                each.extend(found);
                return each;
            }
        };
        let mut again = Vec::with_capacity(ids.len());
        for (id, claim) in ids.into_iter().zip(claims.claims) {
            match claim {
                BatchClaim::Claimed => again.push(id),
                BatchClaim::Finished(completed) => found.push((id, replayed(completed))),
                // Another transaction has it now: a redelivery settles it.
                BatchClaim::Busy => found.push((
                    id,
                    Handled {
                        outcome: Outcome::retry(),
                        note: Note::Contended,
                    },
                )),
            }
        }
        claimed = redecode(&again);
        match claims.transaction {
            Some(next) if !claimed.is_empty() && claimed.len() == again.len() => tx = next,
            next => {
                if let Some(next) = next {
                    store.rollback(next).await;
                }
                // Nothing left to run (or, were a payload not to decode again, retried).
                let done: Vec<Arc<str>> = found.iter().map(|(id, _)| id.clone()).collect();
                found.extend(
                    members
                        .iter()
                        .filter(|(id, _)| !done.contains(id))
                        .map(|(id, _)| (id.clone(), Handled::ran(Outcome::retry()))),
                );
                return found;
            }
        }
    }
}

/// A message finished before: settled again with its outcome.
fn replayed(completed: crate::rules::outcome::Completed) -> Handled {
    Handled {
        outcome: Outcome::replay(completed),
        note: Note::Replayed,
    }
}

/// One run of the handler on the claimed messages, then the commit (or the rollback). `Err`
/// only for an abort by the database (at commit, or seen by
/// [`TransactionalStore::aborted`](crate::store::TransactionalStore::aborted)); the
/// transaction is rolled back then.
async fn once<S, T, H>(
    shared: &Transactional<S>,
    subscription: &Arc<str>,
    mut tx: S::Transaction,
    claimed: Vec<BatchItem<T>>,
    handler: &mut H,
    members: &[Member],
) -> Result<Vec<(Arc<str>, Handled)>, StoreError>
where
    S: TransactionalBatchStore,
    H: AsyncFnMut(Batch<T>, &mut S::Transaction) -> BatchHandled,
{
    let store = &shared.store;
    let all = |outcome, note| {
        members
            .iter()
            .map(|(id, _)| (id.clone(), Handled { outcome, note }))
            .collect::<Vec<_>>()
    };
    // The handler's panic is caught here so that the transaction is rolled back, not dropped.
    let handled = Guarded::new(Box::pin(handler(Batch::new(claimed), &mut tx))).await;
    let handled = match handled {
        Ok(handled) => handled,
        Err(Panicked) => {
            store.rollback(tx).await;
            return Ok(all(Outcome::retry(), Note::Panicked));
        }
    };
    if store.aborted(&tx) {
        // Whatever the handler returned, it saw a transaction that cannot commit.
        store.rollback(tx).await;
        return Err(aborted_in_handler());
    }
    if handled.rest.is_some_and(|h| h.note == Note::HandlerError) {
        store.rollback(tx).await;
        return Ok(all(Outcome::retry(), Note::HandlerError));
    }
    // Each message's outcome (none: the worker retries it as missing).
    let (resolved, _) = handled.per_message(members.iter().map(|(id, _)| &**id));
    let mut outcomes: Vec<(Arc<str>, Option<Handled>)> = members
        .iter()
        .map(|(id, _)| id.clone())
        .zip(resolved)
        .collect();
    let mut deferred = false;
    for (_, h) in &mut outcomes {
        if let Some(h) = h.as_mut()
            && h.outcome.is_deferred()
        {
            deferred = true;
            *h = Handled {
                outcome: Outcome::retry(),
                note: Note::HandlerError,
            };
        }
    }
    if deferred {
        tracing::error!(%subscription,
            "settle_later is not supported in a transactional batch handler: its transaction \
             ends when the handler returns; those messages are retried");
    }
    let (finished, released): (Vec<_>, Vec<_>) = outcomes
        .iter()
        .partition(|(_, h)| h.and_then(|h| h.outcome.completed()).is_some());
    if finished.is_empty() {
        store.rollback(tx).await;
        return Ok(outcomes
            .into_iter()
            .filter_map(|(id, h)| h.map(|h| (id, h)))
            .collect());
    }
    let records = finished
        .iter()
        .filter_map(|(id, h)| Some((id.clone(), h.and_then(|h| h.outcome.completed())?)))
        .collect();
    let released = released.into_iter().map(|(id, _)| id.clone()).collect();
    match store.commit_batch(tx, records, released).await {
        Ok(()) => Ok(outcomes
            .into_iter()
            .filter_map(|(id, h)| {
                let h = h?;
                let note = if h.outcome.completed().is_some() {
                    Note::Committed
                } else {
                    h.note
                };
                Some((id, Handled { note, ..h }))
            })
            .collect()),
        Err(error @ StoreError::Aborted(_)) => Err(error),
        Err(error) => Ok(failed(
            shared,
            "the batch's transaction did not commit",
            &error,
            subscription,
            members,
        )
        .each),
    }
}

/// A message another transaction held when the batch claimed it: its own claim waits for that
/// one (up to the store's claim timeout), then it is replayed if the other committed, retried
/// if not; an error if the claim failed.
async fn settle_busy<S: TransactionalBatchStore>(
    shared: &Transactional<S>,
    subscription: &str,
    (id, _): &Member,
) -> Result<Handled, StoreError> {
    let store = &shared.store;
    Ok(match store.begin(subscription, id).await? {
        Claim::Finished(completed) => Handled {
            outcome: Outcome::replay(completed),
            note: Note::Replayed,
        },
        Claim::Claimed(tx) => {
            // The other transaction did not finish it: a redelivery runs it in a batch again.
            store.rollback(tx).await;
            Handled {
                outcome: Outcome::retry(),
                note: Note::Contended,
            }
        }
    })
}

fn member<T>(item: &BatchItem<T>) -> Member {
    (item.delivery.message_id.clone(), item.delivery.clock)
}

/// A store call failed for the whole batch: every message is held, then retried.
fn failed<S>(
    shared: &Transactional<S>,
    step: &str,
    error: &StoreError,
    subscription: &str,
    members: &[Member],
) -> BatchHandled {
    let hold = shared.hold_after(step, error, subscription, Failed::Batch(members.len()));
    BatchHandled {
        each: members
            .iter()
            .map(|(id, clock)| {
                (
                    id.clone(),
                    Handled {
                        outcome: held(hold, clock),
                        note: conflict_or_failure(error),
                    },
                )
            })
            .collect(),
        rest: None,
    }
}
