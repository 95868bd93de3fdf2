//! Leasehold on the in-memory source (`leasehold::testing`), no emulator: the actor pipeline
//! alone, a CPU-bound handler, and the live heap per outstanding message.
//!
//! Uses Leasehold's public API, the in-memory source of `leasehold-actors`' testing feature,
//! and the clock, heap count and countdown of the harness. These runs end when the source says
//! it has counted enough acks (`MemoryPubSub::acked_reach`): a signal, not a poll.

use crate::harness::alloc::live;
use crate::harness::clock::{Clock, Run};
use crate::harness::countdown::Countdown;
use leasehold::{Delivery, Registration};
use leasehold_actors::testing::MemoryPubSub;
use std::sync::Arc;
use std::time::Instant;

/// The in-memory source every pipeline run reads: endless 200-byte messages, counted when
/// settled (`leasehold::testing`).
fn memory() -> MemoryPubSub {
    MemoryPubSub::endless(vec![b'x'; 200])
}

const BENCH_SUB: &str = "projects/bench/subscriptions/pipeline";

/// The messages of one batch in the batch side of the pipeline.
pub(crate) const PIPELINE_BATCH: usize = 100;

/// The actor pipeline on the in-memory source: a no-op handler per message, or (`batch`) a
/// no-op batch handler on batches of [`PIPELINE_BATCH`]. `LEASEHOLD_BENCH_WORKER_THREADS` and
/// `LEASEHOLD_BENCH_TRACE_RATIO` set its worker threads and trace sample ratio.
pub(crate) async fn pipeline(messages: u64, batch: bool) -> Run {
    pipeline_with(messages, batch, false).await
}

/// [`pipeline`], with an outage breaker (closed all along: every message acks) when `breaker`.
pub(crate) async fn pipeline_with(messages: u64, batch: bool, breaker: bool) -> Run {
    let pubsub = memory();
    let mut registration = super::worker_threads_from_env(
        if batch {
            Registration::raw_batch(BENCH_SUB, |_: leasehold::Batch<bytes::Bytes>| async {
                leasehold::BatchOutcome::all(leasehold::Outcome::ack())
            })
            .max_batch_messages(PIPELINE_BATCH)
        } else {
            Registration::raw(BENCH_SUB, |_, d: Delivery| async move { d.ack() })
        }
        .workers(64)
        .max_outstanding_messages(10_000),
    );
    if breaker {
        registration = registration.breaker(leasehold::Breaker::new());
    }
    if let Some(ratio) = std::env::var("LEASEHOLD_BENCH_TRACE_RATIO")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        registration = registration.trace_sample_ratio(ratio);
    }
    let clock = Clock::start();
    let sub = leasehold::start_with(registration, pubsub.connector())
        .await
        .unwrap();
    pubsub.acked_reach(messages).await;
    let run = clock.stop(pubsub.acked() as f64);
    sub.stop().await;
    run
}

/// About `micros` µs of computation: the number of xorshift steps, measured on this machine.
pub(crate) fn calibrate(micros: u64) -> u64 {
    let steps = 2_000_000;
    let began = Instant::now();
    std::hint::black_box(spin(steps));
    let per_step = began.elapsed().as_secs_f64() / steps as f64;
    ((micros as f64 / 1e6) / per_step) as u64
}

/// Computation the optimizer cannot remove.
fn spin(steps: u64) -> u64 {
    let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
    for _ in 0..steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// A CPU-bound handler (`steps` of computation per message) on the in-memory source, its
/// handlers on `threads` worker threads.
pub(crate) async fn cpu_bound(threads: usize, steps: u64, messages: u64) -> Run {
    let pubsub = memory();
    let registration = Registration::raw(BENCH_SUB, move |_, d: Delivery| {
        std::hint::black_box(spin(steps));
        async move { d.ack() }
    })
    .workers(64)
    .worker_threads(threads)
    .max_outstanding_messages(1_000);
    let clock = Clock::start();
    let sub = leasehold::start_with(registration, pubsub.connector())
        .await
        .unwrap();
    pubsub.acked_reach(messages).await;
    let run = clock.stop(pubsub.acked() as f64);
    sub.stop().await;
    run
}

/// Live heap bytes per outstanding message, with `held` messages in handlers that wait (each
/// handler counts itself in before it waits; the count that reaches `held` says all are in).
pub(crate) async fn memory_per_message(held: usize) -> f64 {
    let release = Arc::new(tokio::sync::Notify::new());
    let r = release.clone();
    let entered = Arc::new(Countdown::new(held as u64));
    let e = entered.clone();
    let registration = Registration::raw(BENCH_SUB, move |_, d: Delivery| {
        let r = r.clone();
        e.count();
        async move {
            r.notified().await;
            d.ack()
        }
    })
    .workers(held)
    .max_outstanding_messages(held);
    let pubsub = memory();
    let before = live();
    let sub = leasehold::start_with(registration, pubsub.connector())
        .await
        .unwrap();
    entered.reached().await;
    let during = live();
    release.notify_waiters();
    sub.stop().await;
    (during.saturating_sub(before)) as f64 / held as f64
}
