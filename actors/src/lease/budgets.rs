//! The deadlines of a subscription's lease budgets, earliest first: plain data, no timer and no
//! I/O. The registry (`registry.rs`) keeps one timer at the earliest deadline this returns.
//!
//! Entering a lease is a push on a binary heap, which is constant time in practice: a budget is
//! `max_lease` from receipt, so each new deadline is the latest and sifts no further. A lease
//! that leaves is not looked for: its entry stays until it reaches the front, where it is
//! dropped, or until a lease enters while the heap holds 1,024 entries or more and more than
//! twice the live leases, when it is compacted (in linear time, at least halving it: a constant
//! share per lease). A `tokio_util` `DelayQueue` would cost a timer-wheel entry and a slab entry
//! per message, each inserted and removed on the supervisor's thread.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tokio::time::Instant;

/// Below this many entries the heap is never compacted.
const COMPACT_FROM: usize = 1024;

/// One lease's budget: its deadline, which entry it is (keys are reused), its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Budget {
    deadline: Instant,
    entry: u64,
    key: usize,
}

/// The budget deadlines of the leases entered, earliest first.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    heap: BinaryHeap<Reverse<Budget>>,
    entries: u64,
}

impl Budgets {
    /// Adds the budget of the lease at `key`, ending at `deadline`; returns the entry that
    /// [`earliest`](Self::earliest) and [`spent`](Self::spent) ask `live` about.
    ///
    /// `live_leases` (the leases alive now) bounds the entries kept for leases that left; `live`
    /// says whether the lease at a key is still the one of an entry.
    pub(crate) fn push(
        &mut self,
        key: usize,
        deadline: Instant,
        live_leases: usize,
        live: impl Fn(usize, u64) -> bool,
    ) -> u64 {
        if self.heap.len() >= COMPACT_FROM && self.heap.len() > 2 * live_leases {
            self.heap.retain(|Reverse(b)| live(b.key, b.entry));
        }
        self.entries += 1;
        let entry = self.entries;
        self.heap.push(Reverse(Budget {
            deadline,
            entry,
            key,
        }));
        entry
    }

    /// The earliest deadline of a lease still live; the entries of leases that left before it
    /// are dropped.
    pub(crate) fn earliest(&mut self, live: impl Fn(usize, u64) -> bool) -> Option<Instant> {
        while let Some(Reverse(first)) = self.heap.peek() {
            if live(first.key, first.entry) {
                return Some(first.deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// The key of a live lease whose budget ended by `now`, taken out; `None` when none has.
    pub(crate) fn spent(
        &mut self,
        now: Instant,
        live: impl Fn(usize, u64) -> bool,
    ) -> Option<usize> {
        let deadline = self.earliest(&live)?;
        if deadline > now {
            return None;
        }
        self.heap.pop().map(|Reverse(b)| b.key)
    }

    /// Entries kept, live or not.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::time::Duration;

    /// Which entry lives at each key.
    #[derive(Default)]
    struct Live(RefCell<HashMap<usize, u64>>);

    impl Live {
        fn check(&self) -> impl Fn(usize, u64) -> bool + '_ {
            |key, entry| self.0.borrow().get(&key) == Some(&entry)
        }
    }

    fn enter(budgets: &mut Budgets, live: &Live, key: usize, deadline: Instant) {
        let count = live.0.borrow().len();
        let entry = budgets.push(key, deadline, count, live.check());
        live.0.borrow_mut().insert(key, entry);
    }

    #[test]
    fn budgets_are_spent_in_deadline_order_and_not_before() {
        let (mut budgets, live) = (Budgets::default(), Live::default());
        let t = Instant::now();
        let s = Duration::from_secs;
        enter(&mut budgets, &live, 0, t + s(20));
        enter(&mut budgets, &live, 1, t + s(10));
        enter(&mut budgets, &live, 2, t + s(30));
        assert_eq!(budgets.earliest(live.check()), Some(t + s(10)));
        assert_eq!(budgets.spent(t + s(9), live.check()), None);
        assert_eq!(budgets.spent(t + s(20), live.check()), Some(1));
        assert_eq!(budgets.spent(t + s(20), live.check()), Some(0));
        assert_eq!(budgets.spent(t + s(20), live.check()), None);
        assert_eq!(budgets.earliest(live.check()), Some(t + s(30)));
    }

    #[test]
    fn a_lease_that_left_is_never_spent_even_when_its_key_is_reused() {
        let (mut budgets, live) = (Budgets::default(), Live::default());
        let t = Instant::now();
        enter(&mut budgets, &live, 7, t + Duration::from_secs(1));
        live.0.borrow_mut().remove(&7);
        // The key goes to a later lease, with a later deadline.
        enter(&mut budgets, &live, 7, t + Duration::from_secs(5));
        assert_eq!(
            budgets.earliest(live.check()),
            Some(t + Duration::from_secs(5))
        );
        assert_eq!(
            budgets.spent(t + Duration::from_secs(2), live.check()),
            None
        );
        assert_eq!(
            budgets.spent(t + Duration::from_secs(5), live.check()),
            Some(7)
        );
    }

    #[test]
    fn entries_of_leases_that_left_are_bounded() {
        let (mut budgets, live) = (Budgets::default(), Live::default());
        let t = Instant::now();
        // One lease stays at the front for the whole run; 100,000 others come and go behind it.
        enter(&mut budgets, &live, 0, t + Duration::from_secs(1));
        for i in 1..100_000u64 {
            enter(&mut budgets, &live, 1, t + Duration::from_secs(1 + i));
            live.0.borrow_mut().remove(&1);
            assert!(
                budgets.len() <= COMPACT_FROM + 1,
                "{} entries",
                budgets.len()
            );
        }
        assert_eq!(
            budgets.spent(t + Duration::from_secs(1), live.check()),
            Some(0)
        );
        assert_eq!(budgets.earliest(live.check()), None);
    }
}
