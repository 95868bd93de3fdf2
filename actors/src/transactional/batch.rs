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
use crate::api::decode::Decoder;
use crate::api::delivery::{Delivery, subscription_of};
use crate::api::handler::{
    self, BatchCall, BatchRun, BatchStarted, Decode, ErasedHandler, Handing, batch_decode,
};
use crate::api::registration::Registration;
use crate::error::StoreError;
use crate::rules::outcome::{Handled, Note, Outcome};
use crate::store::{BatchClaim, BatchClaims, Claim, TransactionalBatchStore};
use crate::transactional::batch_run::{Member, Redecode, failed, member, run, shortest};
use crate::transactional::single::Transactional;
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
        Self::transactional_batch(
            subscription.into(),
            store,
            batch_decode(handler::json::<T>),
            handler,
        )
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
        Self::transactional_batch(
            subscription.into(),
            store,
            batch_decode(handler::raw),
            handler,
        )
    }

    /// A batch handler of payloads decoded by `decoder` whose writes commit in one transaction
    /// with the batch's records: [`transactional_json_batch`](Self::transactional_json_batch)
    /// with a decoder of your own (see [`decoded`](Self::decoded)). What the decoder fetches
    /// first for each message is awaited before the batch is decoded and its transaction opens.
    pub fn transactional_decoded_batch<D, S, H, O>(
        subscription: impl Into<String>,
        store: S,
        decoder: D,
        handler: H,
    ) -> Self
    where
        D: Decoder,
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<D::Output>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        let decoder = Arc::new(decoder);
        let decode = batch_decode(handler::by_decoder(decoder.clone()));
        Self::transactional_batch(subscription.into(), store, decode, handler)
            .decoding_with(&decoder)
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
                let again_decode = decode.clone();
                let redecode: Redecode<T> = Box::new(move |ids: &[Arc<str>]| {
                    let again = spare
                        .iter()
                        .flatten()
                        .filter(|(_, delivery)| ids.contains(&delivery.message_id))
                        .cloned()
                        .collect();
                    again_decode(again).0
                });
                let (items, undecodable) = decode(messages);
                let (handler, aborts) = (handler.clone(), store.clone());
                let run = async move |batch: Batch<T>, tx: &mut S::Transaction| {
                    let n = batch.len();
                    let subscription = subscription_of(batch.deliveries());
                    let returned = handler(batch, tx).await;
                    if aborts.store.aborted(tx) {
                        // Run again (or retried) by the runner, which logs it: whatever the
                        // handler returned (its error is the abort) is not logged.
                        return BatchHandled {
                            each: Vec::new(),
                            rest: Some(Handled {
                                outcome: Outcome::retry(),
                                note: Note::HandlerError,
                            }),
                        };
                    }
                    returned.into_batch_handled(&subscription, n)
                };
                start(store.clone(), items, undecodable, run, redecode)
            }))
        })
    }
}

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
    // Claimed under their keys: their ids, or their dedupe keys (never logged).
    let keys: Vec<Arc<str>> = items
        .iter()
        .map(|item| item.delivery.progress_key_shared())
        .collect();
    // An abort of the claim itself is claimed again after the store's wait, as a rerun would
    // be (nothing ran yet); past the reruns, or on any other error, every message is retried.
    let mut aborts = 0;
    let claims = loop {
        let error = match store.begin_batch(&subscription, &keys).await {
            Ok(claims) => {
                shared.succeeded();
                break claims;
            }
            Err(error) => error,
        };
        let members: Vec<Member> = items.iter().map(member).collect();
        if let StoreError::Aborted(_) = error {
            aborts += 1;
            if let Some(delay) = shared.rerun_after(aborts, &shortest(&members)) {
                tokio::time::sleep(delay).await;
                continue;
            }
        }
        let step = "could not open a transaction and claim the batch";
        return failed(&shared, step, &error, &subscription, &members);
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
                Ok(handled) => waited.push((member.id, handled)),
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

/// A message another transaction held when the batch claimed it: its own claim waits for that
/// one (up to the store's claim timeout), then it is replayed if the other committed, retried
/// if not; an error if the claim failed.
async fn settle_busy<S: TransactionalBatchStore>(
    shared: &Transactional<S>,
    subscription: &str,
    member: &Member,
) -> Result<Handled, StoreError> {
    let store = &shared.store;
    Ok(match store.begin(subscription, &member.key).await? {
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
