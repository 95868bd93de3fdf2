//! Leasehold against the plain official client, Google's Python and Node subscribers and the
//! community crate `gcloud-pubsub`, the actor pipeline alone, and memory per outstanding
//! message, measured side by side in one run.
//!
//! ```text
//! cargo bench --bench throughput              # full run: the tables in BENCHMARKS.md
//! cargo bench --bench throughput -- --quick   # fewer messages and repetitions
//! cargo bench --bench throughput -- --no-peers        # without Python, Node and gcloud-pubsub
//! cargo bench --bench throughput -- --pipeline-only   # the pipeline alone, for a profiler
//!                                                    # (`--batch`: a batch handler)
//! cargo bench --bench throughput -- --cpu-bound       # a CPU-bound handler, 1 thread vs per core
//! cargo bench --bench throughput -- --memory          # memory per outstanding message, alone
//! cargo bench --bench throughput -- --breaker         # the pipeline without and with a closed breaker
//! cargo bench --bench throughput -- --observability   # traces exported vs not, side by side
//! cargo bench --bench throughput -- --one leasehold 1  # one end-to-end run in this process (or
//!                                                      # `plain`, and `eo` after the streams),
//!                                                      # for a profiler; `python`, `node` or
//!                                                      # `gcloud` runs that peer as a child
//! cargo bench --bench throughput -- --against OTHER   # the Rust sides of this build against
//!                                                    # another build's binary, alternating
//!                                                    # (`--messages N`, `--reps N`)
//! ```
//!
//! `--otel` (every message's span exported) and `--logs` (logs at `info` to stderr) go with any
//! mode.
//!
//! End-to-end runs need the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, or one started here). Each
//! side runs as a child process of its own, so that its peak RSS is its own: `plain` (a loop over
//! Google's official Rust client) and `leasehold` are this binary again in its child mode,
//!
//! ```text
//! throughput --side plain|leasehold --subscription NAME --messages N --streams K
//! ```
//!
//! `python` and `node` are Google's subscribers for those languages (`benches/peers/`),
//! installed by this benchmark into `target/bench-peers/` when missing (a virtualenv and a
//! node_modules; an existing install is reused), and `gcloud-pubsub` is the community Rust crate
//! of that name, a cargo project of its own (`benches/peers/gcloud/`, outside the workspace)
//! that this benchmark builds with `cargo build --release --locked` into
//! `target/bench-peers/gcloud/`. When a peer cannot be installed or built, the run says so and
//! goes on without it. Each run gets a fresh topic and subscription with the messages published
//! before the child starts; the sides take turns in an order that rotates from one repetition to
//! the next, so drift on the machine hits all alike. Each child measures itself from just before
//! it starts subscribing (its clients built) to the last ack (on exactly-once subscriptions, the
//! last confirmed ack), which it learns of by a signal, not by polling, and prints one line,
//! `RESULT per_second=.. cpu_us_per_message=.. peak_rss_kb=..` (and `allocations_per_message=..`
//! for the Rust sides): CPU is the child's user + system time (the emulator's is not counted),
//! peak RSS its VmHWM.
//!
//! # Layout
//!
//! This file reads the mode and runs it. [`sides`] holds what is measured (the plain loop,
//! Leasehold on the emulator and in memory, the peers); [`harness`] what the measurements stand
//! on (the command line, the counting allocator, the clocks, the completion signal, topics and
//! subscriptions, child processes); [`report`] the tables it prints. Each imports only the ones
//! listed after it: report, sides, harness.

mod harness;
mod report;
mod sides;

use harness::args::{self, Child, Mode, flag};
use harness::child::{Row, measure, side_timeout};
use harness::clock::peak_rss_kb;
use harness::topics::Admin;
use leasehold::Connection;
use leasehold::emulator::EmulatorHost;
use sides::{Side, in_memory, peers};

#[actix_rt::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Traces on: every message's span exported through OpenTelemetry (to an exporter that
    // discards them), as the service does with a collector configured.
    let _tracing = flag(&args, "--otel").then(harness::observability::install);
    if flag(&args, "--logs") {
        // Logs on, as the service's default (`info`), to stderr.
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_writer(std::io::stderr)
            .init();
    }
    match args::mode(&args) {
        Mode::PipelineOnly { messages, batch } => {
            // For a profiler: the actor pipeline alone, long enough to sample.
            let run = in_memory::pipeline(messages, batch).await;
            let what = if batch {
                "pipeline alone, batches"
            } else {
                "pipeline alone"
            };
            println!("{what}: {run:?}");
        }
        Mode::Observability => report::observability::table(5),
        Mode::CpuBound => report::in_memory::cpu_bound_table(5, 10_000).await,
        Mode::Memory => report::in_memory::memory_table().await,
        Mode::Breaker { messages } => report::in_memory::breaker_table(5, messages).await,
        Mode::Against {
            other,
            messages,
            reps,
        } => {
            let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
            let admin = Admin::connect(&emulator.connection()).await;
            report::against::against_binary(&admin, emulator.host(), other, messages, reps).await;
        }
        Mode::Side(child) => child_side(child).await,
        Mode::One {
            side,
            streams,
            exactly_once,
        } => one(side, streams, exactly_once).await,
        Mode::Full { quick, no_peers } => full(quick, no_peers).await,
    }
}

/// The child mode: one Rust side (`plain` or `leasehold`) on the subscription the parent made,
/// against the emulator at PUBSUB_EMULATOR_HOST; prints its RESULT line.
async fn child_side(child: Child<'_>) {
    let host = std::env::var("PUBSUB_EMULATOR_HOST").expect("PUBSUB_EMULATOR_HOST");
    let connection = Connection::emulator(&host);
    let Child {
        side,
        subscription,
        messages,
        streams,
    } = child;
    let run = match side {
        "plain" => sides::plain::plain(&connection, subscription, streams, messages).await,
        "leasehold" => {
            sides::leasehold::with_leasehold(&connection, subscription, streams, messages).await
        }
        other => panic!("unknown side {other}: plain or leasehold"),
    };
    println!(
        "RESULT per_second={:.1} cpu_us_per_message={:.3} peak_rss_kb={} allocations_per_message={:.2}",
        run.per_second,
        run.cpu_us_per_message,
        peak_rss_kb(),
        run.allocations_per_message
    );
}

/// For a profiler: one end-to-end run of one side on 60,000 messages (the Rust sides in this
/// process, a peer as a child).
async fn one(side: &str, streams: usize, exactly_once: bool) {
    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let connection = emulator.connection();
    let admin = Admin::connect(&connection).await;
    let messages = 60_000;
    let made = admin.prepare(messages, exactly_once).await;
    let subscription = &made.subscription;
    match side {
        "plain" => {
            let run =
                sides::plain::plain(&connection, subscription, streams, messages as u64).await;
            println!("{side}, {streams} stream(s), exactly-once {exactly_once}: {run:?}");
        }
        "python" | "node" | "gcloud" => {
            let peers = peers::setup();
            let side = match side {
                "python" => Side::Python,
                "node" => Side::Node,
                _ => Side::Gcloud,
            };
            let result = match side.command(&peers) {
                Some(mut command) => {
                    Row {
                        host: emulator.host(),
                        messages,
                        streams,
                        exactly_once,
                    }
                    .configure(&mut command, subscription);
                    measure(command, side_timeout(messages)).await
                }
                None => Err("not installed (see the peer line above)".to_string()),
            };
            println!(
                "{}, {streams} stream(s), exactly-once {exactly_once}: {result:?}",
                side.name()
            );
        }
        _ => {
            let run = sides::leasehold::with_leasehold(
                &connection,
                subscription,
                streams,
                messages as u64,
            )
            .await;
            println!("{side}, {streams} stream(s), exactly-once {exactly_once}: {run:?}");
        }
    }
    admin.cleanup(made).await;
}

/// The whole benchmark: the pipeline alone, the CPU-bound handler, memory per outstanding
/// message, then the end-to-end table (`quick`: fewer messages and repetitions; `no_peers`:
/// the Rust sides only).
async fn full(quick: bool, no_peers: bool) {
    let (messages, reps, pipeline_messages) = if quick {
        (4_000usize, 1usize, 100_000u64)
    } else {
        (20_000, 3, 500_000)
    };
    // End to end: five interleaved repetitions of each side in the full run.
    let end_to_end_reps = if quick { 1 } else { 5 };
    println!(
        "# Leasehold benchmarks ({})",
        if quick { "quick" } else { "full" }
    );
    if quick {
        println!(
            "\nquick: one run of each side over 4,000 messages, a smoke test, not a measurement: \
             the peers' warm-up (first connection, Node's JIT) is spread over few messages and \
             inflates their CPU per message; compare only full runs"
        );
    }
    // Installed (or found) before anything is measured: an install must not overlap a run.
    let peers = if no_peers {
        println!("\npeers: skipped (--no-peers): the end-to-end table has the Rust sides only");
        Vec::new()
    } else {
        println!();
        peers::setup()
    };

    report::in_memory::pipeline_table(reps, pipeline_messages).await;
    report::in_memory::cpu_bound_table(
        if quick { 1 } else { 5 },
        if quick { 2_000 } else { 10_000 },
    )
    .await;
    report::in_memory::memory_table().await;

    // End to end. On an emulator of its own, not leasehold_test_support's: that one installs a
    // trace-level log capture, which a benchmark must not pay for.
    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let admin = Admin::connect(&emulator.connection()).await;
    report::end_to_end::end_to_end_table(
        &admin,
        emulator.host(),
        &peers,
        messages,
        end_to_end_reps,
    )
    .await;
}
