//! The worker actor: one per worker thread, running handlers.
//!
//! Workers take jobs from one queue shared by all the workers of a subscription, each when it is
//! free, so a thread that a handler blocks takes nothing more while the others go on. An async
//! worker runs many handlers at once (the pool bounds how many are handed out); a blocking
//! worker runs one at a time. For each job a worker asks the progress store whether the message
//! was finished before, decodes the payload, runs the handler, records a finished outcome, and
//! settles the message straight with its lease actor through the job's [`SettleRight`]; then
//! it gives the job's [`Ticket`] back to the pool, which only learns that a place is free. Every
//! call into user code is guarded ([`guard`](crate::guard)).
//!
//! A job dropped before it ended (its worker died, or the stop cut the handler) drops its right,
//! which nacks the message, and its ticket, which frees its place: a lost worker never strands
//! a lease.

use crate::delivery::Delivery;
use crate::error::DecodeError;
use crate::guard::{self, Guarded, Panicked};
use crate::job_queue::Taker;
use crate::lifeline::Lifeline;
use crate::outcome::Outcome;
use crate::progress::{ProgressStore, StoreError, lookup_guarded, report_record, start_record};
use crate::registration::{ErasedHandler, FailurePolicy, Handled, Note, PanicPolicy, Started};
use crate::settle_right::{Place, SettleRight};
use crate::stats::{FailureKind, Stats};
use crate::tasks::{Tasks, poll_once};
use actix::prelude::*;
use bytes::Bytes;
use futures::Stream;
use futures::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll, Waker};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

/// What every worker of one subscription shares.
pub(crate) struct JobContext {
    pub(crate) handler: ErasedHandler,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) panic_policy: PanicPolicy,
    pub(crate) progress: Option<Arc<dyn ProgressStore>>,
    pub(crate) stats: Arc<Stats>,
    /// Set by the supervisor the moment a stop begins: a job taken after it is released unrun.
    pub(crate) draining: Arc<AtomicBool>,
    /// Where the workers give back the places of ended jobs: the pool.
    pub(crate) finished: UnboundedSender<Ticket>,
    /// The subscription's name, for log lines.
    pub(crate) subscription: Arc<str>,
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
    /// The right to settle the message: the worker settles it straight with its lease actor.
    pub(crate) right: SettleRight,
    /// The job's place in the pool, given back when the job ends.
    pub(crate) ticket: Ticket,
}

/// A job's place in the worker pool: its ordering key and message id. A worker gives it back
/// when the job ends (or is lost with the worker), so the pool frees the place and starts what
/// waited for it; it says nothing of the message's outcome, which went to the lease actor.
#[derive(Debug)]
pub(crate) struct Ticket {
    /// The message's ordering key.
    pub(crate) key: String,
    /// The message id.
    pub(crate) id: Arc<str>,
}

/// A worker's ended jobs, given back to the pool together at the end of the worker's turn.
///
/// Sent one by one as they end, each would wake the supervisor's thread on its own: with
/// handlers that finish at once, that cost more than the work (a context switch per message).
struct Outbox {
    batch: RefCell<Vec<Ticket>>,
    finished: UnboundedSender<Ticket>,
}

impl Outbox {
    fn push(&self, ticket: Ticket) {
        self.batch.borrow_mut().push(ticket);
    }

    fn is_empty(&self) -> bool {
        self.batch.borrow().is_empty()
    }

    /// Gives back what ended. (Should the pool be gone, there is nobody to tell: the messages
    /// were settled with their lease actors already.)
    fn flush(&self) {
        for ticket in self.batch.borrow_mut().drain(..) {
            let _ = self.finished.send(ticket);
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A running job's place in the pool: given back once, also when the job is dropped before it
/// ends (its worker stopped or died).
struct Reporter {
    ticket: Option<Ticket>,
    outbox: Rc<Outbox>,
}

impl Reporter {
    fn end(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.outbox.push(ticket);
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.end();
    }
}

/// What a job needs from its handler's start to its settle. Dropped before it settled (its
/// worker stopped or died), its right nacks the message and its place goes back to the pool.
struct Running {
    cx: Arc<JobContext>,
    id: Arc<str>,
    attempt: Option<u32>,
    span: tracing::Span,
    began: Instant,
    right: SettleRight,
    ticket: Reporter,
}

impl Running {
    /// The outcome of a handler that returned, with what its note says counted.
    fn handled(&self, h: Handled) -> Outcome {
        let (cx, id, attempt) = (&self.cx, &self.id, self.attempt);
        match h.note {
            Note::Ran => {}
            Note::HandlerError => cx.stats.failed(id, attempt, FailureKind::HandlerError),
            Note::Committed => Stats::bump(&cx.stats.committed),
            Note::Replayed => Stats::bump(&cx.stats.replayed),
            Note::StoreFailed => {
                Stats::bump(&cx.stats.store_failures);
                cx.stats.failed(id, attempt, FailureKind::StoreFailure);
            }
            Note::Panicked => return self.panicked(),
        }
        h.outcome
    }

    fn panicked(&self) -> Outcome {
        self.cx.handler_panicked(&self.span, &self.id, self.attempt)
    }

    /// The payload did not decode: the failure policy's outcome.
    fn undecodable(&self, error: DecodeError, delivery: Delivery) -> Outcome {
        let (cx, span, id) = (&self.cx, &self.span, &self.id);
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
    fn finish(self, outcome: Outcome) -> Option<LocalBoxFuture<'static, ()>> {
        self.cx.stats.handler_seconds.observe(self.began.elapsed());
        let recording = match (&self.cx.progress, outcome.completed()) {
            (Some(store), Some(completed)) => Some(start_record(&**store, &self.id, completed)),
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

    /// Settles the message with its lease actor, then gives the job's place back.
    fn settle(self, outcome: Outcome) {
        let Self {
            right, mut ticket, ..
        } = self;
        right.settle(outcome);
        ticket.end();
    }

    fn report(&self, result: Result<Result<(), StoreError>, Panicked>) {
        let cx = &self.cx;
        report_record(result, &cx.subscription, &self.id, &cx.stats, &self.span);
    }
}

/// Starts one job: the store, the decoder, the handler, the record, the settle. A job that ends
/// in its first poll (a quick handler, a replay, a blocking handler) ends here, with nothing
/// boxed; what waits (a handler, a record) goes on in the returned future.
fn start(job: Job, cx: Arc<JobContext>, outbox: Rc<Outbox>) -> Option<LocalBoxFuture<'static, ()>> {
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
    let id = delivery.message_id.clone();
    if cx.draining.load(Ordering::SeqCst) {
        right.release();
        ticket.end();
        return None;
    }
    if let Some(store) = &cx.progress
        && let Some(completed) = lookup_guarded(&**store, &cx.subscription, &id, &cx.stats, &span)
    {
        Stats::bump(&cx.stats.replayed);
        tracing::debug!(parent: &span, ?completed,
            "finished before: settled again without running the handler");
        right.settle(Outcome::replay(completed));
        ticket.end();
        return None;
    }
    let attempt = delivery.delivery_attempt;
    let began = Instant::now();
    // Decoding and a blocking handler run inside this call; an async handler's first poll below.
    let started = {
        let _entered = span.enter();
        guard::call(|| (cx.handler)(data, delivery))
    };
    let running = Running {
        cx,
        id,
        attempt,
        span,
        began,
        right,
        ticket,
    };
    let outcome = match started {
        Ok(Started::Running(handler)) => {
            let mut handler = Guarded::new(handler).instrument(running.span.clone());
            match poll_once(Pin::new(&mut handler)) {
                Poll::Ready(Ok(h)) => running.handled(h),
                Poll::Ready(Err(Panicked)) => running.panicked(),
                Poll::Pending => {
                    return Some(Box::pin(async move {
                        let outcome = match handler.await {
                            Ok(h) => running.handled(h),
                            Err(Panicked) => running.panicked(),
                        };
                        if let Some(recording) = running.finish(outcome) {
                            recording.await;
                        }
                    }));
                }
            }
        }
        Ok(Started::Done(h)) => running.handled(h),
        Ok(Started::Undecodable(error, delivery)) => running.undecodable(error, delivery),
        Err(Panicked) => running.panicked(),
    };
    running.finish(outcome)
}

/// How many jobs a worker runs at once, and the waker of its intake while it is full.
struct Gate {
    running: Cell<usize>,
    limit: usize,
    waker: Cell<Option<Waker>>,
}

/// The shared queue as one worker sees it: it yields a job only while the worker has room.
struct Intake {
    queue: Taker<Job>,
    gate: Rc<Gate>,
}

impl Stream for Intake {
    type Item = Job;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Job>> {
        if self.gate.running.get() >= self.gate.limit {
            self.gate.waker.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        self.queue.poll_take(cx)
    }
}

/// Command: stop now (the drain is over). Running handlers are dropped; their settlement rights
/// nack their messages (settled already, unless the drain timeout was zero).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct StopWorker;

/// Command (to self): send what finished in this turn to the pool.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Flush;

/// Runs handlers on one thread.
pub(crate) struct Worker {
    context: Arc<JobContext>,
    intake: Option<Intake>,
    gate: Rc<Gate>,
    outbox: Rc<Outbox>,
    /// A `Flush` is queued for the end of this turn.
    flush_queued: bool,
    jobs: Tasks<LocalBoxFuture<'static, ()>>,
    lifeline: Lifeline,
    _alive: TaskTrackerToken,
}

impl Worker {
    /// A worker taking jobs from `queue`, at most `limit` at once; `on_death` runs if it dies.
    pub(crate) fn new(
        context: Arc<JobContext>,
        queue: Taker<Job>,
        limit: usize,
        lifeline: Lifeline,
        alive: TaskTrackerToken,
    ) -> Self {
        let gate = Rc::new(Gate {
            running: Cell::new(0),
            limit: limit.max(1),
            waker: Cell::new(None),
        });
        Self {
            outbox: Rc::new(Outbox {
                batch: RefCell::new(Vec::new()),
                finished: context.finished.clone(),
            }),
            flush_queued: false,
            context,
            intake: Some(Intake {
                queue,
                gate: gate.clone(),
            }),
            gate,
            jobs: Tasks::new(),
            lifeline,
            _alive: alive,
        }
    }

    fn job_finished(&mut self, ctx: &mut Context<Self>) {
        self.gate.running.set(self.gate.running.get() - 1);
        if let Some(waker) = self.gate.waker.take() {
            waker.wake();
        }
        if self.gate.limit == 1 {
            // A blocking worker's next job may block for long: nothing waits behind it.
            self.outbox.flush();
        } else if !self.flush_queued && !self.outbox.is_empty() {
            // After the other items of this turn (more jobs may finish in it): one wake of the
            // pool's thread for all of them. (A handler that blocks an async worker's thread by
            // mistake also holds back the results its thread finished earlier in that turn.)
            self.flush_queued = true;
            ctx.notify(Flush);
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.add_stream(self.jobs.completions());
        if let Some(intake) = self.intake.take() {
            ctx.add_stream(intake);
        }
    }
}

impl StreamHandler<Job> for Worker {
    fn handle(&mut self, job: Job, ctx: &mut Self::Context) {
        self.gate.running.set(self.gate.running.get() + 1);
        // A job that finishes in its first poll (a blocking handler, a replay, a quick handler)
        // is done here, before this worker takes the next one.
        match start(job, self.context.clone(), self.outbox.clone()) {
            None => self.job_finished(ctx),
            Some(waiting) => self.jobs.push(waiting),
        }
    }

    /// The queue closed: the pool is gone (it reports its own death), and so is the work.
    fn finished(&mut self, ctx: &mut Self::Context) {
        self.lifeline.disarm();
        ctx.stop();
    }
}

impl StreamHandler<()> for Worker {
    fn handle(&mut self, (): (), ctx: &mut Self::Context) {
        self.job_finished(ctx);
    }

    /// The job set never ends while the worker lives. (The default would stop it.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Flush> for Worker {
    type Result = ();

    fn handle(&mut self, _: Flush, _: &mut Self::Context) {
        self.flush_queued = false;
        self.outbox.flush();
    }
}

impl Handler<StopWorker> for Worker {
    type Result = ();

    fn handle(&mut self, _: StopWorker, ctx: &mut Self::Context) {
        self.lifeline.disarm();
        ctx.stop();
    }
}

/// Test hook: a panic in the worker's own code.
#[cfg(test)]
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Crash;

#[cfg(test)]
impl Handler<Crash> for Worker {
    type Result = ();

    fn handle(&mut self, _: Crash, _: &mut Self::Context) {
        panic!("a bug in a worker (test)");
    }
}
