//! One batch on its way through a worker: each message's store lookup (a finished one is
//! replayed and left out), the decoder's fetches and the decoder, the handler once on the rest,
//! then each message's record and settle with its own outcome, through its own right
//! ([`run_batch`]).

use crate::api::batch::BatchHandled;
use crate::api::delivery::Delivery;
use crate::api::handler::{BatchRun, BatchStarted, ErasedHandler, Handing};
use crate::error::DecodeError;
use crate::pool::job::{Job, JobContext, Outbox, Running, admit};
use crate::pool::one_job::{prepare, running};
use crate::rt::guard::{self, Guarded, Panicked};
use crate::rt::tasks::poll_once;
use crate::rules::breaker::Verdict;
use crate::rules::outcome::Outcome;
use crate::rules::outcome::{Handled, Note};
use crate::status::stats::{FailureKind, Stats};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use tokio::time::Instant;
use tracing::Instrument;

/// Starts one batch: each message's store lookup (a finished one is replayed and left out),
/// the decoder's fetches (awaited together; a message whose fetch failed is settled alone), the
/// decoder (a payload that does not decode goes to the failure policy alone), the handler on
/// the others together, then each message's record and settle with its own outcome. What waits
/// (the fetches, the handler, the records) goes on in the returned future.
pub(crate) fn run_batch(
    jobs: Vec<Job>,
    cx: Arc<JobContext>,
    outbox: Rc<Outbox>,
) -> Option<LocalBoxFuture<'static, ()>> {
    let began = Instant::now();
    let mut members = Vec::with_capacity(jobs.len());
    let mut inputs = Vec::with_capacity(jobs.len());
    for job in jobs {
        let Some(admitted) = admit(job, &cx, outbox.clone()) else {
            continue;
        };
        let (member, data, delivery) = running(admitted, cx.clone(), began);
        members.push(member);
        inputs.push((data, delivery));
    }
    if members.is_empty() {
        return None;
    }
    let mut preparing = Vec::new();
    let mut failed: Vec<(usize, Result<DecodeError, Panicked>)> = Vec::new();
    for (at, (_, delivery)) in inputs.iter().enumerate() {
        match prepare(&cx, delivery, &members[at].span) {
            Ok(None) => {}
            Ok(Some(fetch)) => preparing.push((at, Guarded::new(fetch))),
            Err(Panicked) => failed.push((at, Err(Panicked))),
        }
    }
    if preparing.is_empty() && failed.is_empty() {
        return decode_and_run(members, inputs, cx);
    }
    // The batch waits for every fetch of its messages (each revision once, however many
    // messages were written with it: the decoder's cache shares one fetch).
    Some(Box::pin(async move {
        let (at, fetches): (Vec<usize>, Vec<_>) = preparing.into_iter().unzip();
        let fetched = futures::future::join_all(fetches).await;
        failed.extend(
            at.into_iter()
                .zip(fetched)
                .filter_map(|(at, fetched)| match fetched {
                    Ok(Ok(())) => None,
                    Ok(Err(error)) => Some((at, Ok(error))),
                    Err(Panicked) => Some((at, Err(Panicked))),
                }),
        );
        let mut pending = Vec::new();
        // From the last, so that each index still points at its message.
        failed.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, failure) in failed {
            let member = members.remove(at);
            let (_, delivery) = inputs.remove(at);
            let outcome = match failure {
                Ok(error) => member.undecodable(error, delivery),
                Err(Panicked) => member.panicked(),
            };
            pending.extend(member.finish(outcome));
        }
        if !members.is_empty() {
            pending.extend(decode_and_run(members, inputs, cx));
        }
        futures::future::join_all(pending).await;
    }))
}

/// The batch's payloads decoded (those that do not decode settled alone), the handler called
/// on the rest, each message recorded and settled.
fn decode_and_run(
    mut members: Vec<Running>,
    inputs: Vec<(Bytes, Delivery)>,
    cx: Arc<JobContext>,
) -> Option<LocalBoxFuture<'static, ()>> {
    let ErasedHandler::Batch(handler) = &cx.handler else {
        unreachable!("the pool hands batches only to batch handlers");
    };
    // One span for the batch, following from each message's (OpenTelemetry's batch receive);
    // sampled with them: traced when any of its messages is.
    let span = if members.iter().all(|m| m.span.is_disabled()) {
        tracing::Span::none()
    } else {
        let span = tracing::debug_span!("batch", subscription = %cx.subscription,
            messaging.batch.message_count = members.len(), otel.kind = "consumer",
            messaging.operation.type = "process");
        for member in &members {
            span.follows_from(&member.span);
        }
        span
    };
    // Decoding runs inside this call; the handler's call (a blocking handler's whole run, an
    // async handler's first poll) below, once the payloads that did not decode are settled.
    let started = {
        let _entered = span.enter();
        guard::call(|| handler(inputs))
    };
    let BatchStarted { undecodable, run } = match started {
        Ok(started) => started,
        Err(Panicked) => return settle_batch(members, Err(Panicked), &cx),
    };
    let mut pending = Vec::new();
    for (error, delivery) in undecodable {
        let Some(at) = members.iter().position(|m| m.id == delivery.message_id) else {
            continue;
        };
        // `remove`, not `swap_remove`: the others keep their order, which is their ordering
        // keys' order when they are held and run again.
        let member = members.remove(at);
        let outcome = member.undecodable(error, delivery);
        pending.extend(member.finish(outcome));
    }
    // Counted when the handler gets the batch (not when it returns: a batch still running, or
    // cut at the drain timeout, was handed out all the same).
    let stats = cx.stats.clone();
    let handing: Handing = Box::new(move |messages| {
        Stats::bump(&stats.batches);
        stats.batch_size.observe_count(messages as u64);
    });
    let called = run.map(|call| {
        let _entered = span.enter();
        guard::call(move || call(handing))
    });
    let rest = match called {
        None => None,
        Some(Err(Panicked)) => settle_batch(members, Err(Panicked), &cx),
        Some(Ok(BatchRun::Done(handled))) => settle_batch(members, Ok(handled), &cx),
        Some(Ok(BatchRun::Running(run))) => {
            let mut run = Guarded::new(run).instrument(span);
            match poll_once(Pin::new(&mut run)) {
                Poll::Ready(handled) => settle_batch(members, handled, &cx),
                Poll::Pending => Some(Box::pin(async move {
                    if let Some(recording) = settle_batch(members, run.await, &cx) {
                        recording.await;
                    }
                }) as LocalBoxFuture<'static, ()>),
            }
        }
    };
    pending.extend(rest);
    match pending.len() {
        0 => None,
        1 => pending.pop(),
        _ => Some(Box::pin(async move {
            futures::future::join_all(pending).await;
        })),
    }
}

/// A batch handler returned (or panicked): each message gets its outcome (its own, the one for
/// all, or, missing, a retry), is recorded when finished, and is settled. The records still
/// pending go on in the returned future.
fn settle_batch(
    members: Vec<Running>,
    handled: Result<BatchHandled, Panicked>,
    cx: &JobContext,
) -> Option<LocalBoxFuture<'static, ()>> {
    // A panic (the handler's, caught here, or caught by a transactional batch, which rolled
    // back first): every message of the batch is settled by the panic policy.
    let handled = handled.unwrap_or(BatchHandled {
        each: Vec::new(),
        rest: Some(Handled {
            outcome: Outcome::retry(),
            note: Note::Panicked,
        }),
    });
    let (resolved, strays) = handled.per_message(members.iter().map(|m| &*m.id));
    let mut panicked = 0;
    let outcomes: Vec<Outcome> = members
        .iter()
        .zip(resolved)
        .map(|(m, h)| match h {
            Some(h) if h.note == Note::Panicked => {
                panicked += 1;
                m.verdict.set(Verdict::Failure);
                cx.stats.failed(&m.id, m.attempt, FailureKind::Panic);
                cx.panic_policy.outcome()
            }
            Some(h) => m.handled(h),
            None => {
                m.verdict.set(Verdict::Failure);
                cx.stats
                    .failed(&m.id, m.attempt, FailureKind::MissingOutcome);
                tracing::warn!(parent: &m.span, subscription = %cx.subscription,
                    message_id = %m.id,
                    "the batch handler gave this message no outcome; it is retried");
                Outcome::retry()
            }
        })
        .collect();
    if strays > 0 {
        tracing::warn!(subscription = %cx.subscription, outcomes = strays,
            "a batch handler set outcomes for messages not in its batch; they were ignored");
    }
    if panicked > 0 {
        Stats::bump(&cx.stats.panics);
        tracing::error!(subscription = %cx.subscription, messages = panicked,
            policy = ?cx.panic_policy,
            "batch handler panicked; every message of the batch is settled by the panic \
             policy; the worker goes on");
    }
    let pending: Vec<_> = members
        .into_iter()
        .zip(outcomes)
        .filter_map(|(m, outcome)| m.finish(outcome))
        .collect();
    match pending.len() {
        0 => None,
        1 => pending.into_iter().next(),
        _ => Some(Box::pin(async move {
            futures::future::join_all(pending).await;
        })),
    }
}
