//! The supervisor: one per subscription, the public entry point of the actor system. It reads
//! the subscription once, starts the worker pool and the ack sink, owns the streams, starts a
//! lease actor per message, hands messages to the pool, reopens a failed stream with capped
//! exponential backoff, and watches the pool and the sink.
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
use crate::error::{Chain, Code, ReadError, SourceError, StartError};
use crate::flow::{FlowControl, FlowPermit};
use crate::guard::Lifeline;
use crate::lease::{LeaseActor, LeaseShared, Leases, StopStage};
use crate::lease_state::{LeaseClock, LeaseState};
use crate::progress::ProgressStore;
use crate::pull::{Pulled, StopSignals, pull};
use crate::registration::{
    EXACTLY_ONCE_MIN_LEASE_EXTENSION, ErasedHandler, FailurePolicy, HandlerKind, PanicPolicy,
    Registration,
};
use crate::rules::{
    Backoff, RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX, resolve_limit, retry_at_start,
    short_for_exactly_once, validate_subscription_name,
};
use crate::source::{Connector, Received, StreamSettings, SubscriptionInfo};
use crate::stats::Stats;
use crate::subscription::{Connectivity, Shared, State, Subscription, SupervisionEvent};
use crate::worker::JobContext;
use crate::worker_pool::{
    Dispatch, DispatchSender, Drain, Layout, Shutdown as PoolShutdown, StopWorkers, WorkerPool,
};
use actix::prelude::*;
use futures::future::LocalBoxFuture;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// Where the supervisor is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Built, not started.
    Starting,
    /// Pulling: each stream is open, or reopening after a backoff.
    Running,
    /// A stop was requested (or an actor died): no more pulling; in-flight messages finish.
    Draining,
    /// Drained and stopped.
    Stopped,
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

/// Command: stop and drain; resolves when drained. Idempotent. The same as
/// [`Subscription::stop`], for code that holds the actor's address (which, unlike `stop()`,
/// does not wait for every actor to be dropped).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;

/// What the workers are built from when the supervisor starts.
struct Handlers {
    handler: ErasedHandler,
    kind: HandlerKind,
    failure_policy: FailurePolicy,
    panic_policy: PanicPolicy,
    progress: Option<Arc<dyn ProgressStore>>,
    workers: usize,
    worker_threads: Option<usize>,
}

/// The actors the supervisor starts and supervises.
struct Children {
    pool: Addr<WorkerPool>,
    /// Messages for the pool: a channel rather than the pool's mailbox, whose envelope and
    /// queue node per message cost two allocations.
    dispatch: DispatchSender,
    sink: Addr<AckSink>,
    leases: Rc<LeaseShared>,
}

/// One of the subscription's streams.
struct StreamSlot {
    backoff: Backoff,
    /// Shuts the open stream down once every message is settled (see `MessageSource::shutdown`).
    shutdown: Option<LocalBoxFuture<'static, ()>>,
}

/// Supervises one subscription: its streams, its worker pool, its ack sink.
///
/// Build it with [`new`](Self::new) (which reads the subscription), take a
/// [`subscription`](Self::subscription) handle, and start it in your actix system
/// (`actor.start()`); [`start`](crate::start) does the three. Its address takes [`Stop`];
/// [`Subscription::watch`] reports its restarts and failures.
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Connector, Delivery, Registration, SubscriptionActor};
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
/// address.send(leasehold::Stop).await?;
/// # let _ = subscription;
/// # Ok(()) }
/// ```
#[must_use = "the subscription is not consumed until the actor is started"]
pub struct SubscriptionActor {
    shared: Arc<Shared>,
    info: Option<SubscriptionInfo>,
    limit: Option<u32>,
    settings: StreamSettings,
    connector: Rc<dyn Connector>,
    /// Taken when the actor starts.
    handlers: Option<Handlers>,
    children: Option<Children>,
    /// What every delivery shares: the subscription's name, the store, the counters.
    deliveries: Arc<DeliveryShared>,
    lifecycle: Lifecycle,
    /// Shared with the workers: set the moment a stop begins, so that no handler starts after.
    draining: Arc<AtomicBool>,
    /// The streams pulling in parallel (`Options::streams`).
    streams: Vec<StreamSlot>,
    /// The stop signals of the pull loops.
    stop: StopSignals,
    drain_timeout: Duration,
    /// The OpenTelemetry span name of every message: `<subscription id> process`.
    span_name: Arc<str>,
    /// The share of messages that get a span.
    trace_sample_ratio: f64,
    /// How often the connection and the store are probed, and whether a probe is out now.
    probe_interval: Duration,
    probing: bool,
    /// A transactional registration's question to its store.
    store_probe: Option<crate::registration::StoreProbe>,
    /// `Stop` callers waiting for the drain to end.
    stopped: Vec<tokio::sync::oneshot::Sender<()>>,
    _alive: TaskTrackerToken,
}

impl std::fmt::Debug for SubscriptionActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionActor")
            .field("subscription", &self.settings.subscription)
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

impl SubscriptionActor {
    /// Validates the registration and reads the subscription (exactly-once flag, dead-letter
    /// limit, ack deadline), retrying transient failures within the start timeout (each failed
    /// attempt logged at warn). Nothing is pulled until the actor is started.
    pub async fn new(
        registration: Registration,
        connector: Rc<dyn Connector>,
    ) -> Result<Self, StartError> {
        if actix::System::try_current().is_none() {
            return Err(StartError::NoActixSystem);
        }
        let name = registration.subscription.clone();
        validate_subscription_name(&name)?;
        registration.validate().map_err(StartError::InvalidOption)?;
        let options = &registration.options;
        let info = read_subscription(&*connector, &name, options.start_timeout).await?;

        let from_subscription = info.as_ref().and_then(|i| i.max_delivery_attempts);
        let (limit, differ) = resolve_limit(options.max_attempts, from_subscription);
        if differ {
            tracing::warn!(subscription = %name, registration = ?options.max_attempts,
                dead_letter_policy = ?from_subscription,
                "max_attempts differs from the subscription's dead-letter policy; \
                 drop() follows max_attempts (Pub/Sub still dead-letters by its policy)");
        }
        let exactly_once = info.as_ref().is_some_and(|i| i.exactly_once);
        if exactly_once && connector.is_global_endpoint() {
            tracing::warn!(subscription = %name,
                "exactly-once delivery holds only within one region, and this client uses the \
                 global endpoint: connect to a locational endpoint such as \
                 https://us-central1-pubsub.googleapis.com");
        }
        let extension = options.lease_extension();
        if short_for_exactly_once(options, exactly_once) {
            tracing::warn!(subscription = %name, max_lease_extension = ?extension,
                advised = ?EXACTLY_ONCE_MIN_LEASE_EXTENSION,
                "exactly-once subscription with a short lease extension: Pub/Sub advises long \
                 extensions so that network delays do not expire ack ids (a refused ack is \
                 redelivered work); kept as set");
        }

        let Registration {
            subscription: _,
            options,
            failure_policy,
            panic_policy,
            handler,
            kind,
            progress,
            store_probe,
        } = registration;
        let stats = Arc::new(Stats::default());
        let flow = FlowControl::new(
            options.max_outstanding_messages,
            options.max_outstanding_bytes,
        );
        let shared = Arc::new(Shared::new(stats.clone(), flow));
        let settings = StreamSettings {
            subscription: name.clone(),
            max_outstanding_messages: options.max_outstanding_messages,
            max_outstanding_bytes: options.max_outstanding_bytes,
            max_lease: options.max_lease,
            max_lease_extension: extension,
        };
        Ok(Self {
            deliveries: Arc::new(DeliveryShared {
                subscription: Arc::from(name.as_str()),
                progress: progress.as_ref().map(Arc::downgrade),
                stats,
            }),
            handlers: Some(Handlers {
                handler,
                kind,
                failure_policy,
                panic_policy,
                progress,
                workers: options.workers,
                worker_threads: options.worker_threads,
            }),
            children: None,
            info,
            limit,
            settings,
            connector,
            lifecycle: Lifecycle::Starting,
            draining: Arc::new(AtomicBool::new(false)),
            streams: (0..options.streams)
                .map(|_| StreamSlot {
                    backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
                    shutdown: None,
                })
                .collect(),
            stop: StopSignals::default(),
            drain_timeout: options.drain_timeout,
            span_name: Arc::from(format!(
                "{} process",
                name.rsplit('/').next().unwrap_or(&name)
            )),
            probe_interval: options.health_probe_interval,
            trace_sample_ratio: options.trace_sample_ratio,
            probing: false,
            store_probe,
            stopped: Vec::new(),
            _alive: shared.alive.token(),
            shared,
        })
    }

    /// A handle on this subscription: counters, state, load, watchers, stop. Take it before
    /// starting the actor; it works once the actor runs.
    pub fn subscription(&self) -> Subscription {
        Subscription {
            shared: self.shared.clone(),
            info: self.info.clone(),
            limit: self.limit,
        }
    }

    /// Starts the sink and the pool, with lifelines back to this actor.
    fn start_children(&mut self, ctx: &mut Context<Self>) {
        let Some(handlers) = self.handlers.take() else {
            return;
        };
        let subscription = self.deliveries.subscription.clone();
        let stats = self.shared.stats.clone();
        let alive = &self.shared.alive;
        let on_sink_death = ctx.address().downgrade();
        let (confirmations, inbox) = tokio::sync::mpsc::unbounded_channel();
        let sink = AckSink::new(
            subscription.clone(),
            inbox,
            stats.clone(),
            handlers.progress.clone(),
            Lifeline::new(move || {
                if let Some(supervisor) = on_sink_death.upgrade() {
                    supervisor.do_send(ActorDied(Role::AckSink));
                }
            }),
            alive,
        )
        .start();
        let (finished, finished_jobs) = tokio::sync::mpsc::unbounded_channel();
        let jobs = Arc::new(JobContext {
            handler: handlers.handler,
            failure_policy: handlers.failure_policy,
            panic_policy: handlers.panic_policy,
            progress: handlers.progress,
            stats: stats.clone(),
            draining: self.draining.clone(),
            finished,
            subscription: subscription.clone(),
        });
        let (dispatch, dispatched) = tokio::sync::mpsc::unbounded_channel();
        let pool = WorkerPool::new(
            handlers.workers,
            dispatched,
            Layout::new(handlers.kind, handlers.workers, handlers.worker_threads),
            jobs,
            finished_jobs,
            self.shared.clone(),
            ctx.address().downgrade(),
        )
        .start();
        let leases = Rc::new(Leases::default());
        // The lease budgets: one timer queue for every lease actor, polled here.
        ctx.spawn(actix::fut::wrap_future(leases.clone().watch_budgets()));
        self.children = Some(Children {
            leases: Rc::new(LeaseShared {
                sink: confirmations,
                stats,
                leases,
                alive: alive.clone(),
                subscription: subscription.clone(),
            }),
            pool,
            dispatch,
            sink,
        });
    }

    fn open_stream(&mut self, stream: usize, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        let source = self.connector.open(&self.settings);
        self.shared
            .stats
            .open_streams
            .fetch_add(1, Ordering::Relaxed);
        self.streams[stream].shutdown = Some(source.shutdown());
        let pulling = pull(
            source,
            stream,
            self.shared.flow.clone(),
            self.stop.clone(),
            self.shared.stats.clone(),
        );
        ctx.add_stream(pulling);
    }

    fn on_received(&mut self, received: Received, permit: FlowPermit) {
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
        // OpenTelemetry's messaging conventions for Pub/Sub, as Google's other clients name the
        // span and its attributes; the result is recorded when the message is settled. At debug
        // level: at info, merely logging at info made every message build and format a span
        // (+3 µs and 8 allocations a message). Warnings and errors about a message name it in
        // their own fields.
        let traced = self.trace_sample_ratio >= 1.0
            || publisher_sampled(&attributes)
            || fastrand::f64() < self.trace_sample_ratio;
        let span = if !traced {
            tracing::Span::none()
        } else {
            tracing::debug_span!("message",
            subscription = %self.settings.subscription,
            %message_id,
            attempt = ?delivery_attempt,
            otel.name = %self.span_name,
            otel.kind = "consumer",
            messaging.system = "gcp_pubsub",
            messaging.operation.type = "process",
            messaging.destination.name = %self.deliveries.subscription,
            messaging.message.id = %message_id,
            messaging.gcp_pubsub.message.delivery_attempt = delivery_attempt.map(i64::from),
            messaging.gcp_pubsub.message.ordering_key = tracing::field::Empty,
            messaging.gcp_pubsub.result = tracing::field::Empty)
        };
        if !ordering_key.is_empty() {
            span.record(
                "messaging.gcp_pubsub.message.ordering_key",
                ordering_key.as_str(),
            );
        }
        #[cfg(feature = "otel")]
        crate::otel::continue_trace(&span, &attributes);
        let clock = LeaseClock::new(Instant::now(), self.settings.max_lease);
        let lease = LeaseActor::new(
            LeaseState::new(clock, delivery_attempt, self.limit),
            handle,
            message_id.clone(),
            span.clone(),
            Some(permit),
            publish_time,
            children.leases.clone(),
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
            lease: Some(lease.downgrade()),
        };
        // Refused only when the pool is gone (the subscription fails): the lease actor, its
        // last address dropped with the message, ends and its handle nacks.
        let _ = children.dispatch.send(Dispatch {
            delivery,
            data,
            span,
            lease,
        });
    }

    /// Runs the drain: release what no handler started, wait for running handlers (nacking them
    /// at `timeout`), stop the workers, flush the sink, shut the client's streams down, then
    /// stop everything.
    fn drain(&mut self, timeout: Duration, ctx: &mut Context<Self>) {
        if !matches!(self.lifecycle, Lifecycle::Running) {
            return;
        }
        self.lifecycle = Lifecycle::Draining;
        // First: from here on a worker releases whatever it takes, unrun.
        self.draining.store(true, Ordering::SeqCst);
        self.shared.set_state(State::Draining);
        self.shared.watchers.tell(SupervisionEvent::Draining);
        // The pull loops stop feeding the handlers and start releasing; holds end now; messages
        // waiting for a worker are released.
        self.stop.drain.cancel();
        let Some(children) = &self.children else {
            return;
        };
        children.leases.leases.advance(StopStage::Draining);
        children.pool.do_send(Drain);
        let shutdowns: Vec<_> = self
            .streams
            .iter_mut()
            .filter_map(|slot| slot.shutdown.take())
            .collect();
        let flow = self.shared.flow.clone();
        let leases = children.leases.leases.clone();
        let finished = self.stop.finished.clone();
        let (pool, sink) = (children.pool.clone(), children.sink.clone());
        let subscription = self.settings.subscription.clone();
        let drained = async move {
            if tokio::time::timeout(timeout, flow.all_returned())
                .await
                .is_err()
            {
                let left = flow.in_flight().messages;
                if !timeout.is_zero() {
                    tracing::warn!(%subscription, left, ?timeout,
                        "drain timeout: nacking the messages still unsettled");
                }
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
            act.shared.set_state(State::Stopped);
            act.shared.watchers.tell(SupervisionEvent::Stopped);
            for waiter in act.stopped.drain(..) {
                let _ = waiter.send(());
            }
            ctx.stop();
        }));
    }

    fn stream_ended(&mut self, stream: usize, error: Option<SourceError>, ctx: &mut Context<Self>) {
        self.shared
            .stats
            .open_streams
            .fetch_sub(1, Ordering::Relaxed);
        if self.lifecycle != Lifecycle::Running {
            return;
        }
        if let Some(error) = error {
            tracing::error!(subscription = %self.settings.subscription, error = %Chain(&error),
                "message stream failed; leased messages are kept, the stream is reopened");
        }
        Stats::bump(&self.shared.stats.stream_restarts);
        let delay = self.streams[stream].backoff.next_delay(fastrand::f64());
        tracing::warn!(subscription = %self.settings.subscription, stream, ?delay,
            "reopening the message stream");
        self.shared
            .watchers
            .tell(SupervisionEvent::StreamReopening {
                stream,
                after: delay,
            });
        ctx.run_later(delay, move |act, ctx| act.open_stream(stream, ctx));
    }

    fn measure_oldest_lease(&self) {
        let age = self
            .children
            .as_ref()
            .and_then(|c| c.leases.leases.oldest())
            .map_or(Duration::ZERO, |at| at.elapsed());
        self.shared
            .stats
            .oldest_lease_ms
            .store(age.as_millis() as u64, Ordering::Relaxed);
    }

    /// Reads the subscription (when it could be read at start) and asks the progress store, to
    /// know the connection works; logs and reports what changed.
    fn probe(&mut self, ctx: &mut Context<Self>) {
        if self.lifecycle != Lifecycle::Running || self.probing {
            return;
        }
        self.probing = true;
        let connector = self.connector.clone();
        let name = self.settings.subscription.clone();
        let readable = self.info.is_some();
        let store = self.deliveries.progress.clone();
        let store_probe = self.store_probe.clone();
        let timeout = self.probe_interval.min(Duration::from_secs(10));
        let probed = async move {
            let read = if readable {
                Some(tokio::time::timeout(timeout, connector.read_subscription(&name)).await)
            } else {
                None
            };
            let store_ok = match store.as_ref().and_then(std::sync::Weak::upgrade) {
                Some(store) => matches!(
                    crate::guard::call(|| store.completed("leasehold:health-probe")),
                    Ok(Ok(_))
                ),
                None => match store_probe.and_then(|p| crate::guard::call(|| p()).ok().flatten()) {
                    Some(asked) => matches!(
                        crate::guard::Guarded::new(Box::pin(tokio::time::timeout(timeout, asked)))
                            .await,
                        Ok(Ok(Ok(())))
                    ),
                    None => true,
                },
            };
            (read, store_ok)
        };
        ctx.spawn(probed.into_actor(self).map(|(read, store_ok), act, _| {
            act.probing = false;
            act.shared.store_ok.store(store_ok, Ordering::Relaxed);
            if let Some(read) = read {
                act.connectivity_probed(read);
            }
        }));
    }

    fn connectivity_probed(
        &self,
        read: Result<Result<SubscriptionInfo, ReadError>, tokio::time::error::Elapsed>,
    ) {
        let now = SystemTime::now();
        let subscription = &self.settings.subscription;
        let mut current = self.shared.connectivity.lock();
        let next = match read {
            Ok(Ok(_)) => match &*current {
                Connectivity::Connected { .. } => return,
                Connectivity::Unreachable { since, .. } => {
                    let after = now.duration_since(*since).unwrap_or_default();
                    tracing::info!(%subscription, ?after, "Pub/Sub reachable again");
                    Connectivity::Connected { since: now }
                }
                Connectivity::Broken { .. } => {
                    tracing::info!(%subscription, "the subscription can be read again");
                    Connectivity::Connected { since: now }
                }
                _ => {
                    tracing::info!(%subscription, "connected to Pub/Sub");
                    Connectivity::Connected { since: now }
                }
            },
            Ok(Err(ReadError::NotFound(cause) | ReadError::PermissionDenied(cause)))
            | Ok(Err(ReadError::Other {
                code: Some(Code::Unauthenticated),
                cause,
            })) => {
                if matches!(&*current, Connectivity::Broken { .. }) {
                    return;
                }
                let reason = Chain(&cause).to_string();
                tracing::error!(%subscription, %reason,
                    "the subscription cannot be consumed (deleted, or permission refused)");
                Connectivity::Broken { since: now, reason }
            }
            failed => {
                let last_error = match failed {
                    Err(_) => "the probe got no answer in time".to_string(),
                    Ok(Err(e)) => Chain(&e).to_string(),
                    Ok(Ok(_)) => unreachable!(),
                };
                let since = match &*current {
                    Connectivity::Unreachable { since, .. } => *since,
                    _ => {
                        tracing::warn!(%subscription, %last_error,
                            "Pub/Sub unreachable; the streams retry on their own");
                        now
                    }
                };
                Connectivity::Unreachable { since, last_error }
            }
        };
        *current = next;
    }

    /// The subscription failed: its state says why, and its watchers hear it.
    fn mark_failed(&self, reason: String) {
        *self.shared.state.lock() = State::Failed(reason.clone());
        self.shared.watchers.tell(SupervisionEvent::Failed(reason));
    }

    fn fail(&mut self, what: String, ctx: &mut Context<Self>) {
        Stats::bump(&self.shared.stats.actor_failures);
        tracing::error!(subscription = %self.settings.subscription, actor = %what,
            "a Leasehold actor died; every outstanding message is nacked and the subscription \
             fails");
        self.mark_failed(format!("the {what} died"));
        match self.lifecycle {
            Lifecycle::Running => self.drain(Duration::ZERO, ctx),
            _ => {
                if let Some(children) = &self.children {
                    children.leases.leases.advance(StopStage::Abandoned);
                }
            }
        }
    }
}

/// Whether the publisher sampled the message's trace: the flags of the W3C `traceparent` in the
/// `googclient_traceparent` attribute (`00-<trace id>-<span id>-<flags>`, bit 0 sampled).
pub(crate) fn publisher_sampled(attributes: &std::collections::HashMap<String, String>) -> bool {
    attributes
        .get(crate::source::TRACEPARENT_ATTRIBUTE)
        .and_then(|traceparent| traceparent.rsplit('-').next())
        .and_then(|flags| u8::from_str_radix(flags, 16).ok())
        .is_some_and(|flags| flags & 1 == 1)
}

/// Reads the subscription within `timeout`, retrying what is worth it. `None` when the read is
/// not permitted.
async fn read_subscription(
    connector: &dyn Connector,
    name: &str,
    timeout: Duration,
) -> Result<Option<SubscriptionInfo>, StartError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    let mut last = None;
    for attempt in 1u32.. {
        let read = tokio::time::timeout_at(deadline, connector.read_subscription(name)).await;
        let failure = match read {
            Err(_elapsed) => None,
            Ok(Ok(info)) => return Ok(Some(info)),
            Ok(Err(ReadError::PermissionDenied(cause))) => {
                tracing::warn!(subscription = %name, %cause,
                    "cannot read the subscription (needs pubsub.subscriptions.get): \
                     its dead-letter limit is unknown, so drop() acks unless max_attempts is set");
                return Ok(None);
            }
            Ok(Err(ReadError::NotFound(cause))) => {
                return Err(StartError::NotFound {
                    subscription: name.to_string(),
                    cause,
                });
            }
            Ok(Err(ReadError::Other { code, cause })) if !retry_at_start(code) => {
                return Err(StartError::Read {
                    subscription: name.to_string(),
                    code,
                    cause,
                });
            }
            Ok(Err(ReadError::Other { code, cause })) => Some((code, cause)),
        };
        let Some((code, cause)) = failure else {
            break;
        };
        let wait = backoff.next_delay(fastrand::f64());
        tracing::warn!(subscription = %name, attempt, ?code, %cause, retry_in = ?wait,
            "reading the subscription failed; retrying within the start timeout");
        last = Some(cause);
        if Instant::now() + wait >= deadline {
            break;
        }
        tokio::time::sleep(wait).await;
    }
    Err(StartError::Timeout {
        subscription: name.to_string(),
        after: timeout,
        last,
    })
}

impl Actor for SubscriptionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.lifecycle = Lifecycle::Running;
        self.shared.set_state(State::Running);
        self.start_children(ctx);
        for stream in 0..self.streams.len() {
            self.open_stream(stream, ctx);
        }
        // What the status page and the health checks read.
        ctx.run_interval(Duration::from_secs(1), |act, _| act.measure_oldest_lease());
        ctx.run_interval(self.probe_interval, |act, ctx| act.probe(ctx));
        self.probe(ctx);
        // `Subscription::stop` cancels this token.
        let stop = self.shared.stop.clone();
        ctx.spawn(
            async move { stop.cancelled().await }
                .into_actor(self)
                .map(|(), act, ctx| act.drain(act.drain_timeout, ctx)),
        );
    }
}

impl Drop for SubscriptionActor {
    /// Dropped before its drain ended: the supervisor died (a bug in Leasehold, or its arbiter
    /// stopped under it). Nothing may be stranded: every lease is nacked and the workers stop.
    fn drop(&mut self) {
        match self.lifecycle {
            Lifecycle::Stopped => return,
            // Never started: nothing ran, nothing to clean up.
            Lifecycle::Starting => return self.shared.set_state(State::Stopped),
            Lifecycle::Running | Lifecycle::Draining => {}
        }
        Stats::bump(&self.shared.stats.actor_failures);
        tracing::error!(subscription = %self.settings.subscription,
            "the supervisor ended without a stop (it panicked, or its arbiter or system ended); \
             every outstanding message is nacked and the workers stop");
        self.mark_failed("the supervisor died".to_string());
        self.draining.store(true, Ordering::SeqCst);
        self.stop.drain.cancel();
        self.stop.finished.cancel();
        if let Some(children) = &self.children {
            children.leases.leases.advance(StopStage::Abandoned);
            children.pool.do_send(StopWorkers);
            children.pool.do_send(PoolShutdown);
            children.sink.do_send(SinkShutdown);
        }
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
        self.shared.stop.cancel();
        self.drain(self.drain_timeout, ctx);
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
        self.fail(role.to_string(), ctx);
    }
}

/// Test hooks: kill a worker, or make the pool or the sink panic, as bugs in Leasehold would.
#[cfg(test)]
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) enum Sabotage {
    KillWorker(usize),
    CrashPool,
    CrashSink,
}

#[cfg(test)]
impl Handler<Sabotage> for SubscriptionActor {
    type Result = ();

    fn handle(&mut self, sabotage: Sabotage, _: &mut Self::Context) {
        let children = self.children.as_ref().expect("started");
        match sabotage {
            Sabotage::KillWorker(n) => children.pool.do_send(crate::worker_pool::KillWorker(n)),
            Sabotage::CrashPool => children.pool.do_send(crate::worker_pool::Crash),
            Sabotage::CrashSink => children.sink.do_send(crate::ack_sink::Crash),
        }
    }
}
