//! The worker actor: one per worker thread, running jobs (`job.rs`).
//!
//! Workers take jobs from one queue shared by all the workers of a subscription, each when it is
//! free, so a thread that a handler blocks takes nothing more while the others go on. An async
//! worker runs many jobs at once (the pool bounds how many are handed out); a blocking worker
//! runs one at a time. What ended in one turn goes back to the pool together.

use crate::pool::batch_job::run_batch;
use crate::pool::job::{JobContext, Outbox, Work, run_one};
use crate::pool::job_queue::Taker;
use crate::rt::lifeline::Lifeline;
use crate::rt::tasks::Tasks;
use actix::prelude::*;
use futures::Stream;
use futures::future::LocalBoxFuture;
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};
use tokio_util::task::task_tracker::TaskTrackerToken;

/// How many jobs a worker runs at once, and the waker of its intake while it is full.
struct Gate {
    running: Cell<usize>,
    limit: usize,
    waker: Cell<Option<Waker>>,
}

/// The shared queue as one worker sees it: it yields a job only while the worker has room.
struct Intake {
    queue: Taker<Work>,
    gate: Rc<Gate>,
}

impl Stream for Intake {
    type Item = Work;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Work>> {
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
    /// A worker taking jobs from `queue`, at most `limit` at once; if it dies, its lifeline tells the pool.
    pub(crate) fn new(
        context: Arc<JobContext>,
        queue: Taker<Work>,
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
            outbox: Rc::new(Outbox::new(
                context.settlements.clone(),
                context.finished.clone(),
            )),
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

impl StreamHandler<Work> for Worker {
    fn handle(&mut self, work: Work, ctx: &mut Self::Context) {
        self.gate.running.set(self.gate.running.get() + 1);
        // A job that finishes in its first poll (a blocking handler, a replay, a quick handler)
        // is done here, before this worker takes the next one.
        match begin(work, self.context.clone(), self.outbox.clone()) {
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

/// Starts one piece of work ([`run_one`] or [`run_batch`]).
fn begin(
    work: Work,
    cx: Arc<JobContext>,
    outbox: Rc<Outbox>,
) -> Option<LocalBoxFuture<'static, ()>> {
    match work {
        Work::One(job) => run_one(job, cx, outbox),
        Work::Batch(jobs) => run_batch(jobs, cx, outbox),
    }
}

/// Test hooks, as bugs in Leasehold would behave.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A panic in the worker's own code.
    #[derive(Debug, Message)]
    #[rtype(result = "()")]
    pub(crate) struct Crash;

    impl Handler<Crash> for Worker {
        type Result = ();

        fn handle(&mut self, _: Crash, _: &mut Self::Context) {
            panic!("a bug in a worker (test)");
        }
    }
}
