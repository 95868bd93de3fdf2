//! How a batch forms, as plain data: the worker pool adds each message that may run, and takes
//! a batch when it is full (by messages or bytes) or when its wait after its first message is
//! over. It knows the ordering keys in the forming batch, whose next messages may join it. Time
//! is passed in, so the rules are tested without a clock.

use crate::rules::options::BatchPolicy;
use tokio::time::Instant;

/// The batch forming now.
#[derive(Debug)]
pub(crate) struct Batcher<J> {
    policy: BatchPolicy,
    forming: Vec<J>,
    /// Payload bytes in `forming`.
    bytes: usize,
    /// When the first message of `forming` came.
    since: Option<Instant>,
    /// The ordering keys of `forming`'s messages.
    keys: rustc_hash::FxHashSet<String>,
}

impl<J> Batcher<J> {
    pub(crate) fn new(policy: BatchPolicy) -> Self {
        Self {
            policy,
            forming: Vec::new(),
            bytes: 0,
            since: None,
            keys: Default::default(),
        }
    }

    /// Adds `job` (`bytes` of payload, ordering key `key`, empty for none) at `now`. The
    /// batches that are full come back: the one that would overflow `max_batch_bytes` with it,
    /// and the one it completes (a message larger than the limit is a batch of its own).
    pub(crate) fn add(&mut self, job: J, key: &str, bytes: usize, now: Instant) -> Vec<Vec<J>> {
        let mut full = Vec::new();
        if !self.forming.is_empty() && !self.fits(bytes) {
            full.push(self.take());
        }
        if self.forming.is_empty() {
            self.since = Some(now);
        }
        if !key.is_empty() && !self.keys.contains(key) {
            self.keys.insert(key.to_string());
        }
        self.forming.push(job);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.forming.len() >= self.policy.messages || self.bytes >= self.policy.bytes {
            full.push(self.take());
        }
        full
    }

    /// Whether `bytes` more fit in the forming batch.
    fn fits(&self, bytes: usize) -> bool {
        self.bytes.saturating_add(bytes) <= self.policy.bytes
    }

    /// Whether a message of ordering key `key` (`bytes` of payload) may join the forming batch:
    /// messages of its key are in it, and it fits (added, it stays in this batch).
    pub(crate) fn may_join(&self, key: &str, bytes: usize) -> bool {
        self.fits(bytes) && self.keys.contains(key)
    }

    /// When the forming batch is due, if one is forming.
    pub(crate) fn due_at(&self) -> Option<Instant> {
        self.since.map(|since| since + self.policy.wait)
    }

    /// The forming batch, if its wait is over at `now`.
    pub(crate) fn take_due(&mut self, now: Instant) -> Option<Vec<J>> {
        self.due_at()
            .is_some_and(|due| due <= now)
            .then(|| self.take())
    }

    /// The forming batch, whatever its size (empty when none forms).
    pub(crate) fn take(&mut self) -> Vec<J> {
        self.bytes = 0;
        self.since = None;
        self.keys.clear();
        std::mem::take(&mut self.forming)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy(messages: usize, bytes: usize) -> BatchPolicy {
        BatchPolicy {
            messages,
            bytes,
            wait: Duration::from_millis(50),
        }
    }

    #[test]
    fn a_batch_is_full_at_its_message_count() {
        let mut b = Batcher::new(policy(3, 1000));
        let t0 = Instant::now();
        assert!(b.add(1, "", 10, t0).is_empty());
        assert!(b.add(2, "", 10, t0).is_empty());
        assert_eq!(b.add(3, "", 10, t0), vec![vec![1, 2, 3]]);
        assert_eq!(b.due_at(), None, "nothing forms");
    }

    #[test]
    fn a_message_that_would_overflow_the_bytes_closes_the_batch_and_a_large_one_is_alone() {
        let mut b = Batcher::new(policy(100, 100));
        let t0 = Instant::now();
        assert!(b.add(1, "", 60, t0).is_empty());
        assert_eq!(
            b.add(2, "", 60, t0),
            vec![vec![1]],
            "2 starts the next batch"
        );
        assert_eq!(b.add(3, "", 500, t0), vec![vec![2], vec![3]]);
        assert!(b.take().is_empty());
    }

    #[test]
    fn a_forming_batch_is_due_its_wait_after_its_first_message() {
        let mut b = Batcher::new(policy(100, 1000));
        let t0 = Instant::now();
        b.add(1, "", 1, t0);
        b.add(2, "", 1, t0 + Duration::from_millis(40));
        assert_eq!(b.due_at(), Some(t0 + Duration::from_millis(50)));
        assert_eq!(b.take_due(t0 + Duration::from_millis(49)), None);
        assert_eq!(b.take_due(t0 + Duration::from_millis(50)), Some(vec![1, 2]));
        assert_eq!(b.due_at(), None);
    }

    #[test]
    fn a_key_may_join_the_batch_its_messages_form_while_it_fits() {
        let mut b = Batcher::new(policy(3, 100));
        let t0 = Instant::now();
        assert!(!b.may_join("k", 1), "no batch forms");
        b.add(1, "k", 50, t0);
        assert!(b.may_join("k", 50));
        assert!(
            !b.may_join("k", 51),
            "it would close the batch and start the next"
        );
        assert!(!b.may_join("j", 1), "no message of its key is there");
        b.add(2, "k", 10, t0);
        assert_eq!(b.add(3, "", 10, t0), vec![vec![1, 2, 3]]);
        assert!(!b.may_join("k", 1), "its batch was taken");
    }
}
