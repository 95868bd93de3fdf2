//! The community crate `gcloud-pubsub` (crates.io), one side of the throughput benchmark.
//!
//! Built and run by `cargo bench --bench throughput` (into `target/bench-peers/gcloud/`):
//!
//! ```text
//! leasehold-bench-gcloud-peer --subscription projects/P/subscriptions/S --messages N --streams K [--exactly-once]
//! leasehold-bench-gcloud-peer --version
//! ```
//!
//! The crate's current API at its defaults, as its documentation shows it: one client
//! (`ClientConfig::default()`, which reads PUBSUB_EMULATOR_HOST), K calls to
//! `Subscription::subscribe(None)` (one streaming pull each), each stream read by a task of its
//! own on tokio's multi-threaded runtime that awaits `ack()` on every message before it takes the
//! next. `ack()` is one Acknowledge RPC; on an exactly-once subscription its answer is the
//! confirmation, so an ack counts when it returns `Ok` (a refused ack brings the message back,
//! and it counts then). `--exactly-once` is accepted and changes nothing: the same call is the
//! crate's way on both kinds of subscription. It stops at the N-th ack and prints one line,
//!
//! ```text
//! RESULT per_second=.. cpu_us_per_message=.. peak_rss_kb=..
//! ```
//!
//! measured from just before the first `subscribe()` (the client and its connections made
//! before) to that ack, then exits. CPU is this process's user + system time
//! (`CLOCK_PROCESS_CPUTIME_ID`), peak RSS its VmHWM. The Nth ack is signalled (a
//! `tokio::sync::Notify`), not polled for.

use futures::StreamExt;
use gcloud_pubsub::client::{Client, ClientConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// This process's CPU time (all threads, user + system), in seconds.
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(ok, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// This process image's peak resident set (VmHWM), in KiB. Not getrusage's `ru_maxrss`, which
/// Linux carries over from the parent through fork and exec.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .expect("VmHWM in /proc/self/status")
}

/// The version of `package` this program was built with, from the lock file it was built from
/// (`cargo build --locked`).
fn locked_version(package: &str) -> &'static str {
    let lock = include_str!("../Cargo.lock");
    let header = format!("name = \"{package}\"\nversion = \"");
    lock.split_once(header.as_str())
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("unknown", |(version, _)| version)
}

fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--version") {
        println!(
            "gcloud-pubsub {}, tonic {}, tokio {}",
            locked_version("gcloud-pubsub"),
            locked_version("tonic"),
            locked_version("tokio")
        );
        return;
    }
    let (Some(subscription), Some(messages)) = (
        value(&args, "--subscription"),
        value(&args, "--messages").and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: --subscription NAME --messages N [--streams K] [--exactly-once]");
        std::process::exit(2);
    };
    let streams: usize = value(&args, "--streams")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    if std::env::var_os("PUBSUB_EMULATOR_HOST").is_none() {
        eprintln!("PUBSUB_EMULATOR_HOST is not set: this peer runs against the emulator only");
        std::process::exit(2);
    }

    let client = Client::new(ClientConfig::default())
        .await
        .unwrap_or_else(|e| panic!("gcloud-pubsub client: {e}"));
    let subscription = client.subscription(subscription);
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());

    let cpu = cpu_seconds();
    let wall = Instant::now();
    for _ in 0..streams {
        let mut stream = subscription
            .subscribe(None)
            .await
            .unwrap_or_else(|e| panic!("subscribe: {e}"));
        let (acked, done) = (acked.clone(), done.clone());
        tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                if message.ack().await.is_ok()
                    && acked.fetch_add(1, Ordering::Relaxed) + 1 == messages
                {
                    done.notify_one();
                }
            }
            eprintln!("a message stream ended before the last ack");
            std::process::exit(1);
        });
    }
    done.notified().await;
    let elapsed = wall.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    println!(
        "RESULT per_second={:.1} cpu_us_per_message={:.3} peak_rss_kb={}",
        messages as f64 / elapsed,
        cpu * 1e6 / messages as f64,
        peak_rss_kb()
    );
    // The streams are not drained: their subscription is deleted after this side.
    std::process::exit(0);
}
