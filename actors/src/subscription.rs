//! The handle on a running subscription, what it reports, and [`start`].
//!
//! A [`Subscription`] is a cheap, cloneable, `Send` handle: counters, state, load, the stop.
//! It does not own the consumer: dropping every handle leaves it consuming.

use crate::error::StartError;
use crate::flow::{FlowControl, InFlight};
use crate::registration::Registration;
use crate::source::{Connector, SubscriptionInfo};
use crate::stats::{Stats, StatsSnapshot};
use crate::supervisor::SubscriptionActor;
use crate::worker_pool::LoadReport;
use actix::prelude::*;
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a subscription's consumer is in its life, as [`Subscription::state`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Built, not started yet (a [`SubscriptionActor`] not yet started).
    Starting,
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

/// What the supervisor of a subscription tells whoever watches it
/// ([`Subscription::watch`]): restarts, failures, the drain.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
#[non_exhaustive]
pub enum SupervisionEvent {
    /// A worker died and was started again; the messages its handlers ran were nacked.
    WorkerRestarted {
        /// Which worker (0-based).
        worker: usize,
        /// Worker restarts so far, all workers together.
        restarts: u64,
    },
    /// A stream ended and is reopened after `after`.
    StreamReopening {
        /// Which stream (0-based).
        stream: usize,
        /// The backoff before it reopens.
        after: Duration,
    },
    /// A Leasehold actor died and the subscription failed; the text says which.
    Failed(String),
    /// A stop began.
    Draining,
    /// The stop ended: every message settled, every actor gone.
    Stopped,
}

/// Whoever watches a subscription.
#[derive(Default)]
pub(crate) struct Watchers(Mutex<Vec<Recipient<SupervisionEvent>>>);

impl Watchers {
    pub(crate) fn tell(&self, event: SupervisionEvent) {
        let mut watchers = self.0.lock();
        // A watcher that stopped is forgotten.
        watchers.retain(|w| w.connected());
        for watcher in watchers.iter() {
            watcher.do_send(event.clone());
        }
    }
}

/// What the supervisor and every handle of one subscription share.
pub(crate) struct Shared {
    pub(crate) stats: Arc<Stats>,
    pub(crate) flow: FlowControl,
    pub(crate) state: Mutex<State>,
    /// Cancelled by `stop()`: the supervisor begins its drain.
    pub(crate) stop: CancellationToken,
    /// Counts the subscription's live actors: `stop()` returns once none is left. (Closed from
    /// the start: tokens taken later still count.)
    pub(crate) alive: TaskTracker,
    pub(crate) watchers: Watchers,
}

impl Shared {
    pub(crate) fn new(stats: Arc<Stats>, flow: FlowControl) -> Self {
        let alive = TaskTracker::new();
        alive.close();
        Self {
            stats,
            flow,
            state: Mutex::new(State::Starting),
            stop: CancellationToken::new(),
            alive,
            watchers: Watchers::default(),
        }
    }

    /// Moves to `state`, unless the subscription failed: a failure is what the handles keep
    /// reporting, through the drain and after.
    pub(crate) fn set_state(&self, state: State) {
        let mut current = self.state.lock();
        if !matches!(*current, State::Failed(_)) {
            *current = state;
        }
    }
}

/// A handle on one subscription's consumer.
///
/// Cloned handles share the consumer. Dropping every handle does not stop it: call
/// [`stop`](Self::stop).
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Connector, Delivery, Registration, Subscription};
/// # use std::rc::Rc;
/// # async fn run(connector: Rc<dyn Connector>) -> Result<(), Box<dyn std::error::Error>> {
/// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
///     d.ack()
/// });
/// let subscription = leasehold::start(registration, connector).await?;
/// // ... later, on SIGTERM:
/// subscription.stop().await;
/// println!("{:?}", subscription.stats());
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "dropping the handle does not stop consuming: keep it to stop() the subscription"]
pub struct Subscription {
    pub(crate) shared: Arc<Shared>,
    pub(crate) info: Option<SubscriptionInfo>,
    pub(crate) limit: Option<u32>,
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
    /// The live counters. They count deliveries, not messages: a message delivered five times
    /// counts five times in `received` (and in whatever settled each delivery).
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
        }
    }
    /// Messages and payload bytes outstanding now: received and not yet settled.
    pub fn in_flight(&self) -> InFlight {
        self.shared.flow.in_flight()
    }
    /// Sends every later [`SupervisionEvent`] of this subscription (worker restarts, stream
    /// reopenings, a failure, the drain) to `watcher`, such as an actor of yours that restarts
    /// a failed subscription. A watcher that stops is forgotten.
    pub fn watch(&self, watcher: Recipient<SupervisionEvent>) {
        self.shared.watchers.0.lock().push(watcher);
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
    /// when the call returns (logged at error). A [`SubscriptionActor`] built and not started
    /// yet stops as soon as it is started, and `stop()` waits for that (or for it to be
    /// dropped).
    pub async fn stop(&self) {
        self.shared.stop.cancel();
        self.shared.alive.wait().await;
    }
}

/// Starts consuming `registration.subscription()` through `connector`: the shorthand for
/// [`SubscriptionActor::new`], [`SubscriptionActor::subscription`] and `start()` in the
/// current actix system.
///
/// Reads the subscription once (exactly-once flag, dead-letter limit, ack deadline), retrying
/// transient failures within the registration's start timeout, then opens the streams. Fails
/// without pulling anything when the name is invalid, an option is out of range, the
/// subscription does not exist or cannot be read in time.
pub async fn start(
    registration: Registration,
    connector: Rc<dyn Connector>,
) -> Result<Subscription, StartError> {
    let actor = SubscriptionActor::new(registration, connector).await?;
    let subscription = actor.subscription();
    actor.start();
    Ok(subscription)
}
