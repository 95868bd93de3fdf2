//! The lease actor: one per outstanding message.
//!
//! It holds the message's [`SettleHandle`], so the client keeps extending the lease, until the
//! outcome is known; it runs the `retry_after` wait and notices when the lease budget runs out.
//! The rules are in [`LeaseState`]; this file only turns messages and timers into calls on it and
//! carries out the effects.

use crate::ack_sink::{Confirm, Confirmations};
use crate::flow::FlowPermit;
use crate::lease_state::{LeaseEffect, LeaseState};
use crate::outcome::{Fate, Outcome};
use crate::source::{Confirmation, SettleHandle};
use crate::stats::{FailureKind, Stats};
use crate::tasks::poll_once;
use actix::WeakAddr;
use actix::prelude::*;
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};
use tokio_util::time::{DelayQueue, delay_queue};

/// The furthest ahead one budget timer is set (a timer wheel holds about two years). A longer
/// `max_lease` is timed in steps of this length.
const LONGEST_BUDGET_TIMER: Duration = Duration::from_secs(365 * 24 * 3600);

/// What every lease actor of one subscription shares (behind one `Rc`: starting a lease actor
/// copies no address).
pub(crate) struct LeaseShared {
    /// Where exactly-once confirmations are awaited.
    pub sink: Confirmations,
    /// The subscription's counters.
    pub stats: Arc<Stats>,
    /// Every live lease of the subscription, for a stop.
    pub leases: Rc<Leases>,
    /// Counts the subscription's live actors: a stop returns once none is left.
    pub alive: TaskTracker,
    /// The subscription's name, for log lines.
    pub subscription: Arc<str>,
}

/// Where a subscription's stop stands, as the lease actors see it. Stages only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum StopStage {
    /// No stop requested.
    #[default]
    Running,
    /// Draining: `retry_after` holds end at once.
    Draining,
    /// The drain timeout passed: everything unsettled is nacked.
    Abandoned,
}

/// The live lease actors of one subscription, so that a stop can reach each of them with one
/// message (rather than every lease waiting on a signal of its own), and their lease budgets:
/// one timer queue for all of them, polled by the supervisor ([`Leases::poll_spent`]), rather
/// than a timer (an allocation and a timer-wheel entry of the runtime's) per lease actor.
#[derive(Debug, Default)]
pub struct Leases {
    live: RefCell<Slab<Live>>,
    /// Each live lease's budget, by its key in `live`, until the budget is spent.
    budgets: RefCell<DelayQueue<usize>>,
    stage: Cell<StopStage>,
}

/// One live lease in the registry.
#[derive(Debug)]
struct Live {
    /// Weak: the registry must not keep an actor alive, and a weak address is copied without
    /// allocating.
    lease: WeakAddr<LeaseActor>,
    received_at: Instant,
    /// When its budget runs out.
    deadline: Instant,
    /// Its entry in `budgets`, until that fires.
    budget: Option<delay_queue::Key>,
}

impl Leases {
    /// Moves every lease to `stage` (a later stage only).
    pub fn advance(&self, stage: StopStage) {
        if self.stage.get() >= stage {
            return;
        }
        self.stage.set(stage);
        for (_, live) in self.live.borrow().iter() {
            if let Some(lease) = live.lease.upgrade() {
                lease.do_send(StageChanged(stage));
            }
        }
    }

    /// When the oldest live lease was received.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.live.borrow().iter().map(|(_, l)| l.received_at).min()
    }

    /// Sets the budget timer of the lease at `key` (clamped to [`LONGEST_BUDGET_TIMER`]).
    fn arm(&self, key: usize, deadline: Instant) -> delay_queue::Key {
        let furthest = Instant::now() + LONGEST_BUDGET_TIMER;
        self.budgets
            .borrow_mut()
            .insert_at(key, deadline.min(furthest))
    }

    /// Tells each lease actor whose budget ran out, as the timers fire; pending otherwise (also
    /// with no lease live: arming a timer wakes the caller).
    fn poll_spent(&self, cx: &mut TaskContext<'_>) -> Poll<()> {
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
            if let Some(lease) = entry.lease.upgrade() {
                lease.do_send(BudgetSpent);
            }
        }
    }

    /// Polls [`Leases::poll_spent`] for as long as the subscription lives.
    pub(crate) async fn watch_budgets(self: Rc<Self>) {
        std::future::poll_fn(|cx| self.poll_spent(cx)).await
    }

    /// Lease actors alive now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live.borrow().len()
    }

    /// Whether none is alive.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Event: the lease budget (`max_lease` from receipt) ran out.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct BudgetSpent;

/// Event: the subscription's stop moved on.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct StageChanged(StopStage);

/// Command: settle the message with this outcome. The first outcome wins.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Settle(pub Outcome);

/// Command: a stop began before a handler started on the message: nack it, unrun.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Release;

/// Owns one message's lease until it is settled.
pub struct LeaseActor {
    state: LeaseState,
    handle: Option<Box<dyn SettleHandle>>,
    message_id: Arc<str>,
    span: tracing::Span,
    shared: Rc<LeaseShared>,
    /// This actor's place in [`Leases`].
    key: Option<usize>,
    /// The message's share of flow control, returned when this actor ends.
    _permit: Option<FlowPermit>,
    /// When Pub/Sub accepted the message.
    publish_time: Option<SystemTime>,
    /// Counted among the holds running now.
    holding: bool,
    /// Counted among the subscription's live actors.
    _alive: TaskTrackerToken,
}

impl LeaseActor {
    /// A lease actor for a message just received.
    pub(crate) fn new(
        state: LeaseState,
        handle: Box<dyn SettleHandle>,
        message_id: Arc<str>,
        span: tracing::Span,
        permit: Option<FlowPermit>,
        publish_time: Option<SystemTime>,
        shared: Rc<LeaseShared>,
    ) -> Self {
        Self {
            publish_time,
            holding: false,
            state,
            handle: Some(handle),
            message_id,
            span,
            key: None,
            _permit: permit,
            _alive: shared.alive.token(),
            shared,
        }
    }

    /// Starts the actor, enters it in the registry of live leases and sets its budget timer.
    pub(crate) fn launch(mut self) -> Addr<Self> {
        let shared = self.shared.clone();
        let clock = self.state.clock();
        let leases = &shared.leases;
        let mut live = leases.live.borrow_mut();
        let entry = live.vacant_entry();
        let key = entry.key();
        self.key = Some(key);
        let deadline = clock.deadline();
        let budget = leases.arm(key, deadline);
        // The actor runs from the next turn of the event loop; the registry borrow ends first.
        let addr = self.start();
        entry.insert(Live {
            lease: addr.downgrade(),
            received_at: clock.received_at(),
            deadline,
            budget: Some(budget),
        });
        addr
    }

    fn on_stage(&mut self, stage: StopStage, ctx: &mut Context<Self>) {
        let effect = match stage {
            StopStage::Running => return,
            StopStage::Draining => self.state.on_drain(),
            StopStage::Abandoned => self.state.on_abandon(),
        };
        self.apply(effect, ctx);
    }

    fn apply(&mut self, effect: LeaseEffect, ctx: &mut Context<Self>) {
        let _enter = self.span.enter();
        match effect {
            LeaseEffect::Send(action, fate) => {
                let counter = match fate {
                    Fate::Acked => &self.shared.stats.acked,
                    Fate::Retried => &self.shared.stats.retried,
                    Fate::Dropped => &self.shared.stats.dropped,
                    Fate::DeadLettered => &self.shared.stats.dead_lettered,
                    Fate::Released => &self.shared.stats.released,
                };
                Stats::bump(counter);
                if std::mem::take(&mut self.holding) {
                    self.shared.stats.holding.fetch_sub(1, Ordering::Relaxed);
                }
                let stats = &self.shared.stats;
                stats
                    .lease_held_seconds
                    .observe(self.state.clock().held(Instant::now()));
                if let Some(published) = self.publish_time
                    && let Ok(since) = SystemTime::now().duration_since(published)
                {
                    stats.publish_to_settle_seconds.observe(since);
                }
                if fate == Fate::DeadLettered {
                    stats.failed(
                        &self.message_id,
                        self.state.attempt(),
                        FailureKind::DeadLettered,
                    );
                }
                self.span
                    .record("messaging.gcp_pubsub.result", fate.as_str());
                tracing::debug!(?fate, ?action, "settled");
                // To the client now (it batches the RPCs); on exactly-once subscriptions the
                // sink awaits the confirmation.
                if let Some(handle) = self.handle.take()
                    && let Confirmation::Pending(mut confirmation) = handle.settle(action)
                {
                    // Polled once here: Google's client queues the action when its confirmation
                    // is first polled, so the action leaves now, whatever becomes of the sink.
                    if let Poll::Ready(result) = poll_once(confirmation.as_mut()) {
                        confirmation = Box::pin(std::future::ready(result));
                    }
                    // Refused only when the sink is gone (the subscription failed): the action
                    // was queued with the client all the same; its confirmation goes unawaited.
                    let _ = self.shared.sink.send(Confirm {
                        confirmation,
                        action,
                        message_id: self.message_id.clone(),
                        span: self.span.clone(),
                    });
                }
                ctx.stop();
            }
            LeaseEffect::WaitHold(delay) => {
                Stats::bump(&self.shared.stats.held);
                self.holding = true;
                self.shared.stats.holding.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?delay, "holding the lease before a retry");
                ctx.run_later(delay, |act, ctx| {
                    let effect = act.state.on_hold_elapsed();
                    act.apply(effect, ctx);
                });
            }
            LeaseEffect::LostLease => {
                Stats::bump(&self.shared.stats.lost_leases);
                self.shared.stats.failed(
                    &self.message_id,
                    self.state.attempt(),
                    FailureKind::LostLease,
                );
                tracing::warn!(subscription = %self.shared.subscription, message_id = %self.message_id,
                    "lost lease: max_lease ran out before the handler settled the message; \
                     Pub/Sub will redeliver it");
            }
            LeaseEffect::Duplicate => {
                tracing::warn!(subscription = %self.shared.subscription, message_id = %self.message_id,
                    "a second outcome for a message already settled was ignored");
            }
            LeaseEffect::None => {}
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    /// Alive while a strong address is held (the job's, a `Settler`'s) or a hold waits; once
    /// both are gone unsettled, it stops and its handle nacks.
    fn started(&mut self, ctx: &mut Self::Context) {
        // A message read just before a stop began starts in the stop's stage.
        let stage = self.shared.leases.stage.get();
        self.on_stage(stage, ctx);
    }
}

impl LeaseActor {
    /// A hold ended (or never was).
    fn end_hold(&mut self) {
        if std::mem::take(&mut self.holding) {
            self.shared.stats.holding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for LeaseActor {
    /// Leaves the registry, whether the actor stopped or was dropped (its arbiter ended). Ended
    /// without an outcome (every strong address to it went without one), its handle's drop nacks
    /// the message: counted as retried, so that every message received is counted settled.
    fn drop(&mut self) {
        self.end_hold();
        if self.handle.is_some() {
            Stats::bump(&self.shared.stats.retried);
            tracing::warn!(subscription = %self.shared.subscription, message_id = %self.message_id,
                "a lease ended without an outcome; the message is nacked and will be redelivered");
        }
        let leases = &self.shared.leases;
        if let Some(key) = self.key.take()
            && let Ok(mut live) = leases.live.try_borrow_mut()
            && let Some(Live {
                budget: Some(budget),
                ..
            }) = live.try_remove(key)
            && let Ok(mut budgets) = leases.budgets.try_borrow_mut()
        {
            budgets.try_remove(&budget);
        }
    }
}

impl Handler<BudgetSpent> for LeaseActor {
    type Result = ();

    fn handle(&mut self, _: BudgetSpent, ctx: &mut Self::Context) {
        let effect = self.state.on_budget_elapsed();
        self.apply(effect, ctx);
    }
}

impl Handler<StageChanged> for LeaseActor {
    type Result = ();

    fn handle(&mut self, StageChanged(stage): StageChanged, ctx: &mut Self::Context) {
        self.on_stage(stage, ctx);
    }
}

impl Handler<Release> for LeaseActor {
    type Result = ();

    fn handle(&mut self, _: Release, ctx: &mut Self::Context) {
        let effect = self.state.on_release();
        self.apply(effect, ctx);
    }
}

impl Handler<Settle> for LeaseActor {
    type Result = ();

    fn handle(&mut self, Settle(outcome): Settle, ctx: &mut Self::Context) {
        let effect = self.state.on_outcome(outcome, Instant::now());
        self.apply(effect, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeHandle, Settled};
    use crate::lease_state::LeaseClock;
    use crate::outcome::Action;
    use std::time::Duration;

    type Sent = Arc<parking_lot::Mutex<Vec<Action>>>;

    fn start(
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
    ) -> (Addr<LeaseActor>, Sent, Arc<Stats>, Settled) {
        start_with(attempt, limit, max_lease, Rc::default())
    }

    /// A lease actor over an exactly-once handle, so that every action reaches the sink.
    fn start_with(
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
        leases: Rc<Leases>,
    ) -> (Addr<LeaseActor>, Sent, Arc<Stats>, Settled) {
        start_handle(attempt, limit, max_lease, leases, FakeHandle::new(true))
    }

    fn start_handle(
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
        leases: Rc<Leases>,
        (handle, settled): (FakeHandle, Settled),
    ) -> (Addr<LeaseActor>, Sent, Arc<Stats>, Settled) {
        let sent = Sent::default();
        // Stands in for the ack sink: collects the confirmations that reach it.
        let (sink, mut inbox) = tokio::sync::mpsc::unbounded_channel::<Confirm>();
        let collected = sent.clone();
        actix_rt::spawn(async move {
            while let Some(confirm) = inbox.recv().await {
                collected.lock().push(confirm.action);
            }
        });
        let stats = Arc::new(Stats::default());
        let state = LeaseState::new(LeaseClock::new(Instant::now(), max_lease), attempt, limit);
        let addr = launch(state, Box::new(handle), sink, stats.clone(), leases);
        (addr, sent, stats, settled)
    }

    /// A lease actor over `handle`, whose confirmations go to `sink`.
    fn launch(
        state: LeaseState,
        handle: Box<dyn SettleHandle>,
        sink: Confirmations,
        stats: Arc<Stats>,
        leases: Rc<Leases>,
    ) -> Addr<LeaseActor> {
        // The supervisor's part: the budget timers.
        actix_rt::spawn(leases.clone().watch_budgets());
        let shared = Rc::new(LeaseShared {
            sink,
            stats,
            leases,
            alive: TaskTracker::new(),
            subscription: "projects/p/subscriptions/orders".into(),
        });
        LeaseActor::new(
            state,
            handle,
            "m1".into(),
            tracing::Span::none(),
            None,
            None,
            shared,
        )
        .launch()
    }

    /// Lets the actors on this thread run what is ready.
    async fn turns() {
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }

    async fn settle(addr: &Addr<LeaseActor>, outcome: Outcome) {
        addr.send(Settle(outcome)).await.unwrap();
        turns().await;
    }

    #[actix_rt::test]
    async fn retry_after_holds_for_the_delay_then_nacks() {
        tokio::time::pause();
        let (addr, sent, stats, settled) = start(Some(1), None, Duration::from_secs(600));
        settle(
            &addr,
            Outcome::retry_after_unchecked(Duration::from_secs(15)),
        )
        .await;
        assert!(sent.lock().is_empty());
        assert!(!settled.dropped(), "the handle is held during the wait");
        assert_eq!(stats.snapshot().held, 1);

        tokio::time::advance(Duration::from_secs(14)).await;
        turns().await;
        assert!(sent.lock().is_empty(), "not before 15 s");

        tokio::time::advance(Duration::from_secs(2)).await;
        turns().await;
        assert_eq!(*sent.lock(), vec![Action::Nack]);
        assert_eq!(stats.snapshot().retried, 1);
    }

    #[actix_rt::test]
    async fn budget_running_out_counts_a_lost_lease_and_a_late_ack_still_goes_out() {
        tokio::time::pause();
        let (addr, sent, stats, _settled) = start(None, None, Duration::from_secs(10));
        turns().await; // the actor starts and arms its budget timer
        tokio::time::advance(Duration::from_secs(9)).await;
        turns().await;
        assert_eq!(
            stats.snapshot().lost_leases,
            0,
            "not before the budget ends"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        turns().await;
        assert_eq!(stats.snapshot().lost_leases, 1);
        settle(&addr, Outcome::ack()).await;
        assert_eq!(*sent.lock(), vec![Action::Ack]);
    }

    #[actix_rt::test]
    async fn a_drain_ends_a_hold_at_once() {
        tokio::time::pause();
        let leases = Rc::new(Leases::default());
        let (addr, sent, _stats, _settled) =
            start_with(None, None, Duration::from_secs(600), leases.clone());
        settle(
            &addr,
            Outcome::retry_after_unchecked(Duration::from_secs(300)),
        )
        .await;
        assert!(sent.lock().is_empty());
        assert_eq!(leases.len(), 1);
        leases.advance(StopStage::Draining);
        turns().await;
        assert_eq!(*sent.lock(), vec![Action::Nack]);
    }

    #[actix_rt::test]
    async fn abandon_nacks_a_message_whose_handler_is_still_running() {
        tokio::time::pause();
        let leases = Rc::new(Leases::default());
        let (addr, sent, _stats, _settled) =
            start_with(None, None, Duration::from_secs(600), leases.clone());
        turns().await;
        leases.advance(StopStage::Draining);
        turns().await;
        assert!(
            sent.lock().is_empty(),
            "a drain alone waits for the handler"
        );
        leases.advance(StopStage::Abandoned);
        turns().await;
        assert_eq!(*sent.lock(), vec![Action::Nack]);
        assert!(leases.is_empty(), "a settled lease leaves the registry");
        // The handler's late outcome goes nowhere.
        addr.do_send(Settle(Outcome::ack()));
        turns().await;
        assert_eq!(*sent.lock(), vec![Action::Nack]);
    }

    #[actix_rt::test]
    async fn a_best_effort_action_goes_to_the_client_and_not_to_the_sink() {
        tokio::time::pause();
        let (addr, sent, stats, settled) = start_handle(
            None,
            None,
            Duration::from_secs(600),
            Rc::default(),
            FakeHandle::new(false),
        );
        settle(&addr, Outcome::ack()).await;
        assert_eq!(settled.action(), Some(Action::Ack));
        assert!(sent.lock().is_empty(), "nothing to confirm");
        assert_eq!(stats.snapshot().acked, 1);
    }

    /// A handle like Google's exactly-once one: the action is queued when its confirmation is
    /// first polled.
    #[derive(Debug)]
    struct Lazy(Arc<parking_lot::Mutex<Option<Action>>>);
    impl SettleHandle for Lazy {
        fn settle(self: Box<Self>, action: Action) -> Confirmation {
            Confirmation::Pending(Box::pin(async move {
                *self.0.lock() = Some(action);
                Ok(())
            }))
        }
    }

    #[actix_rt::test]
    async fn an_exactly_once_action_is_queued_even_when_the_sink_is_gone() {
        let queued = Arc::new(parking_lot::Mutex::new(None));
        let (sink, inbox) = tokio::sync::mpsc::unbounded_channel::<Confirm>();
        drop(inbox);
        let state = LeaseState::new(
            LeaseClock::new(Instant::now(), Duration::from_secs(600)),
            None,
            None,
        );
        let addr = launch(
            state,
            Box::new(Lazy(queued.clone())),
            sink,
            Arc::new(Stats::default()),
            Rc::default(),
        );
        settle(&addr, Outcome::ack()).await;
        assert_eq!(*queued.lock(), Some(Action::Ack));
    }

    #[actix_rt::test]
    async fn a_lease_whose_every_address_goes_without_an_outcome_is_counted_retried() {
        tokio::time::pause();
        let (addr, sent, stats, _settled) = start(None, None, Duration::from_secs(600));
        turns().await;
        drop(addr);
        turns().await;
        assert_eq!(stats.snapshot().retried, 1);
        assert!(sent.lock().is_empty());
    }

    #[actix_rt::test]
    async fn drop_on_the_last_attempt_nacks() {
        tokio::time::pause();
        let (addr, sent, stats, _settled) = start(Some(5), Some(5), Duration::from_secs(600));
        settle(&addr, Outcome::drop()).await;
        assert_eq!(*sent.lock(), vec![Action::Nack]);
        assert_eq!(stats.snapshot().dead_lettered, 1);
    }

    #[actix_rt::test]
    async fn only_the_first_outcome_counts() {
        tokio::time::pause();
        let (addr, sent, stats, _settled) = start(None, None, Duration::from_secs(600));
        addr.do_send(Settle(Outcome::ack()));
        addr.do_send(Settle(Outcome::retry()));
        turns().await;
        assert_eq!(*sent.lock(), vec![Action::Ack]);
        assert_eq!(stats.snapshot().retried, 0);
    }
}
