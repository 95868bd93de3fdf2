//! The queue between the worker pool and its workers, and who gets woken when jobs arrive.
//!
//! Waking a worker thread costs a system call on each side and a context switch, more than a
//! quick handler's whole message. So the pool adds the jobs of one turn together
//! ([`Jobs::push_all`]) and wakes as few idle workers as can take them: one, for async workers
//! (each runs any number of jobs at once), or one per job, for blocking workers (one job each).
//! A worker that stays busy with jobs still queued ([`BUSY_TURN`]) wakes an idle sibling, so
//! slow or CPU-bound handlers still spread over every worker thread; and since a worker whose
//! handler blocks its thread by mistake cannot even do that, the pool checks for jobs that no
//! worker took for a while ([`Jobs::wake_if_stalled`]) and wakes an idle worker for them.
//!
//! A general channel (`async-channel`, say) wakes a parked worker for each job and makes the
//! workers and the pool contend for its listener lock on every message.
//!
//! # How the wake-up protocol is checked
//! One lock guards the jobs and the idle workers' wakers: a worker registers its waker under
//! the lock in which it found the queue empty, and whoever adds jobs, closes the queue or finds
//! them stalled takes the wakers to wake under the lock in which it changed the queue (and
//! wakes them after releasing it). So no wake-up can fall between a worker's look and its
//! park. The unit tests at the bottom check who is woken, on one thread. The model test in
//! `job_queue/model.rs` checks the protocol across threads with [loom]: it runs each scenario
//! (a worker parking while jobs are pushed, two workers and a batch for async and for blocking
//! workers, a close, a stalled batch, a busy turn, a restarted worker's taker) in every
//! interleaving of its threads with up to two preemptions, and fails on any in which a worker
//! stays parked with work it should have taken. It runs in plain `cargo test`, in a few
//! seconds.
//!
//! For that the queue is generic over its [`Platform`]: [`Native`] (parking_lot's lock in
//! std's `Arc`, std's clock) is what the runtime uses, the same code as naming them directly;
//! the model puts in loom's lock and `Arc`. (A `cfg(loom)` switch instead would need a build
//! with `--cfg loom`, which rebuilds every dependency, tokio reading that flag too.) Time does
//! not pass in the model: a busy turn is over at once in one scenario and never in the others.
//!
//! [loom]: https://docs.rs/loom

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ops::DerefMut;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[cfg(test)]
mod model;

/// How long a worker takes jobs in one go, with more still queued, before it wakes an idle
/// sibling to share them. Long against a quick handler (a batch of them takes a few
/// microseconds each), short against the work of one that computes.
pub(crate) const BUSY_TURN: Duration = Duration::from_micros(100);

/// Room the queue keeps once it is empty: a burst of jobs (a hand-out of hundreds) leaves its
/// room behind, a few hundred bytes a job, which would stay with the subscription for good.
const KEPT_ROOM: usize = 256;

/// What the queue is built on: the lock its ends share, and the clock of a busy turn.
pub(crate) trait Platform {
    /// A lock, shared by the pool's end and every worker's.
    type Shared<T>: Clone;
    /// When a busy turn began.
    type Instant: Copy;
    /// Shares `value` behind a lock.
    fn share<T>(value: T) -> Self::Shared<T>;
    /// Locks `shared` until the guard is dropped.
    fn lock<T>(shared: &Self::Shared<T>) -> impl DerefMut<Target = T> + '_;
    /// Now.
    fn now() -> Self::Instant;
    /// Whether a busy turn that began at `began` is over ([`BUSY_TURN`]).
    fn turn_over(began: Self::Instant) -> bool;
}

/// The runtime's platform: parking_lot's lock in std's `Arc`, std's clock.
pub(crate) struct Native;

impl Platform for Native {
    type Shared<T> = Arc<Mutex<T>>;
    type Instant = Instant;

    fn share<T>(value: T) -> Self::Shared<T> {
        Arc::new(Mutex::new(value))
    }

    #[inline]
    fn lock<T>(shared: &Self::Shared<T>) -> impl DerefMut<Target = T> + '_ {
        shared.lock()
    }

    #[inline]
    fn now() -> Instant {
        Instant::now()
    }

    #[inline]
    fn turn_over(began: Instant) -> bool {
        began.elapsed() >= BUSY_TURN
    }
}

struct Inner<Job> {
    jobs: VecDeque<Job>,
    /// The waker of each idle worker, by its slot, with the id of the taker that left it (a
    /// restarted worker's new taker and its dead predecessor's share the slot).
    idle: Vec<Option<(u64, Waker)>>,
    /// Ids for takers.
    takers: u64,
    /// Jobs taken so far, by every worker.
    taken: u64,
    closed: bool,
}

impl<Job> Inner<Job> {
    /// Takes the waker of one idle worker (not `except`).
    fn idle_worker(&mut self, except: Option<usize>) -> Option<Waker> {
        self.idle
            .iter_mut()
            .enumerate()
            .filter(|(slot, _)| Some(*slot) != except)
            .find_map(|(_, waker)| waker.take())
            .map(|(_, waker)| waker)
    }
}

/// The pool's end of the queue. Dropping it closes the queue: the workers end.
pub(crate) struct Jobs<Job, P: Platform = Native> {
    shared: P::Shared<Inner<Job>>,
}

impl<Job> Jobs<Job> {
    /// A queue for workers in `slots` slots.
    pub(crate) fn new(slots: usize) -> Self {
        Self::on(slots)
    }
}

impl<Job, P: Platform> Jobs<Job, P> {
    /// A queue for workers in `slots` slots, built on `P`.
    fn on(slots: usize) -> Self {
        let mut idle = Vec::new();
        idle.resize_with(slots, || None);
        Self {
            shared: P::share(Inner {
                jobs: VecDeque::new(),
                idle,
                takers: 0,
                taken: 0,
                closed: false,
            }),
        }
    }

    /// The end a worker in `slot` takes jobs from.
    pub(crate) fn taker(&self, slot: usize) -> Taker<Job, P> {
        let id = {
            let mut inner = P::lock(&self.shared);
            inner.takers += 1;
            inner.takers
        };
        Taker {
            shared: self.shared.clone(),
            slot,
            id,
            turn_began: None,
        }
    }

    /// Adds `jobs` and wakes the idle workers they need: one when each worker runs any number
    /// at once (`one_each` false), one per job when each runs one at a time.
    pub(crate) fn push_all(&self, jobs: impl Iterator<Item = Job>, one_each: bool) {
        let mut woken = Vec::new();
        {
            let mut inner = P::lock(&self.shared);
            let before = inner.jobs.len();
            inner.jobs.extend(jobs);
            let added = inner.jobs.len() - before;
            let wanted = if one_each { added } else { added.min(1) };
            while woken.len() < wanted {
                let Some(waker) = inner.idle_worker(None) else {
                    break;
                };
                woken.push(waker);
            }
        }
        for waker in woken {
            waker.wake();
        }
    }

    /// Jobs taken so far, by every worker: what [`Jobs::wake_if_stalled`] compares with.
    pub(crate) fn taken(&self) -> u64 {
        P::lock(&self.shared).taken
    }

    /// When jobs are queued and none was taken since `taken` was `seen` (the worker woken for
    /// them is stuck in a handler that blocks its thread), wakes an idle worker. Whether jobs
    /// are still queued.
    pub(crate) fn wake_if_stalled(&self, seen: u64) -> bool {
        let idle = {
            let mut inner = P::lock(&self.shared);
            if inner.jobs.is_empty() {
                return false;
            }
            if inner.taken != seen {
                return true;
            }
            inner.idle_worker(None)
        };
        if let Some(waker) = idle {
            waker.wake();
        }
        true
    }

    /// Takes back every job no worker took yet (a stop began).
    pub(crate) fn take_all(&self) -> Vec<Job> {
        P::lock(&self.shared).jobs.drain(..).collect()
    }

    /// Closes the queue: every worker ends once it is empty.
    pub(crate) fn close(&self) {
        let idle: Vec<Waker> = {
            let mut inner = P::lock(&self.shared);
            inner.closed = true;
            inner
                .idle
                .iter_mut()
                .filter_map(|idle| idle.take().map(|(_, waker)| waker))
                .collect()
        };
        for waker in idle {
            waker.wake();
        }
    }
}

impl<Job, P: Platform> Drop for Jobs<Job, P> {
    fn drop(&mut self) {
        self.close();
    }
}

/// A worker's end of the queue.
pub(crate) struct Taker<Job, P: Platform = Native> {
    shared: P::Shared<Inner<Job>>,
    slot: usize,
    id: u64,
    /// When this worker began taking jobs without finding the queue empty.
    turn_began: Option<P::Instant>,
}

impl<Job, P: Platform> Taker<Job, P> {
    /// The next job; `None` once the queue is closed and empty; pending (this worker idle) while
    /// it is empty.
    pub(crate) fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Option<Job>> {
        let mut inner = P::lock(&self.shared);
        let Some(job) = inner.jobs.pop_front() else {
            self.turn_began = None;
            if inner.closed {
                return Poll::Ready(None);
            }
            if inner.jobs.capacity() > KEPT_ROOM {
                inner.jobs.shrink_to(KEPT_ROOM);
            }
            let id = self.id;
            let mine = &mut inner.idle[self.slot];
            if !mine
                .as_ref()
                .is_some_and(|(by, w)| *by == id && w.will_wake(cx.waker()))
            {
                *mine = Some((id, cx.waker().clone()));
            }
            return Poll::Pending;
        };
        inner.idle[self.slot] = None;
        inner.taken += 1;
        let mut sibling = None;
        if !inner.jobs.is_empty() {
            let began = *self.turn_began.get_or_insert_with(P::now);
            if P::turn_over(began) {
                sibling = inner.idle_worker(Some(self.slot));
                self.turn_began = None;
            }
        }
        drop(inner);
        if let Some(sibling) = sibling {
            sibling.wake();
        }
        Poll::Ready(Some(job))
    }

    /// Leaves the idle list (the worker stops).
    fn leave(&self) {
        if let Some(idle) = P::lock(&self.shared).idle.get_mut(self.slot)
            && idle.as_ref().is_some_and(|(by, _)| *by == self.id)
        {
            *idle = None;
        }
    }
}

impl<Job, P: Platform> Drop for Taker<Job, P> {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// Counts its wakes.
    #[derive(Default)]
    struct Counter(AtomicUsize);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    impl Counter {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Two workers, idle.
    fn idle_pair(jobs: &Jobs<u32>) -> [(Taker<u32>, Arc<Counter>); 2] {
        [0, 1].map(|slot| {
            let mut taker = jobs.taker(slot);
            let counter = Arc::new(Counter::default());
            let waker = Waker::from(counter.clone());
            assert!(
                taker
                    .poll_take(&mut Context::from_waker(&waker))
                    .is_pending()
            );
            (taker, counter)
        })
    }

    fn take(taker: &mut Taker<u32>) -> Poll<Option<u32>> {
        taker.poll_take(&mut Context::from_waker(futures::task::noop_waker_ref()))
    }

    #[test]
    fn a_batch_wakes_one_idle_worker_when_each_runs_many() {
        let jobs = Jobs::new(2);
        let [(_a, a), (_b, b)] = idle_pair(&jobs);
        jobs.push_all(0..16, false);
        assert_eq!(a.count() + b.count(), 1);
    }

    #[test]
    fn a_batch_wakes_a_worker_per_job_when_each_runs_one() {
        let jobs = Jobs::new(2);
        let [(_a, a), (_b, b)] = idle_pair(&jobs);
        jobs.push_all(0..2, true);
        assert_eq!((a.count(), b.count()), (1, 1));
    }

    #[test]
    fn jobs_come_out_in_order() {
        let jobs = Jobs::new(1);
        let mut a = jobs.taker(0);
        jobs.push_all(0..3, false);
        assert_eq!(take(&mut a), Poll::Ready(Some(0)));
        assert_eq!(take(&mut a), Poll::Ready(Some(1)));
        assert_eq!(take(&mut a), Poll::Ready(Some(2)));
        assert_eq!(take(&mut a), Poll::Pending);
    }

    #[test]
    fn a_worker_busy_past_its_turn_with_jobs_left_wakes_a_sibling() {
        let jobs = Jobs::new(2);
        let [(mut a, _), (_b, b)] = idle_pair(&jobs);
        jobs.push_all(0..3, false);
        assert_eq!(take(&mut a), Poll::Ready(Some(0)));
        assert_eq!(b.count(), 0, "a quick turn keeps the jobs to itself");
        // As if the job just taken had computed for a whole turn.
        a.turn_began = Some(Instant::now() - BUSY_TURN);
        assert_eq!(take(&mut a), Poll::Ready(Some(1)));
        assert_eq!(b.count(), 1);
    }

    #[test]
    fn jobs_no_worker_takes_wake_an_idle_worker() {
        let jobs = Jobs::new(2);
        let [(mut a, _), (_b, b)] = idle_pair(&jobs);
        jobs.push_all(0..3, false);
        let seen = jobs.taken();
        // The woken worker takes one job and blocks in it: it takes nothing more.
        assert_eq!(take(&mut a), Poll::Ready(Some(0)));
        assert!(jobs.wake_if_stalled(seen), "jobs are still queued");
        assert_eq!(b.count(), 0, "a job was taken since: nothing stalled");
        let seen = jobs.taken();
        assert!(jobs.wake_if_stalled(seen));
        assert_eq!(b.count(), 1, "no job taken since: the idle worker is woken");
        let mut b = jobs.taker(1);
        assert_eq!(take(&mut b), Poll::Ready(Some(1)));
        assert_eq!(take(&mut b), Poll::Ready(Some(2)));
        assert!(!jobs.wake_if_stalled(jobs.taken()), "nothing queued");
    }

    #[test]
    fn closing_ends_every_worker_once_the_queue_is_empty() {
        let jobs = Jobs::new(2);
        let [(mut a, a_woken), (mut b, b_woken)] = idle_pair(&jobs);
        jobs.push_all(std::iter::once(7), false);
        jobs.close();
        assert_eq!((a_woken.count(), b_woken.count()), (1, 1));
        assert_eq!(take(&mut a), Poll::Ready(Some(7)));
        assert_eq!(take(&mut a), Poll::Ready(None));
        assert_eq!(take(&mut b), Poll::Ready(None));
    }

    #[test]
    fn dropping_the_pool_end_closes_the_queue() {
        let jobs: Jobs<u32> = Jobs::new(1);
        let mut a = jobs.taker(0);
        drop(jobs);
        assert_eq!(take(&mut a), Poll::Ready(None));
    }

    #[test]
    fn a_dead_worker_leaving_does_not_unregister_its_successor() {
        let jobs = Jobs::new(1);
        let dead = jobs.taker(0);
        let mut successor = jobs.taker(0);
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        assert!(
            successor
                .poll_take(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(dead);
        jobs.push_all(std::iter::once(1), false);
        assert_eq!(counter.count(), 1);
    }

    #[test]
    fn take_all_empties_the_queue() {
        let jobs = Jobs::new(1);
        jobs.push_all(0..5, false);
        assert_eq!(jobs.take_all().len(), 5);
        assert!(jobs.take_all().is_empty());
    }
}
