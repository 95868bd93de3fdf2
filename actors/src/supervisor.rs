//! The supervisor: one per subscription. It reads the subscription once, owns the streams,
//! starts a lease actor per message, hands deliveries to the worker pool, reopens a failed
//! stream with capped exponential backoff, and watches the pool and the ack sink.
//!
//! What a stream restart keeps: every message already received keeps its lease actor and its
//! handle, so it is settled as usual (the official client keeps extending those leases while the
//! stream is down). What it loses: nothing that was pulled; messages Pub/Sub had sent but the
//! stream had not yet yielded are redelivered by Pub/Sub.
//!
//! Stopping drains: pulling stops, `retry_after` holds are nacked at once, messages no handler
//! has started are nacked at once, running handlers get up to the drain timeout to finish,
//! whatever is still unsettled then is nacked, the workers and their threads stop, the ack sink
//! is flushed (exactly-once confirmations awaited), the client's streams shut down once they
//! have sent every ack and nack, and the pool, the sink and the supervisor stop.
//!
//! When the pool or the sink dies (a bug in Leasehold), the supervisor hears it through their
//! lifelines, logs an error, counts it, marks the subscription [`State::Failed`] and drains at
//! once: everything outstanding is nacked, nothing is stranded.

use crate::ack_sink::{AckSink, Flush, Shutdown as SinkShutdown};
use crate::delivery::{Delivery, DeliveryShared};
use crate::error::{ReadError, SourceError, StartError};
use crate::flow::{FlowControl, FlowPermit, InFlight};
use crate::guard::Lifeline;
use crate::lease::{LeaseActor, LeaseShared, Leases, StopSignals, StopStage};
use crate::lease_state::{LeaseClock, LeaseState};
use crate::registration::Registration;
use crate::source::{Connector, MessageSource, Received, StreamSettings, SubscriptionInfo};
use crate::stats::{Stats, StatsSnapshot};
use crate::worker::JobContext;
use crate::worker_pool::{
    Dispatch, Drain, Layout, LoadReport, Shutdown as PoolShutdown, StopWorkers, WorkerPool,
};
use actix::prelude::*;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// The first wait before reopening a failed stream: short, since most stream failures are a
/// server closing an idle or long-lived stream.
pub const RESTART_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between reopening attempts, so an outage costs at most one attempt per 30 s.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Where the supervisor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Pulling: each stream is open, or reopening after a backoff.
    Running,
    /// A stop was requested (or an actor died): no more pulling; in-flight messages finish.
    Draining,
    /// Drained and stopped.
    Stopped,
}

/// Where a subscription's consumer is in its life, as [`Subscription::state`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Pulling and running handlers.
    Running,
    /// A stop began: nothing new starts; running handlers finish (up to the drain timeout).
    Draining,
    /// Stopped: every message settled, every actor and worker thread gone.
    Stopped,
    /// A Leasehold actor died (a bug in Leasehold, logged at error): everything outstanding was
    /// nacked (Pub/Sub redelivers it) and the consumer stopped pulling. `stop()` still ends it
    /// cleanly. The text says which actor.
    Failed(String),
}

/// Which supervised actor died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The worker pool.
    WorkerPool,
    /// The ack sink.
    AckSink,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::WorkerPool => "worker pool",
            Role::AckSink => "ack sink",
        })
    }
}

/// Event: a supervised actor died without being stopped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct ActorDied(pub(crate) Role);

/// Capped exponential backoff with jitter, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `initial`, doubles up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { next: initial, max }
    }
    /// The next wait: the current step scaled by `jitter` (in `[0, 1)`) into its upper half, so
    /// restarts after a shared outage spread out. Doubles the step for the time after.
    pub fn next_delay(&mut self, jitter: f64) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        step.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    }
    /// A message arrived: the stream is healthy again.
    pub fn reset(&mut self, initial: Duration) {
        self.next = initial;
    }
}

/// Checks `projects/{project}/subscriptions/{name}` with Pub/Sub's rules for `name`.
pub fn validate_subscription_name(name: &str) -> Result<(), StartError> {
    let invalid = || StartError::InvalidName(name.to_string());
    let parts: Vec<&str> = name.split('/').collect();
    let [projects, project, subscriptions, id] = parts.as_slice() else {
        return Err(invalid());
    };
    let id_ok = (3..=255).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if *projects != "projects" || project.is_empty() || *subscriptions != "subscriptions" || !id_ok
    {
        return Err(invalid());
    }
    Ok(())
}

/// The dead-letter limit: the registration's, else the subscription's. The flag says both were
/// given and differ (worth one warning).
pub fn resolve_limit(registration: Option<u32>, subscription: Option<u32>) -> (Option<u32>, bool) {
    let differ = matches!((registration, subscription), (Some(r), Some(s)) if r != s);
    (registration.or(subscription), differ)
}

/// A running consumer of one subscription.
///
/// Cloned handles share the consumer. Dropping every handle does not stop it: call
/// [`stop`](Self::stop).
#[derive(Clone)]
pub struct Subscription {
    addr: Addr<SubscriptionActor>,
    pool: Addr<WorkerPool>,
    sink: Addr<AckSink>,
    stats: Arc<Stats>,
    flow: FlowControl,
    info: Option<SubscriptionInfo>,
    limit: Option<u32>,
    state: Arc<Mutex<State>>,
    alive: TaskTracker,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("info", &self.info)
            .field("limit", &self.limit)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The live counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
    /// What was read of the subscription at start; `None` when the read was not permitted.
    pub fn info(&self) -> Option<&SubscriptionInfo> {
        self.info.as_ref()
    }
    /// The dead-letter limit in force for `drop()`.
    pub fn max_attempts(&self) -> Option<u32> {
        self.limit
    }
    /// Where the consumer is in its life: running, draining, stopped, or failed (with why).
    pub fn state(&self) -> State {
        self.state.lock().clone()
    }
    /// Messages handed to a worker whose handler has not finished, and messages waiting for a
    /// worker or for their ordering key.
    pub fn load(&self) -> LoadReport {
        LoadReport {
            running: self.stats.running.load(Ordering::Relaxed),
            waiting: self.stats.waiting.load(Ordering::Relaxed),
        }
    }
    /// Messages and payload bytes outstanding now: received and not yet settled.
    pub fn in_flight(&self) -> InFlight {
        self.flow.in_flight()
    }
    /// The supervisor's address.
    pub fn addr(&self) -> &Addr<SubscriptionActor> {
        &self.addr
    }
    /// Stops and drains; returns when done. Idempotent: later calls wait for the same drain.
    ///
    /// Pulling stops at once; `retry_after` holds and messages no handler has started are nacked
    /// at once (the delay is lost, not the message). Running handlers get up to the drain timeout
    /// to finish; whatever is unsettled then is nacked and the handlers are cut. Then every ack
    /// and nack is sent and, on exactly-once subscriptions, confirmed or refused, and the
    /// client's streams shut down once they have sent them. When it returns, no actor or worker
    /// thread of this subscription is alive, and the handler and the progress store have been
    /// dropped (unless you keep a clone of the `Registration`). A handler that blocks its thread
    /// past the drain is the exception: its message was nacked, and its thread is left to end
    /// when the call returns (logged at error).
    pub async fn stop(&self) {
        if self.addr.send(Stop).await.is_err() {
            // The supervisor is gone: it stopped already, or died and nacked what it held.
            // Stop what may be left of the rest.
            let _ = self.pool.send(StopWorkers).await;
            let _ = self.sink.send(Flush).await;
            self.pool.do_send(PoolShutdown);
            self.sink.do_send(SinkShutdown);
        }
        self.alive.wait().await;
    }
}

/// Starts consuming `registration.subscription()` through `connector`.
///
/// Reads the subscription once (exactly-once flag, dead-letter limit, ack deadline), then opens
/// the stream. Fails without pulling anything when the name is invalid, the options contradict
/// each other, or the subscription does not exist. Must be called inside an actix system: the
/// supervisor, the leases and the acks run on the calling arbiter, the handlers on worker
/// threads of their own.
pub async fn start(
    registration: Registration,
    connector: Rc<dyn Connector>,
) -> Result<Subscription, StartError> {
    let name = registration.subscription.clone();
    validate_subscription_name(&name)?;
    registration.options.validate()?;

    let info = match connector.read_subscription(&name).await {
        Ok(info) => Some(info),
        Err(ReadError::PermissionDenied(reason)) => {
            tracing::warn!(subscription = %name, %reason,
                "cannot read the subscription (needs pubsub.subscriptions.get): \
                 its dead-letter limit is unknown, so drop() acks unless max_attempts is set");
            None
        }
        Err(ReadError::NotFound(_)) => return Err(StartError::NotFound(name)),
        Err(ReadError::Other(reason)) => {
            return Err(StartError::Read {
                subscription: name,
                reason,
            });
        }
    };
    let from_subscription = info.as_ref().and_then(|i| i.max_delivery_attempts);
    let (limit, differ) = resolve_limit(registration.options.max_attempts, from_subscription);
    if differ {
        tracing::warn!(subscription = %name, registration = ?registration.options.max_attempts,
            dead_letter_policy = ?from_subscription,
            "max_attempts differs from the subscription's dead-letter policy; \
             drop() follows max_attempts");
    }
    if info.as_ref().is_some_and(|i| i.exactly_once) && connector.is_global_endpoint() {
        tracing::warn!(subscription = %name,
            "exactly-once delivery holds only within one region, and this client uses the \
             global endpoint: connect to a locational endpoint such as \
             https://us-central1-pubsub.googleapis.com");
    }

    let Registration {
        subscription: _,
        options,
        failure_policy,
        panic_policy,
        handler,
        kind,
        progress,
    } = registration;
    let subscription: Arc<str> = Arc::from(name.as_str());
    let stats = Arc::new(Stats::default());
    let state = Arc::new(Mutex::new(State::Running));
    // Every actor holds a token; `stop` returns once none is left. Closed now: tokens taken
    // later still count.
    let alive = TaskTracker::new();
    alive.close();

    // The supervisor's address first: the pool and the sink report their death to it.
    let context = Context::<SubscriptionActor>::new();
    let supervisor = context.address().downgrade();
    let on_sink_death = supervisor.clone();
    let sink = AckSink::new(
        subscription.clone(),
        stats.clone(),
        progress.clone(),
        Lifeline::new(move || {
            if let Some(supervisor) = on_sink_death.upgrade() {
                supervisor.do_send(ActorDied(Role::AckSink));
            }
        }),
        &alive,
    )
    .start();
    let draining = Arc::new(AtomicBool::new(false));
    let (finished, finished_jobs) = tokio::sync::mpsc::unbounded_channel();
    let jobs = Arc::new(JobContext {
        handler,
        failure_policy,
        panic_policy,
        progress: progress.clone(),
        stats: stats.clone(),
        draining: draining.clone(),
        finished,
    });
    let pool = WorkerPool::new(
        options.workers,
        Layout::new(kind, options.workers, options.worker_threads),
        jobs,
        finished_jobs,
        subscription.clone(),
        supervisor,
        &alive,
    )
    .start();
    let settings = StreamSettings {
        subscription: name,
        max_outstanding_messages: options.max_outstanding_messages,
        max_outstanding_bytes: options.max_outstanding_bytes,
        max_lease: options.max_lease,
        max_lease_extension: options.max_lease_extension,
    };
    let flow = FlowControl::new(
        options.max_outstanding_messages,
        options.max_outstanding_bytes,
    );
    let actor = SubscriptionActor {
        deliveries: Arc::new(DeliveryShared {
            subscription,
            progress,
            stats: stats.clone(),
        }),
        settings,
        connector,
        limit,
        pool: pool.clone(),
        sink: sink.clone(),
        stats: stats.clone(),
        flow: flow.clone(),
        lifecycle: Lifecycle::Running,
        state: state.clone(),
        draining,
        streams: (0..options.streams)
            .map(|_| StreamSlot::default())
            .collect(),
        leases: Rc::new(LeaseShared {
            sink: sink.clone().recipient(),
            stats: stats.clone(),
            leases: Rc::new(Leases::default()),
            alive: alive.clone(),
        }),
        stop: StopSignals::default(),
        drain_timeout: options.drain_timeout,
        stopped: Vec::new(),
        _alive: alive.token(),
    };
    let addr = context.run(actor);
    Ok(Subscription {
        addr,
        pool,
        sink,
        stats,
        flow,
        info,
        limit,
        state,
        alive,
    })
}

/// Command: stop and drain; resolves when drained. Idempotent.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

/// One of the subscription's streams.
struct StreamSlot {
    backoff: Backoff,
    /// Shuts the open stream down once every message is settled (see `MessageSource::shutdown`).
    shutdown: Option<LocalBoxFuture<'static, ()>>,
}

impl Default for StreamSlot {
    fn default() -> Self {
        Self {
            backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
            shutdown: None,
        }
    }
}

/// Supervises one subscription's streams, pool and sink.
pub struct SubscriptionActor {
    settings: StreamSettings,
    /// What every delivery shares: the subscription's name, the store, the counters.
    deliveries: Arc<DeliveryShared>,
    connector: Rc<dyn Connector>,
    limit: Option<u32>,
    pool: Addr<WorkerPool>,
    sink: Addr<AckSink>,
    stats: Arc<Stats>,
    flow: FlowControl,
    lifecycle: Lifecycle,
    /// What the `Subscription` handles report.
    state: Arc<Mutex<State>>,
    /// Shared with the workers: set the moment a stop begins, so that no handler starts after.
    draining: Arc<AtomicBool>,
    /// The streams pulling in parallel (`Options::streams`).
    streams: Vec<StreamSlot>,
    /// Given to every lease actor.
    leases: Rc<LeaseShared>,
    /// The stop signals of the pull loops.
    stop: StopSignals,
    drain_timeout: Duration,
    /// `Stop` callers waiting for the drain to end.
    stopped: Vec<tokio::sync::oneshot::Sender<()>>,
    _alive: TaskTrackerToken,
}

/// What a pull loop hands the supervisor.
#[derive(Debug)]
enum Pulled {
    /// A message, with its flow-control permit.
    Arrived(Received, FlowPermit),
    /// The stream ended, after an error or not.
    Ended(Option<SourceError>),
}

/// What a pull loop owns.
struct PullState {
    source: Box<dyn MessageSource>,
    flow: FlowControl,
    stop: StopSignals,
    stats: Arc<Stats>,
}

/// Reads the stream while there is room under flow control, and yields each message with its
/// permit, tagged with the stream's number. Ends after yielding the stream's end.
///
/// A stream the supervisor polls itself (`add_stream`): a message reaches it without a trip
/// through its mailbox.
///
/// Once a stop begins it stops taking messages for the handlers, releases (nacks) whatever the
/// client has buffered, so Pub/Sub can hand those messages to another consumer at once instead
/// of when their leases run out, and shuts the stream down. It ends without yielding anything
/// more once the drain is over.
fn pull(
    source: Box<dyn MessageSource>,
    stream: usize,
    flow: FlowControl,
    stop: StopSignals,
    stats: Arc<Stats>,
) -> impl futures::Stream<Item = (usize, Pulled)> {
    let state = PullState {
        source,
        flow,
        stop,
        stats,
    };
    futures::stream::unfold(Some(state), move |state| async move {
        let mut st = state?;
        // Take the room first: a message is only read from the client when it may run.
        // `biased`: a stop wins over a message that happens to be ready.
        let room = tokio::select! {
            biased;
            _ = st.stop.drain.cancelled() => None,
            room = st.flow.message() => Some(room),
        };
        let Some(room) = room else {
            return release(st).await;
        };
        let item = tokio::select! {
            biased;
            _ = st.stop.drain.cancelled() => None,
            item = st.source.next() => Some(item),
        };
        let Some(item) = item else {
            // The room taken for this read goes back first: the drain waits for all of it.
            drop(room);
            return release(st).await;
        };
        match item {
            Some(Ok(received)) => {
                let permit = st.flow.bytes(room, received.data.len()).await;
                Some(((stream, Pulled::Arrived(received, permit)), Some(st)))
            }
            Some(Err(error)) => Some(((stream, Pulled::Ended(Some(error))), None)),
            None => Some(((stream, Pulled::Ended(None)), None)),
        }
    })
}

/// A stop began: nacks (drops) what the client already holds, without waiting on the network,
/// then shuts the stream down so that it reads no more (the client goes on extending and
/// settling the leases of what it delivered), and ends when every message is settled.
async fn release<T>(mut st: PullState) -> Option<T> {
    while let Some(Some(Ok(_released))) = st.source.next().now_or_never() {
        Stats::bump(&st.stats.released);
    }
    // Polled once: that signals the shutdown; the supervisor awaits its end after the drain.
    let _ = st.source.shutdown().now_or_never();
    st.stop.finished.cancelled().await;
    None
}

impl SubscriptionActor {
    fn open_stream(&mut self, stream: usize, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        let source = self.connector.open(&self.settings);
        self.streams[stream].shutdown = Some(source.shutdown());
        let pulling = pull(
            source,
            stream,
            self.flow.clone(),
            self.stop.clone(),
            self.stats.clone(),
        );
        ctx.add_stream(pulling);
    }

    fn on_received(&mut self, received: Received, permit: FlowPermit) {
        Stats::bump(&self.stats.received);
        self.stats
            .peak_outstanding
            .fetch_max(self.flow.in_flight().messages as u64, Ordering::Relaxed);
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
        let span = tracing::info_span!("message",
            subscription = %self.settings.subscription,
            %message_id,
            attempt = ?delivery_attempt);
        let clock = LeaseClock::new(Instant::now(), self.settings.max_lease);
        let lease = LeaseActor::new(
            LeaseState::new(clock, delivery_attempt, self.limit),
            handle,
            message_id.clone(),
            span.clone(),
            Some(permit),
            self.leases.clone(),
        )
        .launch();
        let delivery = Delivery {
            shared: self.deliveries.clone(),
            message_id,
            attributes,
            ordering_key,
            publish_time,
            delivery_attempt,
            clock,
            lease: lease.downgrade(),
        };
        self.pool.do_send(Dispatch {
            delivery,
            data,
            span,
            lease,
        });
    }

    fn set_state(&self, state: State) {
        let mut current = self.state.lock();
        // A failure is what the handles keep reporting, through the drain and after.
        if !matches!(*current, State::Failed(_)) {
            *current = state;
        }
    }

    /// Runs the drain: release what no handler started, wait for running handlers (nacking them
    /// at `timeout`), stop the workers, flush the sink, shut the client's streams down, then
    /// stop everything.
    fn drain(&mut self, timeout: Duration, ctx: &mut Context<Self>) {
        self.lifecycle = Lifecycle::Draining;
        // First: from here on a worker releases whatever it takes, unrun.
        self.draining.store(true, Ordering::SeqCst);
        self.set_state(State::Draining);
        // The pull loops stop feeding the handlers and start releasing; holds end now; messages
        // waiting for a worker are released.
        self.stop.drain.cancel();
        self.leases.leases.advance(StopStage::Draining);
        self.pool.do_send(Drain);
        let shutdowns: Vec<_> = self
            .streams
            .iter_mut()
            .filter_map(|slot| slot.shutdown.take())
            .collect();
        let flow = self.flow.clone();
        let leases = self.leases.leases.clone();
        let finished = self.stop.finished.clone();
        let (pool, sink) = (self.pool.clone(), self.sink.clone());
        let subscription = self.settings.subscription.clone();
        let drained = async move {
            if tokio::time::timeout(timeout, flow.all_returned())
                .await
                .is_err()
            {
                let left = flow.in_flight().messages;
                tracing::warn!(%subscription, left, ?timeout,
                    "drain timeout: nacking the messages still unsettled");
                leases.advance(StopStage::Abandoned);
                flow.all_returned().await;
            }
            // Every message is settled: no handler runs past this point.
            let _ = pool.send(StopWorkers).await;
            // Every ack and nack is handed to the client and, exactly-once, confirmed.
            let _ = sink.send(Flush).await;
            // The pull loops drop the client's streams; the client sends what it still holds.
            finished.cancel();
            futures::future::join_all(shutdowns).await;
            pool.do_send(PoolShutdown);
            sink.do_send(SinkShutdown);
        };
        ctx.spawn(drained.into_actor(self).map(|(), act, ctx| {
            act.lifecycle = Lifecycle::Stopped;
            act.set_state(State::Stopped);
            for waiter in act.stopped.drain(..) {
                let _ = waiter.send(());
            }
            ctx.stop();
        }));
    }

    fn stream_ended(&mut self, stream: usize, error: Option<SourceError>, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        if let Some(error) = error {
            tracing::error!(subscription = %self.settings.subscription, %error,
                "message stream failed; leased messages are kept, the stream is reopened");
        }
        Stats::bump(&self.stats.stream_restarts);
        let delay = self.streams[stream].backoff.next_delay(fastrand::f64());
        tracing::warn!(subscription = %self.settings.subscription, stream, ?delay,
            "reopening the message stream");
        ctx.run_later(delay, move |act, ctx| act.open_stream(stream, ctx));
    }
}

impl Actor for SubscriptionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        for stream in 0..self.streams.len() {
            self.open_stream(stream, ctx);
        }
    }
}

impl Drop for SubscriptionActor {
    /// Dropped before its drain ended: the supervisor died (a bug in Leasehold, or its arbiter
    /// stopped under it). Nothing may be stranded: every lease is nacked and the workers stop.
    fn drop(&mut self) {
        if self.lifecycle == Lifecycle::Stopped {
            return;
        }
        Stats::bump(&self.stats.actor_failures);
        tracing::error!(subscription = %self.settings.subscription,
            "the supervisor ended without a stop (it panicked, or its arbiter or system ended); \
             every outstanding message is nacked and the workers stop");
        *self.state.lock() = State::Failed("the supervisor died".into());
        self.draining.store(true, Ordering::SeqCst);
        self.stop.drain.cancel();
        self.stop.finished.cancel();
        self.leases.leases.advance(StopStage::Abandoned);
        self.pool.do_send(StopWorkers);
    }
}

impl StreamHandler<(usize, Pulled)> for SubscriptionActor {
    fn handle(&mut self, (stream, pulled): (usize, Pulled), ctx: &mut Self::Context) {
        match pulled {
            Pulled::Arrived(received, permit) => {
                self.streams[stream].backoff.reset(RESTART_BACKOFF_INITIAL);
                // A message read just before a stop is still handled: it holds a lease like any
                // other, and the pool releases it.
                self.on_received(received, permit);
            }
            Pulled::Ended(error) => self.stream_ended(stream, error, ctx),
        }
    }

    /// A pull loop's end was reported (`Pulled::Ended`) or is the end of a drain: nothing to do.
    /// (The default would stop the actor.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Stop> for SubscriptionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stopped.push(tx);
        if self.lifecycle == Lifecycle::Running {
            self.drain(self.drain_timeout, ctx);
        }
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
        Stats::bump(&self.stats.actor_failures);
        tracing::error!(subscription = %self.settings.subscription, actor = %role,
            "a Leasehold actor died; every outstanding message is nacked and the subscription \
             fails");
        *self.state.lock() = State::Failed(format!("the {role} died"));
        match self.lifecycle {
            Lifecycle::Running => self.drain(Duration::ZERO, ctx),
            _ => self.leases.leases.advance(StopStage::Abandoned),
        }
    }
}

#[cfg(test)]
mod tests;
