//! How a subscription's supervisor comes to be: [`SubscriptionActor::new`] checks the
//! registration and reads the subscription (`start.rs`), then builds the actor's parts;
//! [`start`] does that and starts it in the current actix system.

use crate::api::delivery::DeliveryContext;
use crate::api::registration::{Readiness, Registration, StoreProbe};
use crate::error::StartError;
use crate::rules::flow::FlowControl;
use crate::rules::pull_turn::PullTurn;
use crate::source::Connector;
use crate::status::shared::Shared;
use crate::status::stats::Stats;
use crate::supervisor::actor::{Lifecycle, Probing, SubscriptionActor};
use crate::supervisor::children::Handlers;
use crate::supervisor::span::Spans;
use crate::supervisor::streams::Streams;
use crate::supervisor::subscription::Subscription;
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// A transactional store's probe as a breaker's readiness check: ready when it answers.
fn probe_readiness(probe: StoreProbe) -> Readiness {
    Arc::new(move || {
        let probing = crate::rt::guard::call(|| probe()).ok().flatten();
        Box::pin(async move {
            match probing {
                Some(probing) => probing.await.is_ok(),
                None => false,
            }
        })
    })
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
        let batch = registration
            .is_batch()
            .then(|| registration.options.batch_policy());
        let prepared = crate::supervisor::start::prepare(&registration, &*connector).await?;
        let Registration {
            subscription,
            options,
            failure_policy,
            panic_policy,
            handler,
            kind,
            progress,
            store_probe,
            store_aborts,
            readiness,
            prepare,
        } = registration;
        // Pub/Sub dead-letters by its policy; when the policy could not be read,
        // `max_attempts(n)` is the user's word for it.
        let dead_letter_after = prepared
            .info
            .as_ref()
            .and_then(|i| i.max_delivery_attempts)
            .or(options.max_attempts);
        let mut stats = Stats::default();
        if let Some(aborts) = store_aborts {
            stats.store_aborts = aborts;
        }
        let stats = Arc::new(stats);
        if options.breaker.is_some() {
            // Reported from the start, before the pool runs.
            stats
                .breaker
                .set(crate::rules::breaker::BreakerState::Closed);
        }
        let flow = FlowControl::new(
            options.max_outstanding_messages,
            options.max_outstanding_bytes,
        );
        let shared = Arc::new(Shared::new(stats.clone(), flow, options.liveness_timeout));
        let name: Arc<str> = Arc::from(subscription);
        Ok(Self {
            deliveries: Arc::new(DeliveryContext {
                subscription: name.clone(),
                progress: progress.as_ref().map(Arc::downgrade),
                stats,
                dedupe_on: options.dedupe_on.as_deref().map(Arc::from),
            }),
            handlers: Some(Handlers {
                handler,
                prepare,
                kind,
                failure_policy,
                panic_policy,
                progress,
                dedupes: options.dedupe_on.is_some(),
                workers: options.workers,
                worker_threads: options.worker_threads,
                batch,
                // A transactional store's own probe checks the dependency unless the user gave
                // a check.
                breaker: options.breaker.map(|breaker| {
                    (
                        breaker,
                        readiness.or_else(|| store_probe.clone().map(probe_readiness)),
                    )
                }),
            }),
            children: None,
            info: prepared.info,
            limit: prepared.limit,
            streams: Streams::new(
                options.streams,
                connector.clone(),
                prepared.settings,
                &shared,
                options.read_ahead(),
                dead_letter_after,
            ),
            connector,
            lifecycle: Lifecycle::Starting,
            draining: Arc::new(AtomicBool::new(false)),
            drain_timeout: options.drain_timeout,
            spans: Spans::new(name, options.trace_sample_ratio),
            probing: Probing {
                interval: options.health_probe_interval,
                out: false,
                store: store_probe,
            },
            stopped: Vec::new(),
            turn: PullTurn::new(
                batch.map_or(options.workers, |policy| policy.may_start(options.workers)),
            ),
            _alive: shared.alive.token(),
            shared,
        })
    }

    /// A handle on this subscription: counters, state, load, watchers, stop. Take it before
    /// starting the actor; it works once the actor runs.
    pub fn subscription(&self) -> Subscription {
        Subscription::new(self.shared.clone(), self.info.clone(), self.limit)
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
