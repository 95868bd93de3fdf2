//! The registry of a subscription's live leases, and one timer for all their budgets.
//!
//! A stop reaches every lease through the registry with one message each (rather than every
//! lease waiting on a signal of its own), and the status page reads the oldest lease from it.
//! The lease budgets (`max_lease` from receipt) are kept earliest first ([`Budgets`]) and timed
//! by one timer at the earliest, polled by a task of the registry's own ([`BudgetTimers`]),
//! rather than by a timer per lease actor (an allocation and a timer-wheel entry each).
//!
//! The registry does not know the lease actor's type: it holds [`LeaseLink`]s, which
//! `actor.rs` implements for the actor's weak address and the message's generation. (`actor.rs`
//! imports this module, never the reverse.)

use crate::lease::budgets::Budgets;
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The furthest ahead the budget timer is set (tokio's timer reaches about two years). A longer
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
    /// Its budget's entry in `budgets`: keys are reused, entries are not.
    entry: u64,
}

/// The one timer of the budgets: set at the earliest deadline, and who polls it.
#[derive(Debug, Default)]
struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// Where `sleep` is set.
    at: Option<Instant>,
    /// The task polling the budgets, woken when a lease's deadline comes before `at`.
    waker: Option<Waker>,
}

/// The live leases of one subscription and their budget timer.
#[derive(Debug)]
pub(crate) struct Leases<L> {
    live: RefCell<Slab<Live<L>>>,
    budgets: RefCell<Budgets>,
    timer: RefCell<Timer>,
    stage: Cell<StopStage>,
}

impl<L> Default for Leases<L> {
    fn default() -> Self {
        Self {
            live: RefCell::default(),
            budgets: RefCell::default(),
            timer: RefCell::default(),
            stage: Cell::default(),
        }
    }
}

/// Whether the lease at `key` is the one of budget `entry`.
fn is_live<L>(live: &Slab<Live<L>>) -> impl Fn(usize, u64) -> bool + '_ {
    |key, entry| live.get(key).is_some_and(|l| l.entry == entry)
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
        let budget = {
            let live = &*live;
            let count = live.len();
            self.budgets
                .borrow_mut()
                .push(key, deadline, count, is_live(live))
        };
        live.insert(Live {
            link,
            received_at,
            entry: budget,
        });
        drop(live);
        // Only a deadline before the timer's needs the timer set again: with one `max_lease`
        // for every lease, only the first after an idle spell.
        let mut timer = self.timer.borrow_mut();
        if timer.at.is_none_or(|at| deadline < at)
            && let Some(waker) = timer.waker.take()
        {
            waker.wake();
        }
        key
    }

    /// The lease at `key` ended: it leaves the registry (its budget's entry goes once it comes
    /// first, or at a compaction). The timer stays set at the deadline it had, even for the last
    /// lease to leave: it then wakes the budget task once for nothing (and, on tokio's paused
    /// clock, an idle runtime's time moves on to it). Safe to call while the registry is being
    /// walked (from a lease dropped during a stop): then it does nothing, and the entry goes
    /// with the registry.
    pub(crate) fn leave(&self, key: usize) {
        if let Ok(mut live) = self.live.try_borrow_mut() {
            live.try_remove(key);
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

    /// Tells each lease whose budget ran out; pending otherwise, with the timer set at the
    /// earliest deadline (or none, with no lease live: entering one wakes the caller).
    fn poll_spent(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut timer = self.timer.borrow_mut();
        if !timer
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            timer.waker = Some(cx.waker().clone());
        }
        loop {
            let now = Instant::now();
            let spent = {
                let live = self.live.borrow();
                self.budgets.borrow_mut().spent(now, is_live(&live))
            };
            if let Some(key) = spent {
                // Telling the link only sends the lease actor a message: nothing re-enters.
                if let Some(lease) = self.live.borrow().get(key) {
                    lease.link.budget_spent();
                }
                continue;
            }
            let earliest = {
                let live = self.live.borrow();
                self.budgets.borrow_mut().earliest(is_live(&live))
            };
            let Some(deadline) = earliest else {
                timer.at = None;
                timer.sleep = None;
                return Poll::Pending;
            };
            // A budget beyond one timer's reach is timed in steps.
            let at = deadline.min(now + LONGEST_BUDGET_TIMER);
            if timer.at != Some(at) {
                timer.at = Some(at);
                match &mut timer.sleep {
                    Some(sleep) => sleep.as_mut().reset(at),
                    None => timer.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
                }
            }
            let sleep = timer.sleep.as_mut().expect("set above");
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// Starts polling the budget timer on the current arbiter, for as long as the returned
    /// guard lives.
    pub(crate) fn time_budgets(self: &Rc<Self>) -> BudgetTimers {
        let leases = self.clone();
        let task = tokio::task::spawn_local(async move {
            std::future::poll_fn(|cx| leases.poll_spent(cx)).await
        });
        BudgetTimers(task.abort_handle())
    }
}

/// The task that polls a registry's budget timer; dropped, it ends.
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
