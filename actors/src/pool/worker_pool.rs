//! The worker pool: decides which message runs next and hands it to the worker threads; starts,
//! supervises and stops those workers.
//!
//! The pool runs on the supervisor's arbiter and runs no user code: it only schedules. At most
//! `workers` messages are handed out at once, and messages that share an ordering key one at a
//! time, in arrival order ([`Schedule`]). A redelivery of a message whose handler is still
//! running waits for that run instead of running beside it. Handed-out jobs go into one queue
//! that the [`Worker`]s take from, each when it is free. The pool settles nothing: each job
//! carries its message's [`SettleRight`] to the worker, which settles it with the lease actor;
//! the pool hears only that the job's place is free ([`Ticket`]). The one exception is a stop:
//! the pool releases (nacks, unrun) the jobs it still holds, through their rights.
//!
//! Supervision: a worker that dies (a panic in Leasehold's code, or its arbiter stopped under it)
//! is noticed through its [`Lifeline`], counted and started again after a backoff; the rights of
//! the jobs it was running nack their messages. Stopping: [`ReleaseUnstarted`] releases every message no
//! handler has started; [`StopWorkers`] stops the worker actors and their threads.

use crate::lease::settle_right::Place;
use crate::pool::crew::{Crew, Layout, WorkerDied};
use crate::pool::holding::Holding;
use crate::pool::job::{Job, JobContext, Ticket};
use crate::pool::job_queue::Jobs;
use crate::pool::messages::{Dispatch, PoolInbox, ReleaseUnstarted, Shutdown, StopWorkers};
use crate::pool::work::Work;
use crate::rt::lifeline::Lifeline;
use crate::rt::turns::{TurnHandler, TurnLimit, channel, each_turn};
use crate::rules::batcher::Batcher;
use crate::rules::options::BatchPolicy;
use crate::rules::schedule::{RunningIds, Schedule};
use crate::status::shared::{Shared, SupervisionEvent};
use actix::prelude::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

mod breaker;

/// How long jobs may wait in the queue with no worker taking any before an idle worker is
/// woken for them (the one woken before may be blocked by its handler).
const STALL_CHECK: Duration = Duration::from_millis(1);

/// One turn of the pool's channels: every dispatch and ticket sent so far (a turn of a pull
/// loop's messages come together), so that one hand-out puts their jobs in the queue.
const POOL_TURN: TurnLimit = TurnLimit::items(1024);

/// Command (to self): put the jobs this turn let start into the workers' queue.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct HandOut;

/// Where the pool is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PoolState {
    /// Handing out messages.
    Running,
    /// A stop began: nothing more is handed out.
    Draining,
    /// The workers are stopping or gone.
    Stopping,
}

/// Schedules messages onto the worker threads.
pub(crate) struct WorkerPool {
    schedule: Schedule<Job>,
    context: Arc<JobContext>,
    /// The workers: started, restarted and stopped here.
    crew: Crew,
    /// The jobs handed out, taken by the workers. Dropped with the pool, it closes: the workers
    /// end.
    jobs: Jobs<Work>,
    /// Message ids whose handler is running, with redeliveries of them that wait for it.
    running_ids: RunningIds<Job>,
    /// Jobs let start in this turn, put into `jobs` together at its end ([`HandOut`]).
    outgoing: Vec<Work>,
    /// A batch registration's forming batch: messages let start, waiting for more.
    batcher: Option<Batcher<Job>>,
    /// A timer is armed for the forming batch's wait.
    batch_timer: bool,
    /// A [`HandOut`] is queued.
    hand_out_queued: bool,
    /// A check for jobs no worker takes is armed ([`WorkerPool::check_for_stall`]).
    stall_check: bool,
    state: PoolState,
    /// Messages from the supervisor; taken into the actor's context when it starts.
    dispatched: Option<UnboundedReceiver<Dispatch>>,
    /// The places of ended jobs, from every worker; taken into the actor's context when it
    /// starts.
    finished: Option<UnboundedReceiver<Vec<Ticket>>>,
    lifeline: Lifeline,
    /// The breaker, when the registration has one.
    holding: Option<Holding>,
    /// Whoever watches the subscription hears of restarts.
    shared: Arc<Shared>,
    _alive: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl WorkerPool {
    /// A pool handing out at most `workers` messages at once to workers laid out as `layout`.
    ///
    /// For a batch registration (`batch`), `workers` batches run at once, so as many times
    /// `max_batch_messages` messages may be let start.
    pub(crate) fn new(
        workers: usize,
        batch: Option<BatchPolicy>,
        layout: Layout,
        inbox: PoolInbox,
        context: Arc<JobContext>,
        shared: Arc<Shared>,
        lifeline: Lifeline,
    ) -> Self {
        let PoolInbox {
            dispatched,
            finished,
        } = inbox;
        Self {
            jobs: Jobs::new(layout.workers),
            schedule: Schedule::new(batch.map_or(workers, |policy| policy.may_start(workers))),
            crew: Crew::new(layout, context.clone()),
            context,
            running_ids: RunningIds::default(),
            outgoing: Vec::new(),
            batcher: batch.map(Batcher::new),
            batch_timer: false,
            hand_out_queued: false,
            stall_check: false,
            state: PoolState::Running,
            dispatched: Some(dispatched),
            finished: Some(finished),
            lifeline,
            holding: None,
            _alive: shared.alive.token(),
            shared,
        }
    }

    fn publish_load(&self) {
        let stats = &self.context.stats;
        stats
            .running
            .store(self.schedule.running(), Ordering::Relaxed);
        stats
            .waiting
            .store(self.schedule.waiting(), Ordering::Relaxed);
    }

    /// Lets every message the schedule allows start: they go to the workers at the end of this
    /// turn ([`Self::hand_out_later`]).
    fn start_ready(&mut self) {
        // While the breaker is not closed nothing starts, but the try when nothing is held.
        let limit = self.holding.as_ref().map_or(usize::MAX, Holding::may_start);
        let trying = limit != usize::MAX;
        for _ in 0..limit {
            let batcher = &self.batcher;
            let next = self.schedule.next_to_start(|key, job| {
                batcher
                    .as_ref()
                    .is_some_and(|b| b.may_join(key, job.data.len()))
            });
            let Some((key, job)) = next else {
                break;
            };
            self.mark_try(trying, &job);
            if self.start(&key, job) && !key.is_empty() && !trying {
                // The messages of its key that wait behind it join its batch while they fit.
                loop {
                    let batcher = &self.batcher;
                    let next = self.schedule.next_of_key(&key, |job| {
                        batcher
                            .as_ref()
                            .is_some_and(|b| b.may_join(&key, job.data.len()))
                    });
                    let Some(job) = next else {
                        break;
                    };
                    self.start(&key, job);
                }
            }
        }
        self.publish_load();
    }

    /// Starts `job`: to the workers, or into the forming batch (then `true`), unless a run of
    /// its message is on.
    fn start(&mut self, key: &str, job: Job) -> bool {
        let id = job.ticket.id.clone();
        let message_id = job.delivery.message_id.clone();
        let Some((_, job)) = self.running_ids.admit(&id, key.to_string(), job) else {
            // A redelivery of a message still in its handler here (or a copy of it: the same
            // dedupe key): it waits for that run, then goes through the progress store like any
            // redelivery. Its place is free.
            tracing::debug!(%message_id, "redelivered while still running; waiting for that run");
            self.schedule.finished(key);
            return false;
        };
        match &mut self.batcher {
            None => {
                self.outgoing.push(Work::One(job));
                false
            }
            Some(batcher) => {
                let bytes = job.data.len();
                for full in batcher.add(job, key, bytes, Instant::now()) {
                    self.outgoing.push(Work::Batch(full));
                }
                true
            }
        }
    }

    /// Sees that the forming batch is handed out when its wait is over: at the end of this turn
    /// when it is over already, else by a timer.
    fn batch_later(&mut self, ctx: &mut Context<Self>) {
        let Some(due) = self.batcher.as_ref().and_then(Batcher::due_at) else {
            return;
        };
        let now = Instant::now();
        if due <= now {
            if !self.hand_out_queued {
                self.hand_out_queued = true;
                ctx.notify(HandOut);
            }
        } else if !self.batch_timer {
            self.batch_timer = true;
            ctx.run_later(due - now, |pool, ctx| {
                pool.batch_timer = false;
                pool.batch_later(ctx);
            });
        }
    }

    /// Queues the hand-out of what this turn let start, after the other messages of the turn.
    ///
    /// Put into the queue one by one as they start, each job would wake a parked worker thread
    /// on its own: with handlers that finish at once, a context switch per message costs more
    /// than the message's own work. Together, they wake one idle async worker (one per job for
    /// blocking workers: `job_queue.rs`).
    fn hand_out_later(&mut self, ctx: &mut Context<Self>) {
        if !self.hand_out_queued && !self.outgoing.is_empty() {
            self.hand_out_queued = true;
            ctx.notify(HandOut);
        }
    }

    /// Checks, [`STALL_CHECK`] from now and again while jobs are queued, that workers take
    /// them. One idle worker is woken for a batch, and it wakes a sibling only when it takes
    /// its next job: a handler that blocks its thread by mistake would keep the rest of its
    /// batch from every other thread until it returns.
    fn check_for_stall(&mut self, ctx: &mut Context<Self>) {
        if self.stall_check {
            return;
        }
        self.stall_check = true;
        let seen = self.jobs.taken();
        ctx.run_later(STALL_CHECK, move |pool, ctx| {
            pool.stall_check = false;
            if pool.jobs.wake_if_stalled(seen) {
                pool.check_for_stall(ctx);
            }
        });
    }

    /// A stop began: release every message no handler has started.
    fn release_unstarted(&mut self) {
        if self.state != PoolState::Running {
            return;
        }
        self.state = PoolState::Draining;
        // Set by the supervisor already; set here too for a pool told to stop on its own.
        self.context.draining.store(true, Ordering::Release);
        for (_, job) in self.schedule.drain() {
            job.right.release();
        }
        for job in self.running_ids.take_waiting() {
            job.right.release();
        }
        self.release_held();
        // Let start, not handed out yet (in a forming batch, or ready); then handed out, not
        // taken by a worker yet.
        let mut unstarted = std::mem::take(&mut self.outgoing);
        if let Some(batcher) = &mut self.batcher {
            unstarted.push(Work::Batch(batcher.take()));
        }
        unstarted.extend(self.jobs.take_all());
        for work in unstarted {
            for job in work.into_jobs() {
                job.right.release();
                self.free_place(job.ticket);
            }
        }
        self.publish_load();
    }

    /// A job's place is free (it ended, or was released): lets what waited for it go on.
    fn free_place(&mut self, Ticket { key, id, .. }: Ticket) {
        self.schedule.finished(&key);
        let parked = self.running_ids.ended(&id);
        if self.state == PoolState::Running {
            // Redeliveries that waited go through the schedule and the store like any delivery.
            for (key, job) in parked {
                self.schedule.submit(key, job);
            }
            self.start_ready();
        } else {
            for (_, job) in parked {
                job.right.release();
            }
            self.publish_load();
        }
    }
}

impl Actor for WorkerPool {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(finished) = self.finished.take() {
            ctx.spawn(each_turn(channel(finished), POOL_TURN));
        }
        if let Some(dispatched) = self.dispatched.take() {
            ctx.spawn(each_turn(channel(dispatched), POOL_TURN));
        }
        self.crew.start(&ctx.address(), &self.jobs);
    }
}

impl TurnHandler<Dispatch> for WorkerPool {
    fn handle_item(&mut self, msg: Dispatch, ctx: &mut Self::Context) {
        let Dispatch {
            delivery,
            data,
            span,
            mut right,
        } = msg;
        if self.state != PoolState::Running {
            // Read just as a stop began.
            return right.release();
        }
        right.moved_to(Place::Scheduled);
        let key = delivery.ordering_key.clone();
        // Placed by its progress key: a copy of a message (the same dedupe key) waits for a run
        // of the first like a redelivery of it.
        let ticket = Ticket::new(key.clone(), delivery.progress_key_shared());
        let job = Job {
            delivery,
            data,
            span,
            right,
            ticket,
        };
        self.schedule.submit(key, job);
        self.start_ready();
        self.hand_out_later(ctx);
        self.batch_later(ctx);
        self.dispatched(ctx);
    }

    // The turn needs no end of its own: the `HandOut` queued by the first message that let a
    // job start runs after every stream of the pool's poll, and puts every job let start into
    // the workers' queue at once. And when the supervisor is gone, it stops the pool.
}

impl Handler<HandOut> for WorkerPool {
    type Result = ();

    fn handle(&mut self, _: HandOut, ctx: &mut Self::Context) {
        self.hand_out_queued = false;
        if let Some(due) = self
            .batcher
            .as_mut()
            .and_then(|batcher| batcher.take_due(Instant::now()))
        {
            self.outgoing.push(Work::Batch(due));
        }
        let one_each = self.crew.layout().per_worker == 1;
        self.jobs
            .push_all(self.outgoing.drain(..).map(Work::queued), one_each);
        // What a burst let start leaves no room behind for good (`job_queue.rs`, `KEPT_ROOM`).
        self.outgoing.shrink_to(256);
        self.check_for_stall(ctx);
    }
}

/// A job ended on a worker (its message settled with its lease actor already): its place is
/// free.
impl TurnHandler<Vec<Ticket>> for WorkerPool {
    fn handle_item(&mut self, ended: Vec<Ticket>, ctx: &mut Self::Context) {
        for ticket in ended {
            self.job_ended(ticket, ctx);
        }
        self.hand_out_later(ctx);
        self.batch_later(ctx);
    }

    // Every worker is gone and so is the work.
}

impl Handler<WorkerDied> for WorkerPool {
    type Result = ();

    fn handle(&mut self, died: WorkerDied, ctx: &mut Self::Context) {
        if self.state == PoolState::Stopping {
            return;
        }
        let Some(restart) = self.crew.died(died) else {
            return;
        };
        ctx.run_later(restart.delay, move |pool, ctx| {
            if pool.state == PoolState::Stopping {
                return;
            }
            if let Some(restarts) = pool.crew.restart(restart, &ctx.address(), &pool.jobs) {
                pool.shared
                    .watchers
                    .tell(SupervisionEvent::WorkerRestarted {
                        worker: restart.slot,
                        restarts,
                    });
            }
        });
    }
}

impl Handler<ReleaseUnstarted> for WorkerPool {
    type Result = ();

    fn handle(&mut self, _: ReleaseUnstarted, _: &mut Self::Context) {
        self.release_unstarted();
    }
}

impl Handler<StopWorkers> for WorkerPool {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopWorkers, _: &mut Self::Context) -> Self::Result {
        self.release_unstarted();
        self.state = PoolState::Stopping;
        let stopped = self.crew.stop();
        self.jobs.close();
        Box::pin(stopped)
    }
}

impl Handler<Shutdown> for WorkerPool {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        self.lifeline.disarm();
        ctx.stop();
    }
}

/// Test hooks, as bugs in Leasehold would behave.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Test hook: kill a worker as a bug in Leasehold's code would.
    #[derive(Debug, Message)]
    #[rtype(result = "()")]
    pub(crate) struct KillWorker(pub(crate) usize);

    impl Handler<KillWorker> for WorkerPool {
        type Result = ();

        fn handle(&mut self, KillWorker(slot): KillWorker, _: &mut Self::Context) {
            self.crew.kill(slot);
        }
    }

    /// Test hook: a panic in the pool's own code.
    #[derive(Debug, Message)]
    #[rtype(result = "()")]
    pub(crate) struct Crash;

    impl Handler<Crash> for WorkerPool {
        type Result = ();

        fn handle(&mut self, _: Crash, _: &mut Self::Context) {
            panic!("a bug in the worker pool (test)");
        }
    }
}
