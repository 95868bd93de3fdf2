//! Leasehold as a service: one process that consumes several subscriptions, configured from a
//! file and the environment, and serves Prometheus metrics, health and readiness for an
//! orchestrator, and a status page for people.
//!
//! ```no_run
//! use leasehold::{Delivery, Outcome};
//! use leasehold_service::{Service, config};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: u64 }
//!
//! async fn on_order(order: Order, delivery: Delivery) -> Outcome {
//!     if order.id == 0 { delivery.drop() } else { delivery.ack() }
//! }
//!
//! #[actix_rt::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = config::load("leasehold.toml")?;
//!     let _telemetry = leasehold_service::telemetry::init(&config.telemetry)?;
//!     // Handlers are code, bound to the subscriptions of the configuration by their key.
//!     Service::new(config).json("orders", on_order).run().await?;
//!     Ok(())
//! }
//! ```
//!
//! - [`config`]: the configuration (TOML, with `LEASEHOLD__...` environment variables over it);
//!   every option of a [`Registration`] has a key.
//! - `metrics.rs`: the Prometheus metrics, read at each scrape.
//! - `status.rs`: the status page.
//! - [`replay`]: the binary's arguments ([`replay::Cli`]) and `replay KEY`, dead letters through
//!   the key's handler.
//! - [`telemetry`]: logs, and traces exported over OTLP.
//!
//! The HTTP endpoints run on actix-web with its own signal handling off: the service's drain
//! is in charge of SIGTERM and SIGINT, and readiness turns false when the drain begins.
//!
//! The manual (the configuration's keys, the endpoints, Kubernetes, the metrics, the alerts and
//! the dashboard, traces) is the crate's `README.md`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod charts;
pub mod config;
mod history;
mod metrics;
pub mod push;
pub mod replay;
mod status;
pub mod telemetry;

use crate::config::{ConfigError, ServiceConfig};
use crate::history::{History, SAMPLE_INTERVAL};
use crate::metrics::{Running, Subscriptions};
use actix_web::{App, HttpResponse, HttpServer, web};
use futures::FutureExt;
use leasehold::{Batch, Delivery, IntoBatchOutcome, IntoOutcome, Registration};
use leasehold::{
    StartError,
    error::ConnectError,
    status::StatsSnapshot,
    store::{TransactionalBatchStore, TransactionalStore},
};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The service could not run.
///
/// When it fails before its subscriptions started, nothing was pulled; when one subscription
/// fails to start, those started before it are stopped (drained) first.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The configuration could not be read or applied.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A subscription is configured with no handler bound to its key.
    #[error("subscription {key} is configured, but no handler is bound to it")]
    NoHandler {
        /// Its key.
        key: String,
    },
    /// A handler is bound to a key that no subscription is configured under.
    #[error("a handler is bound to {key}, but no subscription is configured under that key")]
    NoSubscription {
        /// The key.
        key: String,
    },
    /// The Pub/Sub clients could not be built.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A subscription could not start.
    #[error("subscription {key} could not start")]
    Start {
        /// Its key.
        key: String,
        /// Why.
        #[source]
        cause: StartError,
    },
    /// `replay` named a key no subscription is configured under. Nothing was consumed.
    #[error("no subscription is configured under {key} (configured: {})", configured.join(", "))]
    NotConfigured {
        /// The key.
        key: String,
        /// The keys configured.
        configured: Vec<String>,
    },
    /// `replay` has no subscription to replay from: neither `--from` nor the key's
    /// `dead_letter_subscription` names one. Nothing was consumed.
    #[error(
        "nothing to replay {key} from: name a subscription on its dead-letter topic{} with \
         --from, or as subscriptions.{key}.dead_letter_subscription",
        dead_letter_topic.as_ref().map(|t| format!(" ({t})")).unwrap_or_default()
    )]
    NoDeadLetterSubscription {
        /// The key.
        key: String,
        /// Its dead-letter topic, when the subscription could be read.
        dead_letter_topic: Option<String>,
    },
    /// The replay could not start (see the cause). Nothing was consumed.
    #[error("cannot replay the dead letters of {key}")]
    Replay {
        /// The key.
        key: String,
        /// Why.
        #[source]
        cause: leasehold::error::ReplayError,
    },
    /// The HTTP address could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address.
        address: String,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

/// The README's example, compiled as a doctest so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

type Build = Box<dyn FnOnce(&str) -> Registration>;

/// A service: the subscriptions of a [`ServiceConfig`], each with the handler bound to its key.
#[must_use = "a service does nothing until it runs"]
pub struct Service {
    config: ServiceConfig,
    handlers: BTreeMap<String, Build>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("config", &self.config)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What each subscription did, when the service stopped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Summary {
    /// Each subscription's counters at the end, by key.
    pub subscriptions: BTreeMap<String, StatsSnapshot>,
}

/// What the HTTP endpoints read.
struct Shared {
    subscriptions: Subscriptions,
    registry: Registry,
    history: History,
    draining: AtomicBool,
}

impl Service {
    /// A service for `config`; bind a handler to each of its subscriptions.
    pub fn new(config: ServiceConfig) -> Self {
        Self {
            config,
            handlers: BTreeMap::new(),
        }
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Binds the subscription configured under `key` to a registration built by `build` from
    /// the subscription's name; the configuration's options are set on it after.
    pub fn registration(
        mut self,
        key: impl Into<String>,
        build: impl FnOnce(&str) -> Registration + 'static,
    ) -> Self {
        self.handlers.insert(key.into(), Box::new(build));
        self
    }

    /// Binds an async handler of JSON payloads (see [`Registration::json`]).
    pub fn json<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        self.registration(key, move |name| Registration::json(name, handler))
    }

    /// Binds an async handler of raw payloads (see [`Registration::raw`]).
    pub fn raw<F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(bytes::Bytes, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        self.registration(key, move |name| Registration::raw(name, handler))
    }

    /// Binds an async batch handler of JSON payloads (see [`Registration::json_batch`]); the
    /// table's `max_batch_messages`, `max_batch_bytes` and `max_batch_wait` shape its batches.
    pub fn json_batch<T, F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        self.registration(key, move |name| Registration::json_batch(name, handler))
    }

    /// Binds an async batch handler of raw payloads (see [`Registration::raw_batch`]).
    pub fn raw_batch<F, Fut>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<bytes::Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        self.registration(key, move |name| Registration::raw_batch(name, handler))
    }

    /// Binds a blocking handler of JSON payloads (see [`Registration::blocking_json`]).
    pub fn blocking_json<T, F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| Registration::blocking_json(name, handler))
    }

    /// Binds a blocking handler of raw payloads (see [`Registration::blocking_raw`]).
    pub fn blocking_raw<F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(bytes::Bytes, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| Registration::blocking_raw(name, handler))
    }

    /// Binds a blocking batch handler of JSON payloads (see
    /// [`Registration::blocking_json_batch`]).
    pub fn blocking_json_batch<T, F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::blocking_json_batch(name, handler)
        })
    }

    /// Binds a blocking batch handler of raw payloads (see
    /// [`Registration::blocking_raw_batch`]).
    pub fn blocking_raw_batch<F, O>(self, key: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<bytes::Bytes>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::blocking_raw_batch(name, handler)
        })
    }

    /// Binds a handler of JSON payloads whose writes commit with the message's record in one
    /// transaction of `store` (see [`Registration::transactional_json`]).
    pub fn transactional_json<T, S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalStore,
        H: AsyncFn(T, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_json(name, store, handler)
        })
    }

    /// Binds a handler of raw payloads whose writes commit with the message's record in one
    /// transaction of `store` (see [`Registration::transactional_raw`]).
    pub fn transactional_raw<S, H, O>(self, key: impl Into<String>, store: S, handler: H) -> Self
    where
        S: TransactionalStore,
        H: AsyncFn(bytes::Bytes, Delivery, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_raw(name, store, handler)
        })
    }

    /// Binds a batch handler of JSON payloads whose writes commit with the batch's records in
    /// one transaction of `store` (see [`Registration::transactional_json_batch`]).
    pub fn transactional_json_batch<T, S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<T>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_json_batch(name, store, handler)
        })
    }

    /// Binds a batch handler of raw payloads whose writes commit with the batch's records in
    /// one transaction of `store` (see [`Registration::transactional_raw_batch`]).
    pub fn transactional_raw_batch<S, H, O>(
        self,
        key: impl Into<String>,
        store: S,
        handler: H,
    ) -> Self
    where
        S: TransactionalBatchStore,
        H: AsyncFn(Batch<bytes::Bytes>, &mut S::Transaction) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        self.registration(key, move |name| {
            Registration::transactional_raw_batch(name, store, handler)
        })
    }

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
        for (key, table) in &self.config.subscriptions {
            let build = self.handlers.remove(key).expect("checked above");
            let sampled =
                build(&table.name).trace_sample_ratio(self.config.telemetry.trace_sample_ratio);
            let push = table.push_endpoint(key, connection.is_emulator());
            let result = match (table.apply(key, sampled), push) {
                (Ok(registration), Ok(push)) => {
                    let max_lease = registration.options().max_lease;
                    let window = metrics::Window::of(registration.options());
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
                        })
                        .map_err(|cause| ServiceError::Start {
                            key: key.clone(),
                            cause,
                        })
                }
                (Err(e), _) | (_, Err(e)) => Err(e.into()),
            };
            match result {
                Ok(running) => started.push(running),
                Err(error) => {
                    futures::future::join_all(started.iter().map(|r| r.subscription.stop())).await;
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
                return Err(error);
            }
        };
        tracing::info!(%address, subscriptions = subscriptions.len(),
            "serving /metrics, /livez, /readyz and the status page");

        shutdown.await;
        shared.draining.store(true, Ordering::SeqCst);
        tracing::info!("draining every subscription");
        futures::future::join_all(subscriptions.iter().map(|r| r.subscription.stop())).await;
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

/// Serves `/metrics`, `/livez`, `/readyz`, the status page and the push endpoints of
/// `subscriptions` on `address`, and samples the charts' history: what serving and a replay's
/// `--http` share.
/// Where the HTTP endpoints listen.
pub(crate) enum Listen {
    /// Bind this address.
    Address(String),
    /// A socket bound already (so a failure came before anything started), and its address.
    Bound(std::net::TcpListener, String),
}

pub(crate) fn serve_http(
    subscriptions: Subscriptions,
    listen: Listen,
    workers: usize,
) -> Result<
    (
        Arc<Shared>,
        actix_web::dev::ServerHandle,
        actix_rt::task::JoinHandle<()>,
    ),
    ServiceError,
> {
    let shared = Arc::new(Shared {
        registry: metrics::registry(subscriptions.clone()),
        subscriptions: subscriptions.clone(),
        history: History::default(),
        draining: AtomicBool::new(false),
    });
    let data = web::Data::from(shared.clone());
    let endpoints: Vec<_> = subscriptions
        .iter()
        .filter_map(|r| r.push.clone())
        .collect();
    let server = HttpServer::new(move || {
        let endpoints = endpoints.clone();
        App::new()
            .app_data(data.clone())
            .configure(move |c| endpoints.iter().for_each(|e| e.configure(c)))
            .route("/metrics", web::get().to(metrics_endpoint))
            .route("/livez", web::get().to(livez))
            .route("/readyz", web::get().to(readyz))
            .route("/", web::get().to(status_page))
    })
    // The drain, not actix-web, is in charge of SIGTERM and SIGINT.
    .disable_signals()
    .workers(workers.max(1))
    .shutdown_timeout(1);
    let (server, address) = match listen {
        Listen::Address(address) => (server.bind(&address), address),
        Listen::Bound(listener, address) => (
            // actix-web's accept loop polls the socket: it must not block.
            listener
                .set_nonblocking(true)
                .and_then(|()| server.listen(listener)),
            address,
        ),
    };
    let server = server
        .map_err(|cause| ServiceError::Bind { address, cause })?
        .run();
    let http = server.handle();
    actix_rt::spawn(server);
    let sampler = {
        let shared = shared.clone();
        actix_rt::spawn(async move {
            // The first tick is at once: the charts' first point comes one interval later.
            let mut tick = actix_rt::time::interval(SAMPLE_INTERVAL);
            loop {
                tick.tick().await;
                shared.history.sample(&shared.subscriptions);
            }
        })
    };
    Ok((shared, http, sampler))
}

/// Resolves on SIGTERM or SIGINT.
async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    let which = futures::select! {
        _ = term.recv().fuse() => "SIGTERM",
        _ = int.recv().fuse() => "SIGINT",
    };
    tracing::info!(signal = which, "stop requested");
}

async fn metrics_endpoint(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(metrics::render(&shared.registry))
}

/// Per subscription, what health says, one line each.
fn report(shared: &Shared, ok: impl Fn(&leasehold::status::Health) -> bool) -> (bool, String) {
    let mut all = true;
    let mut body = String::new();
    for running in shared.subscriptions.iter() {
        let health = running.subscription.health();
        all &= ok(&health);
        body.push_str(&format!("{}: {health}\n", running.key));
    }
    (all, body)
}

/// Live: the actors answer and no subscription failed or hit a permanent error. An outage of
/// Pub/Sub does not make the service not live.
async fn livez(shared: web::Data<Shared>) -> HttpResponse {
    let (live, body) = report(&shared, |h| h.live);
    let mut response = if live {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response
        .content_type("text/plain; charset=utf-8")
        .body(body)
}

/// Ready: every subscription running (its streams open or reopening within their backoff),
/// its progress store answering, and no drain begun.
async fn readyz(shared: web::Data<Shared>) -> HttpResponse {
    let draining = shared.draining.load(Ordering::SeqCst);
    let (ready, mut body) = report(&shared, |h| h.ready);
    if draining {
        body.insert_str(0, "draining: a stop began\n");
    }
    let mut response = if ready && !draining {
        HttpResponse::Ok()
    } else {
        HttpResponse::ServiceUnavailable()
    };
    response
        .content_type("text/plain; charset=utf-8")
        .body(body)
}

async fn status_page(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(status::render(
            &shared.subscriptions,
            &shared.history,
            shared.draining.load(Ordering::SeqCst),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::future::LocalBoxFuture;
    use leasehold::{
        BatchOutcome, Outcome,
        error::{Cause, StoreError},
        store::{BatchClaims, Claim, Completed},
    };

    /// A transactional store that is never asked anything: the registrations are only built.
    struct Unused;

    impl TransactionalStore for Unused {
        type Transaction = ();
        fn begin(
            &self,
            _: &str,
            _: &str,
        ) -> LocalBoxFuture<'static, Result<Claim<()>, StoreError>> {
            async { Err(StoreError::Backend(Cause::message("unused"))) }.boxed_local()
        }
        fn commit(&self, _: (), _: Completed) -> LocalBoxFuture<'static, Result<(), StoreError>> {
            async { Ok(()) }.boxed_local()
        }
        fn rollback(&self, _: ()) -> LocalBoxFuture<'static, ()> {
            async {}.boxed_local()
        }
    }

    impl TransactionalBatchStore for Unused {
        fn begin_batch(
            &self,
            _: &str,
            _: &[Arc<str>],
        ) -> LocalBoxFuture<'static, Result<BatchClaims<()>, StoreError>> {
            async { Err(StoreError::Backend(Cause::message("unused"))) }.boxed_local()
        }
        fn commit_batch(
            &self,
            _: (),
            _: Vec<(Arc<str>, Completed)>,
            _: Vec<Arc<str>>,
        ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
            async { Ok(()) }.boxed_local()
        }
    }

    fn ack_all<T>(batch: Batch<T>) -> BatchOutcome {
        let mut outcomes = BatchOutcome::new();
        for item in &batch {
            outcomes.set(&item.delivery, item.delivery.ack());
        }
        outcomes
    }

    /// What a binder bound under `key`: its registration, built for `name`, as `Debug` prints
    /// it, and whether it takes batches (batch options are refused on the others).
    fn bound(mut service: Service, key: &str) -> (String, bool) {
        assert_eq!(service.handlers.keys().collect::<Vec<_>>(), [key]);
        let build = service.handlers.remove(key).unwrap();
        let registration = build("projects/p/subscriptions/s");
        assert_eq!(registration.subscription(), "projects/p/subscriptions/s");
        let debug = format!("{registration:?}");
        (
            debug,
            registration.max_batch_messages(10).validate().is_ok(),
        )
    }

    #[test]
    fn each_binder_binds_its_kind_of_registration_under_the_key() {
        let new = || Service::new(ServiceConfig::default());
        let one = async |_: bytes::Bytes, d: Delivery| d.ack();
        let json = async |_: u64, d: Delivery| d.ack();
        let blocking = |_: bytes::Bytes, d: Delivery| -> Outcome { d.ack() };
        let blocking_json = |_: u64, d: Delivery| -> Outcome { d.ack() };
        let batch = async |b: Batch<bytes::Bytes>| ack_all(b);
        let json_batch = async |b: Batch<u64>| ack_all(b);
        let in_tx = async |_: bytes::Bytes, d: Delivery, _: &mut ()| d.ack();
        let json_in_tx = async |_: u64, d: Delivery, _: &mut ()| d.ack();
        let batch_in_tx = async |b: Batch<bytes::Bytes>, _: &mut ()| ack_all(b);
        let json_batch_in_tx = async |b: Batch<u64>, _: &mut ()| ack_all(b);
        // (binder, blocking, batch, transactional)
        let cases = [
            ("json", new().json("k", json), false, false, false),
            ("raw", new().raw("k", one), false, false, false),
            (
                "blocking_json",
                new().blocking_json("k", blocking_json),
                true,
                false,
                false,
            ),
            (
                "blocking_raw",
                new().blocking_raw("k", blocking),
                true,
                false,
                false,
            ),
            (
                "json_batch",
                new().json_batch("k", json_batch),
                false,
                true,
                false,
            ),
            ("raw_batch", new().raw_batch("k", batch), false, true, false),
            (
                "blocking_json_batch",
                new().blocking_json_batch("k", ack_all::<u64>),
                true,
                true,
                false,
            ),
            (
                "blocking_raw_batch",
                new().blocking_raw_batch("k", ack_all::<bytes::Bytes>),
                true,
                true,
                false,
            ),
            (
                "transactional_json",
                new().transactional_json("k", Unused, json_in_tx),
                false,
                false,
                true,
            ),
            (
                "transactional_raw",
                new().transactional_raw("k", Unused, in_tx),
                false,
                false,
                true,
            ),
            (
                "transactional_json_batch",
                new().transactional_json_batch("k", Unused, json_batch_in_tx),
                false,
                true,
                true,
            ),
            (
                "transactional_raw_batch",
                new().transactional_raw_batch("k", Unused, batch_in_tx),
                false,
                true,
                true,
            ),
        ];
        for (binder, service, blocking, batch, transactional) in cases {
            let (debug, takes_batches) = bound(service, "k");
            assert!(
                debug.contains(&format!("blocking: {blocking}")),
                "{binder}: {debug}"
            );
            assert!(
                debug.contains(&format!("transactional: {transactional}")),
                "{binder}: {debug}"
            );
            assert_eq!(takes_batches, batch, "{binder}: batch options refused?");
        }
    }
}
