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
//! A general channel (`async-channel` before) woke a parked worker for each job and made the
//! workers and the pool contend for its listener lock on every message.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long a worker takes jobs in one go, with more still queued, before it wakes an idle
/// sibling to share them. Long against a quick handler (a batch of them takes a few
/// microseconds each), short against the work of one that computes.
pub(crate) const BUSY_TURN: Duration = Duration::from_micros(100);

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
pub(crate) struct Jobs<Job> {
    shared: Arc<Mutex<Inner<Job>>>,
}

impl<Job> Jobs<Job> {
    /// A queue for workers in `slots` slots.
    pub(crate) fn new(slots: usize) -> Self {
        let mut idle = Vec::new();
        idle.resize_with(slots, || None);
        Self {
            shared: Arc::new(Mutex::new(Inner {
                jobs: VecDeque::new(),
                idle,
                takers: 0,
                taken: 0,
                closed: false,
            })),
        }
    }

    /// The end a worker in `slot` takes jobs from.
    pub(crate) fn taker(&self, slot: usize) -> Taker<Job> {
        let id = {
            let mut inner = self.shared.lock();
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
            let mut inner = self.shared.lock();
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
        self.shared.lock().taken
    }

    /// When jobs are queued and none was taken since `taken` was `seen` (the worker woken for
    /// them is stuck in a handler that blocks its thread), wakes an idle worker. Whether jobs
    /// are still queued.
    pub(crate) fn wake_if_stalled(&self, seen: u64) -> bool {
        let idle = {
            let mut inner = self.shared.lock();
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
        self.shared.lock().jobs.drain(..).collect()
    }

    /// Closes the queue: every worker ends once it is empty.
    pub(crate) fn close(&self) {
        let idle: Vec<Waker> = {
            let mut inner = self.shared.lock();
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

impl<Job> Drop for Jobs<Job> {
    fn drop(&mut self) {
        self.close();
    }
}

/// A worker's end of the queue.
pub(crate) struct Taker<Job> {
    shared: Arc<Mutex<Inner<Job>>>,
    slot: usize,
    id: u64,
    /// When this worker began taking jobs without finding the queue empty.
    turn_began: Option<Instant>,
}

impl<Job> Taker<Job> {
    /// The next job; `None` once the queue is closed and empty; pending (this worker idle) while
    /// it is empty.
    pub(crate) fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Option<Job>> {
        let mut inner = self.shared.lock();
        let Some(job) = inner.jobs.pop_front() else {
            self.turn_began = None;
            if inner.closed {
                return Poll::Ready(None);
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
            let began = *self.turn_began.get_or_insert_with(Instant::now);
            if began.elapsed() >= BUSY_TURN {
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
        if let Some(idle) = self.shared.lock().idle.get_mut(self.slot)
            && idle.as_ref().is_some_and(|(by, _)| *by == self.id)
        {
            *idle = None;
        }
    }
}

impl<Job> Drop for Taker<Job> {
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
