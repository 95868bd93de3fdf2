//! Whether a subscription is alive and ready, and what it rests on: the supervisor's heartbeat,
//! the connectivity probe, and the verdict.
//!
//! - **Heartbeat.** A task on the supervisor's arbiter sends the supervisor a [`Heartbeat`]
//!   through its mailbox every [`heartbeat_interval`] (a quarter of the liveness timeout, and at
//!   least once a second); the supervisor records each answer (and
//!   measures the oldest lease). `health()` reads how long ago the last answer was: when the
//!   supervisor's thread is blocked or its mailbox stuck, no answer comes, and past the
//!   liveness timeout the subscription is not live. Nothing has to run for `health()` to see
//!   it: a silence is what it measures.
//! - **Connectivity.** Every `health_probe_interval` the supervisor reads the subscription and
//!   asks the store ([`probe`]); [`next_connectivity`] turns what the read met into the next
//!   [`Connectivity`] (an outage, a broken subscription, recovered), and [`log_change`] says so
//!   once per change.
//! - **The verdict.** [`assess`] is a pure function of the state, the connectivity, the store
//!   and the heartbeat.

use crate::api::registration::StoreProbe;
use crate::error::{Chain, Code, ReadError};
use crate::source::{Connector, SubscriptionInfo};
use crate::status::shared::{Connectivity, Health, HealthReason, Shared, State};
use crate::store::progress::ProgressStore;
use actix::WeakAddr;
use actix::prelude::*;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

/// Command: answer, to show the supervisor's mailbox is being served.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct Heartbeat;

/// How often the supervisor is asked for a heartbeat: every quarter of the liveness timeout, and
/// at least once a second (it also paces the oldest-lease measure).
pub(crate) fn heartbeat_interval(liveness_timeout: Duration) -> Duration {
    (liveness_timeout / 4).min(Duration::from_secs(1))
}

/// Sends `supervisor` a [`Heartbeat`] every `every` and waits for each answer, for as long as
/// it lives. Runs on the supervisor's own arbiter: if that thread is blocked, no heartbeat is
/// sent or answered, which is the silence `health()` measures.
pub(crate) async fn heartbeat<A>(supervisor: WeakAddr<A>, every: Duration)
where
    A: Actor + Handler<Heartbeat>,
    A::Context: actix::dev::ToEnvelope<A, Heartbeat>,
{
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        if supervisor.send(Heartbeat).await.is_err() {
            return;
        }
    }
}

/// Whether a subscription is live and ready, and why.
///
/// Not live: failed, broken (not found, permission or authentication refused), or running
/// (or draining) with a supervisor silent for longer than `liveness_timeout`. Ready: live,
/// running, and the store answering. An outage is live and ready: the streams retry on their
/// own, and restarting into the same outage helps nobody.
pub(crate) fn assess(
    state: &State,
    connectivity: &Connectivity,
    store_ok: bool,
    silent_for: Option<Duration>,
    liveness_timeout: Duration,
) -> Health {
    let not_live = |why| Health {
        live: false,
        ready: false,
        why,
    };
    if let State::Failed(failure) = state {
        return not_live(HealthReason::Failed(*failure));
    }
    if let Connectivity::Broken { reason, .. } = connectivity {
        return not_live(HealthReason::Broken {
            reason: reason.clone(),
        });
    }
    if matches!(state, State::Running | State::Draining)
        && let Some(silent_for) = silent_for.filter(|s| *s > liveness_timeout)
    {
        return not_live(HealthReason::Unresponsive { silent_for });
    }
    let live = |ready, why| Health {
        live: true,
        ready,
        why,
    };
    match state {
        State::Starting => live(false, HealthReason::Starting),
        State::Draining => live(false, HealthReason::Draining),
        State::Stopped => live(false, HealthReason::Stopped),
        _ if !store_ok => live(false, HealthReason::StoreDown),
        _ => match connectivity {
            Connectivity::Unreachable { last_error, .. } => live(
                true,
                HealthReason::Unreachable {
                    last_error: last_error.clone(),
                },
            ),
            _ => live(true, HealthReason::Ready),
        },
    }
}

/// What one probe's read of the subscription met: an answer, an error, or no answer in time.
pub(crate) type ProbeRead =
    Result<Result<SubscriptionInfo, ReadError>, tokio::time::error::Elapsed>;

/// What a probe found: the read (none when the subscription could not be read at start), and
/// whether the store answered.
pub(crate) struct Probed {
    pub(crate) read: Option<ProbeRead>,
    pub(crate) store_ok: bool,
}

impl Probed {
    /// Keeps what the probe found where the handles read it, and logs a change of
    /// connectivity.
    pub(crate) fn apply(self, shared: &Shared, subscription: &str) {
        shared.store_ok.store(self.store_ok, Ordering::Relaxed);
        let Some(read) = self.read else {
            return;
        };
        let mut current = shared.connectivity.lock();
        if let Some(next) = next_connectivity(&current, read, SystemTime::now()) {
            log_change(subscription, &current, &next);
            *current = next;
        }
    }
}

/// Reads the subscription (when `readable`) and asks the store, each within `timeout`.
pub(crate) async fn probe(
    connector: Rc<dyn Connector>,
    name: String,
    readable: bool,
    store: Option<std::sync::Weak<dyn ProgressStore>>,
    store_probe: Option<StoreProbe>,
    timeout: Duration,
) -> Probed {
    let read = if readable {
        Some(tokio::time::timeout(timeout, connector.read_subscription(&name)).await)
    } else {
        None
    };
    let store_ok = match store.as_ref().and_then(std::sync::Weak::upgrade) {
        Some(store) => matches!(
            crate::rt::guard::call(|| store.completed("leasehold:health-probe")),
            Ok(Ok(_))
        ),
        None => match store_probe.and_then(|p| crate::rt::guard::call(|| p()).ok().flatten()) {
            Some(asked) => matches!(
                crate::rt::guard::Guarded::new(Box::pin(tokio::time::timeout(timeout, asked)))
                    .await,
                Ok(Ok(Ok(())))
            ),
            None => true,
        },
    };
    Probed { read, store_ok }
}

/// The connectivity after a probe's read; `None` when it did not change.
pub(crate) fn next_connectivity(
    current: &Connectivity,
    read: ProbeRead,
    now: SystemTime,
) -> Option<Connectivity> {
    match read {
        Ok(Ok(_)) => match current {
            Connectivity::Connected { .. } => None,
            _ => Some(Connectivity::Connected { since: now }),
        },
        Ok(Err(ReadError::NotFound(cause) | ReadError::PermissionDenied(cause)))
        | Ok(Err(ReadError::Other {
            code: Some(Code::Unauthenticated),
            cause,
        })) => match current {
            Connectivity::Broken { .. } => None,
            _ => Some(Connectivity::Broken {
                since: now,
                reason: Chain(&cause).to_string(),
            }),
        },
        Err(_) | Ok(Err(_)) => {
            let last_error = match read {
                Ok(Err(e)) => Chain(&e).to_string(),
                _ => "the probe got no answer in time".to_string(),
            };
            let since = match current {
                Connectivity::Unreachable { since, .. } => *since,
                _ => now,
            };
            Some(Connectivity::Unreachable { since, last_error })
        }
    }
}

/// Logs a change of connectivity, once per change (an outage's later failed probes only update
/// its last error).
pub(crate) fn log_change(subscription: &str, from: &Connectivity, to: &Connectivity) {
    match (from, to) {
        (Connectivity::Unreachable { since, .. }, Connectivity::Connected { since: now }) => {
            let after = now.duration_since(*since).unwrap_or_default();
            tracing::info!(%subscription, ?after, "Pub/Sub reachable again");
        }
        (Connectivity::Broken { .. }, Connectivity::Connected { .. }) => {
            tracing::info!(%subscription, "the subscription can be read again");
        }
        (_, Connectivity::Connected { .. }) => {
            tracing::info!(%subscription, "connected to Pub/Sub");
        }
        (_, Connectivity::Broken { reason, .. }) => {
            tracing::error!(%subscription, %reason,
                "the subscription cannot be consumed (deleted, or permission refused)");
        }
        (Connectivity::Unreachable { .. }, Connectivity::Unreachable { .. }) => {}
        (_, Connectivity::Unreachable { last_error, .. }) => {
            tracing::warn!(%subscription, %last_error,
                "Pub/Sub unreachable; the streams retry on their own");
        }
        (_, _) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Cause;
    use crate::status::{Failure, Role};

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn unreachable() -> Connectivity {
        Connectivity::Unreachable {
            since: SystemTime::UNIX_EPOCH,
            last_error: "connection refused".into(),
        }
    }

    #[test]
    fn an_outage_is_live_and_ready_a_broken_subscription_is_neither() {
        let outage = assess(&State::Running, &unreachable(), true, None, TIMEOUT);
        assert!(outage.live && outage.ready);
        assert_eq!(
            outage.to_string(),
            "ready: Pub/Sub unreachable (an outage, retried): connection refused"
        );
        let broken = Connectivity::Broken {
            since: SystemTime::UNIX_EPOCH,
            reason: "gone".into(),
        };
        let health = assess(&State::Running, &broken, true, None, TIMEOUT);
        assert!(!health.live && !health.ready);
        assert_eq!(health.to_string(), "not live: broken: gone");
    }

    #[test]
    fn a_silent_supervisor_is_not_live_past_the_timeout() {
        let connected = Connectivity::Unknown;
        let quiet = Some(Duration::from_secs(9));
        assert!(assess(&State::Running, &connected, true, quiet, TIMEOUT).live);
        let silent = Some(Duration::from_secs(11));
        let health = assess(&State::Running, &connected, true, silent, TIMEOUT);
        assert_eq!(
            (health.live, &health.why),
            (
                false,
                &HealthReason::Unresponsive {
                    silent_for: Duration::from_secs(11)
                }
            )
        );
        assert!(!assess(&State::Draining, &connected, true, silent, TIMEOUT).live);
        // Stopped, nothing answers, and nothing needs to.
        let stopped = assess(&State::Stopped, &connected, true, silent, TIMEOUT);
        assert!(stopped.live && !stopped.ready);
        assert_eq!(stopped.why, HealthReason::Stopped);
    }

    #[test]
    fn a_failure_wins_and_a_silent_store_is_live_but_not_ready() {
        let failed = State::Failed(Failure::ActorDied(Role::AckSink));
        let health = assess(&failed, &unreachable(), true, None, TIMEOUT);
        assert_eq!(health.to_string(), "not live: failed: the ack sink died");
        let store_down = assess(
            &State::Running,
            &Connectivity::Unknown,
            false,
            None,
            TIMEOUT,
        );
        assert!(store_down.live && !store_down.ready);
        assert_eq!(store_down.why, HealthReason::StoreDown);
    }

    #[test]
    fn connectivity_changes_once_per_change() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let connected = next_connectivity(&Connectivity::Unknown, Ok(Ok(info())), now).unwrap();
        assert_eq!(connected, Connectivity::Connected { since: now });
        assert_eq!(next_connectivity(&connected, Ok(Ok(info())), now), None);
        let refused = || {
            Ok(Err(ReadError::Other {
                code: Some(Code::Unavailable),
                cause: Cause::message("refused"),
            }))
        };
        let outage = next_connectivity(&connected, refused(), now).unwrap();
        let later = now + Duration::from_secs(5);
        // Still out: the outage keeps its start, and its last error is the newest.
        let still = next_connectivity(&outage, refused(), later).unwrap();
        assert!(matches!(still, Connectivity::Unreachable { since, .. } if since == now));
        let gone = Ok(Err(ReadError::NotFound(Cause::message("deleted"))));
        let broken = next_connectivity(&still, gone, later).unwrap();
        assert!(matches!(broken, Connectivity::Broken { ref reason, .. } if reason == "deleted"));
        let gone = Ok(Err(ReadError::NotFound(Cause::message("deleted"))));
        assert_eq!(next_connectivity(&broken, gone, later), None);
    }

    fn info() -> SubscriptionInfo {
        SubscriptionInfo {
            exactly_once: false,
            max_delivery_attempts: None,
            ack_deadline: Duration::from_secs(10),
            topic: None,
            dead_letter_topic: None,
        }
    }

    #[test]
    fn the_heartbeat_is_asked_every_quarter_timeout_and_at_least_once_a_second() {
        assert_eq!(
            heartbeat_interval(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(
            heartbeat_interval(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
    }
}
