//! The push side: `Push::allow_unauthenticated` bound to a no-op registration, served by
//! actix-web on 127.0.0.1, its subscription real but never pulled. Its child mode (`--serve`),
//! whose measured window the parent opens and closes on its stdin, and the parent's run of it
//! against the load generator ([`load`](super::load)).
//!
//! Uses `leasehold-push` and actix-web, and the harness's clock, subscriptions and child
//! processes.

use super::load::{Load, load};
use crate::harness::args::{number, value};
use crate::harness::child::{child, expect_line, field, lines, reap, stdin_lines};
use crate::harness::clock::Clock;
use crate::harness::topics::Admin;
use actix_web::{App, HttpServer};
use leasehold::{Delivery, Registration};
use leasehold_push::Push;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The child: prints `READY port=P`, then on stdin `start` opens the measured window
/// (answered `STARTED`) and `stop` closes it (answered with the `RESULT` line: the messages its
/// registration acked in the window); EOF stops it.
pub(crate) async fn serve(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let http_workers: usize = number(args, "--http-workers").unwrap_or(1);
    let inner = super::emulator_connection()
        .connect()
        .await
        .expect("connect");
    let registration = super::options(Registration::raw(
        subscription,
        |_, d: Delivery| async move { d.ack() },
    ));
    let (sub, endpoint) = Push::allow_unauthenticated(super::PATH)
        .start(registration, inner)
        .await
        .expect("start the push registration");
    let served = endpoint.clone();
    let server = HttpServer::new(move || {
        let endpoint = served.clone();
        App::new().configure(move |c| endpoint.configure(c))
    })
    .workers(http_workers)
    .disable_signals()
    .shutdown_timeout(1)
    .bind(("127.0.0.1", 0))
    .expect("bind the push endpoint");
    let port = server.addrs()[0].port();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    println!("READY port={port}");
    let mut commands = stdin_lines();
    let mut window = None;
    while let Some(command) = commands.recv().await {
        match command.trim() {
            "start" => {
                let refused = endpoint.stats().refused_total();
                window = Some((Clock::start(), sub.stats().acked, refused));
                println!("STARTED");
            }
            "stop" => {
                let (clock, acked, refused) = window.take().expect("stop after start");
                let messages = sub.stats().acked - acked;
                let refused = endpoint.stats().refused_total() - refused;
                println!("RESULT {} refused={refused}", clock.result(messages));
            }
            other => panic!("unknown command {other:?}"),
        }
    }
    sub.stop().await;
    handle.stop(false).await;
}

/// One push run's figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PushRun {
    pub(crate) per_second: f64,
    pub(crate) cpu_us: f64,
    pub(crate) allocations: f64,
    pub(crate) load_cpu_us: f64,
    pub(crate) not_204: u64,
}

/// How one push run goes: its connections, its warm-up and measured durations, the server's
/// actix-web workers, and where the message ids go on from (shared by every run).
pub(crate) struct PushPlan<'a> {
    pub(crate) connections: usize,
    pub(crate) warm_up: Duration,
    pub(crate) duration: Duration,
    pub(crate) http_workers: usize,
    pub(crate) ids: &'a Rc<Cell<u64>>,
}

/// One push run: a server child on a fresh subscription, `connections` pushers warming up,
/// then pushing for `duration` inside the server's measured window.
pub(crate) async fn push_run(admin: &Admin, host: &str, plan: PushPlan<'_>) -> PushRun {
    let connections = plan.connections;
    let made = admin.prepare(0).await;
    let http_workers = plan.http_workers.to_string();
    let mut server = child(
        host,
        &[
            "--serve",
            "--subscription",
            &made.subscription,
            "--http-workers",
            &http_workers,
        ],
    );
    let mut stdin = server.stdin.take().expect("piped stdin");
    let mut lines = lines(&mut server);
    let port: u16 = expect_line(&mut lines, "READY port=")
        .await
        .parse()
        .expect("a port");
    // A warm-up on the connections (their first requests, the gate opening with the stream),
    // then the server's window opens around the measured pushes.
    let Load {
        tally,
        elapsed,
        cpu: load_cpu,
    } = load(
        port,
        &made.subscription,
        plan.ids,
        connections,
        (plan.warm_up, plan.duration),
        async || {
            stdin.write_all(b"start\n").await.unwrap();
            expect_line(&mut lines, "STARTED").await;
        },
    )
    .await;
    stdin.write_all(b"stop\n").await.unwrap();
    let result = expect_line(&mut lines, "RESULT ").await;
    drop(stdin);
    reap(server).await;
    admin.cleanup(made).await;
    let acked = field(&result, "messages").unwrap_or(0.0);
    if acked as u64 != tally.no_content {
        eprintln!(
            "push, {connections} connection(s): the server acked {acked} in its window, the load \
             generator counted {} answers 204",
            tally.no_content
        );
    }
    if tally.other > 0 || tally.reconnects > 0 {
        eprintln!(
            "push, {connections} connection(s): {} answers other than 204, {} reconnects",
            tally.other, tally.reconnects
        );
    }
    PushRun {
        per_second: tally.no_content as f64 / elapsed,
        cpu_us: field(&result, "cpu_us_per_message").expect("cpu_us_per_message"),
        allocations: field(&result, "allocations_per_message").unwrap_or(f64::NAN),
        load_cpu_us: load_cpu * 1e6 / (tally.no_content + tally.other).max(1) as f64,
        not_204: tally.other,
    }
}
