//! Which message runs next: a fixed number of workers, one message at a time per ordering key.
//!
//! Messages without an ordering key run as soon as a worker is free. Messages that share an
//! ordering key run one at a time, in the order they arrived. Pure data, no I/O: the
//! [`WorkerPool`](crate::worker_pool::WorkerPool) actor calls it and starts what it returns.

use std::collections::{HashMap, VecDeque};

/// A queue of jobs for `capacity` workers with per-ordering-key serialization.
#[derive(Debug)]
pub struct Schedule<J> {
    capacity: usize,
    running: usize,
    /// Jobs waiting for a free worker, in arrival order.
    ready: VecDeque<(String, J)>,
    /// Keys with a job running; each holds the jobs of that key waiting for it, in order.
    busy_keys: HashMap<String, VecDeque<J>>,
}

impl<J> Schedule<J> {
    /// A schedule for `capacity` workers (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            running: 0,
            ready: VecDeque::new(),
            busy_keys: HashMap::new(),
        }
    }

    /// Jobs currently running.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Jobs waiting, for a worker or for their ordering key.
    pub fn waiting(&self) -> usize {
        self.ready.len() + self.busy_keys.values().map(VecDeque::len).sum::<usize>()
    }

    /// A job arrived with this ordering key (empty: none). Returns the jobs to start now.
    pub fn submit(&mut self, key: String, job: J) -> Vec<(String, J)> {
        self.ready.push_back((key, job));
        self.fill()
    }

    /// The job with this ordering key finished. Returns the jobs to start now.
    pub fn finished(&mut self, key: &str) -> Vec<(String, J)> {
        self.running -= 1;
        let mut start = Vec::new();
        if !key.is_empty() {
            match self.busy_keys.get_mut(key).and_then(VecDeque::pop_front) {
                // The next job of this key takes the worker that just freed up.
                Some(next) => {
                    self.running += 1;
                    start.push((key.to_string(), next));
                }
                None => {
                    self.busy_keys.remove(key);
                }
            }
        }
        start.extend(self.fill());
        start
    }

    fn fill(&mut self) -> Vec<(String, J)> {
        let mut start = Vec::new();
        while self.running < self.capacity {
            let Some((key, job)) = self.ready.pop_front() else {
                break;
            };
            if key.is_empty() {
                self.running += 1;
                start.push((key, job));
            } else if let Some(waiting) = self.busy_keys.get_mut(&key) {
                // Its key is busy: it waits behind the running job, keeping arrival order.
                waiting.push_back(job);
            } else {
                self.busy_keys.insert(key.clone(), VecDeque::new());
                self.running += 1;
                start.push((key, job));
            }
        }
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(started: Vec<(String, u32)>) -> Vec<u32> {
        started.into_iter().map(|(_, j)| j).collect()
    }

    #[test]
    fn unkeyed_jobs_run_up_to_capacity() {
        let mut s = Schedule::new(2);
        assert_eq!(jobs(s.submit(String::new(), 1)), vec![1]);
        assert_eq!(jobs(s.submit(String::new(), 2)), vec![2]);
        assert_eq!(jobs(s.submit(String::new(), 3)), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (2, 1));
        assert_eq!(jobs(s.finished("")), vec![3]);
    }

    #[test]
    fn one_key_runs_one_at_a_time_in_arrival_order() {
        let mut s = Schedule::new(4);
        assert_eq!(jobs(s.submit("k".into(), 1)), vec![1]);
        assert_eq!(jobs(s.submit("k".into(), 2)), Vec::<u32>::new());
        assert_eq!(jobs(s.submit("k".into(), 3)), Vec::<u32>::new());
        assert_eq!(s.running(), 1);
        assert_eq!(jobs(s.finished("k")), vec![2]);
        assert_eq!(jobs(s.finished("k")), vec![3]);
        assert_eq!(jobs(s.finished("k")), Vec::<u32>::new());
        assert_eq!((s.running(), s.waiting()), (0, 0));
    }

    #[test]
    fn other_keys_and_unkeyed_jobs_pass_a_busy_key() {
        let mut s = Schedule::new(3);
        assert_eq!(jobs(s.submit("a".into(), 1)), vec![1]);
        assert_eq!(jobs(s.submit("a".into(), 2)), Vec::<u32>::new());
        assert_eq!(jobs(s.submit("b".into(), 3)), vec![3]);
        assert_eq!(jobs(s.submit(String::new(), 4)), vec![4]);
        assert_eq!(s.running(), 3);
    }

    #[test]
    fn a_keyed_job_queued_for_a_worker_keeps_its_order_behind_its_key() {
        let mut s = Schedule::new(1);
        assert_eq!(jobs(s.submit("k".into(), 1)), vec![1]);
        assert_eq!(jobs(s.submit(String::new(), 2)), Vec::<u32>::new());
        assert_eq!(jobs(s.submit("k".into(), 3)), Vec::<u32>::new());
        // Job 1 ends: the key's queue is empty, so the worker goes to the oldest ready job.
        assert_eq!(jobs(s.finished("k")), vec![2]);
        assert_eq!(jobs(s.finished("")), vec![3]);
    }

    #[test]
    fn zero_capacity_is_one_worker() {
        let mut s = Schedule::new(0);
        assert_eq!(jobs(s.submit(String::new(), 1)), vec![1]);
    }
}
