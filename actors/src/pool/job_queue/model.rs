//! The queue's wake-up protocol checked across threads with loom: each scenario runs in every
//! interleaving of its threads with up to [`PREEMPTIONS`] preemptions, and one in which a
//! worker stays parked with work it should have taken leaves every thread blocked, which loom
//! reports as a deadlock. (The stall check's scenario would instead loop until loom's bound on
//! branches stops it.) After its "deadlock" message, loom may abort the whole test binary
//! while unwinding (a known loom limitation): the test named above the message failed.
//!
//! A worker here is a loom thread that parks in `block_on` while its poll is pending and is
//! woken only through the waker it registered, as a worker's arbiter is. Jobs are numbers. A
//! job that blocks its worker (a blocking handler, or one that blocks its thread by mistake)
//! waits on [`Started`] until the other job of its batch has started on another worker.
//!
//! Run by plain `cargo test` (only this crate's test build links loom; nothing is built with
//! `--cfg loom`). `LOOM_MAX_PREEMPTIONS=3 cargo test -p leasehold-actors --lib job_queue::model`
//! explores deeper, in about a minute.

use super::{Jobs, Platform, Taker};
use loom::future::block_on;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread::{self, JoinHandle};
use std::future::poll_fn;
use std::iter::once;
use std::ops::DerefMut;
use std::task::{Context, Waker};

/// Preemptions explored per interleaving, unless `LOOM_MAX_PREEMPTIONS` says otherwise. Every
/// breakage of the protocol tried against this model fails at two, and six of the ten
/// pass at one: their race needs one preemption to run a worker before the pool goes on and
/// another to stop a thread in the middle of its part. Three takes about fifteen times as long.
const PREEMPTIONS: usize = 2;

/// loom's lock and `Arc`, and a clock on which a busy turn is over at once (`TURN_OVER`) or
/// never: time is not modelled, each setting checks one side of [`super::BUSY_TURN`].
struct Loom<const TURN_OVER: bool>;

impl<const TURN_OVER: bool> Platform for Loom<TURN_OVER> {
    type Shared<T> = Arc<Mutex<T>>;
    type Instant = ();

    fn share<T>(value: T) -> Self::Shared<T> {
        Arc::new(Mutex::new(value))
    }

    fn lock<T>(shared: &Self::Shared<T>) -> impl DerefMut<Target = T> + '_ {
        shared.lock().expect("a model thread panicked")
    }

    fn now() {}

    fn turn_over((): ()) -> bool {
        TURN_OVER
    }
}

/// No busy turn ever ends: only a push, a close or a stall check wakes a worker.
type Model = Loom<false>;

/// Runs `scenario` in every interleaving within the bound.
fn check(scenario: impl Fn() + Send + Sync + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(PREEMPTIONS);
    builder.check(scenario);
}

/// The next job, parking the thread while there is none; `None` once the queue is closed.
fn take<P: Platform>(taker: &mut Taker<u32, P>) -> Option<u32> {
    block_on(poll_fn(|cx| taker.poll_take(cx)))
}

/// A worker thread in `slot`: it takes jobs until the queue closes, runs each with `run`, and
/// returns the jobs it took. The worker that finds `last` jobs taken closes the queue (the
/// pool's part, done here so the pool's thread need not wait for it).
fn worker<P: Platform + 'static>(
    jobs: &Arc<Jobs<u32, P>>,
    slot: usize,
    last: Option<u64>,
    run: impl Fn(u32) + Send + 'static,
) -> JoinHandle<Vec<u32>>
where
    Jobs<u32, P>: Send + Sync,
    Taker<u32, P>: Send,
{
    let mut taker = jobs.taker(slot);
    let jobs = jobs.clone();
    thread::spawn(move || {
        let mut took = Vec::new();
        while let Some(job) = take(&mut taker) {
            took.push(job);
            run(job);
            if last.is_some_and(|last| jobs.taken() == last) {
                jobs.close();
            }
        }
        took
    })
}

/// Two workers, idle or about to be.
fn two_workers<P: Platform + 'static>(
    jobs: &Arc<Jobs<u32, P>>,
    last: Option<u64>,
    run: impl Fn(u32) + Clone + Send + 'static,
) -> [JoinHandle<Vec<u32>>; 2]
where
    Jobs<u32, P>: Send + Sync,
    Taker<u32, P>: Send,
{
    [0, 1].map(|slot| worker(jobs, slot, last, run.clone()))
}

/// Waits for the workers to end: the jobs they took, in order.
fn join(workers: [JoinHandle<Vec<u32>>; 2]) -> Vec<u32> {
    let mut took: Vec<u32> = workers
        .into_iter()
        .flat_map(|worker| worker.join().unwrap())
        .collect();
    took.sort_unstable();
    took
}

/// A job that returns at once.
fn quick(_: u32) {}

/// How many jobs have started, for jobs that wait for others.
#[derive(Default)]
struct Started {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Started {
    fn record(&self) {
        *self.count.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    /// Blocks until `count` jobs have started.
    fn wait_for(&self, count: usize) {
        let mut started = self.count.lock().unwrap();
        while *started < count {
            started = self.changed.wait(started).unwrap();
        }
    }
}

/// A job that blocks its worker's thread (a blocking handler, or one that blocks its thread by
/// mistake) until `count` jobs have started; the others return at once.
fn blocking(started: &Arc<Started>, count: usize) -> impl Fn(u32) + Clone + Send + 'static {
    let started = started.clone();
    move |_| {
        started.record();
        started.wait_for(count);
    }
}

#[test]
fn a_worker_parking_while_jobs_are_pushed_takes_each() {
    check(|| {
        let jobs = Jobs::<u32, Model>::on(1);
        let mut taker = jobs.taker(0);
        let worker = thread::spawn(move || [take(&mut taker), take(&mut taker)]);
        jobs.push_all(once(1), false);
        jobs.push_all(once(2), true);
        assert_eq!(worker.join().unwrap(), [Some(1), Some(2)]);
    });
}

#[test]
fn a_batch_for_async_workers_is_taken_whole() {
    check(|| {
        let jobs = Arc::new(Jobs::<u32, Model>::on(2));
        let workers = two_workers(&jobs, Some(2), quick);
        jobs.push_all(0..2, false);
        assert_eq!(join(workers), [0, 1]);
    });
}

#[test]
fn a_batch_for_blocking_workers_starts_each_job_on_a_worker_of_its_own() {
    check(|| {
        let jobs = Arc::new(Jobs::<u32, Model>::on(2));
        let started = Arc::new(Started::default());
        // Each job holds its worker until both have started: one worker woken for both jobs
        // would hold the second behind the first.
        let workers = two_workers(&jobs, Some(2), blocking(&started, 2));
        jobs.push_all(0..2, true);
        assert_eq!(join(workers), [0, 1]);
    });
}

#[test]
fn closing_ends_every_worker_after_the_jobs_left() {
    check(|| {
        let jobs = Arc::new(Jobs::<u32, Model>::on(2));
        let workers = two_workers(&jobs, None, quick);
        jobs.push_all(once(7), false);
        jobs.close();
        assert_eq!(join(workers), [7]);
    });
}

#[test]
fn a_stalled_batch_is_woken_by_the_stall_check() {
    check(|| {
        let jobs = Arc::new(Jobs::<u32, Model>::on(2));
        let started = Arc::new(Started::default());
        // The worker woken for the batch blocks in its first job until the second has started.
        let workers = two_workers(&jobs, Some(2), blocking(&started, 2));
        jobs.push_all(0..2, false);
        // The pool's stall check, as `WorkerPool::check_for_stall` runs it: `seen` read after
        // the push, then, a check period later (the pool's thread yields), again while jobs
        // are queued.
        let mut seen = jobs.taken();
        loop {
            thread::yield_now();
            if !jobs.wake_if_stalled(seen) {
                break;
            }
            seen = jobs.taken();
        }
        assert_eq!(join(workers), [0, 1]);
    });
}

#[test]
fn a_worker_past_its_busy_turn_wakes_a_sibling_for_the_jobs_left() {
    check(|| {
        let jobs = Arc::new(Jobs::<u32, Loom<true>>::on(2));
        let started = Arc::new(Started::default());
        let workers = two_workers(&jobs, Some(2), blocking(&started, 2));
        jobs.push_all(0..2, false);
        assert_eq!(join(workers), [0, 1]);
    });
}

#[test]
fn a_dead_taker_leaving_while_its_successor_parks_keeps_the_successor_registered() {
    check(|| {
        let jobs = Jobs::<u32, Model>::on(1);
        let mut dead = jobs.taker(0);
        // The dead worker had parked, its waker registered, before it died.
        assert!(
            dead.poll_take(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        );
        let mut successor = jobs.taker(0);
        let dying = thread::spawn(move || drop(dead));
        let worker = thread::spawn(move || take(&mut successor));
        jobs.push_all(once(1), false);
        assert_eq!(worker.join().unwrap(), Some(1));
        dying.join().unwrap();
    });
}
