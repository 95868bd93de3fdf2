//! The sides measured: the servers that answer pushes on loopback (Leasehold's push endpoint,
//! [`push`], and the bare endpoint, [`bare`], each a child of its own, run by the parent in
//! [`run`] and driven by the load generator in [`load`]) and the pull path on the emulator
//! ([`pull`]). Leasehold's sides have a handler that acks at once (the pull side's also counts,
//! for its completion signal), with the same handler slots and flow control.
//!
//! Uses `leasehold` and `leasehold-push`, and the harness's clocks, completion signal and child
//! processes; nothing of [`report`](crate::report).

pub(crate) mod bare;
pub(crate) mod load;
pub(crate) mod pull;
pub(crate) mod push;
pub(crate) mod run;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use leasehold::{Connection, Registration};

/// The path pushes are sent to.
const PATH: &str = "/push";
/// The handler slots of both sides.
const WORKERS: usize = 64;
/// Both sides' flow control: above every concurrency measured, so that no push is refused.
pub(crate) const MAX_OUTSTANDING: usize = 1000;

/// What both sides' registrations run with: [`WORKERS`] handler slots, flow control at
/// [`MAX_OUTSTANDING`] messages.
fn options(registration: Registration) -> Registration {
    registration
        .workers(WORKERS)
        .max_outstanding_messages(MAX_OUTSTANDING)
}

/// In a child: the emulator the parent names in PUBSUB_EMULATOR_HOST.
fn emulator_connection() -> Connection {
    Connection::emulator(&std::env::var("PUBSUB_EMULATOR_HOST").expect("PUBSUB_EMULATOR_HOST"))
}

/// In a server child: serves what `configure` adds to an actix-web app on 127.0.0.1 (a free
/// port), with `http_workers` worker threads, and says `READY port=P`. Both servers, Leasehold's
/// endpoint and the bare one, run on this same HTTP stack.
fn serve_on_loopback(
    configure: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
    http_workers: usize,
) -> ServerHandle {
    let server = HttpServer::new(move || App::new().configure(configure.clone()))
        .workers(http_workers)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(("127.0.0.1", 0))
        .expect("bind the server on 127.0.0.1");
    let port = server.addrs()[0].port();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    println!("READY port={port}");
    handle
}
