//! One job: a message on its way through a worker. What it carries ([`Job`]: the delivery, the
//! payload, its [`SettleRight`] and its [`Ticket`]), what its run shares with a batch's
//! ([`admit`]: the drain and the progress store's lookup; [`Running`]: the outcome counted,
//! recorded and settled), and how its end reaches the pool ([`Outbox`]). The run itself is
//! `one_job.rs` (`batch_job.rs` for a batch).
//!
//! The worker settles the message with its lease actor through the job's right (the settlements
//! of a turn go together to the lease actors' thread), then
//! gives the job's ticket back to the pool, which only learns that a place is free. A job
//! dropped before it ended (its worker died, or the stop cut the handler) drops its right, which
//! nacks the message, and its ticket, which frees its place: a lost worker never strands a
//! lease. Every call into user code is guarded ([`guard`](crate::rt::guard)).

use crate::api::decode::Prepare;
use crate::api::delivery::{Delivery, retry_after};
use crate::api::handler::ErasedHandler;
use crate::api::policy::{FailurePolicy, PanicPolicy};
use crate::error::DecodeError;
use crate::error::StoreError;
use crate::lease::settle_right::{Place, SettleRight, Settlement, Settlements};
pub(crate) use crate::pool::ticket::{Rerun, Returned, Ticket};
use crate::rt::guard::{self, Panicked};
use crate::rt::tasks::poll_once;
use crate::rules::breaker::Verdict;
use crate::rules::outcome::Outcome;
use crate::rules::outcome::{Handled, Note};
use crate::status::stats::{FailureKind, Stats};
use crate::store::progress::{ProgressStore, lookup_guarded, report_record, start_record};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

/// What every worker of one subscription shares.
pub(crate) struct JobContext {
    pub(crate) handler: ErasedHandler,
    /// The registration's own decoder's fetch, awaited before the payload is decoded.
    pub(crate) prepare: Option<Prepare>,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) panic_policy: PanicPolicy,
    pub(crate) progress: Option<Arc<dyn ProgressStore>>,
    pub(crate) stats: Arc<Stats>,
    /// Set by the supervisor the moment a stop begins: a job taken after it is released unrun.
    pub(crate) draining: Arc<AtomicBool>,
    /// Where the workers give back the places of ended jobs: the pool.
    pub(crate) finished: UnboundedSender<Vec<Ticket>>,
    /// Where the workers send the settlements of each turn: the lease actors' thread.
    pub(crate) settlements: Settlements,
    /// The subscription's name, for log lines.
    pub(crate) subscription: Arc<str>,
    /// A breaker is set: each job keeps what it needs to run again, and a failed one goes
    /// back to the pool unsettled (the pool holds it, or settles it while the breaker is closed).
    pub(crate) holds_failures: bool,
}

impl JobContext {
    /// A handler panicked: counted, logged, settled by the panic policy.
    fn handler_panicked(
        &self,
        span: &tracing::Span,
        message_id: &str,
        attempt: Option<u32>,
    ) -> Outcome {
        Stats::bump(&self.stats.panics);
        self.stats.failed(message_id, attempt, FailureKind::Panic);
        tracing::error!(parent: span, subscription = %self.subscription, %message_id,
            policy = ?self.panic_policy, "handler panicked; the worker goes on");
        self.panic_policy.outcome()
    }
}

/// One message for a worker.
pub(crate) struct Job {
    /// What the handler gets.
    pub(crate) delivery: Delivery,
    /// The payload to decode.
    pub(crate) data: Bytes,
    /// The message's span.
    pub(crate) span: tracing::Span,
    /// The right to settle the message: the worker settles it with its lease actor.
    pub(crate) right: SettleRight,
    /// The job's place in the pool, given back when the job ends.
    pub(crate) ticket: Ticket,
}

/// A worker's ended jobs: their settlements, sent to the lease actors' thread together, and
/// their tickets, given back to the pool together, at the end of the worker's turn.
///
/// Sent one by one as they end, each would wake the supervisor's thread on its own: with
/// handlers that finish at once, that costs more than the work (a context switch per message).
pub(crate) struct Outbox {
    settled: RefCell<Vec<(SettleRight, Settlement)>>,
    tickets: RefCell<Vec<Ticket>>,
    settlements: Settlements,
    finished: UnboundedSender<Vec<Ticket>>,
}

impl Outbox {
    /// An outbox that sends settlements on `settlements` and gives tickets back on `finished`.
    pub(crate) fn new(settlements: Settlements, finished: UnboundedSender<Vec<Ticket>>) -> Self {
        Self {
            settled: RefCell::new(Vec::new()),
            tickets: RefCell::new(Vec::new()),
            settlements,
            finished,
        }
    }

    /// Sends what settled to the lease actors, then gives the tickets back. (Should the lease
    /// actors' thread be gone, the rights are dropped: their lease actors are gone too. Should
    /// the pool be gone, there is nobody to tell.)
    pub(crate) fn flush(&self) {
        // One send each for the whole turn: a channel operation per message costs more than the
        // one allocation per turn of a fresh batch.
        let settled = take_batch(&mut self.settled.borrow_mut());
        if !settled.is_empty() {
            let _ = self.settlements.send(settled);
        }
        let tickets = take_batch(&mut self.tickets.borrow_mut());
        if !tickets.is_empty() {
            let _ = self.finished.send(tickets);
        }
    }
}

/// What `batch` holds, leaving it empty with room for as many.
fn take_batch<T>(batch: &mut Vec<T>) -> Vec<T> {
    if batch.is_empty() {
        return Vec::new();
    }
    let room = batch.len();
    std::mem::replace(batch, Vec::with_capacity(room))
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A running job's place in the pool: given back once, also when the job is dropped before it
/// ends (its worker stopped or died).
pub(crate) struct Reporter {
    ticket: Option<Ticket>,
    outbox: Rc<Outbox>,
}

impl Reporter {
    /// The job ended with `settlement` for its message: both go out at the end of the turn.
    fn end(&mut self, right: SettleRight, settlement: Settlement) {
        self.outbox.settled.borrow_mut().push((right, settlement));
        self.give_back();
    }

    /// The job ran and ended with `verdict`: settled now, or, failed with a breaker set
    /// (`back`), given back to the pool unsettled.
    fn ran(
        &mut self,
        right: SettleRight,
        outcome: Outcome,
        verdict: Verdict,
        rerun: Option<Rerun>,
        span: tracing::Span,
    ) {
        let failed = matches!(verdict, Verdict::Failure | Verdict::Down);
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.verdict = verdict;
            if let (true, Some(Rerun { delivery, data })) = (failed, rerun) {
                ticket.back = Some(Box::new(Returned {
                    delivery,
                    data,
                    span,
                    right,
                    outcome,
                }));
                return self.give_back();
            }
        }
        self.end(right, Settlement::of(outcome));
    }

    fn give_back(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.outbox.tickets.borrow_mut().push(ticket);
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// A finished message settled again from the store without its handler: counted replayed, and
/// deduplicated when it was found by its dedupe key.
pub(crate) fn replayed(stats: &Stats, by_key: bool) {
    Stats::bump(&stats.replayed);
    if by_key {
        Stats::bump(&stats.deduplicated);
    }
}

/// What a job needs from its handler's start to its settle. Dropped before it settled (its
/// worker stopped or died), its right nacks the message and its place goes back to the pool.
pub(crate) struct Running {
    pub(crate) cx: Arc<JobContext>,
    pub(crate) id: Arc<str>,
    /// The key its progress is kept under, when not its id (`Delivery::key`): never logged.
    pub(crate) key: Option<Arc<str>>,
    pub(crate) attempt: Option<u32>,
    pub(crate) span: tracing::Span,
    pub(crate) began: Instant,
    pub(crate) right: SettleRight,
    pub(crate) ticket: Reporter,
    /// How the run ended, for the breaker: set with the outcome.
    pub(crate) verdict: Cell<Verdict>,
    /// What runs the job again, when a breaker is set.
    pub(crate) rerun: Option<Rerun>,
}

impl Running {
    /// The outcome of a handler that returned, with what its note says counted.
    pub(crate) fn handled(&self, h: Handled) -> Outcome {
        let (cx, id, attempt) = (&self.cx, &self.id, self.attempt);
        self.verdict.set(h.verdict());
        match h.note {
            Note::Ran => {}
            Note::HandlerError => cx.stats.failed(id, attempt, FailureKind::HandlerError),
            Note::Committed => Stats::bump(&cx.stats.committed),
            Note::Replayed => replayed(&cx.stats, self.key.is_some()),
            Note::Contended => {}
            Note::StoreFailed | Note::Conflict => {
                Stats::bump(&cx.stats.store_failures);
                cx.stats.failed(id, attempt, FailureKind::StoreFailure);
            }
            Note::Panicked => return self.panicked(),
        }
        h.outcome
    }

    pub(crate) fn panicked(&self) -> Outcome {
        self.verdict.set(Verdict::Failure);
        self.cx.handler_panicked(&self.span, &self.id, self.attempt)
    }

    /// The payload did not decode: the failure policy's outcome; or, when what decoding needs
    /// could not be fetched, a retry held as long as the decoder asks (its lease allowing).
    pub(crate) fn undecodable(&self, error: DecodeError, delivery: Delivery) -> Outcome {
        let (cx, span, id) = (&self.cx, &self.span, &self.id);
        if let DecodeError::Unavailable { retry_in, .. } = &error {
            // An outage of what the decoder fetches from, not a bad payload: the decoder logs it
            // (once per thing it could not fetch), the breaker counts it.
            self.verdict.set(Verdict::Failure);
            tracing::debug!(parent: span, subscription = %cx.subscription, message_id = %id,
                %error, "what decoding needs could not be fetched; the message is retried");
            let hold = (*retry_in).min(delivery.remaining_lease());
            return retry_after(&delivery.clock, hold).unwrap_or_else(|_| Outcome::retry());
        }
        Stats::bump(&cx.stats.decode_failures);
        cx.stats
            .failed(id, self.attempt, FailureKind::DecodeFailure);
        tracing::warn!(parent: span, subscription = %cx.subscription, message_id = %id,
            %error, policy = ?cx.failure_policy, "payload did not decode");
        guard::call(|| cx.failure_policy.outcome(&delivery, &error)).unwrap_or_else(|Panicked| {
            Stats::bump(&cx.stats.panics);
            tracing::error!(parent: span, subscription = %cx.subscription, message_id = %id,
                policy = ?cx.panic_policy,
                "the failure policy panicked; the message is settled by the panic policy");
            cx.panic_policy.outcome()
        })
    }

    /// The outcome is known: records a finished one (before its ack is sent), then settles.
    /// A record still pending after its first poll goes on in the returned future.
    pub(crate) fn finish(self, outcome: Outcome) -> Option<LocalBoxFuture<'static, ()>> {
        self.cx.stats.handler_seconds.observe(self.began.elapsed());
        let recording = match (&self.cx.progress, outcome.completed()) {
            (Some(store), Some(completed)) => {
                let key = self.key.as_deref().unwrap_or(&self.id);
                Some(start_record(&**store, key, completed))
            }
            _ => None,
        };
        match recording {
            None => {}
            Some(Err(panicked)) => self.report(Err(panicked)),
            Some(Ok(mut recording)) => match poll_once(Pin::new(&mut recording)) {
                Poll::Ready(result) => self.report(result),
                Poll::Pending => {
                    return Some(Box::pin(async move {
                        let result = recording.await;
                        self.report(result);
                        self.settle(outcome);
                    }));
                }
            },
        }
        self.settle(outcome);
        None
    }

    /// Settles the message with its lease actor, then gives the job's place back (or, failed
    /// with a breaker set, gives the job back to the pool unsettled).
    pub(crate) fn settle(self, outcome: Outcome) {
        let Self {
            right,
            mut ticket,
            verdict,
            rerun,
            span,
            ..
        } = self;
        ticket.ran(right, outcome, verdict.get(), rerun, span);
    }

    pub(crate) fn report(&self, result: Result<Result<(), StoreError>, Panicked>) {
        let cx = &self.cx;
        report_record(result, &cx.subscription, &self.id, &cx.stats, &self.span);
    }
}

/// A job the pool let in: not released by the drain, not replayed from the progress store.
pub(crate) struct Admitted {
    pub(crate) delivery: Delivery,
    pub(crate) data: Bytes,
    pub(crate) span: tracing::Span,
    pub(crate) right: SettleRight,
    pub(crate) ticket: Reporter,
}

/// A job begins: its message is released when the subscription drains, and settled as recorded
/// when the progress store has it finished; otherwise its handler is to run.
pub(crate) fn admit(job: Job, cx: &JobContext, outbox: Rc<Outbox>) -> Option<Admitted> {
    let Job {
        delivery,
        data,
        span,
        mut right,
        ticket,
    } = job;
    right.moved_to(Place::Running);
    let mut ticket = Reporter {
        ticket: Some(ticket),
        outbox,
    };
    if cx.draining.load(Ordering::SeqCst) {
        ticket.end(right, Settlement::Released);
        return None;
    }
    if let Some(store) = &cx.progress
        && let Some(completed) = lookup_guarded(
            &**store,
            &cx.subscription,
            delivery.progress_key(),
            &delivery.message_id,
            &cx.stats,
            &span,
        )
    {
        replayed(&cx.stats, delivery.key.is_some());
        tracing::debug!(parent: &span, ?completed,
            "finished before: settled again without running the handler");
        ticket.end(right, Settlement::of(Outcome::replay(completed)));
        return None;
    }
    Some(Admitted {
        delivery,
        data,
        span,
        right,
        ticket,
    })
}
