//! What the actors of one subscription and its [`Subscription`](crate::Subscription) handles
//! share, and the words they report in: the [`State`] of the consumer, why it [`Failure`]d,
//! what is known of the [`Connectivity`], and the [`SupervisionEvent`]s its watchers hear.
//!
//! Below every actor: the supervisor, the pool and the handle all import it, and it imports
//! none of them.

use crate::rt::breaker_signal::BreakerSignal;
use crate::rt::lifeline::Role;
use crate::rules::flow::FlowControl;
use crate::status::stats::Stats;
use actix::prelude::*;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a subscription's consumer is in its life, as
/// [`Subscription::state`](crate::Subscription::state) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Built, not started yet (a [`SubscriptionActor`](crate::supervisor::SubscriptionActor) not yet
    /// started).
    Starting,
    /// Pulling and running handlers.
    Running,
    /// A stop began: nothing new starts; running handlers finish (up to the drain timeout).
    Draining,
    /// Stopped: every message settled, every actor and worker thread gone.
    Stopped,
    /// The subscription failed (a bug in Leasehold, logged at error): everything outstanding was
    /// nacked (Pub/Sub redelivers it) and the consumer stopped pulling. `stop()` still ends it
    /// cleanly. The [`Failure`] says why.
    Failed(Failure),
}

/// Why a subscription failed ([`State::Failed`], [`SupervisionEvent::Failed`],
/// [`HealthReason::Failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// One of Leasehold's own actors died without being stopped: a panic in Leasehold's code,
    /// or its arbiter (thread) stopped under it. Every outstanding message was nacked (Pub/Sub
    /// redelivers it) and pulling stopped; worker threads are restarted instead and never fail
    /// a subscription.
    #[error("the {0} died")]
    ActorDied(Role),
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

/// Whether a subscription is alive and ready, and why, for an orchestrator's probes
/// ([`Subscription::health`](crate::Subscription::health)). Its `Display` is one line:
/// `ready: ...` or `not ready: ...`, and `not live` when it is not live.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The supervisor answers its heartbeat (within
    /// [`liveness_timeout`](crate::Registration::liveness_timeout)), and the subscription has
    /// neither failed nor met a permanent error (not found, permission denied,
    /// unauthenticated). An outage does not make it not live: restarting into the same outage
    /// helps nobody.
    pub live: bool,
    /// Running (not starting, not draining), live, and the progress store answers.
    pub ready: bool,
    /// What decided the two.
    pub why: HealthReason,
}

/// What decided a subscription's [`Health`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthReason {
    /// Live and ready: running, its supervisor answering, Pub/Sub reachable (or not probed
    /// yet), its store answering.
    Ready,
    /// Live and ready, but Pub/Sub does not answer the probe: an outage, which the streams
    /// retry on their own.
    Unreachable {
        /// What the last probe met.
        last_error: String,
    },
    /// Live, not ready: not started yet.
    Starting,
    /// Live, not ready: a stop began.
    Draining,
    /// Live, not ready: stopped.
    Stopped,
    /// Live, not ready: the progress store (or the transactional store) did not answer the
    /// last probe.
    StoreDown,
    /// Not live: the subscription cannot be consumed (deleted, permission or authentication
    /// refused).
    Broken {
        /// Why, as the probe met it.
        reason: String,
    },
    /// Not live: the subscription failed.
    Failed(Failure),
    /// Not live: the supervisor has not answered its heartbeat for longer than
    /// [`liveness_timeout`](crate::Registration::liveness_timeout). Its thread is blocked (a
    /// handler blocking with `worker_threads(0)`, a progress store blocking in the health
    /// probe) or the actor is stuck: no lease is extended or settled meanwhile.
    Unresponsive {
        /// How long since its last answer.
        silent_for: Duration,
    },
}

impl std::fmt::Display for HealthReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ready => f.write_str("live"),
            Self::Unreachable { last_error } => {
                write!(f, "Pub/Sub unreachable (an outage, retried): {last_error}")
            }
            Self::Starting => f.write_str("starting"),
            Self::Draining => f.write_str("draining"),
            Self::Stopped => f.write_str("stopped"),
            Self::StoreDown => f.write_str("the progress store does not answer"),
            Self::Broken { reason } => write!(f, "broken: {reason}"),
            Self::Failed(failure) => write!(f, "failed: {failure}"),
            Self::Unresponsive { silent_for } => write!(
                f,
                "the supervisor has not answered its heartbeat for {:.1}s",
                silent_for.as_secs_f64()
            ),
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = match (self.live, self.ready) {
            (_, true) => "ready",
            (true, false) => "not ready",
            (false, false) => "not live",
        };
        write!(f, "{verdict}: {}", self.why)
    }
}

/// What the supervisor of a subscription tells whoever watches it
/// ([`Subscription::watch`](crate::Subscription::watch)): restarts, failures, the drain.
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
    /// The subscription failed; the [`Failure`] says why.
    Failed(Failure),
    /// A stop began.
    Draining,
    /// The stop ended: every message settled, every actor gone.
    Stopped,
}

/// Whoever watches a subscription.
#[derive(Default)]
pub(crate) struct Watchers(Mutex<Vec<Recipient<SupervisionEvent>>>);

impl Watchers {
    pub(crate) fn add(&self, watcher: Recipient<SupervisionEvent>) {
        self.0.lock().push(watcher);
    }

    pub(crate) fn tell(&self, event: SupervisionEvent) {
        let mut watchers = self.0.lock();
        // A watcher that stopped is forgotten.
        watchers.retain(|w| w.connected());
        for watcher in watchers.iter() {
            watcher.do_send(event.clone());
        }
    }
}

/// When the supervisor last answered its heartbeat, for [`Health::live`]. Written on the
/// supervisor's thread, read by any handle.
pub(crate) struct LastHeartbeat {
    /// What the times are counted from.
    epoch: Instant,
    /// Milliseconds from `epoch` to the last answer; `u64::MAX` before the first.
    last: AtomicU64,
}

impl LastHeartbeat {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last: AtomicU64::new(u64::MAX),
        }
    }

    /// The supervisor answered now.
    pub(crate) fn beat(&self) {
        let now = self.epoch.elapsed().as_millis();
        self.last.store(
            u64::try_from(now).unwrap_or(u64::MAX - 1),
            Ordering::Relaxed,
        );
    }

    /// How long since the last answer; `None` before the first.
    pub(crate) fn silent_for(&self) -> Option<Duration> {
        let last = self.last.load(Ordering::Relaxed);
        (last != u64::MAX).then(|| {
            self.epoch
                .elapsed()
                .saturating_sub(Duration::from_millis(last))
        })
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
    pub(crate) store_ok: AtomicBool,
    /// The supervisor's answers to its heartbeat.
    pub(crate) heartbeat: LastHeartbeat,
    /// How long the supervisor may go without answering before the subscription is not live.
    pub(crate) liveness_timeout: Duration,
    /// Set by the worker pool while its breaker is open; the supervisor tells the connector.
    pub(crate) breaker: Arc<BreakerSignal>,
}

impl Shared {
    pub(crate) fn new(stats: Arc<Stats>, flow: FlowControl, liveness_timeout: Duration) -> Self {
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
            store_ok: AtomicBool::new(true),
            heartbeat: LastHeartbeat::new(),
            liveness_timeout,
            breaker: Arc::default(),
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

    /// The subscription failed: its state says why (the first failure stays), and its watchers
    /// hear it.
    pub(crate) fn fail(&self, failure: Failure) {
        {
            let mut current = self.state.lock();
            if matches!(*current, State::Failed(_)) {
                return;
            }
            *current = State::Failed(failure);
        }
        self.watchers.tell(SupervisionEvent::Failed(failure));
    }
}
