//! The lease actor: one per outstanding message at every instant, reused message after message.
//!
//! It holds the message's [`SettleHandle`](crate::source::SettleHandle) (so the client keeps
//! extending the lease) until the outcome is known, runs the `retry_after` wait and notices when
//! the lease budget runs out. The rules are in
//! [`LeaseState`](crate::rules::lease_state::LeaseState); this file turns messages and timers
//! into calls on it.
//!
//! **Reuse.** Starting an actix actor per message (context, mailbox, address, task) would be about
//! half of a message's allocations. An actor that settled its message goes back to the idle list,
//! and the supervisor hands it the next one through its [`Slot`], without an envelope and without
//! a wake-up (the message's right wakes the actor when it comes back); a new actor starts only
//! when none is idle, so there are never more than the peak of outstanding messages.
//! All of one message is in one [`Held`], given up whole at settlement: state and clock, handle,
//! id, span, permit, registry key, holding flag, the right's receiver, tracker token. What can
//! arrive late for a settled message (a `Settler`'s outcome, a budget or stop event, a hold's
//! timer) carries its generation, and the actor ignores what is not for the message it holds.
//!
//! Each message's one [`SettleRight`] travels to the worker that runs its handler and comes back
//! as the outcome (dropped unused anywhere, as a nack naming where). The registry ([`Leases`])
//! holds weak addresses; actors end once the [`LeaseContext`] is closed and they hold nothing.

use crate::lease::ack_sink::Confirmations;
use crate::lease::handover::{IdleSlots, Slot};
use crate::lease::held::{Held, NewLease};
use crate::lease::registry::{BudgetTimers, LeaseLink, Leases, StopStage};
use crate::lease::settle_right::{Place, SettleRight, Settlement};
use crate::lease::settled;
use crate::rules::lease_state::LeaseEffect;
use crate::rules::outcome::{Fate, Outcome};
use crate::status::stats::Stats;
use actix::WeakAddr;
use actix::prelude::*;
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// The registry of one subscription's live leases.
pub(crate) type LiveLeases = Leases<LeaseRef>;

/// One message's lease actor, as the registry and `settle_later` reach it: the actor's weak
/// address and the generation of the message, so that what is sent for a message already
/// settled does not reach the one the actor holds now.
#[derive(Clone, Debug)]
pub(crate) struct LeaseRef {
    addr: WeakAddr<LeaseActor>,
    generation: u64,
}

impl LeaseRef {
    /// Where a `Settler` sends its outcome (a strong address: the actor may not end before);
    /// `None` once the actor has ended.
    pub(crate) fn settle_to(&self) -> Option<SettleTo> {
        self.addr.upgrade().map(|addr| SettleTo {
            addr,
            generation: self.generation,
        })
    }
}

impl LeaseLink for LeaseRef {
    fn budget_spent(&self) {
        self.tell(Event::BudgetSpent);
    }

    fn stage_changed(&self, stage: StopStage) {
        self.tell(Event::StageChanged(stage));
    }
}

impl LeaseRef {
    fn tell(&self, event: Event) {
        if let Some(lease) = self.addr.upgrade() {
            lease.do_send(ForMessage(self.generation, event));
        }
    }
}

/// Where a [`Settler`](crate::Settler) sends the outcome of the message it was handed.
#[derive(Debug)]
pub(crate) struct SettleTo {
    addr: Addr<LeaseActor>,
    generation: u64,
}

impl SettleTo {
    /// Sends `outcome` for the message; the lease actor ignores it if that message was settled
    /// already (a stop past its drain timeout nacked it).
    pub(crate) fn send(self, outcome: Outcome) {
        self.addr.do_send(Settle {
            outcome,
            generation: self.generation,
        });
    }
}

/// What every lease actor of one subscription shares (behind one `Rc`: handing a message over
/// copies no address), and the idle lease actors the next messages go to.
pub(crate) struct LeaseContext {
    /// Where exactly-once confirmations are awaited.
    pub(crate) sink: Confirmations,
    /// The subscription's counters.
    pub(crate) stats: Arc<Stats>,
    /// Every live lease of the subscription, for a stop.
    pub(crate) leases: Rc<LiveLeases>,
    /// Counts the subscription's actors and its unsettled messages (each [`Held`] keeps a
    /// token): a stop returns once none is left.
    pub(crate) alive: TaskTracker,
    /// The subscription's name, for log lines.
    pub(crate) subscription: Arc<str>,
    /// Lease actors that hold no message, each by its slot; closed once no message comes any
    /// more, and lease actors end once they hold none.
    idle: IdleSlots<Held, WeakAddr<LeaseActor>>,
    /// Lease actors started and not yet ended.
    actors: Cell<usize>,
    /// The task that polls the one timer of the lease budgets: it runs while a lease actor or
    /// the supervisor holds this context.
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
            idle: IdleSlots::default(),
            actors: Cell::new(0),
        }
    }

    /// Hands a message just received to an idle lease actor, or to a new one when none is idle,
    /// and enters it in the registry of live leases (which times its budget). Returns the
    /// message's one settlement right, and how `settle_later` reaches its lease actor.
    pub(crate) fn hand_over(self: &Rc<Self>, lease: NewLease) -> (SettleRight, LeaseRef) {
        let slot = self.idle.pop().unwrap_or_else(|| self.start_actor());
        let generation = slot.next_generation();
        let link = LeaseRef {
            addr: slot.addr(),
            generation,
        };
        let clock = lease.state.clock();
        let key = self
            .leases
            .enter(link.clone(), clock.received_at(), clock.deadline());
        let (held, right) = Held::new(lease, generation, key, self.alive.token());
        // In a stop the actor acts on the message at once (`take` applies the stop's stage);
        // otherwise it has nothing to do before the message's right comes back, so it is left
        // asleep, to be woken by the right.
        let running = self.leases.stage() == StopStage::Running;
        slot.put(held, |held, waker| running && held.listen(waker));
        (right, link)
    }

    /// No message comes any more: idle lease actors end now, the others once they have settled
    /// what they hold.
    pub(crate) fn close(&self) {
        self.idle.close();
    }

    /// Starts a lease actor, returning its slot.
    fn start_actor(self: &Rc<Self>) -> Rc<LeaseSlot> {
        let slot = Slot::new();
        self.actors.set(self.actors.get() + 1);
        let addr = LeaseActor {
            shared: self.clone(),
            slot: slot.clone(),
            held: None,
        }
        .start()
        .downgrade();
        slot.set_addr(addr);
        slot
    }
}

/// One lease actor's slot for its next message.
type LeaseSlot = Slot<Held, WeakAddr<LeaseActor>>;

/// What the registry tells one generation's message.
#[derive(Debug)]
enum Event {
    /// Its lease budget (`max_lease` from receipt) ran out.
    BudgetSpent,
    /// The subscription's stop moved on.
    StageChanged(StopStage),
}

/// An [`Event`] for the message of this generation.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct ForMessage(u64, Event);

/// Command: settle this generation's message with this outcome; sent by a
/// [`Settler`](crate::Settler). The first outcome wins.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Settle {
    outcome: Outcome,
    generation: u64,
}

/// Owns one message's lease at a time, until it is settled, then the next one's.
pub(crate) struct LeaseActor {
    shared: Rc<LeaseContext>,
    /// Where its next message is handed over.
    slot: Rc<LeaseSlot>,
    /// The message it holds now.
    held: Option<Held>,
}

impl LeaseActor {
    /// Gives up the message held (settled, or not when the actor ends), see [`Held::give_up`].
    fn give_up(&mut self) {
        if let Some(held) = self.held.take() {
            let shared = &self.shared;
            held.give_up(&shared.stats, &shared.leases, &shared.subscription);
        }
    }

    /// The message of `generation`, if the actor holds it now. A message handed over and not
    /// yet taken is taken first: an idle actor is not woken at the hand-over, so an actor
    /// message (a budget or stop event, a settler's outcome) can be the first thing to wake it.
    fn holding(&mut self, generation: u64, ctx: &mut Context<Self>) -> Option<&mut Held> {
        if self.held.is_none()
            && let Some(next) = self.slot.take()
        {
            self.take(next, ctx);
        }
        self.held.as_mut().filter(|h| h.generation == generation)
    }

    /// Takes the message handed over.
    fn take(&mut self, held: Held, ctx: &mut Context<Self>) {
        self.held = Some(held);
        // A message read just before a stop began starts in the stop's stage.
        let stage = self.shared.leases.stage();
        self.on_stage(stage, ctx);
    }

    fn on_stage(&mut self, stage: StopStage, ctx: &mut Context<Self>) {
        let Some(held) = self.held.as_mut() else {
            return;
        };
        let effect = match stage {
            StopStage::Running => return,
            StopStage::Draining => held.state.end_hold(),
            StopStage::Abandoned => held.state.on_abandon(),
        };
        self.apply(effect, ctx);
    }

    /// The message's settlement right came back.
    fn on_settlement(&mut self, settlement: Settlement, ctx: &mut Context<Self>) {
        let Some(held) = self.held.as_mut() else {
            return;
        };
        let effect = match settlement {
            Settlement::Outcome(outcome) => held.state.on_outcome(outcome, Instant::now()),
            Settlement::Released => held.state.settle_unrun(Fate::Released),
            // A settler has it now (and holds this actor's address until it is used).
            Settlement::Deferred => return,
            Settlement::Dropped(place) => {
                let effect = held.state.settle_unrun(Fate::Retried);
                if matches!(effect, LeaseEffect::Send(..)) {
                    tracing::warn!(subscription = %self.shared.subscription,
                        message_id = %held.message_id, %place,
                        "the message's settlement right was dropped without an outcome; the \
                         message is nacked and will be redelivered");
                }
                effect
            }
        };
        self.apply(effect, ctx);
    }

    /// Carries out an effect for the message held now.
    fn apply(&mut self, effect: LeaseEffect, ctx: &mut Context<Self>) {
        let Some(held) = self.held.as_mut() else {
            return;
        };
        let _enter = held.span.enter();
        let stats = &self.shared.stats;
        match effect {
            LeaseEffect::Send(action, fate) => {
                if std::mem::take(&mut held.holding) {
                    stats.holding.fetch_sub(1, Ordering::Relaxed);
                }
                let (state, id) = (&held.state, &held.message_id);
                settled::count(
                    stats,
                    fate,
                    action,
                    state,
                    held.publish_time,
                    id,
                    &held.span,
                );
                if let Some(handle) = held.handle.take() {
                    let sink = &self.shared.sink;
                    settled::hand_to_client(handle, action, sink, &held.message_id, &held.span);
                }
                drop(_enter);
                self.settled(ctx);
            }
            LeaseEffect::WaitHold(delay) => {
                Stats::bump(&stats.held);
                held.holding = true;
                stats.holding.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?delay, "holding the lease before a retry");
                let generation = held.generation;
                ctx.run_later(delay, move |act, ctx| {
                    // Ended early by a stop, the message may be gone, and another held.
                    if let Some(held) = act.holding(generation, ctx) {
                        let effect = held.state.end_hold();
                        act.apply(effect, ctx);
                    }
                });
            }
            LeaseEffect::LostLease => {
                let (subscription, attempt) = (&self.shared.subscription, held.state.attempt());
                settled::lost_lease(stats, subscription, &held.message_id, attempt);
            }
            LeaseEffect::Duplicate => {
                tracing::warn!(subscription = %self.shared.subscription, message_id = %held.message_id,
                    "a second outcome for a message already settled was ignored");
            }
            LeaseEffect::None => {}
        }
    }

    /// The message held is settled: everything of it goes (see [`Held`]), and the actor waits
    /// for the next one, or ends if no message comes any more.
    fn settled(&mut self, ctx: &mut Context<Self>) {
        self.give_up();
        if self.shared.idle.is_closed() {
            ctx.stop();
        } else {
            self.shared.idle.push(self.slot.clone());
        }
    }
}

/// A lease actor's one long-lived task: takes each message handed over, and awaits its
/// settlement right; ends when the lease context is closed and no message is held.
struct Lifecycle;

impl ActorFuture<LeaseActor> for Lifecycle {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut LeaseActor,
        ctx: &mut Context<LeaseActor>,
        task: &mut std::task::Context<'_>,
    ) -> Poll<()> {
        // Kept fresh whatever the actor does: a message can be settled by an actor message or
        // a timer after this was polled, and the next one handed over before it is polled again.
        act.slot.remember(task.waker());
        loop {
            if let Some(held) = act.held.as_mut() {
                // Held, and its right still out: wait for it (or, once it came back, for a
                // settler, a hold or the budget, which come as actor messages).
                let Some(right) = held.right.as_mut() else {
                    return Poll::Pending;
                };
                let Poll::Ready(settlement) = Pin::new(right).poll(task) else {
                    return Poll::Pending;
                };
                held.right = None;
                // The sender always sends before it goes (its drop says where); an error means
                // it could not even do that.
                let settlement = settlement.unwrap_or(Settlement::Dropped(Place::Running));
                act.on_settlement(settlement, ctx);
                continue;
            }
            if let Some(next) = act.slot.take() {
                act.take(next, ctx);
                continue;
            }
            if act.shared.idle.is_closed() {
                ctx.stop();
                return Poll::Ready(());
            }
            return Poll::Pending;
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.spawn(Lifecycle);
    }
}

impl Drop for LeaseActor {
    /// A lease actor ends holding a message only when its arbiter ends under it (the
    /// supervisor's thread stopped, or the actix system shut down without a stop) or a bug
    /// panics in its own code: the message's [`Held`] then nacks it, counted and logged.
    fn drop(&mut self) {
        self.give_up();
        if let Some(untaken) = self.slot.take() {
            self.held = Some(untaken);
            self.give_up();
        }
        self.slot.end();
        self.shared.actors.set(self.shared.actors.get() - 1);
    }
}

impl Handler<ForMessage> for LeaseActor {
    type Result = ();

    fn handle(&mut self, ForMessage(generation, event): ForMessage, ctx: &mut Self::Context) {
        let Some(held) = self.holding(generation, ctx) else {
            return;
        };
        match event {
            Event::BudgetSpent => {
                let effect = held.state.on_budget_elapsed();
                self.apply(effect, ctx);
            }
            Event::StageChanged(stage) => self.on_stage(stage, ctx),
        }
    }
}

impl Handler<Settle> for LeaseActor {
    type Result = ();

    fn handle(&mut self, settle: Settle, ctx: &mut Self::Context) {
        // Another generation: that message was settled already (a stop nacked it), and its
        // settler's outcome goes nowhere, as it would to an actor that had ended.
        if let Some(held) = self.holding(settle.generation, ctx) {
            let effect = held.state.on_outcome(settle.outcome, Instant::now());
            self.apply(effect, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::ack_sink::Confirm;
    use crate::rules::lease_state::LeaseClock;
    use crate::rules::lease_state::LeaseState;
    use crate::rules::outcome::Action;
    use crate::source::SettleHandle;
    use crate::source::{Confirmation, StreamSettings};
    use crate::status::stats::FailureKind;
    use crate::testing::{MemoryPubSub, Published, TestMessage};
    use std::time::Duration;

    type Sent = Arc<parking_lot::Mutex<Vec<Action>>>;

    /// A message handed to a lease actor, and what the test watches of it.
    struct Lease {
        right: Option<SettleRight>,
        lease: LeaseRef,
        /// The actions that reached the stand-in ack sink (every lease of the bench's).
        sent: Sent,
        stats: Arc<Stats>,
        /// What became of the message at the in-memory Pub/Sub.
        published: Published,
        leases: Rc<LiveLeases>,
        context: Rc<LeaseContext>,
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

    /// One subscription's lease actors over an in-memory Pub/Sub, and a stand-in ack sink.
    struct Bench {
        pubsub: MemoryPubSub,
        stream: Box<dyn crate::source::MessageSource>,
        sent: Sent,
        stats: Arc<Stats>,
        context: Rc<LeaseContext>,
        max_lease: Duration,
        published: usize,
    }

    impl Bench {
        /// Lease actors over an exactly-once subscription (every action's confirmation goes to
        /// the sink).
        fn new(max_lease: Duration) -> Self {
            Self::on(MemoryPubSub::new().exactly_once(), max_lease)
        }

        /// Lease actors over messages read from `pubsub`.
        fn on(pubsub: MemoryPubSub, max_lease: Duration) -> Self {
            let stream = pubsub.connector().open(&StreamSettings {
                subscription: "projects/p/subscriptions/orders".into(),
                max_outstanding_messages: 100,
                max_outstanding_bytes: 1 << 20,
                subscription_max_outstanding_messages: 100,
                subscription_max_outstanding_bytes: 1 << 20,
                max_lease,
                max_lease_extension: Duration::from_secs(60),
            });
            let sent = Sent::default();
            let (sink, mut inbox) = tokio::sync::mpsc::unbounded_channel::<Confirm>();
            let collected = sent.clone();
            actix_rt::spawn(async move {
                while let Some(confirm) = inbox.recv().await {
                    collected.lock().push(confirm.action);
                }
            });
            let stats = Arc::new(Stats::default());
            let context = Rc::new(LeaseContext::new(
                sink,
                stats.clone(),
                TaskTracker::new(),
                "projects/p/subscriptions/orders".into(),
            ));
            Self {
                pubsub,
                stream,
                sent,
                stats,
                context,
                max_lease,
                published: 0,
            }
        }

        /// Publishes a message, reads it, and hands it to a lease actor.
        async fn hand(&mut self, attempt: Option<u32>, limit: Option<u32>) -> Lease {
            self.published += 1;
            let id = format!("m{}", self.published);
            let published = self.pubsub.publish(TestMessage::new("x").id(&id));
            let handle = self
                .stream
                .next()
                .await
                .expect("open")
                .expect("a message")
                .handle;
            let clock = LeaseClock::new(Instant::now(), self.max_lease);
            let (right, lease) = self.context.hand_over(NewLease {
                state: LeaseState::new(clock, attempt, limit),
                handle,
                message_id: id.into(),
                span: tracing::Span::none(),
                permit: None,
                publish_time: None,
            });
            Lease {
                right: Some(right),
                lease,
                sent: self.sent.clone(),
                stats: self.stats.clone(),
                published,
                leases: self.context.leases.clone(),
                context: self.context.clone(),
            }
        }
    }

    /// A lease actor over a message of an exactly-once subscription.
    async fn start(attempt: Option<u32>, limit: Option<u32>, max_lease: Duration) -> Lease {
        Bench::new(max_lease).hand(attempt, limit).await
    }

    /// A lease actor over a message read from `pubsub`.
    async fn start_on(
        pubsub: MemoryPubSub,
        attempt: Option<u32>,
        limit: Option<u32>,
        max_lease: Duration,
    ) -> Lease {
        Bench::on(pubsub, max_lease).hand(attempt, limit).await
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
        let context = Rc::new(LeaseContext::new(
            sink,
            Arc::new(Stats::default()),
            TaskTracker::new(),
            "projects/p/subscriptions/orders".into(),
        ));
        let (right, _lease) = context.hand_over(NewLease {
            state,
            handle: Box::new(Lazy(queued.clone())),
            message_id: "m1".into(),
            span: tracing::Span::none(),
            permit: None,
            publish_time: None,
        });
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
        let settler = lease.lease.settle_to().expect("alive");
        lease.settle(Outcome::deferred()).await;
        assert!(lease.sent.lock().is_empty(), "the settler has it");
        settler.send(Outcome::ack());
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Ack]);
    }

    /// A lease actor ends holding its message only when its arbiter ends under it (or a bug):
    /// its handle's drop nacks the message, and the held message's drop counts it.
    #[test]
    fn a_lease_actor_ended_with_its_arbiter_leaves_its_message_nacked_and_counted() {
        let system = actix::System::new();
        let arbiter = actix::Arbiter::new();
        let (told, watched) = std::sync::mpsc::channel();
        arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                let mut lease = start(None, None, Duration::from_secs(600)).await;
                // Deferred to a settler that never comes: the actor holds it.
                lease.settle(Outcome::deferred()).await;
                assert_eq!(lease.published.action(), None, "held");
                told.send((lease.stats, lease.published)).unwrap();
                std::future::pending::<()>().await;
            });
        });
        let (stats, published) = watched.recv().unwrap();
        arbiter.stop();
        arbiter.join().unwrap();
        assert_eq!(published.action(), Some(Action::Nack), "its handle's drop");
        assert_eq!(stats.snapshot().retried, 1);
        drop(system);
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
        let late = lease.lease.settle_to().expect("alive");
        lease.settle(Outcome::ack()).await;
        late.send(Outcome::retry());
        turns().await;
        assert_eq!(*lease.sent.lock(), vec![Action::Ack]);
        assert_eq!(lease.stats.snapshot().retried, 0);
    }

    // Reuse: a lease actor that settled its message takes the next one.

    #[actix_rt::test]
    async fn a_message_handed_to_an_actor_that_just_settled_the_previous_one() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        let mut first = bench.hand(None, None).await;
        turns().await;
        let late = first.lease.settle_to().expect("alive");
        first.settle(Outcome::ack()).await;
        assert_eq!(first.context.actors.get(), 1);

        let mut second = bench.hand(Some(3), Some(5)).await;
        turns().await;
        assert_eq!(second.context.actors.get(), 1, "the same actor took it");
        assert_eq!(first.leases.len(), 1, "only the second is live");
        // What was sent for the first message reaches the actor, and not the second message.
        late.send(Outcome::retry());
        first.lease.budget_spent();
        first.lease.stage_changed(StopStage::Abandoned);
        turns().await;
        assert_eq!(*bench.sent.lock(), vec![Action::Ack], "the second is held");
        assert_eq!(bench.stats.snapshot().lost_leases, 0);
        assert_eq!(second.published.action(), None);

        second.settle(Outcome::drop()).await;
        assert_eq!(*bench.sent.lock(), vec![Action::Ack, Action::Ack]);
        let stats = bench.stats.snapshot();
        assert_eq!((stats.acked, stats.dropped, stats.retried), (1, 1, 0));
        assert_eq!(second.leases.len(), 0);
        assert_eq!(second.context.actors.get(), 1);
    }

    #[actix_rt::test]
    async fn there_are_never_more_actors_than_messages_outstanding_at_once() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        let mut leases = Vec::new();
        for _ in 0..3 {
            leases.push(bench.hand(None, None).await);
        }
        turns().await;
        assert_eq!(bench.context.actors.get(), 3);
        for lease in &mut leases {
            lease.settle(Outcome::ack()).await;
        }
        for _ in 0..10 {
            let mut lease = bench.hand(None, None).await;
            turns().await;
            lease.settle(Outcome::ack()).await;
        }
        assert_eq!(bench.context.actors.get(), 3);
        assert_eq!(bench.stats.snapshot().acked, 13);
        assert_eq!(bench.sent.lock().len(), 13);
    }

    #[actix_rt::test]
    async fn a_reused_actor_holds_each_message_for_its_own_delay() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        let mut first = bench.hand(None, None).await;
        first
            .settle(Outcome::retry_after_unchecked(Duration::from_secs(15)))
            .await;
        tokio::time::advance(Duration::from_secs(16)).await;
        turns().await;
        assert_eq!(*bench.sent.lock(), vec![Action::Nack]);

        let mut second = bench.hand(None, None).await;
        assert_eq!(bench.context.actors.get(), 1);
        second
            .settle(Outcome::retry_after_unchecked(Duration::from_secs(30)))
            .await;
        let holding = || bench.stats.holding.load(Ordering::Relaxed);
        assert_eq!((bench.stats.snapshot().held, holding()), (2, 1));
        tokio::time::advance(Duration::from_secs(29)).await;
        turns().await;
        assert_eq!(bench.sent.lock().len(), 1, "not before its own 30 s");
        tokio::time::advance(Duration::from_secs(2)).await;
        turns().await;
        assert_eq!(*bench.sent.lock(), vec![Action::Nack, Action::Nack]);
        assert_eq!((bench.stats.snapshot().retried, holding()), (2, 0));
    }

    #[actix_rt::test]
    async fn a_hold_a_drain_ended_does_not_reach_the_next_message() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        let mut first = bench.hand(None, None).await;
        first
            .settle(Outcome::retry_after_unchecked(Duration::from_secs(300)))
            .await;
        first.leases.advance(StopStage::Draining);
        turns().await;
        assert_eq!(*bench.sent.lock(), vec![Action::Nack], "the drain ended it");

        // Read just before the stop: its handler runs on the same actor.
        let mut second = bench.hand(None, None).await;
        turns().await;
        assert_eq!(bench.context.actors.get(), 1);
        tokio::time::advance(Duration::from_secs(301)).await;
        turns().await;
        assert_eq!(
            bench.sent.lock().len(),
            1,
            "the first hold's timer is ignored"
        );
        second.settle(Outcome::ack()).await;
        assert_eq!(*bench.sent.lock(), vec![Action::Nack, Action::Ack]);
        assert_eq!(bench.stats.holding.load(Ordering::Relaxed), 0);
    }

    #[actix_rt::test]
    async fn closing_ends_idle_actors_at_once_and_busy_ones_once_settled() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        let mut idle = bench.hand(None, None).await;
        let mut busy = bench.hand(None, None).await;
        turns().await;
        idle.settle(Outcome::ack()).await;
        assert_eq!(bench.context.actors.get(), 2);

        bench.context.close();
        turns().await;
        assert_eq!(bench.context.actors.get(), 1, "the idle one ended");
        assert_eq!(
            busy.published.action(),
            None,
            "the busy one holds its message"
        );
        busy.settle(Outcome::retry()).await;
        assert_eq!(bench.context.actors.get(), 0);
        assert_eq!(*bench.sent.lock(), vec![Action::Ack, Action::Nack]);
        assert_eq!(bench.stats.snapshot().settled(), 2);
    }

    #[actix_rt::test]
    async fn each_message_on_a_reused_actor_has_its_own_lease_budget() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(10));
        let mut first = bench.hand(None, None).await;
        turns().await;
        tokio::time::advance(Duration::from_secs(6)).await;
        first.settle(Outcome::ack()).await;

        // Received at 6 s: its budget runs to 16 s, not the first one's 10 s.
        let mut second = bench.hand(None, None).await;
        turns().await;
        assert_eq!(bench.context.actors.get(), 1);
        tokio::time::advance(Duration::from_secs(5)).await;
        turns().await;
        assert_eq!(bench.stats.snapshot().lost_leases, 0, "not at 11 s");
        tokio::time::advance(Duration::from_secs(6)).await;
        turns().await;
        assert_eq!(bench.stats.snapshot().lost_leases, 1, "at 17 s");
        second.settle(Outcome::ack()).await;
        assert_eq!(*bench.sent.lock(), vec![Action::Ack, Action::Ack]);
    }

    #[actix_rt::test]
    async fn a_settlers_outcome_that_comes_before_the_actor_took_its_message_is_kept() {
        tokio::time::pause();
        let mut bench = Bench::new(Duration::from_secs(600));
        for _ in 0..2 {
            // New, then reused: no turn of the event loop between the hand-over and the
            // settler's outcome, so the outcome is in the mailbox before the slot is read.
            let mut lease = bench.hand(None, None).await;
            lease.lease.settle_to().expect("alive").send(Outcome::ack());
            lease.settle(Outcome::deferred()).await;
        }
        assert_eq!(bench.context.actors.get(), 1);
        assert_eq!(*bench.sent.lock(), vec![Action::Ack, Action::Ack]);
    }
}
