//! The supervisor: one per subscription, the public entry point of the actor system. It owns
//! the subscription's lifecycle and its streams: it starts the worker pool and the ack sink,
//! opens the streams and reopens one that fails (capped exponential backoff), hands each message
//! to a lease actor (an idle one, reused, or a new one when none is idle) and dispatches it to
//! the pool, watches the pool and the sink, answers its heartbeat, and begins the drain.
//!
//! What it does not hold: reading the subscription at start (`start.rs`), building the pool,
//! the sink and what the lease actors share (`children.rs`), the message span (`span.rs`), the
//! health probe, connectivity and heartbeat (`health.rs`), the lease budget timers
//! (`lease/registry.rs`), the drain's sequence (`drain.rs`).
//!
//! What a stream restart keeps: every message already received keeps its lease actor and its
//! handle, so it is settled as usual (the official client keeps extending those leases while the
//! stream is down). What it loses: nothing that was pulled; messages Pub/Sub had sent but the
//! stream had not yet yielded are redelivered by Pub/Sub.
//!
//! When the pool or the sink dies (a bug in Leasehold), the supervisor hears it through their
//! lifelines, logs an error, counts it, marks the subscription [`State::Failed`] and drains at
//! once: everything outstanding is nacked, nothing is stranded.

use crate::api::delivery::{Delivery, DeliveryContext};
use crate::error::{Chain, SourceError};
use crate::lease::ack_sink::Shutdown as SinkShutdown;
use crate::lease::held::NewLease;
use crate::lease::registry::StopStage;
use crate::pool::messages::{Dispatch, ReleaseUnstarted, Shutdown as PoolShutdown, StopWorkers};
use crate::rt::lifeline::ActorDied;
use crate::rt::lifeline::Role;
use crate::rt::turns::{TurnHandler, TurnLimit, each_turn};
use crate::rules::dedupe;
use crate::rules::flow::FlowPermit;
use crate::rules::lease_state::{LeaseClock, LeaseState};
use crate::rules::pull_turn::PullTurn;
use crate::source::{Connector, Received, SubscriptionInfo};
use crate::status::shared::{Failure, Shared, State, SupervisionEvent};
use crate::status::stats::Stats;
use crate::supervisor::children::{Children, Handlers};
use crate::supervisor::drain::{Drain, drain};
use crate::supervisor::health::{self, Heartbeat};
use crate::supervisor::pull::Pulled;
use crate::supervisor::span::Spans;
use crate::supervisor::streams::Streams;
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// One turn of a pull loop: the messages the stream has ready (a response's), as many as the
/// pool can start (`rules/pull_turn.rs`) and never more than this, so that the pool gets them
/// in one turn and its workers in one hand-out. Each message of a turn is in the pool's channel
/// until the pool's turn, and larger turns leave larger channel blocks and queues behind: with
/// 512, the memory benchmark's live heap per outstanding message grew by about 3 % against
/// actix's 16, with 128 by about 2 %, and 128 still takes a response of the emulator's 100 whole.
const PULL_TURN: TurnLimit = TurnLimit::items(128);

/// Where the supervisor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// Built, not started.
    Starting,
    /// Pulling: each stream is open, or reopening after a backoff.
    Running,
    /// A stop was requested (or an actor died): no more pulling; in-flight messages finish.
    Draining,
    /// Drained and stopped.
    Stopped,
}

/// Command: stop and drain; resolves when drained. Idempotent. The same as
/// [`Subscription::stop`](crate::Subscription::stop), for code that holds the actor's address (which, unlike `stop()`,
/// does not wait for every actor to be dropped).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;

/// How the connection and the store are probed.
pub(crate) struct Probing {
    pub(crate) interval: Duration,
    /// A probe is out now.
    pub(crate) out: bool,
    /// A transactional registration's question to its store.
    pub(crate) store: Option<crate::api::registration::StoreProbe>,
}

/// Supervises one subscription: its streams, its worker pool, its ack sink.
///
/// Build it with [`new`](Self::new) (which reads the subscription), take a
/// [`subscription`](Self::subscription) handle, and start it in your actix system
/// (`actor.start()`); [`start`](crate::start) does the three. Its address takes [`Stop`];
/// [`Subscription::watch`](crate::Subscription::watch) reports its restarts and failures.
///
/// A worker that dies (a bug in Leasehold, or its arbiter stopped under it) is noticed, logged
/// at error, counted in `worker_restarts` and `actor_failures`, and started again; the messages
/// its handlers were running are nacked and come back. If the worker pool, the ack sink or the
/// supervisor itself dies, the subscription fails loudly instead: an error is logged,
/// `actor_failures` counts it, everything outstanding is nacked, pulling stops, and
/// [`Subscription::state`](crate::Subscription::state) reports [`State::Failed`] with
/// [`Failure::ActorDied`] and the role that died; [`stop()`](crate::Subscription::stop) still
/// ends it cleanly. A supervisor whose thread is blocked is not dead, but extends and settles
/// nothing: see
/// [`Registration::liveness_timeout`](crate::Registration::liveness_timeout).
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Delivery, Registration, source::Connector, supervisor::SubscriptionActor};
/// # use actix::Actor;
/// # use std::rc::Rc;
/// # async fn run(connector: Rc<dyn Connector>) -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///     d.ack()
/// });
/// let actor = SubscriptionActor::new(registration, connector).await?;
/// let subscription = actor.subscription();
/// let address = actor.start();
/// // ...
/// address.send(leasehold::supervisor::Stop).await?;
/// # let _ = subscription;
/// # Ok(()) }
/// ```
#[must_use = "the subscription is not consumed until the actor is started"]
pub struct SubscriptionActor {
    pub(crate) shared: Arc<Shared>,
    pub(crate) info: Option<SubscriptionInfo>,
    pub(crate) limit: Option<u32>,
    pub(crate) connector: Rc<dyn Connector>,
    /// Taken when the actor starts.
    pub(crate) handlers: Option<Handlers>,
    pub(crate) children: Option<Children>,
    /// What every delivery shares: the subscription's name, the store, the counters.
    pub(crate) deliveries: Arc<DeliveryContext>,
    pub(crate) lifecycle: Lifecycle,
    /// Shared with the workers: set the moment a stop begins, so that no handler starts after.
    pub(crate) draining: Arc<AtomicBool>,
    /// The streams pulling in parallel, and their stop signals.
    pub(crate) streams: Streams,
    pub(crate) drain_timeout: Duration,
    pub(crate) spans: Spans,
    pub(crate) probing: Probing,
    /// `Stop` callers waiting for the drain to end.
    pub(crate) stopped: Vec<tokio::sync::oneshot::Sender<()>>,
    /// How much this turn of the pull loops may read, and has.
    pub(crate) turn: PullTurn,
    pub(crate) _alive: TaskTrackerToken,
}

impl std::fmt::Debug for SubscriptionActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionActor")
            .field("subscription", &self.streams.settings().subscription)
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

impl SubscriptionActor {
    /// Starts the sink and the pool, with lifelines back to this actor.
    fn start_children(&mut self, ctx: &mut Context<Self>) {
        if let Some(handlers) = self.handlers.take() {
            self.children = Some(Children::start(
                handlers,
                &self.shared,
                &self.deliveries.subscription,
                &self.draining,
                ctx.address().downgrade(),
            ));
        }
    }

    fn open_stream(&mut self, stream: usize, ctx: &mut Context<Self>) {
        if self.lifecycle == Lifecycle::Running {
            ctx.spawn(each_turn(self.streams.open(stream), PULL_TURN));
        }
    }

    /// A message arrived: it goes to a lease actor (an idle one, or a new one), and its
    /// settlement right goes to the pool with it.
    fn on_received(&mut self, received: Received, permit: FlowPermit, read_at: Instant) {
        let Some(children) = &self.children else {
            return;
        };
        let stats = &self.shared.stats;
        Stats::bump(&stats.received);
        stats.peak_outstanding.fetch_max(
            self.shared.flow.in_flight().messages as u64,
            Ordering::Relaxed,
        );
        let Received {
            message_id,
            data,
            attributes,
            ordering_key,
            publish_time,
            delivery_attempt,
            handle,
        } = received;
        // One copy of the id, shared by the lease actor, the delivery and the pool.
        let message_id: Arc<str> = Arc::from(message_id);
        let span = self
            .spans
            .message(&message_id, delivery_attempt, &ordering_key, &attributes);
        let clock = LeaseClock::new(read_at, self.streams.settings().max_lease);
        let (right, lease) = children.lease_context.hand_over(NewLease {
            state: LeaseState::new(clock, delivery_attempt, self.limit),
            handle,
            message_id: message_id.clone(),
            span: span.clone(),
            permit: Some(permit),
            publish_time,
        });
        // Keyed on its dedupe attribute when the registration dedupes and the message has it.
        let key = self.deliveries.dedupe_on.as_deref().and_then(|attribute| {
            let key = dedupe::progress_key(attribute, &attributes);
            if key.is_none() {
                Stats::bump(&stats.dedupe_fallbacks);
            }
            key
        });
        let delivery = Delivery {
            shared: self.deliveries.clone(),
            key,
            message_id,
            attributes,
            ordering_key,
            publish_time,
            delivery_attempt,
            clock,
            lease: Some(lease),
        };
        // Refused only when the pool is gone (the subscription fails): the right, dropped with
        // the dispatch, nacks the message.
        let _ = children.dispatch.send(Dispatch {
            delivery,
            data,
            span,
            right,
        });
    }

    /// Begins a stop: from here on no handler starts, the pull loops release what the client
    /// buffered, holds end, and the pool releases what waits; [`drain`] carries it on, and the
    /// supervisor stops when it ends.
    fn begin_drain(&mut self, timeout: Duration, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        self.lifecycle = Lifecycle::Draining;
        // First: from here on a worker releases whatever it takes, unrun.
        self.draining.store(true, Ordering::SeqCst);
        self.shared.set_state(State::Draining);
        self.shared.watchers.tell(SupervisionEvent::Draining);
        self.streams.stop.drain.cancel();
        let Some(children) = &self.children else {
            return;
        };
        children.lease_context.leases.advance(StopStage::Draining);
        children.pool.do_send(ReleaseUnstarted);
        let draining = Drain {
            timeout,
            flow: self.shared.flow.clone(),
            leases: children.lease_context.leases.clone(),
            finished: self.streams.stop.finished.clone(),
            shutdowns: self.streams.take_shutdowns(),
            pool: children.pool.clone(),
            sink: children.sink.clone(),
            subscription: self.deliveries.subscription.clone(),
        };
        ctx.spawn(drain(draining).into_actor(self).map(|(), act, ctx| {
            act.lifecycle = Lifecycle::Stopped;
            act.shared.set_state(State::Stopped);
            act.shared.watchers.tell(SupervisionEvent::Stopped);
            for waiter in act.stopped.drain(..) {
                let _ = waiter.send(());
            }
            ctx.stop();
        }));
    }

    fn loop_ended(&mut self, stream: usize, error: Option<SourceError>, ctx: &mut Context<Self>) {
        let delay = self.streams.ended(stream);
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        let subscription = &self.deliveries.subscription;
        if let Some(error) = error {
            tracing::error!(%subscription, error = %Chain(&error),
                "message stream failed; leased messages are kept, the stream is reopened");
        }
        Stats::bump(&self.shared.stats.stream_restarts);
        tracing::warn!(%subscription, stream, ?delay, "reopening the message stream");
        self.shared
            .watchers
            .tell(SupervisionEvent::StreamReopening {
                stream,
                after: delay,
            });
        ctx.run_later(delay, move |act, ctx| act.open_stream(stream, ctx));
    }

    /// Reads the subscription (when it could be read at start) and asks the progress store, to
    /// know the connection works; logs and reports what changed.
    fn probe(&mut self, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running || self.probing.out {
            return;
        }
        self.probing.out = true;
        let probed = health::probe(
            self.connector.clone(),
            self.streams.settings().subscription.clone(),
            self.info.is_some(),
            self.deliveries.progress.clone(),
            self.probing.store.clone(),
            self.probing.interval.min(Duration::from_secs(10)),
        );
        ctx.spawn(probed.into_actor(self).map(|probed, act, _| {
            act.probing.out = false;
            probed.apply(&act.shared, &act.deliveries.subscription);
        }));
    }

    /// A Leasehold actor died: the subscription fails, and everything outstanding is nacked.
    fn fail(&mut self, role: Role, ctx: &mut Context<Self>) {
        Stats::bump(&self.shared.stats.actor_failures);
        tracing::error!(subscription = %self.deliveries.subscription, actor = %role,
            "a Leasehold actor died; every outstanding message is nacked and the subscription \
             fails");
        self.shared.fail(Failure::ActorDied(role));
        match self.lifecycle {
            Lifecycle::Running => self.begin_drain(Duration::ZERO, ctx),
            _ => {
                if let Some(children) = &self.children {
                    children.lease_context.leases.advance(StopStage::Abandoned);
                }
            }
        }
    }
}

impl Actor for SubscriptionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.lifecycle = Lifecycle::Running;
        self.shared.set_state(State::Running);
        self.shared.heartbeat.beat();
        if self.handlers.as_ref().is_some_and(|h| h.breaker.is_some()) {
            // The connector hears when the breaker opens and closes (a push endpoint refuses
            // pushes while it is open), until the stop.
            let (signal, connector) = (self.shared.breaker.clone(), self.connector.clone());
            let stop = self.shared.stop.clone();
            actix::spawn(async move {
                let mut open = false;
                loop {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        now = signal.changed_from(open) => open = now,
                    }
                    connector.breaker_changed(open);
                }
            });
        }
        self.start_children(ctx);
        for stream in 0..self.streams.len() {
            self.open_stream(stream, ctx);
        }
        actix::spawn(health::heartbeat(
            ctx.address().downgrade(),
            health::heartbeat_interval(self.shared.liveness_timeout),
        ));
        ctx.run_interval(self.probing.interval, |act, ctx| act.probe(ctx));
        self.probe(ctx);
        // `Subscription::stop` cancels this token.
        let stop = self.shared.stop.clone();
        ctx.spawn(
            async move { stop.cancelled().await }
                .into_actor(self)
                .map(|(), act, ctx| act.begin_drain(act.drain_timeout, ctx)),
        );
    }
}

impl Drop for SubscriptionActor {
    /// Dropped before its drain ended: the supervisor died (a bug in Leasehold, or its arbiter
    /// stopped under it). Nothing may be stranded: every lease is nacked and the workers stop.
    /// (When its arbiter stopped, the lease actors go with it: their handles nack.)
    fn drop(&mut self) {
        match self.lifecycle {
            Lifecycle::Stopped => return,
            // Never started: nothing ran, nothing to clean up.
            Lifecycle::Starting => return self.shared.set_state(State::Stopped),
            Lifecycle::Running | Lifecycle::Draining => {}
        }
        Stats::bump(&self.shared.stats.actor_failures);
        tracing::error!(subscription = %self.deliveries.subscription,
            "the supervisor ended without a stop (it panicked, or its arbiter or system ended); \
             every outstanding message is nacked and the workers stop");
        self.shared.fail(Failure::ActorDied(Role::Supervisor));
        self.draining.store(true, Ordering::SeqCst);
        self.streams.stop.drain.cancel();
        self.streams.stop.finished.cancel();
        if let Some(children) = &self.children {
            children.lease_context.leases.advance(StopStage::Abandoned);
            children.pool.do_send(StopWorkers);
            children.pool.do_send(PoolShutdown);
            children.sink.do_send(SinkShutdown);
        }
    }
}

impl TurnHandler<(usize, Pulled)> for SubscriptionActor {
    fn handle_item(&mut self, (stream, pulled): (usize, Pulled), ctx: &mut Self::Context) {
        match pulled {
            Pulled::Arrived(received, permit, read_at) => {
                self.streams.delivered(stream);
                self.turn.read(|| self.shared.stats.pool_load());
                // A message read just before a stop is still handled: it holds a lease like any
                // other, and the pool releases it.
                self.on_received(received, permit, read_at);
            }
            Pulled::Ended(error) => self.loop_ended(stream, error, ctx),
        }
    }

    /// Enough for now once this turn has read what the pool can start (`rules/pull_turn.rs`):
    /// the pool hands those to the workers before more are read.
    fn turn_full(&self) -> bool {
        self.turn.is_full()
    }

    /// Each message of the turn went to the pool on its channel as it came: the pool reads
    /// them all in its next turn, after this one.
    fn turn_ended(&mut self, _: &mut Self::Context) {
        self.turn.end();
    }

    // A pull loop's end was reported (`Pulled::Ended`) or is the end of a drain: nothing to do.
}

impl Handler<Stop> for SubscriptionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stopped.push(tx);
        self.shared.stop.cancel();
        self.begin_drain(self.drain_timeout, ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<ActorDied> for SubscriptionActor {
    type Result = ();

    fn handle(&mut self, ActorDied(role): ActorDied, ctx: &mut Self::Context) {
        if self.lifecycle == Lifecycle::Stopped {
            return;
        }
        self.fail(role, ctx);
    }
}

impl Handler<Heartbeat> for SubscriptionActor {
    type Result = ();

    /// The mailbox is served: recorded for `health()`; and the oldest lease measured, for the
    /// status page and the health checks.
    fn handle(&mut self, _: Heartbeat, _: &mut Self::Context) {
        self.shared.heartbeat.beat();
        let age = self
            .children
            .as_ref()
            .and_then(|c| c.lease_context.leases.oldest())
            .map_or(Duration::ZERO, |at| at.elapsed());
        self.shared
            .stats
            .oldest_lease_ms
            .store(age.as_millis() as u64, Ordering::Relaxed);
    }
}

/// Test hooks, as bugs in Leasehold would behave.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Test hooks: kill a worker, or make the pool or the sink panic, as bugs in Leasehold would.
    #[derive(Debug, Message)]
    #[rtype(result = "()")]
    pub(crate) enum Sabotage {
        KillWorker(usize),
        CrashPool,
        CrashSink,
    }

    impl Handler<Sabotage> for SubscriptionActor {
        type Result = ();

        fn handle(&mut self, sabotage: Sabotage, _: &mut Self::Context) {
            let children = self.children.as_ref().expect("started");
            match sabotage {
                Sabotage::KillWorker(n) => children
                    .pool
                    .do_send(crate::pool::worker_pool::tests::KillWorker(n)),
                Sabotage::CrashPool => children
                    .pool
                    .do_send(crate::pool::worker_pool::tests::Crash),
                Sabotage::CrashSink => children.sink.do_send(crate::lease::ack_sink::Crash),
            }
        }
    }
}
