//! The supervisor: one per subscription. It reads the subscription once, owns the stream, starts
//! a lease actor per message, hands deliveries to the worker pool, and reopens a failed stream
//! with capped exponential backoff.
//!
//! What a stream restart keeps: every message already received keeps its lease actor and its
//! handle, so it is settled as usual (the official client keeps extending those leases while the
//! stream is down). What it loses: nothing that was pulled; messages Pub/Sub had sent but the
//! stream had not yet yielded are redelivered by Pub/Sub.

use crate::ack_sink::{AckSink, Flush};
use crate::delivery::Delivery;
use crate::error::{ReadError, SourceError, StartError};
use crate::lease::LeaseActor;
use crate::lease_state::{LeaseClock, LeaseState};
use crate::registration::Registration;
use crate::source::{Connector, Received, StreamSettings, SubscriptionInfo};
use crate::stats::{Stats, StatsSnapshot};
use crate::worker_pool::{Dispatch, Load, LoadReport, WorkerPool};
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
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
    /// The stream is open and messages flow.
    Running,
    /// The stream failed; it is reopened after a backoff.
    Reconnecting,
    /// Stopped on request: no more pulling.
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
    /// The supervisor's address.
    pub fn addr(&self) -> &Addr<SubscriptionActor> {
        &self.addr
    }
    /// Stops pulling, then waits until every outcome settled so far has been sent (and confirmed
    /// on exactly-once subscriptions). Messages still in handlers keep their leases and are
    /// settled when their handlers return.
    pub async fn stop(&self) {
        let _ = self.addr.send(Stop).await;
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
    let sink = AckSink::new(name.clone(), stats.clone()).start();
    let pool = WorkerPool::new(
        options.workers,
        registration.handler.clone(),
        registration.failure_policy.clone(),
        registration.panic_policy,
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
    let addr = SubscriptionActor {
        settings,
        connector,
        limit,
        pool: pool.clone(),
        sink: sink.clone(),
        stats: stats.clone(),
        backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
        lifecycle: Lifecycle::Running,
    }
    .start();
    Ok(Subscription {
        addr,
        pool,
        sink,
        stats,
        info,
        limit,
    })
}

/// Command: stop pulling. Idempotent.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Supervises one subscription's stream.
pub struct SubscriptionActor {
    settings: StreamSettings,
    connector: Rc<dyn Connector>,
    limit: Option<u32>,
    pool: Addr<WorkerPool>,
    sink: Addr<AckSink>,
    stats: Arc<Stats>,
    backoff: Backoff,
    lifecycle: Lifecycle,
}

impl SubscriptionActor {
    fn open_stream(&mut self, ctx: &mut Context<Self>) {
        if self.lifecycle == Lifecycle::Stopped {
            return;
        }
        self.lifecycle = Lifecycle::Running;
        let source = self.connector.open(&self.settings);
        let stream = futures::stream::unfold(Some(source), |source| async move {
            let mut source = source?;
            match source.next().await? {
                // After an error the stream is over; the supervisor reopens it.
                Err(e) => Some((Err(e), None)),
                Ok(received) => Some((Ok(received), Some(source))),
            }
        });
        ctx.add_stream(stream);
    }

    fn on_received(&mut self, received: Received) {
        Stats::bump(&self.stats.received);
        let Received {
            message_id,
            data,
            attributes,
            ordering_key,
            publish_time,
            delivery_attempt,
            handle,
        } = received;
        let span = tracing::info_span!("message",
            subscription = %self.settings.subscription,
            %message_id,
            attempt = ?delivery_attempt);
        let clock = LeaseClock::new(Instant::now(), self.settings.max_lease);
        let lease = LeaseActor::new(
            LeaseState::new(clock, delivery_attempt, self.limit),
            handle,
            message_id.clone(),
            self.sink.clone().recipient(),
            self.stats.clone(),
            span.clone(),
        )
        .start();
        let delivery = Delivery {
            subscription: self.settings.subscription.clone(),
            message_id,
            attributes,
            ordering_key,
            publish_time,
            delivery_attempt,
            clock,
            lease: lease.recipient(),
        };
        self.pool.do_send(Dispatch {
            delivery,
            data,
            span,
        });
    }
}

impl Actor for SubscriptionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.open_stream(ctx);
    }
}

impl StreamHandler<Result<Received, SourceError>> for SubscriptionActor {
    fn handle(&mut self, item: Result<Received, SourceError>, _: &mut Self::Context) {
        match item {
            Ok(received) => {
                self.backoff.reset(RESTART_BACKOFF_INITIAL);
                self.on_received(received);
            }
            Err(error) => {
                tracing::error!(subscription = %self.settings.subscription, %error,
                    "message stream failed; leased messages are kept, the stream is reopened");
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        if self.lifecycle == Lifecycle::Stopped {
            return;
        }
        self.lifecycle = Lifecycle::Reconnecting;
        Stats::bump(&self.stats.stream_restarts);
        let delay = self.backoff.next_delay(fastrand::f64());
        tracing::warn!(subscription = %self.settings.subscription, ?delay,
            "reopening the message stream");
        ctx.run_later(delay, |act, ctx| act.open_stream(ctx));
    }
}

impl Handler<Stop> for SubscriptionActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        self.lifecycle = Lifecycle::Stopped;
        // Stopping drops the stream: the client stops pulling and keeps leasing what is out.
        ctx.stop();
    }
}

#[cfg(test)]
mod tests;
