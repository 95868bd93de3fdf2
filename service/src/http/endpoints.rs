//! The endpoints: `/metrics`, `/livez`, `/readyz` and the status page `/`, and what they read
//! ([`Shared`]). Liveness and readiness say, per subscription, what its health says.
//!
//! Uses [`crate::observe`] to read and render.

use crate::observe::history::History;
use crate::observe::metrics;
use crate::observe::running::Subscriptions;
use crate::observe::status;
use actix_web::{HttpResponse, web};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the HTTP endpoints read.
pub(crate) struct Shared {
    pub(crate) subscriptions: Subscriptions,
    pub(crate) registry: Registry,
    pub(crate) history: History,
    pub(crate) draining: AtomicBool,
}

pub(crate) async fn metrics_endpoint(shared: web::Data<Shared>) -> HttpResponse {
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
pub(crate) async fn livez(shared: web::Data<Shared>) -> HttpResponse {
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
pub(crate) async fn readyz(shared: web::Data<Shared>) -> HttpResponse {
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

pub(crate) async fn status_page(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(status::render(
            &shared.subscriptions,
            &shared.history,
            shared.draining.load(Ordering::SeqCst),
        ))
}
