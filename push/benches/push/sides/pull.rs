//! The pull side: Leasehold's pull path on a subscription holding the run's messages, the
//! Leasehold side of benches/throughput.rs repeated here so that both figures come from one run.
//! Its child mode (`--pull`) and the parent's run of it.
//!
//! Uses `leasehold::start`, and the harness's clock, completion signal, subscriptions and child
//! processes.

use crate::harness::args::{number, value};
use crate::harness::child::{child, expect_line, field, lines, reap};
use crate::harness::clock::Clock;
use crate::harness::countdown::Countdown;
use crate::harness::topics::Admin;
use leasehold::{Delivery, Registration};
use std::sync::Arc;

/// The child: `messages` already on the subscription, `streams` streams, a no-op handler that
/// acks and counts; prints `RESULT` when the handler has acked `messages` messages (distinct
/// ones: the progress store replays a redelivery of a finished message without the handler).
/// The count that reaches `messages` wakes the measurement ([`Countdown`]), as on
/// benches/throughput.rs's Leasehold side.
pub(crate) async fn pull(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let messages: u64 = number(args, "--messages").expect("--messages N");
    let streams: usize = number(args, "--streams").unwrap_or(1);
    let connection = super::emulator_connection();
    let handled = Arc::new(Countdown::new(messages));
    let counted = handled.clone();
    let registration = super::options(Registration::raw(subscription, move |_, d: Delivery| {
        counted.count();
        async move { d.ack() }
    }));
    // As in benches/throughput.rs: the clients are built outside the window; the stream opens
    // after `start` returns, when the supervisor starts.
    let sub = leasehold::start(registration.streams(streams), &connection)
        .await
        .expect("start the pull registration");
    let clock = Clock::start();
    handled.reached().await;
    println!("RESULT {}", clock.result(messages));
    sub.stop().await;
}

/// One pull run's figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PullRun {
    pub(crate) per_second: f64,
    pub(crate) cpu_us: f64,
    pub(crate) allocations: f64,
}

/// One pull run: `messages` published on a fresh subscription, then a pull child on it.
pub(crate) async fn pull_run(
    admin: &Admin,
    host: &str,
    messages: usize,
    streams: usize,
) -> PullRun {
    let made = admin.prepare(messages).await;
    let mut side = child(
        host,
        &[
            "--pull",
            "--subscription",
            &made.subscription,
            "--messages",
            &messages.to_string(),
            "--streams",
            &streams.to_string(),
        ],
    );
    let mut lines = lines(&mut side);
    let result = expect_line(&mut lines, "RESULT ").await;
    reap(side).await;
    admin.cleanup(made).await;
    PullRun {
        per_second: field(&result, "per_second").expect("per_second"),
        cpu_us: field(&result, "cpu_us_per_message").expect("cpu_us_per_message"),
        allocations: field(&result, "allocations_per_message").unwrap_or(f64::NAN),
    }
}
