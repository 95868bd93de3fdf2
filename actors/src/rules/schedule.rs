//! Which message runs next: a fixed number of workers, one message at a time per ordering key.
//!
//! Messages without an ordering key run as soon as a worker is free. Messages that share an
//! ordering key run one at a time, in the order they arrived; for a batch handler, the messages
//! of a key whose earlier ones are in the batch still forming join that batch, in order (a key
//! is never in two batches running at once). Pure data, no I/O: the worker pool actor
//! (`worker_pool.rs`) calls it and hands out what it returns.

use std::collections::{HashMap, VecDeque};

/// A queue of jobs for `capacity` workers with per-ordering-key serialization.
///
/// [`submit`](Self::submit) and [`finished`](Self::finished) only update the state;
/// [`next_to_start`](Self::next_to_start) then hands out, one at a time, the jobs that may start
/// now (no list is built per call: this runs once per message).
#[derive(Debug)]
pub(crate) struct Schedule<J> {
    capacity: usize,
    running: usize,
    /// Jobs submitted and not started: `ready` plus every key's queue.
    waiting: usize,
    /// Jobs waiting for a free worker, in arrival order.
    ready: VecDeque<(String, J)>,
    /// Keys with jobs running; each holds the jobs of that key waiting for them, in order.
    busy_keys: HashMap<String, Busy<J>>,
    /// Jobs that already hold a worker (their key's previous job handed it over) and start next.
    handed_over: VecDeque<(String, J)>,
}

/// An ordering key's jobs: how many run (more than one only when they joined one forming
/// batch), and those waiting for them, in order.
#[derive(Debug)]
struct Busy<J> {
    running: usize,
    queue: VecDeque<J>,
}

impl<J> Busy<J> {
    fn one() -> Self {
        Self {
            running: 1,
            queue: VecDeque::new(),
        }
    }
}

impl<J> Schedule<J> {
    /// A schedule for `capacity` workers (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            running: 0,
            waiting: 0,
            ready: VecDeque::new(),
            busy_keys: HashMap::new(),
            handed_over: VecDeque::new(),
        }
    }

    /// Jobs currently running (or handed a worker and about to start).
    pub(crate) fn running(&self) -> usize {
        self.running
    }

    /// Jobs waiting, for a worker or for their ordering key.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// A job arrived with this ordering key (empty: none).
    pub(crate) fn submit(&mut self, key: String, job: J) {
        self.waiting += 1;
        self.ready.push_back((key, job));
    }

    /// Takes every job not started yet (a stop began): waiting for a worker, for their key, or
    /// handed a worker and not started. Jobs running go on; `finished` still applies to them.
    pub(crate) fn drain(&mut self) -> Vec<(String, J)> {
        let mut taken: Vec<(String, J)> = self.ready.drain(..).collect();
        for (key, busy) in &mut self.busy_keys {
            taken.extend(busy.queue.drain(..).map(|job| (key.clone(), job)));
        }
        for (key, job) in self.handed_over.drain(..) {
            // It held its key's worker: the key is free again.
            self.running -= 1;
            self.busy_keys.remove(&key);
            taken.push((key, job));
        }
        self.waiting = 0;
        taken
    }

    /// A job that ran is held (by the breaker): its worker is free, its key stays busy, so the
    /// key's next job waits for it.
    pub(crate) fn hold(&mut self) {
        self.running -= 1;
    }

    /// A held job runs again, or is let go: it takes a worker again (over the capacity, if it
    /// must: it was let start before), to be given back by [`finished`](Self::finished).
    pub(crate) fn unhold(&mut self) {
        self.running += 1;
    }

    /// Whether a waiting job could start now: a worker is free and a ready job's key is not
    /// busy.
    pub(crate) fn could_start(&self) -> bool {
        self.running < self.capacity
            && self
                .ready
                .iter()
                .any(|(key, _)| key.is_empty() || !self.busy_keys.contains_key(key))
    }

    /// The jobs waiting for a worker or for their key (not those handed a worker).
    pub(crate) fn waiting_jobs(&self) -> impl Iterator<Item = &J> {
        let queued = self.busy_keys.values().flat_map(|busy| busy.queue.iter());
        self.ready.iter().map(|(_, job)| job).chain(queued)
    }

    /// Takes the waiting jobs that `due` picks; the others keep their order.
    pub(crate) fn take_waiting(&mut self, due: impl Fn(&J) -> bool) -> Vec<(String, J)> {
        let mut taken = Vec::new();
        let ready = std::mem::take(&mut self.ready);
        for (key, job) in ready {
            if due(&job) {
                taken.push((key, job));
            } else {
                self.ready.push_back((key, job));
            }
        }
        for (key, busy) in &mut self.busy_keys {
            let queue = std::mem::take(&mut busy.queue);
            for job in queue {
                if due(&job) {
                    taken.push((key.clone(), job));
                } else {
                    busy.queue.push_back(job);
                }
            }
        }
        self.waiting -= taken.len();
        taken
    }

    /// A job with this ordering key finished; its worker is free.
    pub(crate) fn finished(&mut self, key: &str) {
        self.running -= 1;
        if key.is_empty() {
            return;
        }
        let Some(busy) = self.busy_keys.get_mut(key) else {
            return;
        };
        busy.running -= 1;
        if busy.running > 0 {
            // Others of its batch still run.
            return;
        }
        match busy.queue.pop_front() {
            // The next job of this key takes the worker that just freed up.
            Some(next) => {
                busy.running = 1;
                self.running += 1;
                self.waiting -= 1;
                self.handed_over.push_back((key.to_string(), next));
            }
            None => {
                self.busy_keys.remove(key);
            }
        }
    }

    /// The next job to start now, if a worker is free for one. Call until `None`.
    ///
    /// `joins(key, job)`: whether the key's running jobs are all in the batch still forming and
    /// `job` fits in it, so that it may join them (always `false` without batches).
    pub(crate) fn next_to_start(
        &mut self,
        joins: impl Fn(&str, &J) -> bool,
    ) -> Option<(String, J)> {
        if let Some(next) = self.handed_over.pop_front() {
            return Some(next);
        }
        while self.running < self.capacity {
            let (key, job) = self.ready.pop_front()?;
            if key.is_empty() {
                self.running += 1;
                self.waiting -= 1;
                return Some((key, job));
            } else if let Some(busy) = self.busy_keys.get_mut(&key) {
                if busy.queue.is_empty() && joins(&key, &job) {
                    // Its key's jobs are forming a batch: it joins them, after them.
                    busy.running += 1;
                    self.running += 1;
                    self.waiting -= 1;
                    return Some((key, job));
                }
                // Its key is busy: it waits behind the running job, keeping arrival order.
                busy.queue.push_back(job);
            } else {
                self.busy_keys.insert(key.clone(), Busy::one());
                self.running += 1;
                self.waiting -= 1;
                return Some((key, job));
            }
        }
        None
    }

    /// The next waiting job of `key`, to join its key's jobs in the batch forming now (the
    /// caller knows they are all there), if a worker is free for one and `fits(job)`.
    pub(crate) fn next_of_key(&mut self, key: &str, fits: impl Fn(&J) -> bool) -> Option<J> {
        if self.running >= self.capacity {
            return None;
        }
        let busy = self.busy_keys.get_mut(key)?;
        if !fits(busy.queue.front()?) {
            return None;
        }
        let job = busy.queue.pop_front()?;
        busy.running += 1;
        self.running += 1;
        self.waiting -= 1;
        Some(job)
    }
}

/// The message ids whose handler is running, each with the redeliveries of that message that
/// wait for the run to end (Pub/Sub redelivers a message whose lease ran out while its handler
/// still works on it; running it twice at once would do the work twice).
#[derive(Debug)]
pub(crate) struct RunningIds<J> {
    ids: rustc_hash::FxHashMap<std::sync::Arc<str>, Vec<(String, J)>>,
}

impl<J> Default for RunningIds<J> {
    fn default() -> Self {
        Self {
            ids: Default::default(),
        }
    }
}

impl<J> RunningIds<J> {
    /// A job of message `id` may start: it is handed back to run when no run of that message is
    /// on, and kept, to wait, when one is.
    pub(crate) fn admit(
        &mut self,
        id: &std::sync::Arc<str>,
        key: String,
        job: J,
    ) -> Option<(String, J)> {
        match self.ids.get_mut(&**id) {
            Some(waiting) => {
                waiting.push((key, job));
                None
            }
            None => {
                self.ids.insert(id.clone(), Vec::new());
                Some((key, job))
            }
        }
    }

    /// The run of message `id` ended: the redeliveries that waited for it, in arrival order.
    pub(crate) fn ended(&mut self, id: &str) -> Vec<(String, J)> {
        self.ids.remove(id).unwrap_or_default()
    }

    /// Every redelivery waiting (a stop began); the runs stay recorded until they end.
    pub(crate) fn take_waiting(&mut self) -> Vec<J> {
        self.ids
            .values_mut()
            .flat_map(|waiting| waiting.drain(..).map(|(_, job)| job))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts what may start now.
    fn started(s: &mut Schedule<u32>) -> Vec<u32> {
        std::iter::from_fn(|| s.next_to_start(|_, _| false))
            .map(|(_, j)| j)
            .collect()
    }

    fn submit(s: &mut Schedule<u32>, key: &str, job: u32) -> Vec<u32> {
        s.submit(key.to_string(), job);
        started(s)
    }

    fn finished(s: &mut Schedule<u32>, key: &str) -> Vec<u32> {
        s.finished(key);
        started(s)
    }

    #[test]
    fn unkeyed_jobs_run_up_to_capacity() {
        let mut s = Schedule::new(2);
        assert_eq!(submit(&mut s, "", 1), vec![1]);
        assert_eq!(submit(&mut s, "", 2), vec![2]);
        assert_eq!(submit(&mut s, "", 3), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (2, 1));
        assert_eq!(finished(&mut s, ""), vec![3]);
    }

    #[test]
    fn one_key_runs_one_at_a_time_in_arrival_order() {
        let mut s = Schedule::new(4);
        assert_eq!(submit(&mut s, "k", 1), vec![1]);
        assert_eq!(submit(&mut s, "k", 2), Vec::<u32>::new());
        assert_eq!(submit(&mut s, "k", 3), Vec::<u32>::new());
        assert_eq!(s.running(), 1);
        assert_eq!(finished(&mut s, "k"), vec![2]);
        assert_eq!(finished(&mut s, "k"), vec![3]);
        assert_eq!(finished(&mut s, "k"), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (0, 0));
    }

    #[test]
    fn other_keys_and_unkeyed_jobs_pass_a_busy_key() {
        let mut s = Schedule::new(3);
        assert_eq!(submit(&mut s, "a", 1), vec![1]);
        assert_eq!(submit(&mut s, "a", 2), Vec::<u32>::new());
        assert_eq!(submit(&mut s, "b", 3), vec![3]);
        assert_eq!(submit(&mut s, "", 4), vec![4]);
        assert_eq!(s.running(), 3);
    }

    #[test]
    fn a_keyed_job_queued_for_a_worker_keeps_its_order_behind_its_key() {
        let mut s = Schedule::new(1);
        assert_eq!(submit(&mut s, "k", 1), vec![1]);
        assert_eq!(submit(&mut s, "", 2), Vec::<u32>::new());
        assert_eq!(submit(&mut s, "k", 3), Vec::<u32>::new());
        // Job 1 ends: the key's queue is empty, so the worker goes to the oldest ready job.
        assert_eq!(finished(&mut s, "k"), vec![2]);
        assert_eq!(finished(&mut s, ""), vec![3]);
    }

    #[test]
    fn drain_takes_every_job_not_started_and_leaves_the_running_ones() {
        let mut s = Schedule::new(2);
        assert_eq!(submit(&mut s, "k", 1), vec![1]);
        assert_eq!(submit(&mut s, "", 2), vec![2]);
        s.submit("k".into(), 3);
        s.submit("".into(), 4);
        assert_eq!(started(&mut s), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (2, 2));
        // Job 1 ends: job 3 is handed its worker but not started yet.
        s.finished("k");
        let mut taken: Vec<u32> = s.drain().into_iter().map(|(_, j)| j).collect();
        taken.sort();
        assert_eq!(taken, vec![3, 4]);
        assert_eq!((s.running(), s.waiting()), (1, 0));
        assert_eq!(started(&mut s), Vec::<u32>::new());
        s.finished("");
        assert_eq!((s.running(), s.waiting()), (0, 0));
    }

    #[test]
    fn waiting_jobs_can_be_taken_by_a_rule_and_the_others_keep_their_order() {
        let mut s = Schedule::new(1);
        assert_eq!(submit(&mut s, "k", 1), vec![1]);
        for (key, job) in [("k", 2), ("k", 3), ("", 4), ("k", 5)] {
            s.submit(key.into(), job);
        }
        assert_eq!(started(&mut s), Vec::<u32>::new());
        let mut all: Vec<u32> = s.waiting_jobs().copied().collect();
        all.sort();
        assert_eq!(all, [2, 3, 4, 5]);
        let mut taken: Vec<u32> = s
            .take_waiting(|j| j % 2 == 0)
            .into_iter()
            .map(|(_, j)| j)
            .collect();
        taken.sort();
        assert_eq!(taken, [2, 4]);
        assert_eq!(s.waiting(), 2);
        // The key's others, in order, after its running job.
        assert_eq!(finished(&mut s, "k"), vec![3]);
        assert_eq!(finished(&mut s, "k"), vec![5]);
    }

    #[test]
    fn the_waiting_count_follows_every_change() {
        let mut s = Schedule::new(1);
        for (key, job) in [("a", 1), ("a", 2), ("b", 3), ("", 4)] {
            s.submit(key.into(), job);
        }
        assert_eq!(s.waiting(), 4);
        assert_eq!(started(&mut s), vec![1]);
        assert_eq!(s.waiting(), 3);
        assert_eq!(finished(&mut s, "a"), vec![2]);
        assert_eq!(s.waiting(), 2);
        assert_eq!(finished(&mut s, "a"), vec![3]);
        assert_eq!(finished(&mut s, "b"), vec![4]);
        assert_eq!((s.running(), s.waiting()), (1, 0));
    }

    #[test]
    fn a_keys_jobs_join_its_forming_batch_in_order_and_the_key_frees_when_all_finish() {
        let mut s = Schedule::new(10);
        let forming = |_: &str, _: &u32| true;
        s.submit("k".into(), 1);
        s.submit("k".into(), 2);
        assert_eq!(s.next_to_start(forming).map(|(_, j)| j), Some(1));
        assert_eq!(s.next_to_start(forming).map(|(_, j)| j), Some(2));
        // Queued while the key's batch ran: it joins only through `next_of_key`, first in line.
        s.submit("k".into(), 3);
        s.submit("k".into(), 4);
        assert_eq!(started(&mut s), Vec::<u32>::new());
        assert_eq!(s.next_of_key("k", |_| true), Some(3));
        assert_eq!(
            s.next_to_start(forming).map(|(_, j)| j),
            None,
            "nothing else ready"
        );
        assert_eq!(s.next_of_key("k", |&j| j != 4), None, "4 does not fit");
        assert_eq!(s.next_of_key("k", |_| true), Some(4));
        assert_eq!((s.running(), s.waiting()), (4, 0));
        s.submit("k".into(), 5);
        assert_eq!(started(&mut s), Vec::<u32>::new());
        // The batch of 1 to 4 ends message by message; 5 starts when the last has.
        for _ in 0..3 {
            assert_eq!(finished(&mut s, "k"), Vec::<u32>::new());
        }
        assert_eq!(finished(&mut s, "k"), vec![5]);
        assert_eq!(finished(&mut s, "k"), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (0, 0));
    }

    #[test]
    fn a_key_joins_only_while_a_worker_is_free() {
        let mut s = Schedule::new(2);
        s.submit("k".into(), 1);
        s.submit("".into(), 2);
        s.submit("k".into(), 3);
        assert_eq!(started(&mut s), vec![1, 2]);
        assert_eq!(s.next_of_key("k", |_| true), None, "both workers taken");
        assert_eq!(s.next_to_start(|_, _| true), None);
    }

    #[test]
    fn zero_capacity_is_one_worker() {
        let mut s = Schedule::new(0);
        assert_eq!(submit(&mut s, "", 1), vec![1]);
    }
}

#[cfg(test)]
mod running_ids {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_redelivery_of_a_running_message_waits_for_that_run() {
        let mut running = RunningIds::default();
        let (m1, m2): (Arc<str>, Arc<str>) = ("m1".into(), "m2".into());
        assert_eq!(running.admit(&m1, "k".into(), 1), Some(("k".into(), 1)));
        assert_eq!(
            running.admit(&m2, String::new(), 2),
            Some((String::new(), 2))
        );
        // m1 again while its first run is on: it waits.
        assert_eq!(running.admit(&m1, "k".into(), 3), None);
        assert_eq!(running.admit(&m1, "k".into(), 4), None);
        assert_eq!(running.ended("m2"), vec![]);
        assert_eq!(
            running.ended("m1"),
            vec![("k".to_string(), 3), ("k".to_string(), 4)]
        );
        // The run is over: the next delivery of m1 runs.
        assert_eq!(running.admit(&m1, "k".into(), 5), Some(("k".into(), 5)));
    }

    #[test]
    fn a_stop_takes_every_waiting_redelivery() {
        let mut running = RunningIds::default();
        let m1: Arc<str> = "m1".into();
        running.admit(&m1, String::new(), 1);
        running.admit(&m1, String::new(), 2);
        assert_eq!(running.take_waiting(), vec![2]);
        assert_eq!(running.ended("m1"), vec![]);
    }
}
