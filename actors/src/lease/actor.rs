//! The lease actor: one per outstanding message.
//!
//! It holds the message's [`SettleHandle`], so the client keeps extending the lease, until the
//! outcome is known; it runs the `retry_after` wait and notices when the lease budget runs out.
//! The rules are in [`LeaseState`]; this file only turns messages and timers into calls on it and
//! carries out the effects.
//!
//! A lease actor hands out one [`SettleRight`] when it starts and awaits it: the right travels
//! with the message to the worker that runs its handler, and comes back as the outcome (or, if
//! it is dropped unused anywhere, as a nack naming where). Nothing else keeps the actor alive
//! but that wait, a `retry_after` hold's timer, and the strong address a
//! [`Settler`](crate::Settler) holds once the handler calls `settle_later`; the registry of live
//! leases ([`Leases`]) holds weak ones.

use crate::lease::ack_sink::{Confirm, Confirmations};
use crate::lease::registry::{BudgetTimers, LeaseLink, Leases, StopStage};
use crate::lease::settle_right::{SettleRight, Settlement};
use crate::rt::tasks::poll_once;
use crate::rules::flow::FlowPermit;
use crate::rules::lease_state::{LeaseEffect, LeaseState};
use crate::rules::outcome::{Fate, Outcome};
use crate::source::{Confirmation, SettleHandle};
use crate::status::stats::{FailureKind, Stats};
use actix::WeakAddr;
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::SystemTime;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

/// The registry of one subscription's live lease actors.
pub(crate) type LiveLeases = Leases<WeakAddr<LeaseActor>>;

impl LeaseLink for WeakAddr<LeaseActor> {
    fn budget_spent(&self) {
        if let Some(lease) = self.upgrade() {
            lease.do_send(BudgetSpent);
        }
    }

    fn stage_changed(&self, stage: StopStage) {
        if let Some(lease) = self.upgrade() {
            lease.do_send(StageChanged(stage));
        }
    }
}

/// What every lease actor of one subscription shares (behind one `Rc`: starting a lease actor
/// copies no address).
pub(crate) struct LeaseContext {
    /// Where exactly-once confirmations are awaited.
    pub(crate) sink: Confirmations,
    /// The subscription's counters.
    pub(crate) stats: Arc<Stats>,
    /// Every live lease of the subscription, for a stop.
    pub(crate) leases: Rc<LiveLeases>,
    /// Counts the subscription's live actors: a stop returns once none is left.
    pub(crate) alive: TaskTracker,
    /// The subscription's name, for log lines.
    pub(crate) subscription: Arc<str>,
    /// The lease budgets' timers run while a lease actor or the supervisor holds this.
    _timers: BudgetTimers,
}

impl LeaseContext {
    /// What the lease actors of a subscription share; starts timing their budgets on the
    /// current arbiter.
    pub(crate) fn new(
        sink: Confirmations,
        stats: Arc<Stats>,
        alive: TaskTracker,
        subscription: Arc<str>,
    ) -> Self {
        let leases = Rc::new(LiveLeases::default());
        Self {
            _timers: leases.time_budgets(),
            sink,
            stats,
            leases,
            alive,
            subscription,
        }
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

/// Command: settle the message with this outcome; sent by a [`Settler`](crate::Settler). The
/// first outcome wins.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Settle(pub Outcome);

/// Owns one message's lease until it is settled.
pub(crate) struct LeaseActor {
    state: LeaseState,
    handle: Option<Box<dyn SettleHandle>>,
    message_id: Arc<str>,
    span: tracing::Span,
    shared: Rc<LeaseContext>,
    /// The end of the message's settlement right, awaited from the start.
    right: Option<oneshot::Receiver<Settlement>>,
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
        shared: Rc<LeaseContext>,
    ) -> Self {
        Self {
            publish_time,
            holding: false,
            state,
            handle: Some(handle),
            message_id,
            span,
            right: None,
            key: None,
            _permit: permit,
            _alive: shared.alive.token(),
            shared,
        }
    }

    /// Starts the actor and enters it in the registry of live leases (which times its budget).
    /// Returns the message's one settlement right, and a weak address for `settle_later`.
    pub(crate) fn launch(mut self) -> (SettleRight, WeakAddr<Self>) {
        let (right, from_right) = SettleRight::new();
        self.right = Some(from_right);
        let shared = self.shared.clone();
        let clock = self.state.clock();
        // The actor runs from the next turn of the event loop, and its key is known before.
        // (One address: each one made costs two allocations.)
        let key = shared.leases.next_key();
        self.key = Some(key);
        let addr = self.start().downgrade();
        let entered = shared
            .leases
            .enter(addr.clone(), clock.received_at(), clock.deadline());
        debug_assert_eq!(entered, key);
        (right, addr)
    }

    fn on_stage(&mut self, stage: StopStage, ctx: &mut Context<Self>) {
        let effect = match stage {
            StopStage::Running => return,
            StopStage::Draining => self.state.end_hold(),
            StopStage::Abandoned => self.state.on_abandon(),
        };
        self.apply(effect, ctx);
    }

    /// The message's settlement right came back.
    fn on_settlement(&mut self, settlement: Settlement, ctx: &mut Context<Self>) {
        let effect = match settlement {
            Settlement::Outcome(outcome) => self.state.on_outcome(outcome, Instant::now()),
            Settlement::Released => self.state.settle_unrun(Fate::Released),
            // A settler has it now (and holds this actor's address until it is used).
            Settlement::Deferred => return,
            Settlement::Dropped(place) => {
                let effect = self.state.settle_unrun(Fate::Retried);
                if matches!(effect, LeaseEffect::Send(..)) {
                    tracing::warn!(subscription = %self.shared.subscription,
                        message_id = %self.message_id, %place,
                        "the message's settlement right was dropped without an outcome; the \
                         message is nacked and will be redelivered");
                }
                effect
            }
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
                } else if matches!(fate, Fate::Retried | Fate::Released)
                    && self.state.is_last_attempt()
                {
                    // Pub/Sub dead-letters this nack: say so beside what made it.
                    stats.failed(
                        &self.message_id,
                        self.state.attempt(),
                        FailureKind::RetriedOnLastAttempt,
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
                    let effect = act.state.end_hold();
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

    /// A hold ended (or never was).
    fn end_hold(&mut self) {
        if std::mem::take(&mut self.holding) {
            self.shared.stats.holding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(right) = self.right.take() {
            ctx.spawn(
                actix::fut::wrap_future(right).map(|settlement, act: &mut Self, ctx| {
                    // The sender always sends before it goes (its drop says where); an error means
                    // it could not even do that.
                    let settlement = settlement.unwrap_or(Settlement::Dropped(
                        crate::lease::settle_right::Place::Running,
                    ));
                    act.on_settlement(settlement, ctx);
                }),
            );
        }
        // A message read just before a stop began starts in the stop's stage.
        let stage = self.shared.leases.stage();
        self.on_stage(stage, ctx);
    }
}

impl Drop for LeaseActor {
    /// Leaves the registry, whether the actor stopped or was dropped.
    ///
    /// A lease actor ends without having settled its message only when its arbiter ends under
    /// it (the supervisor's thread stopped, or the actix system shut down without a stop), a bug
    /// panics in its own code, or a `Settler` it waited for could not reach it: then its
    /// handle's drop nacks the message (the client's rule), counted here as retried and logged,
    /// so that every message received is counted settled.
    fn drop(&mut self) {
        self.end_hold();
        if self.handle.is_some() {
            Stats::bump(&self.shared.stats.retried);
            tracing::warn!(subscription = %self.shared.subscription, message_id = %self.message_id,
                "a lease actor ended without settling its message (its arbiter ended, or a bug); \
                 the message is nacked and will be redelivered");
        }
        if let Some(key) = self.key.take() {
            self.shared.leases.leave(key);
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
    use crate::rules::lease_state::LeaseClock;
    use crate::rules::outcome::Action;
    use crate::source::{Confirmation, StreamSettings};
    use crate::testing::{MemoryPubSub, Published, TestMessage};
    use std::time::Duration;

    type Sent = Arc<parking_lot::Mutex<Vec<Action>>>;

    /// A started lease actor and what the test watches of it.
    struct Lease {
        right: Option<SettleRight>,
        addr: WeakAddr<LeaseActor>,
        /// The actions that reached the stand-in ack sink.
        sent: Sent,
        stats: Arc<Stats>,
        /// What became of the message at the in-memory Pub/Sub.
        published: Published,
        leases: Rc<LiveLeases>,
    }

    impl Lease {
        /// Settles through the message's right, as a worker does.
        async fn settle(&mut self, outcome: Outcome) {
            self.right
                .take()
                .expect("settled once")
                .settle(Settlement::of(outcome));
            turns().await;
        }
    }

    /// A lease actor over a message of an exactly-once subscription.
    async fn start(attempt: Option<u32>, limit: Option<u32>, max_lease: Duration) -> Lease {
        start_on(
            MemoryPubSub::new().exactly_once(),
            attempt,
            limit,
            max_lease,
        )
        .await
    }

    /// A lease actor over a message read from `pubsub` (an exactly-once one sends every action
    /// to the sink).
    async fn start_on(
        pubsub: MemoryPubSub,
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
    ) -> Lease {
        let published = pubsub.publish(TestMessage::new("x").id("m1"));
        let mut stream = pubsub.connector().open(&StreamSettings {
            subscription: "projects/p/subscriptions/orders".into(),
            max_outstanding_messages: 1,
            max_outstanding_bytes: 1 << 20,
            max_lease,
            max_lease_extension: Duration::from_secs(60),
        });
        let handle = stream
            .next()
            .await
            .expect("open")
            .expect("a message")
            .handle;
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
        let (right, addr, leases) = launch(state, handle, sink, stats.clone());
        Lease {
            right: Some(right),
            addr,
            sent,
            stats,
            published,
            leases,
        }
    }

    /// A lease actor over `handle`, whose confirmations go to `sink`.
    fn launch(
        state: LeaseState,
        handle: Box<dyn SettleHandle>,
        sink: Confirmations,
        stats: Arc<Stats>,
    ) -> (SettleRight, WeakAddr<LeaseActor>, Rc<LiveLeases>) {
        let shared = Rc::new(LeaseContext::new(
            sink,
            stats,
            TaskTracker::new(),
            "projects/p/subscriptions/orders".into(),
        ));
        let leases = shared.leases.clone();
        let (right, addr) = LeaseActor::new(
            state,
            handle,
            "m1".into(),
            tracing::Span::none(),
            None,
            None,
            shared,
        )
        .launch();
        (right, addr, leases)
    }

    /// Lets the actors on this thread run what is ready.
    async fn turns() {
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }

    #[actix_rt::test]
    async fn retry_after_holds_for_the_delay_then_nacks() {
        tokio::time::pause();
        let mut lease = start(Some(1), None, Duration::from_secs(600)).await;
        lease
            .settle(Outcome::retry_after_unchecked(Duration::from_secs(15)))
            .await;
        assert!(lease.sent.lock().is_empty());
        assert!(
            lease.published.action().is_none(),
            "the handle is held during the wait"
        );
        assert_eq!(lease.stats.snapshot().held, 1);

        tokio::time::advance(Duration::from_secs(14)).await;
        turns().await;
        assert!(lease.sent.lock().is_empty(), "not before 15 s");

        tokio::time::advance(Duration::from_secs(2)).await;
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        assert_eq!(lease.stats.snapshot().retried, 1);
    }

    #[actix_rt::test]
    async fn budget_running_out_counts_a_lost_lease_and_a_late_ack_still_goes_out() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(10)).await;
        turns().await; // the actor starts; its budget is timed
        tokio::time::advance(Duration::from_secs(9)).await;
        turns().await;
        assert_eq!(
            lease.stats.snapshot().lost_leases,
            0,
            "not before the budget ends"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        turns().await;
        assert_eq!(lease.stats.snapshot().lost_leases, 1);
        lease.settle(Outcome::ack()).await;
        assert_eq!(*lease.sent.lock(), vec![Action::Ack]);
    }

    #[actix_rt::test]
    async fn a_drain_ends_a_hold_at_once() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        lease
            .settle(Outcome::retry_after_unchecked(Duration::from_secs(300)))
            .await;
        assert!(lease.sent.lock().is_empty());
        assert_eq!(lease.leases.len(), 1);
        lease.leases.advance(StopStage::Draining);
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
    }

    #[actix_rt::test]
    async fn abandon_nacks_a_message_whose_handler_is_still_running() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        turns().await;
        lease.leases.advance(StopStage::Draining);
        turns().await;
        assert!(
            lease.sent.lock().is_empty(),
            "a drain alone waits for the handler"
        );
        lease.leases.advance(StopStage::Abandoned);
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        assert_eq!(lease.leases.len(), 0, "a settled lease leaves the registry");
        // The handler's late outcome goes nowhere.
        lease.settle(Outcome::ack()).await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        assert_eq!(lease.stats.snapshot().settled(), 1);
    }

    #[actix_rt::test]
    async fn a_best_effort_action_goes_to_the_client_and_not_to_the_sink() {
        tokio::time::pause();
        let at_least_once = MemoryPubSub::new();
        let mut lease = start_on(at_least_once, None, None, Duration::from_secs(600)).await;
        lease.settle(Outcome::ack()).await;
        assert_eq!(lease.published.action(), Some(Action::Ack));
        assert!(lease.sent.lock().is_empty(), "nothing to confirm");
        assert_eq!(lease.stats.snapshot().acked, 1);
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
        let (right, _addr, _leases) = launch(
            state,
            Box::new(Lazy(queued.clone())),
            sink,
            Arc::new(Stats::default()),
        );
        right.settle(Settlement::of(Outcome::ack()));
        turns().await;
        assert_eq!(*queued.lock(), Some(Action::Ack));
    }

    #[actix_rt::test]
    async fn a_right_dropped_unused_nacks_the_message_and_counts_it() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        let mut right = lease.right.take().unwrap();
        right.moved_to(crate::lease::settle_right::Place::Queued);
        drop(right);
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        let stats = lease.stats.snapshot();
        assert_eq!((stats.retried, stats.settled()), (1, 1));
        assert_eq!(lease.leases.len(), 0);
    }

    #[actix_rt::test]
    async fn a_deferred_message_is_settled_by_its_settler() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        // What `settle_later` does: a strong address for the settler.
        let settler = lease.addr.upgrade().expect("alive");
        lease.settle(Outcome::deferred()).await;
        assert!(lease.sent.lock().is_empty(), "the settler has it");
        settler.do_send(Settle(Outcome::ack()));
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Ack]);
    }

    /// The one way a lease actor ends with its message unsettled but for its arbiter ending: it
    /// was handed to a settler that cannot reach it. Its handle's drop nacks the message, and
    /// the lease actor's drop counts it.
    #[actix_rt::test]
    async fn a_lease_actor_that_ends_unsettled_is_counted_retried() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        lease.settle(Outcome::deferred()).await;
        turns().await;
        assert!(lease.addr.upgrade().is_none(), "nothing kept it alive");
        assert_eq!(
            lease.published.action(),
            Some(Action::Nack),
            "its handle's drop"
        );
        assert_eq!(lease.stats.snapshot().retried, 1);
        assert_eq!(lease.leases.len(), 0);
    }

    #[actix_rt::test]
    async fn drop_on_the_last_attempt_nacks() {
        tokio::time::pause();
        let mut lease = start(Some(5), Some(5), Duration::from_secs(600)).await;
        lease.settle(Outcome::drop()).await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        assert_eq!(lease.stats.snapshot().dead_lettered, 1);
    }

    #[actix_rt::test]
    async fn a_retry_on_the_last_attempt_is_recorded_as_dead_lettered_by_pub_sub() {
        tokio::time::pause();
        let mut lease = start(Some(5), Some(5), Duration::from_secs(600)).await;
        lease.settle(Outcome::retry()).await;
        assert_eq!(*lease.sent.lock(), vec![Action::Nack]);
        let recorded: Vec<_> = lease
            .stats
            .recent_failures()
            .into_iter()
            .map(|f| (f.attempt, f.kind))
            .collect();
        assert_eq!(recorded, [(Some(5), FailureKind::RetriedOnLastAttempt)]);

        let mut earlier = start(Some(4), Some(5), Duration::from_secs(600)).await;
        earlier.settle(Outcome::retry()).await;
        assert!(earlier.stats.recent_failures().is_empty(), "not the last");
    }

    #[actix_rt::test]
    async fn only_the_first_outcome_counts() {
        tokio::time::pause();
        let mut lease = start(None, None, Duration::from_secs(600)).await;
        let late = lease.addr.upgrade().expect("alive");
        lease.settle(Outcome::ack()).await;
        late.do_send(Settle(Outcome::retry()));
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Ack]);
        assert_eq!(lease.stats.snapshot().retried, 0);
    }
}
