//! The worker actor: one per worker thread, running jobs (`job.rs`).
//!
//! Workers take jobs from one queue shared by all the workers of a subscription, each when it is
//! free, so a thread that a handler blocks takes nothing more while the others go on. An async
//! worker runs many jobs at once (the pool bounds how many are handed out); a blocking worker
//! runs one at a time. A worker takes the jobs ready a turn at a time ([`WORKER_TURN`]) without
//! parking while jobs are queued, and what ended in one turn goes back together: the
//! settlements in one send to the lease actors' thread, the tickets in one to the pool.

use crate::pool::batch_job::run_batch;
use crate::pool::job::{JobContext, Outbox};
use crate::pool::job_queue::{BUSY_TURN, Taker};
use crate::pool::one_job::run_one;
use crate::pool::work::Work;
use crate::rt::lifeline::Lifeline;
use crate::rt::tasks::Tasks;
use crate::rt::turns::{TurnHandler, TurnLimit, each_turn};
use actix::prelude::*;
use futures::Stream;
use futures::future::LocalBoxFuture;
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};
use tokio_util::task::task_tracker::TaskTrackerToken;

/// One turn of a worker, after which what ended goes back in one send: 16 jobs, or fewer when
/// their work has taken [`BUSY_TURN`] (a handler that computes), so that what ended early is not
/// held back long. The worker does not park between turns while jobs are queued.
///
/// Longer turns (32 jobs, or every job queued) send fewer batches but larger ones, and the
/// supervisor's thread, between two of them, reads on: in the pipeline benchmark (an endless
/// source, 10,000 outstanding allowed) what waits in the pool then grows to the flow-control
/// limit and the throughput falls by a third. With 16 it stays near where it was, and a real
/// stream's response still costs one or two sends (`BENCHMARKS.md`).
const WORKER_TURN: TurnLimit = TurnLimit {
    items: 16,
    time: Some(BUSY_TURN),
};

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

/// Runs handlers on one thread.
pub(crate) struct Worker {
    context: Arc<JobContext>,
    intake: Option<Intake>,
    gate: Rc<Gate>,
    outbox: Rc<Outbox>,
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

    fn job_finished(&mut self) {
        self.gate.running.set(self.gate.running.get() - 1);
        if let Some(waker) = self.gate.waker.take() {
            waker.wake();
        }
        if self.gate.limit == 1 {
            // A blocking worker's next job may block for long: nothing waits behind it.
            self.outbox.flush();
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.spawn(each_turn(self.jobs.completions(), WORKER_TURN));
        if let Some(intake) = self.intake.take() {
            ctx.spawn(each_turn(intake, WORKER_TURN));
        }
    }
}

impl TurnHandler<Work> for Worker {
    fn handle_item(&mut self, work: Work, _: &mut Self::Context) {
        self.gate.running.set(self.gate.running.get() + 1);
        // A job that finishes in its first poll (a blocking handler, a replay, a quick handler)
        // is done here, before this worker takes the next one.
        match begin(work, self.context.clone(), self.outbox.clone()) {
            None => self.job_finished(),
            Some(waiting) => self.jobs.push(waiting),
        }
    }

    /// Every job ready was taken (or the turn's time is up): what ended goes to the lease
    /// actors' thread and the pool in one send each, one wake of that thread for all of it.
    /// (A handler that blocks an async worker's thread by mistake also holds back what its
    /// thread finished earlier in that turn.)
    fn turn_ended(&mut self, _: &mut Self::Context) {
        self.outbox.flush();
    }

    /// The queue closed: the pool is gone (it reports its own death), and so is the work.
    fn stream_ended(&mut self, ctx: &mut Self::Context) {
        self.lifeline.disarm();
        ctx.stop();
    }
}

/// Async jobs that ended, in the worker's set.
impl TurnHandler<()> for Worker {
    fn handle_item(&mut self, (): (), _: &mut Self::Context) {
        self.job_finished();
    }

    fn turn_ended(&mut self, _: &mut Self::Context) {
        self.outbox.flush();
    }

    /// The job set never ends while the worker lives.
    fn stream_ended(&mut self, _: &mut Self::Context) {}
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
