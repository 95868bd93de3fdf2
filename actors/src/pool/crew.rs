//! The worker pool's workers: how many, where they run ([`Layout`]), and their lives ([`Crew`]):
//! started with the pool, each on an arbiter (a thread) of its own; a worker that dies is
//! noticed through its lifeline ([`WorkerDied`]) and started again after a backoff that grows
//! if it keeps dying; at a stop every worker is stopped and its thread joined.
//!
//! A worker's death loses no message: the settlement rights of the jobs it ran are dropped
//! with it, and each nacks its message.

use crate::api::handler::HandlerKind;
use crate::pool::job::JobContext;
use crate::pool::job_queue::Jobs;
use crate::pool::work::Work;
use crate::pool::worker::{StopWorker, Worker};
use crate::rt::lifeline::Lifeline;
use crate::rules::supervision::Backoff;
use crate::status::stats::Stats;
use actix::prelude::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// How long a stop waits for worker threads to end once their handlers were cut. Only a handler
/// blocking its thread makes it wait: an async handler is dropped at once.
pub(crate) const WORKER_STOP_GRACE: Duration = Duration::from_secs(2);
/// The first wait before restarting a worker that died.
const WORKER_RESTART_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between restarts of a worker that keeps dying.
const WORKER_RESTART_MAX: Duration = Duration::from_secs(10);
/// A worker that lived this long before dying restarts without waiting.
const WORKER_HEALTHY_AFTER: Duration = Duration::from_secs(10);

/// Where the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Worker actors.
    pub(crate) workers: usize,
    /// Jobs each runs at once.
    pub(crate) per_worker: usize,
    /// Each on an arbiter (thread) of its own; else on the pool's arbiter.
    pub(crate) own_threads: bool,
}

impl Layout {
    /// Async handlers: `threads` workers (one per core when `None`, on the pool's arbiter when
    /// `Some(0)`), each running any number at once (the pool bounds the total). Blocking
    /// handlers: `workers` threads running one each.
    pub(crate) fn new(kind: HandlerKind, workers: usize, threads: Option<usize>) -> Self {
        let per_core = || {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        };
        match (kind, threads) {
            (HandlerKind::Blocking, Some(0)) => Self {
                workers: 1,
                per_worker: 1,
                own_threads: false,
            },
            (HandlerKind::Blocking, _) => Self {
                workers: workers.max(1),
                per_worker: 1,
                own_threads: true,
            },
            (HandlerKind::Async, Some(0)) => Self {
                workers: 1,
                per_worker: usize::MAX,
                own_threads: false,
            },
            (HandlerKind::Async, threads) => Self {
                workers: threads.unwrap_or_else(per_core).max(1),
                per_worker: usize::MAX,
                own_threads: true,
            },
        }
    }
}

/// Event: a worker died without being stopped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct WorkerDied {
    slot: usize,
    generation: u64,
}

/// A worker to start again, after `delay`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Restart {
    pub(crate) slot: usize,
    generation: u64,
    pub(crate) delay: Duration,
}

/// One worker and where it runs.
struct Slot {
    addr: Addr<Worker>,
    arbiter: Option<Arbiter>,
    generation: u64,
    started_at: Instant,
    backoff: Backoff,
}

/// The workers of one pool.
pub(crate) struct Crew {
    layout: Layout,
    context: Arc<JobContext>,
    slots: Vec<Slot>,
    /// Arbiters of workers that died, joined at the stop.
    retired: Vec<Arbiter>,
    /// Counts the live workers.
    alive: TaskTracker,
}

impl Crew {
    pub(crate) fn new(layout: Layout, context: Arc<JobContext>) -> Self {
        Self {
            layout,
            context,
            slots: Vec::new(),
            retired: Vec::new(),
            alive: TaskTracker::new(),
        }
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// Starts every worker, taking jobs from `jobs`; their deaths are reported to `pool`.
    pub(crate) fn start<P>(&mut self, pool: &Addr<P>, jobs: &Jobs<Work>)
    where
        P: Actor + Handler<WorkerDied>,
        P::Context: actix::dev::ToEnvelope<P, WorkerDied>,
    {
        for slot in 0..self.layout.workers {
            let (addr, arbiter) = self.start_worker(slot, 0, pool, jobs);
            self.slots.push(Slot {
                addr,
                arbiter,
                generation: 0,
                started_at: Instant::now(),
                backoff: Backoff::new(WORKER_RESTART_INITIAL, WORKER_RESTART_MAX),
            });
        }
    }

    /// Starts the worker of `slot`, on a new arbiter when the layout asks for threads.
    fn start_worker<P>(
        &self,
        slot: usize,
        generation: u64,
        pool: &Addr<P>,
        jobs: &Jobs<Work>,
    ) -> (Addr<Worker>, Option<Arbiter>)
    where
        P: Actor + Handler<WorkerDied>,
        P::Context: actix::dev::ToEnvelope<P, WorkerDied>,
    {
        let pool = pool.clone();
        let context = self.context.clone();
        let queue = jobs.taker(slot);
        let limit = self.layout.per_worker;
        let alive = self.alive.token();
        let make = move || {
            let lifeline = Lifeline::new(move || pool.do_send(WorkerDied { slot, generation }));
            Worker::new(context, queue, limit, lifeline, alive)
        };
        if self.layout.own_threads {
            let arbiter = Arbiter::new();
            let addr = Worker::start_in_arbiter(&arbiter.handle(), move |_| make());
            (addr, Some(arbiter))
        } else {
            (make().start(), None)
        }
    }

    /// A worker died: counted and logged; its thread is stopped (joined at the stop). The
    /// restart to schedule, unless the death is stale (that worker was replaced already).
    pub(crate) fn died(&mut self, died: WorkerDied) -> Option<Restart> {
        let slot = self.slots.get_mut(died.slot)?;
        if slot.generation != died.generation {
            return None;
        }
        Stats::bump(&self.context.stats.actor_failures);
        if slot.started_at.elapsed() >= WORKER_HEALTHY_AFTER {
            slot.backoff.reset(WORKER_RESTART_INITIAL);
        }
        let delay = slot.backoff.next_delay(fastrand::f64());
        tracing::error!(subscription = %self.context.subscription, worker = died.slot, ?delay,
            "a worker died; the messages its handlers were running are retried; starting it \
             again");
        // Its thread may still run (a panic in the worker actor alone): stop it, join it later.
        if let Some(arbiter) = slot.arbiter.take() {
            arbiter.stop();
            self.retired.push(arbiter);
        }
        slot.generation += 1;
        Some(Restart {
            slot: died.slot,
            generation: slot.generation,
            delay,
        })
    }

    /// Starts a worker again; its restarts so far (all workers together), or `None` when it
    /// was replaced meanwhile.
    pub(crate) fn restart<P>(
        &mut self,
        restart: Restart,
        pool: &Addr<P>,
        jobs: &Jobs<Work>,
    ) -> Option<u64>
    where
        P: Actor + Handler<WorkerDied>,
        P::Context: actix::dev::ToEnvelope<P, WorkerDied>,
    {
        if self.slots.get(restart.slot)?.generation != restart.generation {
            return None;
        }
        let (addr, arbiter) = self.start_worker(restart.slot, restart.generation, pool, jobs);
        let slot = &mut self.slots[restart.slot];
        slot.addr = addr;
        slot.arbiter = arbiter;
        slot.started_at = Instant::now();
        Some(
            self.context
                .stats
                .worker_restarts
                .fetch_add(1, Ordering::Relaxed)
                + 1,
        )
    }

    /// Stops every worker now (their running handlers are dropped); the future resolves when
    /// their threads are joined, or after [`WORKER_STOP_GRACE`] when a handler still blocks its
    /// thread (logged at error).
    pub(crate) fn stop(&mut self) -> impl Future<Output = ()> + 'static {
        let mut arbiters = std::mem::take(&mut self.retired);
        for slot in &mut self.slots {
            slot.addr.do_send(StopWorker);
            if let Some(arbiter) = slot.arbiter.take() {
                arbiter.stop();
                arbiters.push(arbiter);
            }
        }
        let alive = self.alive.clone();
        alive.close();
        let subscription = self.context.subscription.clone();
        async move {
            if tokio::time::timeout(WORKER_STOP_GRACE, alive.wait())
                .await
                .is_err()
            {
                // Their messages were settled (nacked at the drain timeout); the threads end
                // when the blocking calls return.
                tracing::error!(%subscription, grace = ?WORKER_STOP_GRACE,
                    "a handler still blocks its worker thread after the drain; the thread is \
                     left to end on its own");
                return;
            }
            // Each worker is gone, so each thread is at its very end: joining takes no time.
            for arbiter in arbiters {
                let _ = arbiter.join();
            }
        }
    }

    /// Test hook: kill worker `slot` as a bug in Leasehold's code would.
    #[cfg(test)]
    pub(crate) fn kill(&self, slot: usize) {
        self.slots[slot]
            .addr
            .do_send(crate::pool::worker::tests::Crash);
    }
}

impl Drop for Crew {
    /// The worker threads end with the pool, even when it died: its queue closes, so its
    /// workers stop, and their arbiters are told to end.
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(arbiter) = slot.arbiter.take() {
                arbiter.stop();
            }
        }
        for arbiter in &self.retired {
            arbiter.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_handlers_get_a_thread_per_core_unless_told() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            Layout::new(HandlerKind::Async, 8, None),
            Layout {
                workers: cores,
                per_worker: usize::MAX,
                own_threads: true
            }
        );
        assert_eq!(Layout::new(HandlerKind::Async, 8, Some(3)).workers, 3);
        assert!(!Layout::new(HandlerKind::Async, 8, Some(0)).own_threads);
    }

    #[test]
    fn blocking_handlers_get_a_thread_each() {
        assert_eq!(
            Layout::new(HandlerKind::Blocking, 4, None),
            Layout {
                workers: 4,
                per_worker: 1,
                own_threads: true
            }
        );
        // worker_threads does not apply, except 0 (everything on the pool's arbiter).
        assert_eq!(Layout::new(HandlerKind::Blocking, 4, Some(2)).workers, 4);
        assert_eq!(
            Layout::new(HandlerKind::Blocking, 4, Some(0)),
            Layout {
                workers: 1,
                per_worker: 1,
                own_threads: false
            }
        );
    }
}
