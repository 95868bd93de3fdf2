//! The supervisor: one per subscription. It reads the subscription once, owns the stream, starts
//! a lease actor per message, hands deliveries to the worker pool, and reopens a failed stream
//! with capped exponential backoff.
//!
//! What a stream restart keeps: every message already received keeps its lease actor and its
//! handle, so it is settled as usual (the official client keeps extending those leases while the
//! stream is down). What it loses: nothing that was pulled; messages Pub/Sub had sent but the
//! stream had not yet yielded are redelivered by Pub/Sub.
//!
//! Stopping drains: pulling stops, `retry_after` holds are nacked at once, handlers get up to the
//! drain timeout to finish, whatever is still unsettled then is nacked, and the ack sink is
//! flushed (exactly-once confirmations awaited) before the supervisor stops.

use crate::ack_sink::{AckSink, Flush};
use crate::delivery::Delivery;
use crate::error::{ReadError, SourceError, StartError};
use crate::flow::{FlowControl, FlowPermit, InFlight};
use crate::lease::{LeaseActor, LeaseShared, Leases, StopSignals, StopStage};
use crate::lease_state::{LeaseClock, LeaseState};
use crate::registration::Registration;
use crate::source::{Connector, MessageSource, Received, StreamSettings, SubscriptionInfo};
use crate::stats::{Stats, StatsSnapshot};
use crate::worker_pool::{Dispatch, Load, LoadReport, WorkerPool};
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The first wait before reopening a failed stream: short, since most stream failures are a
/// server closing an idle or long-lived stream.
pub const RESTART_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between reopening attempts, so an outage costs at most one attempt per 30 s.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Where the supervisor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Pulling: each stream is open, or reopening after a backoff.
    Running,
    /// A stop was requested: no more pulling; in-flight messages are finishing.
    Draining,
    /// Drained and stopped.
    Stopped,
}

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
#[derive(Clone)]
pub struct Subscription {
    addr: Addr<SubscriptionActor>,
    pool: Addr<WorkerPool>,
    sink: Addr<AckSink>,
    stats: Arc<Stats>,
    flow: FlowControl,
    info: Option<SubscriptionInfo>,
    limit: Option<u32>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("info", &self.info)
            .field("limit", &self.limit)
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
    /// Handlers running now, and messages waiting for a worker or their ordering key.
    pub async fn load(&self) -> LoadReport {
        self.pool.send(Load).await.unwrap_or_default()
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
    /// Pulling stops at once and `retry_after` holds are nacked (the delay is lost, not the
    /// message). Running handlers get up to the drain timeout to finish; whatever is unsettled
    /// then is nacked. Then every ack and nack is sent and, on exactly-once subscriptions,
    /// confirmed or refused.
    pub async fn stop(&self) {
        let _ = self.addr.send(Stop).await;
        // The supervisor is gone once drained; the sink may still hold the last confirmations
        // when a second caller arrives after that.
        let _ = self.sink.send(Flush).await;
    }
}

/// Starts consuming `registration.subscription()` through `connector`.
///
/// Reads the subscription once (exactly-once flag, dead-letter limit, ack deadline), then opens
/// the stream. Fails without pulling anything when the name is invalid, the options contradict
/// each other, or the subscription does not exist.
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

    let stats = Arc::new(Stats::default());
    let options = &registration.options;
    let sink = AckSink::new(name.clone(), stats.clone(), registration.progress.clone()).start();
    let pool = WorkerPool::new(
        options.workers,
        registration.handler.clone(),
        registration.failure_policy.clone(),
        registration.panic_policy,
        registration.progress.clone(),
        stats.clone(),
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
    let addr = SubscriptionActor {
        subscription: Arc::from(settings.subscription.as_str()),
        settings,
        connector,
        limit,
        pool: pool.clone(),
        sink: sink.clone(),
        stats: stats.clone(),
        flow: flow.clone(),
        lifecycle: Lifecycle::Running,
        streams: (0..options.streams)
            .map(|_| StreamSlot::default())
            .collect(),
        leases: Rc::new(LeaseShared {
            sink: sink.clone().recipient(),
            stats: stats.clone(),
            leases: Rc::new(Leases::default()),
        }),
        stop: StopSignals::default(),
        drain_timeout: options.drain_timeout,
        stopped: Vec::new(),
    }
    .start();
    Ok(Subscription {
        addr,
        pool,
        sink,
        stats,
        flow,
        info,
        limit,
    })
}

/// Command: stop and drain; resolves when drained. Idempotent.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;

/// One of the subscription's streams.
#[derive(Debug)]
struct StreamSlot {
    /// Its pull loop, while open; `None` while it waits to reopen.
    pulling: Option<SpawnHandle>,
    backoff: Backoff,
}

impl Default for StreamSlot {
    fn default() -> Self {
        Self {
            pulling: None,
            backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
        }
    }
}

/// Supervises one subscription's stream.
pub struct SubscriptionActor {
    settings: StreamSettings,
    /// The subscription's name, shared by every delivery.
    subscription: Arc<str>,
    connector: Rc<dyn Connector>,
    limit: Option<u32>,
    pool: Addr<WorkerPool>,
    sink: Addr<AckSink>,
    stats: Arc<Stats>,
    flow: FlowControl,
    lifecycle: Lifecycle,
    /// The streams pulling in parallel (`Options::streams`).
    streams: Vec<StreamSlot>,
    /// Given to every lease actor.
    leases: Rc<LeaseShared>,
    /// The stop signals of the pull loops.
    stop: StopSignals,
    drain_timeout: Duration,
    /// `Stop` callers waiting for the drain to end.
    stopped: Vec<tokio::sync::oneshot::Sender<()>>,
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
/// Once a stop begins it stops taking messages for the handlers and releases (nacks) whatever
/// the client still has buffered or receives, until the drain is over, so Pub/Sub can hand
/// those messages to another consumer at once instead of when their leases run out. Then it
/// ends without yielding anything more.
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

/// A stop began: nacks what the stream still delivers until every message is settled.
async fn release<T>(mut st: PullState) -> Option<T> {
    loop {
        tokio::select! {
            biased;
            _ = st.stop.finished.cancelled() => return None,
            item = st.source.next() => match item {
                // Dropping the handle nacks the message.
                Some(Ok(_released)) => Stats::bump(&st.stats.released),
                _ => {
                    st.stop.finished.cancelled().await;
                    return None;
                }
            },
        }
    }
}

impl SubscriptionActor {
    fn open_stream(&mut self, stream: usize, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        let source = self.connector.open(&self.settings);
        let pulling = pull(
            source,
            stream,
            self.flow.clone(),
            self.stop.clone(),
            self.stats.clone(),
        );
        self.streams[stream].pulling = Some(ctx.add_stream(pulling));
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
            subscription: self.subscription.clone(),
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

    /// Runs the drain: wait for in-flight messages (nacking them at the timeout), flush the
    /// sink, then stop.
    fn drain(&mut self, ctx: &mut Context<Self>) {
        self.lifecycle = Lifecycle::Draining;
        // The pull loops stop feeding the handlers and start releasing; holds end now.
        self.stop.drain.cancel();
        self.leases.leases.advance(StopStage::Draining);
        let flow = self.flow.clone();
        let leases = self.leases.leases.clone();
        let finished = self.stop.finished.clone();
        let sink = self.sink.clone();
        let timeout = self.drain_timeout;
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
            // Every message is settled: the pull loops drop the client's streams, which send
            // the pending acks and stop.
            finished.cancel();
            let _ = sink.send(Flush).await;
        };
        ctx.spawn(drained.into_actor(self).map(|(), act, ctx| {
            act.lifecycle = Lifecycle::Stopped;
            for waiter in act.stopped.drain(..) {
                let _ = waiter.send(());
            }
            ctx.stop();
        }));
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

impl StreamHandler<(usize, Pulled)> for SubscriptionActor {
    fn handle(&mut self, (stream, pulled): (usize, Pulled), ctx: &mut Self::Context) {
        match pulled {
            Pulled::Arrived(received, permit) => {
                self.streams[stream].backoff.reset(RESTART_BACKOFF_INITIAL);
                // A message read just before a stop is still handled: it holds a lease like any
                // other.
                self.on_received(received, permit);
            }
            Pulled::Ended(error) => self.stream_ended(stream, error, ctx),
        }
    }

    /// A pull loop's end was reported (`Pulled::Ended`) or is the end of a drain: nothing to do.
    /// (The default would stop the actor.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl SubscriptionActor {
    fn stream_ended(&mut self, stream: usize, error: Option<SourceError>, ctx: &mut Context<Self>) {
        self.streams[stream].pulling = None;
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

impl Handler<Stop> for SubscriptionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.stopped.push(tx);
        if self.lifecycle == Lifecycle::Running {
            self.drain(ctx);
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
mod tests;
