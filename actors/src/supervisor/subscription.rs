//! The handle on a running subscription and what it reports.
//!
//! A [`Subscription`] is a cheap, cloneable, `Send` handle: counters, state, load, health, the
//! stop. It holds no address of any actor, only what the supervisor shares with it (`shared.rs`):
//! dropping every handle leaves the consumer consuming.

use crate::rules::flow::InFlight;
use crate::source::SubscriptionInfo;
use crate::status::breaker::BreakerReport;
use crate::status::shared::{Connectivity, Health, Shared, State, SupervisionEvent};
use crate::status::snapshot::StatsSnapshot;
use crate::status::stats::{FailureRecord, Histograms, LoadReport};
use crate::supervisor::health;
use actix::prelude::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A handle on one subscription's consumer.
///
/// Cloned handles share the consumer. Dropping every handle does not stop it: call
/// [`stop`](Self::stop).
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Delivery, Registration, Subscription, source::Connector};
/// # use std::rc::Rc;
/// # async fn run(connector: Rc<dyn Connector>) -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///     d.ack()
/// });
/// let subscription = leasehold::start_with(registration, connector).await?;
/// // ... later, on SIGTERM:
/// subscription.stop().await;
/// println!("{:?}", subscription.stats());
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "dropping the handle does not stop consuming: keep it to stop() the subscription"]
pub struct Subscription {
    shared: Arc<Shared>,
    info: Option<SubscriptionInfo>,
    limit: Option<u32>,
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
    pub(crate) fn new(
        shared: Arc<Shared>,
        info: Option<SubscriptionInfo>,
        limit: Option<u32>,
    ) -> Self {
        Self {
            shared,
            info,
            limit,
        }
    }

    /// The live counters: what each counts, and how they add up, is on [`StatsSnapshot`].
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }
    /// What was read of the subscription at start; `None` when the read was not permitted.
    pub fn info(&self) -> Option<&SubscriptionInfo> {
        self.info.as_ref()
    }
    /// The dead-letter limit in force for `drop()`.
    pub fn max_attempts(&self) -> Option<u32> {
        self.limit
    }
    /// Where the consumer is in its life: starting, running, draining, stopped, or failed (with
    /// why).
    pub fn state(&self) -> State {
        self.shared.state.lock().clone()
    }
    /// Messages handed to a worker whose handler has not finished, and messages waiting for a
    /// worker or for their ordering key.
    pub fn load(&self) -> LoadReport {
        let stats = &self.shared.stats;
        LoadReport {
            running: stats.running.load(Ordering::Relaxed),
            waiting: stats.waiting.load(Ordering::Relaxed),
            read_ahead: stats.read_ahead.load(Ordering::Relaxed),
            read_ahead_bytes: stats.read_ahead_bytes.load(Ordering::Relaxed),
        }
    }
    /// Messages and payload bytes outstanding now: received and not yet settled.
    pub fn in_flight(&self) -> InFlight {
        self.shared.flow.in_flight()
    }
    /// The latency histograms: handler duration, publication to settle, lease held, and
    /// exactly-once confirmation.
    pub fn histograms(&self) -> Histograms {
        self.shared.stats.histograms()
    }
    /// The newest failures (at most [`RECENT_FAILURES`](crate::defaults::RECENT_FAILURES)),
    /// oldest first: message id, attempt, kind. Never a payload.
    pub fn recent_failures(&self) -> Vec<FailureRecord> {
        self.shared.stats.recent_failures()
    }
    /// How long the oldest outstanding message has been leased (measured once a second); zero
    /// when none is.
    pub fn oldest_lease(&self) -> Duration {
        Duration::from_millis(self.shared.stats.oldest_lease_ms.load(Ordering::Relaxed))
    }
    /// Messages whose `retry_after` hold is running now.
    pub fn holding(&self) -> usize {
        self.shared.stats.holding.load(Ordering::Relaxed)
    }
    /// The outage breaker's state, the messages it holds and how long it has been open;
    /// `None` when the registration has no [`Breaker`](crate::Breaker).
    pub fn breaker(&self) -> Option<BreakerReport> {
        let stats = &self.shared.stats;
        stats
            .breaker
            .report(stats.breaker_trips.load(Ordering::Relaxed))
    }
    /// Streams open now (the others wait to reopen after their backoff).
    pub fn open_streams(&self) -> usize {
        self.shared.stats.open_streams.load(Ordering::Relaxed)
    }
    /// What the last probes found of the connection to Pub/Sub.
    pub fn connectivity(&self) -> Connectivity {
        self.shared.connectivity.lock().clone()
    }
    /// Whether the subscription is live and ready, and why: not live when it failed, when
    /// the subscription cannot be consumed (deleted, permission refused), or when its
    /// supervisor has not answered its heartbeat within
    /// [`liveness_timeout`](crate::Registration::liveness_timeout); ready when it is live,
    /// running and its store answers. An outage is live and ready. See [`Health`].
    pub fn health(&self) -> Health {
        health::assess(
            &self.state(),
            &self.connectivity(),
            self.shared.store_ok.load(Ordering::Relaxed),
            self.shared.heartbeat.silent_for(),
            self.shared.liveness_timeout,
        )
    }
    /// Sends every later [`SupervisionEvent`] of this subscription (worker restarts, stream
    /// reopenings, a failure, the drain) to `watcher`, such as an actor of yours that restarts
    /// a failed subscription. A watcher that stops is forgotten.
    ///
    /// ```no_run
    /// # extern crate leasehold_actors as leasehold;
    /// use actix::prelude::*;
    /// use leasehold::source::Connector;
    /// use leasehold::status::SupervisionEvent;
    /// use leasehold::supervisor::{Stop, SubscriptionActor};
    /// use leasehold::{Delivery, Registration};
    /// use std::rc::Rc;
    ///
    /// struct Watch;
    /// impl Actor for Watch { type Context = Context<Self>; }
    /// impl Handler<SupervisionEvent> for Watch {
    ///     type Result = ();
    ///     fn handle(&mut self, event: SupervisionEvent, _: &mut Context<Self>) {
    ///         eprintln!("supervision: {event:?}");
    ///     }
    /// }
    ///
    /// async fn run(connector: Rc<dyn Connector>) -> Result<(), Box<dyn std::error::Error>> {
    ///     let orders = "projects/p/subscriptions/orders";
    ///     let registration = Registration::raw(orders, |_, d: Delivery| {
    ///         let (later, settler) = d.settle_later();
    ///         std::thread::spawn(move || settler.ack()); // settled elsewhere
    ///         async move { later }
    ///     });
    ///     let actor = SubscriptionActor::new(registration, connector).await?;
    ///     let subscription = actor.subscription();
    ///     subscription.watch(Watch.start().recipient());
    ///     let address = actor.start();
    ///     // ... until it is time to stop:
    ///     address.send(Stop).await?; // drained; subscription.stop() also waits until
    ///     subscription.stop().await; // every actor and worker thread is gone
    ///     Ok(())
    /// }
    /// ```
    ///
    /// In the `leasehold` crate, actix is `leasehold::actix`.
    pub fn watch(&self, watcher: Recipient<SupervisionEvent>) {
        self.shared.watchers.add(watcher);
    }
    /// Stops and drains; returns when done. Idempotent: later calls wait for the same drain.
    ///
    /// Pulling stops at once; `retry_after` holds and messages no handler has started are nacked
    /// at once (the delay is lost, not the message). Running handlers get up to the drain timeout
    /// to finish; whatever is unsettled then is nacked and the handlers are cut. Then every ack
    /// and nack is sent and, on exactly-once subscriptions, confirmed or refused, and the
    /// client's streams shut down once they have sent them. When it returns, no actor or worker
    /// thread of this subscription is alive, and the handler and the progress store have been
    /// dropped (unless you keep a clone of the `Registration`), so a `RedbStore` on the same
    /// path opens again at once. A handler that blocks its thread past the drain is the
    /// exception, since it cannot be cut: its message was nacked, `stop()` waits two seconds more
    /// for that thread, then logs an error and returns, leaving the thread to end on its own. A
    /// [`SubscriptionActor`](crate::supervisor::SubscriptionActor) built and not started yet
    /// stops as soon as it is started, and `stop()` waits for that (or for it to be dropped).
    pub async fn stop(&self) {
        self.shared.stop.cancel();
        self.shared.alive.wait().await;
    }
}
