//! The handle on a running subscription, what it reports, and [`start`].
//!
//! A [`Subscription`] is a cheap, cloneable, `Send` handle: counters, state, load, the stop.
//! It does not own the consumer: dropping every handle leaves it consuming.

use crate::error::StartError;
use crate::flow::{FlowControl, InFlight};
use crate::registration::Registration;
use crate::source::{Connector, SubscriptionInfo};
use crate::stats::{FailureRecord, Histograms, Stats, StatsSnapshot};
use crate::supervisor::SubscriptionActor;
use crate::worker_pool::LoadReport;
use actix::prelude::*;
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
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

/// What the supervisor knows of the connection to Pub/Sub, from its periodic probe (reading the
/// subscription every [`health_probe_interval`](crate::Registration::health_probe_interval)).
///
/// The official client retries a broken stream inside itself and says nothing, so "no message
/// lately" cannot tell an idle subscription from a broken connection: the probe can.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Connectivity {
    /// Not probed yet, or not probed at all (the subscription could not be read at start:
    /// no `pubsub.subscriptions.get`).
    Unknown,
    /// The last probe was answered.
    Connected {
        /// Since when.
        since: SystemTime,
    },
    /// Probes have failed since `since`: an outage. The streams retry on their own; nothing to
    /// restart.
    Unreachable {
        /// Since when.
        since: SystemTime,
        /// What the last probe met (an error's text from the client or the server).
        last_error: String,
    },
    /// The subscription cannot be consumed: it was deleted, or permission or authentication is
    /// refused. Not an outage: it lasts until someone fixes it.
    Broken {
        /// Since when.
        since: SystemTime,
        /// Why.
        reason: String,
    },
}

/// Whether a subscription is alive and ready, and why not, for an orchestrator's probes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The actors answer and the subscription has no permanent error (not found, permission
    /// denied, unauthenticated) and did not fail. An outage does not make it not live: restarting
    /// into the same outage helps nobody.
    pub live: bool,
    /// Running (not starting, not draining), live, and the progress store answers.
    pub ready: bool,
    /// What the two rest on, in words.
    pub why: String,
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
    pub(crate) connectivity: Mutex<Connectivity>,
    /// The progress store answered the last probe (or there is none).
    pub(crate) store_ok: std::sync::atomic::AtomicBool,
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
            connectivity: Mutex::new(Connectivity::Unknown),
            store_ok: std::sync::atomic::AtomicBool::new(true),
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
    /// Streams open now (the others wait to reopen after their backoff).
    pub fn open_streams(&self) -> usize {
        self.shared.stats.open_streams.load(Ordering::Relaxed)
    }
    /// What the last probes found of the connection to Pub/Sub.
    pub fn connectivity(&self) -> Connectivity {
        self.shared.connectivity.lock().clone()
    }
    /// Whether the subscription is live and ready, and why.
    pub fn health(&self) -> Health {
        let state = self.state();
        let connectivity = self.connectivity();
        let store_ok = self.shared.store_ok.load(Ordering::Relaxed);
        let (live, why_live) = match (&state, &connectivity) {
            (State::Failed(reason), _) => (false, format!("failed: {reason}")),
            (_, Connectivity::Broken { reason, .. }) => (false, format!("broken: {reason}")),
            (_, Connectivity::Unreachable { last_error, .. }) => (
                true,
                format!("Pub/Sub unreachable (an outage, retried): {last_error}"),
            ),
            _ => (true, "live".to_string()),
        };
        let ready = live && state == State::Running && store_ok;
        let why = match (&state, ready) {
            (_, true) => format!("ready; {why_live}"),
            (State::Starting, _) => "starting".to_string(),
            (State::Draining, _) => "draining".to_string(),
            (State::Stopped, _) => "stopped".to_string(),
            _ if !store_ok => format!("the progress store does not answer; {why_live}"),
            _ => why_live,
        };
        Health { live, ready, why }
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
