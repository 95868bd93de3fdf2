//! A batch's claimed messages in their transaction: the handler, then the commit or the
//! rollback, and the runs on a fresh transaction after the database aborted one; with what a
//! store's failure does to every message of the batch.
//!
//! It uses `single` (the registration's store, its failures and its aborts).

use crate::api::batch::{Batch, BatchHandled, BatchItem};
use crate::error::StoreError;
use crate::rt::guard::{Guarded, Panicked};
use crate::rules::lease_state::LeaseClock;
use crate::rules::outcome::{Completed, Handled, Note, Outcome};
use crate::store::{BatchClaim, TransactionalBatchStore};
use crate::transactional::single::{
    Failed, Transactional, aborted_in_handler, conflict_or_failure, held, unsettling,
};
use std::sync::Arc;

/// The batch's messages of these ids, decoded again, for a run after an abort (none when the
/// store never asks for one).
pub(crate) type Redecode<T> = Box<dyn Fn(&[Arc<str>]) -> Vec<BatchItem<T>>>;

/// A message of the batch: its id, the key it is claimed under (its id, or its dedupe key:
/// never logged), and its lease, for when it must be held before a retry.
#[derive(Clone)]
pub(crate) struct Member {
    pub(crate) id: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) clock: LeaseClock,
}

/// The handler on the claimed messages, then the commit (or the rollback): each message's
/// outcome, with what it counts. After an abort by the database, the messages are claimed again
/// on a fresh transaction and the handler runs again on those still unfinished, while the
/// store's `rerun_after` and the shortest lease of the batch allow.
pub(crate) async fn run<S, T, H>(
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
        let Some(delay) = shared.rerun_after(aborts, &shortest(&members)) else {
            let step = "the database aborted the batch's transaction, with no rerun left";
            let mut each = failed(shared, step, &error, subscription, &members).each;
            each.extend(found);
            return each;
        };
        tracing::debug!(%subscription, batch_size = members.len(), aborts, ?delay,
            error = %crate::error::Chain(&error),
            "the database aborted the batch's transaction; the handler runs again on a new one");
        tokio::time::sleep(delay).await;
        let keys: Vec<Arc<str>> = members.iter().map(|m| m.key.clone()).collect();
        // Claimed again; an abort of that claim waits and claims again, as a rerun would.
        let claims = loop {
            let error = match store.begin_batch(subscription, &keys).await {
                Ok(claims) => break claims,
                Err(error) => error,
            };
            if let StoreError::Aborted(_) = error {
                aborts += 1;
                if let Some(delay) = shared.rerun_after(aborts, &shortest(&members)) {
                    tokio::time::sleep(delay).await;
                    continue;
                }
            }
            let step = "could not claim the batch again after an abort";
            let mut each = failed(shared, step, &error, subscription, &members).each;
            each.extend(found);
            return each;
        };
        let mut again = Vec::with_capacity(members.len());
        for (member, claim) in members.iter().zip(claims.claims) {
            let id = member.id.clone();
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
                        .filter(|m| !done.contains(&m.id))
                        .map(|m| (m.id.clone(), Handled::ran(Outcome::retry()))),
                );
                return found;
            }
        }
    }
}

/// The lease of the batch's message with the least of it left.
pub(crate) fn shortest(members: &[Member]) -> LeaseClock {
    let now = tokio::time::Instant::now();
    members
        .iter()
        .map(|m| m.clock)
        .min_by_key(|clock| clock.remaining(now))
        .expect("a batch has a message at least")
}

/// A message finished before: settled again with its outcome.
fn replayed(completed: Completed) -> Handled {
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
            .map(|m| (m.id.clone(), Handled { outcome, note }))
            .collect::<Vec<_>>()
    };
    // Their settlers settle nothing: the runner settles each message after the commit.
    let claimed = claimed
        .into_iter()
        .map(|item| BatchItem {
            delivery: unsettling(item.delivery),
            ..item
        })
        .collect();
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
    let (resolved, _) = handled.per_message(members.iter().map(|m| &*m.id));
    let mut outcomes: Vec<(Arc<str>, Option<Handled>)> =
        members.iter().map(|m| m.id.clone()).zip(resolved).collect();
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
    // The store knows each message by its key.
    let key = |id: &Arc<str>| {
        members
            .iter()
            .find(|m| m.id == *id)
            .map_or_else(|| id.clone(), |m| m.key.clone())
    };
    let records = finished
        .iter()
        .filter_map(|(id, h)| Some((key(id), h.and_then(|h| h.outcome.completed())?)))
        .collect();
    let released = released.into_iter().map(|(id, _)| key(id)).collect();
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

pub(crate) fn member<T>(item: &BatchItem<T>) -> Member {
    Member {
        id: item.delivery.message_id.clone(),
        key: item.delivery.progress_key_shared(),
        clock: item.delivery.clock,
    }
}

/// A store call failed for the whole batch: every message is held, then retried.
pub(crate) fn failed<S>(
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
            .map(|m| {
                (
                    m.id.clone(),
                    Handled {
                        outcome: held(hold, &m.clock),
                        note: conflict_or_failure(error),
                    },
                )
            })
            .collect(),
        rest: None,
    }
}
