//! The lease actor: one per outstanding message.
//!
//! It holds the message's [`SettleHandle`], so the client keeps extending the lease, until the
//! outcome is known; it runs the `retry_after` wait and notices when the lease budget runs out.
//! The rules are in [`LeaseState`]; this file only turns messages and timers into calls on it and
//! carries out the effects.

use crate::ack_sink::Apply;
use crate::flow::FlowPermit;
use crate::lease_state::{LeaseEffect, LeaseState};
use crate::outcome::{Fate, Outcome};
use crate::source::SettleHandle;
use crate::stats::{FailureKind, Stats};
use actix::WeakAddr;
use actix::prelude::*;
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;
use tokio::time::Instant;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

/// What every lease actor of one subscription shares (behind one `Rc`: starting a lease actor
/// copies no address).
pub(crate) struct LeaseShared {
    /// Where settled messages go.
    pub sink: Recipient<Apply>,
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
/// message (rather than every lease waiting on a signal of its own).
#[derive(Debug, Default)]
pub struct Leases {
    /// Weak addresses: the registry must not keep an actor alive, and a weak one is copied
    /// without allocating.
    live: RefCell<Slab<(WeakAddr<LeaseActor>, Instant)>>,
    stage: Cell<StopStage>,
}

impl Leases {
    /// Moves every lease to `stage` (a later stage only).
    pub fn advance(&self, stage: StopStage) {
        if self.stage.get() >= stage {
            return;
        }
        self.stage.set(stage);
        for (_, (lease, _)) in self.live.borrow().iter() {
            if let Some(lease) = lease.upgrade() {
                lease.do_send(StageChanged(stage));
            }
        }
    }

    /// When the oldest live lease was received.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.live.borrow().iter().map(|(_, (_, at))| *at).min()
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

    /// Starts the actor and enters it in the registry of live leases.
    pub(crate) fn launch(mut self) -> Addr<Self> {
        let shared = self.shared.clone();
        let received_at = self.state.clock().received_at();
        let mut live = shared.leases.live.borrow_mut();
        let entry = live.vacant_entry();
        self.key = Some(entry.key());
        // The actor runs from the next turn of the event loop; the registry borrow ends first.
        let addr = self.start();
        entry.insert((addr.downgrade(), received_at));
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
                if let Some(handle) = self.handle.take() {
                    self.shared.sink.do_send(Apply {
                        handle,
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

    fn started(&mut self, ctx: &mut Self::Context) {
        let budget = self.state.clock().remaining(Instant::now());
        ctx.run_later(budget, |act, ctx| {
            let effect = act.state.on_budget_elapsed();
            act.apply(effect, ctx);
        });
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
    /// Leaves the registry, whether the actor stopped or was dropped (its arbiter ended).
    fn drop(&mut self) {
        self.end_hold();
        if let Some(key) = self.key.take()
            && let Ok(mut live) = self.shared.leases.live.try_borrow_mut()
        {
            live.remove(key);
        }
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

    /// Collects what reaches the ack sink.
    struct Sink(Arc<parking_lot::Mutex<Vec<Action>>>);
    impl Actor for Sink {
        type Context = Context<Self>;
    }
    impl Handler<Apply> for Sink {
        type Result = ();
        fn handle(&mut self, msg: Apply, _: &mut Self::Context) {
            self.0.lock().push(msg.action);
        }
    }

    type Sent = Arc<parking_lot::Mutex<Vec<Action>>>;

    fn start(
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
    ) -> (Addr<LeaseActor>, Sent, Arc<Stats>, Settled) {
        start_with(attempt, limit, max_lease, Rc::default())
    }

    fn start_with(
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
        leases: Rc<Leases>,
    ) -> (Addr<LeaseActor>, Sent, Arc<Stats>, Settled) {
        let sent = Sent::default();
        let sink = Sink(sent.clone()).start();
        let stats = Arc::new(Stats::default());
        let (handle, settled) = FakeHandle::new(false);
        let state = LeaseState::new(LeaseClock::new(Instant::now(), max_lease), attempt, limit);
        let shared = Rc::new(LeaseShared {
            sink: sink.recipient(),
            stats: stats.clone(),
            leases,
            alive: TaskTracker::new(),
            subscription: "projects/p/subscriptions/orders".into(),
        });
        let addr = LeaseActor::new(
            state,
            Box::new(handle),
            "m1".into(),
            tracing::Span::none(),
            None,
            None,
            shared,
        )
        .launch();
        (addr, sent, stats, settled)
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
