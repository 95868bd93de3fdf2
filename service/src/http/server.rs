//! The HTTP server: the endpoints and the push subscriptions' routes on one actix-web server,
//! with its own signal handling off (the service's drain is in charge of SIGTERM and SIGINT),
//! and the sampler that feeds the charts' history.
//!
//! Uses [`crate::http::endpoints`], [`crate::observe`] and [`crate::error`].

use crate::error::ServiceError;
use crate::http::endpoints::{Shared, livez, metrics_endpoint, readyz, status_page};
use crate::observe::history::{History, SAMPLE_INTERVAL};
use crate::observe::metrics;
use crate::observe::running::Subscriptions;
use actix_web::{App, HttpServer, web};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Where the HTTP endpoints listen.
pub(crate) enum Listen {
    /// Bind this address.
    Address(String),
    /// A socket bound already (so a failure came before anything started), and its address.
    Bound(std::net::TcpListener, String),
}

/// Serves `/metrics`, `/livez`, `/readyz`, the status page and the push endpoints of
/// `subscriptions` where `listen` says, and samples the charts' history: what serving and a
/// replay's `--http` share.
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
