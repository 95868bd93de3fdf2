//! The registry of a subscription's live leases, and one timer queue for their budgets.
//!
//! A stop reaches every lease through the registry with one message each (rather than every
//! lease waiting on a signal of its own), and the status page reads the oldest lease from it.
//! The lease budgets (`max_lease` from receipt) are timed by one `DelayQueue` for all the
//! leases, polled by a task of the registry's own ([`BudgetTimers`]), rather than by a timer per
//! lease actor (an allocation and a timer-wheel entry each).
//!
//! The registry does not know the lease actor's type: it holds [`LeaseLink`]s, which
//! `actor.rs` implements for the actor's weak address and the message's generation. (`actor.rs`
//! imports this module, never the reverse.)

use slab::Slab;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

/// The furthest ahead one budget timer is set (a timer wheel holds about two years). A longer
/// `max_lease` is timed in steps of this length.
const LONGEST_BUDGET_TIMER: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where a subscription's stop stands, as the lease actors see it. Stages only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) enum StopStage {
    /// No stop requested.
    #[default]
    Running,
    /// Draining: `retry_after` holds end at once.
    Draining,
    /// The drain timeout passed: everything unsettled is nacked.
    Abandoned,
}

/// How the registry reaches one lease. Weak: the registry must not keep a lease alive.
pub(crate) trait LeaseLink {
    /// The lease's budget ran out.
    fn budget_spent(&self);
    /// The subscription's stop moved on.
    fn stage_changed(&self, stage: StopStage);
}

/// One live lease in the registry.
#[derive(Debug)]
struct Live<L> {
    link: L,
    received_at: Instant,
    /// When its budget runs out.
    deadline: Instant,
    /// Its entry in `budgets`, until that fires.
    budget: Option<delay_queue::Key>,
}

/// The live leases of one subscription and their budget timers.
#[derive(Debug)]
pub(crate) struct Leases<L> {
    live: RefCell<Slab<Live<L>>>,
    /// Each live lease's budget, by its key in `live`, until the budget is spent.
    budgets: RefCell<DelayQueue<usize>>,
    stage: Cell<StopStage>,
}

impl<L> Default for Leases<L> {
    fn default() -> Self {
        Self {
            live: RefCell::default(),
            budgets: RefCell::default(),
            stage: Cell::default(),
        }
    }
}

impl<L: LeaseLink + 'static> Leases<L> {
    /// Where the stop stands now (a lease started during a stop starts in its stage).
    pub(crate) fn stage(&self) -> StopStage {
        self.stage.get()
    }

    /// Enters a lease received at `received_at` whose budget ends at `deadline`; returns its key,
    /// which it keeps to [`leave`](Self::leave).
    pub(crate) fn enter(&self, link: L, received_at: Instant, deadline: Instant) -> usize {
        let mut live = self.live.borrow_mut();
        let entry = live.vacant_entry();
        let key = entry.key();
        let budget = self.arm(key, deadline);
        entry.insert(Live {
            link,
            received_at,
            deadline,
            budget: Some(budget),
        });
        key
    }

    /// The lease at `key` ended: it leaves the registry and its timer is dropped. Safe to call
    /// while the registry is being walked (from a lease dropped during a stop): then it does
    /// nothing, and the entry goes with the registry.
    pub(crate) fn leave(&self, key: usize) {
        if let Ok(mut live) = self.live.try_borrow_mut()
            && let Some(Live {
                budget: Some(budget),
                ..
            }) = live.try_remove(key)
            && let Ok(mut budgets) = self.budgets.try_borrow_mut()
        {
            budgets.try_remove(&budget);
        }
    }

    /// Moves every lease to `stage` (a later stage only).
    pub(crate) fn advance(&self, stage: StopStage) {
        if self.stage.get() >= stage {
            return;
        }
        self.stage.set(stage);
        for (_, live) in self.live.borrow().iter() {
            live.link.stage_changed(stage);
        }
    }

    /// When the oldest live lease was received.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.live.borrow().iter().map(|(_, l)| l.received_at).min()
    }

    /// Leases alive now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live.borrow().len()
    }

    /// Sets the budget timer of the lease at `key` (clamped to [`LONGEST_BUDGET_TIMER`]).
    fn arm(&self, key: usize, deadline: Instant) -> delay_queue::Key {
        let furthest = Instant::now() + LONGEST_BUDGET_TIMER;
        self.budgets
            .borrow_mut()
            .insert_at(key, deadline.min(furthest))
    }

    /// Tells each lease whose budget ran out, as the timers fire; pending otherwise (also with
    /// no lease live: arming a timer wakes the caller).
    fn poll_spent(&self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let fired = self.budgets.borrow_mut().poll_expired(cx);
            let Poll::Ready(Some(fired)) = fired else {
                return Poll::Pending;
            };
            let key = fired.into_inner();
            let mut live = self.live.borrow_mut();
            let Some(entry) = live.get_mut(key) else {
                continue;
            };
            entry.budget = None;
            if entry.deadline > Instant::now() {
                // A budget beyond one timer's reach: the next step.
                let deadline = entry.deadline;
                drop(live);
                let budget = self.arm(key, deadline);
                if let Some(entry) = self.live.borrow_mut().get_mut(key) {
                    entry.budget = Some(budget);
                }
                continue;
            }
            entry.link.budget_spent();
        }
    }

    /// Starts polling the budget timers on the current arbiter, for as long as the returned
    /// guard lives.
    pub(crate) fn time_budgets(self: &Rc<Self>) -> BudgetTimers {
        let leases = self.clone();
        let task = tokio::task::spawn_local(async move {
            std::future::poll_fn(|cx| leases.poll_spent(cx)).await
        });
        BudgetTimers(task.abort_handle())
    }
}

/// The task that polls a registry's budget timers; dropped, it ends.
#[derive(Debug)]
pub(crate) struct BudgetTimers(tokio::task::AbortHandle);

impl Drop for BudgetTimers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A lease that records what the registry told it.
    #[derive(Clone, Default)]
    struct Told(Rc<RefCell<Vec<String>>>);
    impl LeaseLink for Told {
        fn budget_spent(&self) {
            self.0.borrow_mut().push("spent".into());
        }
        fn stage_changed(&self, stage: StopStage) {
            self.0.borrow_mut().push(format!("{stage:?}"));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_runs_out_at_its_deadline_and_not_before() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let leases = Rc::new(Leases::default());
                let _timers = leases.time_budgets();
                let told = Told::default();
                let now = Instant::now();
                leases.enter(told.clone(), now, now + Duration::from_secs(10));
                tokio::time::sleep(Duration::from_secs(9)).await;
                assert!(told.0.borrow().is_empty());
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(*told.0.borrow(), ["spent"]);
            })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_left_is_told_nothing_and_stages_only_move_forward() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let leases = Rc::new(Leases::default());
                let _timers = leases.time_budgets();
                let (stays, goes) = (Told::default(), Told::default());
                let now = Instant::now();
                let deadline = now + Duration::from_secs(10);
                leases.enter(stays.clone(), now, deadline);
                let key = leases.enter(goes.clone(), now, deadline);
                leases.leave(key);
                assert_eq!(leases.len(), 1);
                leases.advance(StopStage::Abandoned);
                leases.advance(StopStage::Draining);
                tokio::time::sleep(Duration::from_secs(11)).await;
                assert_eq!(*stays.0.borrow(), ["Abandoned", "spent"]);
                assert!(goes.0.borrow().is_empty());
                assert_eq!(leases.oldest(), Some(now));
            })
            .await;
    }
}
