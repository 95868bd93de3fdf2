//! A service running: every subscription started with its handler and options (one set of
//! clients for all), the HTTP surface served, and the drain on shutdown.
//!
//! Uses [`crate::builder`] (the service as built), [`crate::http`] to serve,
//! [`crate::observe`] for what it serves, [`crate::config`] and [`crate::error`].

use crate::builder::{Service, Summary, termination};
use crate::config::ConfigError;
use crate::error::ServiceError;
use crate::http::{Listen, serve_http};
use crate::observe::running::{Running, Subscriptions, Window};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Service {
    /// Runs until SIGTERM or SIGINT, then drains every subscription (readiness turns false at
    /// once) and returns what they did.
    pub async fn run(self) -> Result<Summary, ServiceError> {
        self.run_until(termination()).await
    }

    /// Runs until `shutdown` resolves, then drains every subscription and returns.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Summary, ServiceError> {
        if let Some(key) = self
            .handlers
            .keys()
            .find(|k| !self.config.subscriptions.contains_key(*k))
        {
            return Err(ServiceError::NoSubscription { key: key.clone() });
        }
        if let Some(key) = self
            .config
            .subscriptions
            .keys()
            .find(|k| !self.handlers.contains_key(*k))
        {
            return Err(ServiceError::NoHandler { key: key.clone() });
        }
        if let Some(key) = self
            .relays
            .keys()
            .find(|k| !self.config.subscriptions.contains_key(*k))
        {
            return Err(ServiceError::NoSubscription { key: key.clone() });
        }
        // An outbox table out of range, or with no store to relay, stops the start here too.
        let mut relay_options = BTreeMap::new();
        for (key, table) in &self.config.subscriptions {
            let outbox = table.outbox.clone().unwrap_or_default();
            let problem = |problem: String| ConfigError::Outbox {
                key: key.clone(),
                problem,
            };
            let options = outbox.options().map_err(problem)?;
            match (self.relays.contains_key(key), outbox.runs_relay()) {
                (true, true) => {
                    relay_options.insert(key.clone(), options);
                }
                (false, true) if table.outbox.is_some() => {
                    return Err(problem(format!(
                        "an outbox table, but no store bound to relay: Service::outbox(\"{key}\", \
                         store), or outbox.relay = false"
                    ))
                    .into());
                }
                _ => {}
            }
        }
        // A push table that is incomplete or unsafe stops the start before any client is built.
        let connection = self.config.connection.connection();
        let mut paths = BTreeMap::new();
        for (key, table) in &self.config.subscriptions {
            table.push_endpoint(key, connection.is_emulator())?;
            if let Some(push) = &table.push
                && let Some(other) = paths.insert(push.path.as_str(), key)
            {
                return Err(ConfigError::Push {
                    key: key.clone(),
                    problem: format!("push.path {} is also {other}'s", push.path),
                }
                .into());
            }
        }
        // One set of clients for every subscription.
        let connector = connection.connect().await?;
        let mut started: Vec<Running> = Vec::new();
        // The process's schema revisions, made for the first schema handler.
        let mut schemas = None;
        for (key, table) in &self.config.subscriptions {
            let build = self.handlers.remove(key).expect("checked above");
            let built = build.build(key, table, &connection, &mut schemas).await;
            let push = table.push_endpoint(key, connection.is_emulator());
            let result = match (built, push) {
                (Ok((built, schema)), Ok(push)) => {
                    let sampled =
                        built.trace_sample_ratio(self.config.telemetry.trace_sample_ratio);
                    match table.apply(key, sampled).await {
                        Ok(registration) => Ok((registration, schema, push)),
                        Err(e) => Err(e.into()),
                    }
                }
                (Err(e), _) => Err(e),
                (_, Err(e)) => Err(e.into()),
            };
            let result = match result {
                Ok((registration, schema, push)) => {
                    let max_lease = registration.options().max_lease;
                    let window = Window::of(registration.options());
                    // A push subscription reads its subscription through the same clients;
                    // its stream is what its endpoint admits.
                    let (connector, push) = match push {
                        Some(push) => {
                            let (connector, endpoint) = push.bind(&table.name, connector.clone());
                            (connector, Some(endpoint))
                        }
                        None => (connector.clone(), None),
                    };
                    leasehold::start_with(registration, connector)
                        .await
                        .map(|subscription| Running {
                            key: key.clone(),
                            subscription,
                            // A push's lease is its deadline, read at start.
                            max_lease: push
                                .as_ref()
                                .map_or(max_lease, |p| p.deadline().min(max_lease)),
                            window,
                            push,
                            dead_letter_subscription: table.dead_letter_subscription.clone(),
                            replay: None,
                            replays_dir: Some(self.config.http.replays_dir()),
                            schema,
                            relay: None,
                        })
                        .map_err(|cause| ServiceError::Start {
                            key: key.clone(),
                            cause,
                        })
                }
                Err(e) => Err(e),
            };
            // Its outbox's relay, once it consumes.
            let result = match (result, self.relays.remove(key), relay_options.remove(key)) {
                (Ok(mut running), Some(start), Some(options)) => {
                    match start(connection.clone(), options).await {
                        Ok(relay) => {
                            running.relay = Some(relay);
                            Ok(running)
                        }
                        Err(cause) => {
                            running.subscription.stop().await;
                            Err(ServiceError::Relay {
                                key: key.clone(),
                                cause,
                            })
                        }
                    }
                }
                (result, _, _) => result,
            };
            match result {
                Ok(running) => started.push(running),
                Err(error) => {
                    futures::future::join_all(started.iter().map(|r| r.subscription.stop())).await;
                    stop_relays(&started).await;
                    return Err(error);
                }
            }
        }
        let subscriptions: Subscriptions = Arc::new(started);
        let address = self.config.http.address.clone();
        let (shared, http, sampler) = match serve_http(
            subscriptions.clone(),
            Listen::Address(address.clone()),
            self.config.http.workers,
        ) {
            Ok(serving) => serving,
            Err(error) => {
                futures::future::join_all(subscriptions.iter().map(|r| r.subscription.stop()))
                    .await;
                stop_relays(&subscriptions).await;
                return Err(error);
            }
        };
        tracing::info!(%address, subscriptions = subscriptions.len(),
            "serving /metrics, /livez, /readyz and the status page");

        shutdown.await;
        shared.draining.store(true, Ordering::SeqCst);
        tracing::info!("draining every subscription");
        futures::future::join_all(subscriptions.iter().map(|r| r.subscription.stop())).await;
        // After the subscriptions, so that no commit comes after its relay stopped: each relay
        // finishes the round it is sending; rows not leased yet stay for the next start or
        // another replica's relay.
        stop_relays(&subscriptions).await;
        sampler.abort();
        http.stop(true).await;
        let summary = Summary {
            subscriptions: subscriptions
                .iter()
                .map(|r| (r.key.clone(), r.subscription.stats()))
                .collect(),
        };
        tracing::info!("stopped");
        Ok(summary)
    }
}

/// Stops every relay of `running` at once, and waits for each to end.
async fn stop_relays(running: &[Running]) {
    futures::future::join_all(
        running
            .iter()
            .filter_map(|r| r.relay.as_ref())
            .map(|r| r.stop()),
    )
    .await;
}
