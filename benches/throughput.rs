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
//! last confirmed ack), which it learns of by a signal, not by polling, and prints one line, `RESULT per_second=.. cpu_us_per_message=..
//! peak_rss_kb=..` (and `allocations_per_message=..` for the Rust sides): CPU is the child's user
//! + system time (the emulator's is not counted), peak RSS its VmHWM.

use google_cloud_pubsub::model::{Message, Subscription as SubscriptionSpec};
use google_cloud_pubsub::subscriber::handler::Handler as ClientHandler;
use leasehold::emulator::EmulatorHost;
use leasehold::{Connection, Delivery, Registration};
use leasehold_actors::testing::MemoryPubSub;
use leasehold_test_support::unique;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

// ---------- measurement helpers ----------

/// Counts live heap bytes, for memory per outstanding message, and allocations, for
/// allocations per message (a figure that does not vary from run to run the way CPU time does).
///
/// Sharded by thread: one pair of shared counters would bounce between the cores on every
/// allocation, a cost of this measurement that Leasehold's worker threads would pay and a
/// single-threaded loop would not.
struct Counting;

#[repr(align(128))]
struct Shard {
    live: AtomicI64,
    allocations: AtomicU64,
}

const SHARDS: usize = 16;
static COUNTERS: [Shard; SHARDS] = [const {
    Shard {
        live: AtomicI64::new(0),
        allocations: AtomicU64::new(0),
    }
}; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard; assigned on its first allocation (no allocation of its own).
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

fn shard() -> &'static Shard {
    let index = SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        })
        .unwrap_or(0);
    &COUNTERS[index]
}

/// Live heap bytes now, all threads.
fn live() -> usize {
    COUNTERS
        .iter()
        .map(|s| s.live.load(Ordering::Relaxed))
        .sum::<i64>()
        .max(0) as usize
}

/// Allocations so far, all threads.
fn allocations() -> u64 {
    COUNTERS
        .iter()
        .map(|s| s.allocations.load(Ordering::Relaxed))
        .sum()
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let shard = shard();
        shard
            .live
            .fetch_add(layout.size() as i64, Ordering::Relaxed);
        shard.allocations.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shard()
            .live
            .fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// This process's CPU time (all threads, user + system) in seconds, from the kernel's
/// nanosecond accounting (`CLOCK_PROCESS_CPUTIME_ID`): a five-stream run lasts about two
/// seconds, too short for the 10 ms ticks of `/proc/self/stat`.
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

/// This process image's peak resident set (VmHWM in `/proc/self/status`), in KiB.
///
/// Not getrusage's `ru_maxrss`: Linux carries that over from the parent through fork and exec,
/// so a side started by this benchmark would report the benchmark's own peak (its publisher's)
/// rather than the side's.
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

#[derive(Debug, Clone, Copy)]
struct Run {
    per_second: f64,
    cpu_us_per_message: f64,
    allocations_per_message: f64,
}

/// Where a measurement starts: CPU time, wall clock and allocations so far.
struct Clock {
    cpu: f64,
    began: Instant,
    allocations: u64,
}

impl Clock {
    fn start() -> Self {
        Self {
            cpu: cpu_seconds(),
            began: Instant::now(),
            allocations: allocations(),
        }
    }

    /// The run, for `messages` messages since the start.
    fn stop(&self, messages: f64) -> Run {
        let elapsed = self.began.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let allocations = allocations() - self.allocations;
        Run {
            per_second: messages / elapsed,
            cpu_us_per_message: cpu * 1e6 / messages,
            allocations_per_message: allocations as f64 / messages,
        }
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Medians with their spread: messages per second, µs of CPU per message, allocations per
/// message.
type Summary = ((f64, f64, f64), (f64, f64, f64), (f64, f64, f64));

fn summary(runs: &[Run]) -> Summary {
    (
        median(runs.iter().map(|r| r.per_second).collect()),
        median(runs.iter().map(|r| r.cpu_us_per_message).collect()),
        median(runs.iter().map(|r| r.allocations_per_message).collect()),
    )
}

// ---------- the actor pipeline alone ----------

/// The in-memory source every pipeline run reads: endless 200-byte messages, counted when
/// settled (`leasehold::testing`).
fn memory() -> MemoryPubSub {
    MemoryPubSub::endless(vec![b'x'; 200])
}

const BENCH_SUB: &str = "projects/bench/subscriptions/pipeline";

/// The messages of one batch in the batch side of the pipeline.
const PIPELINE_BATCH: usize = 100;

/// The actor pipeline on the in-memory source: a no-op handler per message, or (`batch`) a
/// no-op batch handler on batches of [`PIPELINE_BATCH`].
async fn pipeline(messages: u64, batch: bool) -> Run {
    let pubsub = memory();
    let mut registration = if batch {
        Registration::raw_batch(BENCH_SUB, |_: leasehold::Batch<bytes::Bytes>| async {
            leasehold::BatchOutcome::all(leasehold::Outcome::ack())
        })
        .max_batch_messages(PIPELINE_BATCH)
    } else {
        Registration::raw(BENCH_SUB, |_, d: Delivery| async move { d.ack() })
    }
    .workers(64)
    .max_outstanding_messages(10_000);
    if let Some(threads) = std::env::var("LEASEHOLD_BENCH_WORKER_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        registration = registration.worker_threads(threads);
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
    while pubsub.acked() < messages {
        actix_rt::time::sleep(Duration::from_millis(1)).await;
    }
    let run = clock.stop(pubsub.acked() as f64);
    sub.stop().await;
    run
}

/// About `micros` µs of computation: the number of xorshift steps, measured on this machine.
fn calibrate(micros: u64) -> u64 {
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
/// handlers on `threads` worker threads: messages per second.
async fn cpu_bound(threads: usize, steps: u64, messages: u64) -> Run {
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
    while pubsub.acked() < messages {
        actix_rt::time::sleep(Duration::from_millis(1)).await;
    }
    let run = clock.stop(pubsub.acked() as f64);
    sub.stop().await;
    run
}

/// One worker thread against one per core, interleaved: the CPU-bound handler's throughput.
async fn cpu_bound_table(reps: usize, messages: u64) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let steps = calibrate(200);
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        one.push(cpu_bound(1, steps, messages).await);
        all.push(cpu_bound(cores, steps, messages).await);
    }
    let ((o, olo, ohi), _, _) = summary(&one);
    let ((a, alo, ahi), _, _) = summary(&all);
    println!(
        "
CPU-bound handler (about 200 µs of computation, {messages} messages, in-memory source, \
         median [min–max] of {reps} interleaved runs): 1 worker thread {o:.0} msg/s [{olo:.0}–{ohi:.0}], \
         {cores} worker threads (one per core) {a:.0} msg/s [{alo:.0}–{ahi:.0}]: {:.2}×",
        a / o
    );
}

/// Live heap bytes per outstanding message, with `held` messages in handlers that wait.
async fn memory_per_message(held: usize) -> f64 {
    let release = Arc::new(tokio::sync::Notify::new());
    let r = release.clone();
    let registration = Registration::raw(BENCH_SUB, move |_, d: Delivery| {
        let r = r.clone();
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
    while sub.in_flight().messages < held || sub.load().running < held {
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    let during = live();
    release.notify_waiters();
    sub.stop().await;
    (during.saturating_sub(before)) as f64 / held as f64
}

// ---------- end to end against the emulator ----------

struct Bench {
    connection: Connection,
    topics: google_cloud_pubsub::client::TopicAdmin,
    subscriptions: google_cloud_pubsub::client::SubscriptionAdmin,
}

impl Bench {
    /// The admin clients for `connection`.
    async fn connect(connection: &Connection) -> Self {
        Self {
            topics: connection.topic_admin().await.unwrap(),
            subscriptions: connection.subscription_admin().await.unwrap(),
            connection: connection.clone(),
        }
    }

    /// A fresh topic and subscription with `messages` 200-byte messages waiting.
    async fn prepare(&self, messages: usize, exactly_once: bool) -> (String, String) {
        let id = unique("bench");
        let topic = format!("projects/leasehold-bench/topics/{id}");
        let subscription = format!("projects/leasehold-bench/subscriptions/{id}");
        self.topics
            .create_topic()
            .set_name(&topic)
            .send()
            .await
            .unwrap();
        self.subscriptions
            .create_subscription()
            .with_request(
                SubscriptionSpec::new()
                    .set_name(&subscription)
                    .set_topic(&topic)
                    .set_ack_deadline_seconds(60)
                    .set_enable_exactly_once_delivery(exactly_once),
            )
            .send()
            .await
            .unwrap();
        let publisher = self.connection.publisher(&topic).await.unwrap();
        let payload = bytes::Bytes::from(vec![b'x'; 200]);
        for chunk in (0..messages).collect::<Vec<_>>().chunks(2000) {
            let sent: Vec<_> = chunk
                .iter()
                .map(|_| publisher.publish(Message::new().set_data(payload.clone())))
                .collect();
            for r in futures::future::join_all(sent).await {
                r.unwrap();
            }
        }
        (topic, subscription)
    }

    async fn cleanup(&self, (topic, subscription): (String, String)) {
        let _ = self
            .subscriptions
            .delete_subscription()
            .set_subscription(&subscription)
            .send()
            .await;
        let _ = self.topics.delete_topic().set_topic(&topic).send().await;
    }
}

/// A count that says when it reaches its target: how a Rust side learns that its run is over,
/// without polling. Both sides end on it (issue 24: polling `stats()` every 2 ms cost the
/// one-stream plain loop about 5 µs per message, more than a third of its CPU).
struct Countdown {
    count: AtomicU64,
    target: u64,
    reached: tokio::sync::Notify,
}

impl Countdown {
    fn new(target: u64) -> Self {
        Self {
            count: AtomicU64::new(0),
            target,
            reached: tokio::sync::Notify::new(),
        }
    }

    /// Counts one; the count that reaches the target wakes [`reached`](Self::reached).
    fn count(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            // Kept as a permit when no one waits yet: the wake-up is not lost.
            self.reached.notify_one();
        }
    }

    /// Resolves once the target is reached.
    async fn reached(&self) {
        self.reached.notified().await;
    }
}

/// The plain loop over the official client: `next()` then `ack()`, until `messages` distinct
/// messages are acked (a redelivery is acked and not counted again); on exactly-once
/// subscriptions the confirmed acks are awaited concurrently and the run ends at the
/// `messages`-th confirmation (a refused ack brings its message back, counted when confirmed).
/// The last count wakes the measurement ([`Countdown`]).
async fn plain(connection: &Connection, subscription: &str, streams: usize, messages: u64) -> Run {
    let subscriber = connection.subscriber().await.unwrap();
    let done = Rc::new(Countdown::new(messages));
    // The ids acked so far, to count distinct messages; room made before the clock starts.
    let seen = Rc::new(RefCell::new(HashSet::with_capacity(messages as usize)));
    let clock = Clock::start();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let mut stream = subscriber.subscribe(subscription).build();
        let (done, seen) = (done.clone(), seen.clone());
        tasks.push(actix_rt::spawn(async move {
            let mut confirmations = futures::stream::FuturesUnordered::new();
            loop {
                tokio::select! {
                    item = stream.next() => match item {
                        Some(Ok((_m, ClientHandler::ExactlyOnce(h)))) => {
                            confirmations.push(h.confirmed_ack());
                        }
                        Some(Ok((m, h))) => {
                            h.ack();
                            if seen.borrow_mut().insert(m.message_id) {
                                done.count();
                            }
                        }
                        _ => break,
                    },
                    Some(confirmed) = futures::StreamExt::next(&mut confirmations) => {
                        if confirmed.is_ok() {
                            done.count();
                        }
                    }
                }
            }
        }));
    }
    done.reached().await;
    let run = clock.stop(messages as f64);
    for t in tasks {
        t.abort();
    }
    run
}

/// The default progress store ([`MemoryStore`](leasehold::store::MemoryStore)) with a count of
/// the records it clears: the runtime clears a record when Pub/Sub confirms its message's ack
/// (exactly-once subscriptions), so its count is the confirmed acks, and the Leasehold side's
/// exactly-once runs end on it. The same store runs on at-least-once subscriptions, where nothing
/// is cleared: both delivery types run one configuration.
struct CountingClears {
    store: leasehold::store::MemoryStore,
    cleared: Arc<Countdown>,
}

impl leasehold::store::ProgressStore for CountingClears {
    fn completed(
        &self,
        message_id: &str,
    ) -> Result<Option<leasehold::store::Completed>, leasehold::store::StoreError> {
        self.store.completed(message_id)
    }

    fn record(
        &self,
        message_id: &str,
        completed: leasehold::store::Completed,
    ) -> futures::future::BoxFuture<'static, Result<(), leasehold::store::StoreError>> {
        self.store.record(message_id, completed)
    }

    fn clear(&self, message_id: &str) {
        self.store.clear(message_id);
        self.cleared.count();
    }
}

/// Leasehold: a no-op handler that acks, `streams` streams, 64 workers. The run ends when the
/// handler has acked `messages` messages (at-least-once: the progress store replays a
/// redelivery of a finished message without the handler, so these are distinct messages) or,
/// on exactly-once subscriptions, when Pub/Sub has confirmed `messages` acks (the store's
/// clears); the last count wakes the measurement ([`Countdown`]).
async fn with_leasehold(
    connection: &Connection,
    subscription: &str,
    streams: usize,
    messages: u64,
) -> Run {
    let handled = Arc::new(Countdown::new(messages));
    let confirmed = Arc::new(Countdown::new(messages));
    let counted = handled.clone();
    let mut registration = Registration::raw(subscription, move |_, d: Delivery| {
        counted.count();
        async move { d.ack() }
    })
    .streams(streams)
    .workers(64)
    .progress_store(CountingClears {
        store: leasehold::store::MemoryStore::default(),
        cleared: confirmed.clone(),
    });
    if let Some(threads) = std::env::var("LEASEHOLD_BENCH_WORKER_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        registration = registration.worker_threads(threads);
    }
    // As for the plain loop, building the clients is outside the measurement: the stream opens
    // after `start` returns, when the supervisor starts.
    let sub = leasehold::start(registration, connection).await.unwrap();
    let clock = Clock::start();
    let exactly_once = sub.info().is_some_and(|i| i.exactly_once);
    if exactly_once {
        confirmed.reached().await;
    } else {
        handled.reached().await;
    }
    let run = clock.stop(messages as f64);
    sub.stop().await;
    run
}

#[actix_rt::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Traces on: every message's span exported through OpenTelemetry (to an exporter that
    // discards them), as the service does with a collector configured.
    let _tracing = args
        .iter()
        .any(|a| a == "--otel")
        .then(observability::install);
    if args.iter().any(|a| a == "--logs") {
        // Logs on, as the service's default (`info`), to stderr.
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_writer(std::io::stderr)
            .init();
    }
    if args.iter().any(|a| a == "--pipeline-only") {
        // For a profiler: the actor pipeline alone, long enough to sample.
        let messages = args
            .iter()
            .position(|a| a == "--messages")
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(2_000_000);
        let batch = args.iter().any(|a| a == "--batch");
        let run = pipeline(messages, batch).await;
        let what = if batch {
            "pipeline alone, batches"
        } else {
            "pipeline alone"
        };
        println!("{what}: {run:?}");
        return;
    }
    if args.iter().any(|a| a == "--observability") {
        observability::table(5);
        return;
    }
    if args.iter().any(|a| a == "--cpu-bound") {
        cpu_bound_table(5, 10_000).await;
        return;
    }
    if let Some(other) = value(&args, "--against") {
        // Binary against binary: this build's Rust sides and another build's, alternating.
        let messages = value(&args, "--messages")
            .and_then(|n| n.parse().ok())
            .unwrap_or(20_000);
        let reps = value(&args, "--reps")
            .and_then(|n| n.parse().ok())
            .unwrap_or(5);
        let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
        let bench = Bench::connect(&emulator.connection()).await;
        against_binary(
            &bench,
            emulator.host(),
            std::path::Path::new(other),
            messages,
            reps,
        )
        .await;
        return;
    }
    if let Some(side) = value(&args, "--side") {
        // A child of the end-to-end table: one side on one subscription, one RESULT line.
        child_side(&args, side).await;
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--one") {
        // For a profiler: one end-to-end run of one side (the Rust sides in this process).
        let side = args.get(at + 1).map(String::as_str).unwrap_or("leasehold");
        let streams = args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(1);
        let exactly_once = args.get(at + 3).is_some_and(|a| a == "eo");
        let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
        let connection = emulator.connection();
        let bench = Bench::connect(&connection).await;
        let messages = 60_000;
        let made = bench.prepare(messages, exactly_once).await;
        match side {
            "plain" => {
                let run = plain(&connection, &made.1, streams, messages as u64).await;
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
                        E2e {
                            host: emulator.host(),
                            subscription: &made.1,
                            messages,
                            streams,
                            exactly_once,
                        }
                        .configure(&mut command);
                        sides::measure(command, side_timeout(messages)).await
                    }
                    None => Err("not installed (see the peer line above)".to_string()),
                };
                println!(
                    "{}, {streams} stream(s), exactly-once {exactly_once}: {result:?}",
                    side.name()
                );
            }
            _ => {
                let run = with_leasehold(&connection, &made.1, streams, messages as u64).await;
                println!("{side}, {streams} stream(s), exactly-once {exactly_once}: {run:?}");
            }
        }
        bench.cleanup(made).await;
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
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
    let peers = if args.iter().any(|a| a == "--no-peers") {
        println!("\npeers: skipped (--no-peers): the end-to-end table has the Rust sides only");
        Vec::new()
    } else {
        println!();
        peers::setup()
    };

    // The actor pipeline alone: single messages and batches, interleaved.
    let (runs, batch_runs): (Vec<Run>, Vec<Run>) = {
        let (mut single, mut batches) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(3) {
            single.push(pipeline(pipeline_messages, false).await);
            batches.push(pipeline(pipeline_messages, true).await);
        }
        (single, batches)
    };
    let ((rate, lo, hi), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&runs);
    println!(
        "\npipeline alone (in-memory source, no-op handler, {pipeline_messages} messages, {} runs): \
         {rate:.0} msg/s [{lo:.0}–{hi:.0}], {cpu:.2} µs CPU/msg [{cpu_lo:.2}–{cpu_hi:.2}], \
         {allocs:.1} allocations/msg (3 of them the in-memory source's own)",
        runs.len()
    );
    let ((rate, lo, hi), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&batch_runs);
    println!(
        "pipeline alone, a batch handler on batches of {PIPELINE_BATCH} (the same source, runs \
         interleaved with the above): {rate:.0} msg/s [{lo:.0}–{hi:.0}], {cpu:.2} µs CPU/msg \
         [{cpu_lo:.2}–{cpu_hi:.2}], {allocs:.1} allocations/msg"
    );

    cpu_bound_table(
        if quick { 1 } else { 5 },
        if quick { 2_000 } else { 10_000 },
    )
    .await;

    let mut per_message = Vec::new();
    for _ in 0..3 {
        per_message.push(memory_per_message(10_000).await);
    }
    let (mem, mem_lo, mem_hi) = median(per_message);
    println!(
        "memory per outstanding message (10,000 held): {mem:.0} B [{mem_lo:.0}–{mem_hi:.0}] \
         live heap"
    );

    // End to end. On an emulator of its own, not leasehold_test_support's: that one installs a
    // trace-level log capture, which a benchmark must not pay for.
    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let connection = emulator.connection();
    let bench = Bench::connect(&connection).await;
    end_to_end_table(&bench, emulator.host(), &peers, messages, end_to_end_reps).await;
}

/// The value after `flag` in `args`.
fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The child mode: one Rust side (`plain` or `leasehold`) on the subscription the parent made,
/// against the emulator at PUBSUB_EMULATOR_HOST; prints its RESULT line. (It finds out by itself
/// whether the subscription is exactly-once: `--exactly-once` is accepted and not needed.)
async fn child_side(args: &[String], side: &str) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let messages: u64 = value(args, "--messages")
        .and_then(|n| n.parse().ok())
        .expect("--messages N");
    let streams: usize = value(args, "--streams")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let host = std::env::var("PUBSUB_EMULATOR_HOST").expect("PUBSUB_EMULATOR_HOST");
    let connection = Connection::emulator(&host);
    let run = match side {
        "plain" => plain(&connection, subscription, streams, messages).await,
        "leasehold" => with_leasehold(&connection, subscription, streams, messages).await,
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

/// The five end-to-end sides, each a child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Plain,
    Leasehold,
    Python,
    Node,
    /// The community crate `gcloud-pubsub` (`benches/peers/gcloud/`).
    Gcloud,
}

impl Side {
    const ALL: [Side; 5] = [
        Side::Plain,
        Side::Leasehold,
        Side::Python,
        Side::Node,
        Side::Gcloud,
    ];

    fn name(self) -> &'static str {
        match self {
            Side::Plain => "plain",
            Side::Leasehold => "Leasehold",
            Side::Python => "Python",
            Side::Node => "Node",
            Side::Gcloud => "gcloud-pubsub",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The command that starts this side, without its run's arguments; `None` for a peer that
    /// is not installed.
    fn command(self, peers: &[peers::Peer]) -> Option<tokio::process::Command> {
        match self {
            Side::Plain | Side::Leasehold => {
                let mut command = tokio::process::Command::new(
                    std::env::current_exe().expect("this benchmark's executable"),
                );
                command.args([
                    "--side",
                    if self == Side::Plain {
                        "plain"
                    } else {
                        "leasehold"
                    },
                ]);
                Some(command)
            }
            Side::Python => peers
                .iter()
                .find(|p| p.kind == peers::Kind::Python)
                .map(peers::Peer::command),
            Side::Node => peers
                .iter()
                .find(|p| p.kind == peers::Kind::Node)
                .map(peers::Peer::command),
            Side::Gcloud => peers
                .iter()
                .find(|p| p.kind == peers::Kind::Gcloud)
                .map(peers::Peer::command),
        }
    }
}

/// One end-to-end run's arguments, the same for every side.
struct E2e<'a> {
    host: &'a str,
    subscription: &'a str,
    messages: usize,
    streams: usize,
    exactly_once: bool,
}

impl E2e<'_> {
    fn configure(&self, command: &mut tokio::process::Command) {
        command
            .args(["--subscription", self.subscription])
            .args(["--messages", &self.messages.to_string()])
            .args(["--streams", &self.streams.to_string()])
            .env("PUBSUB_EMULATOR_HOST", self.host);
        if self.exactly_once {
            command.arg("--exactly-once");
        }
    }
}

/// How long a side may take before it is killed and counted as failed: far more than the
/// slowest side needs (a few thousand messages per second at one stream).
fn side_timeout(messages: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(5 * messages as u64)
}

/// Medians [min–max] of one figure over a side's successful runs; `None` when it has none.
fn spread(
    runs: &[Result<sides::Measured, String>],
    figure: impl Fn(&sides::Measured) -> Option<f64>,
) -> Option<(f64, f64, f64)> {
    let values: Vec<f64> = runs.iter().flatten().filter_map(figure).collect();
    (!values.is_empty()).then(|| median(values))
}

fn cell(value: Option<(f64, f64, f64)>, decimals: usize) -> String {
    match value {
        Some((m, lo, hi)) => format!("{m:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
        None => "–".to_string(),
    }
}

/// The ratio of two medians.
fn ratio(a: Option<(f64, f64, f64)>, b: Option<(f64, f64, f64)>, decimals: usize) -> String {
    match (a, b) {
        (Some((a, _, _)), Some((b, _, _))) => format!("{:.decimals$}", a / b),
        _ => "–".to_string(),
    }
}

/// Binary against binary (`--against OTHER`): the plain and Leasehold sides of this build and of
/// `other` (another build of this benchmark, which must take the same `--side` child mode), each
/// a child process on its own fresh subscription, `reps` rounds in an order that rotates from
/// one round to the next; one row per delivery type and stream count. For what a change buys:
/// the harness of issue 24 against the one before it, or a runtime change against its parent.
async fn against_binary(
    bench: &Bench,
    host: &str,
    other: &std::path::Path,
    messages: usize,
    reps: usize,
) {
    assert!(
        other.is_file(),
        "--against {}: no such file (the benchmark binary of another build, e.g. a copy of \
         target/release/deps/throughput-…)",
        other.display()
    );
    let this = std::env::current_exe().expect("this benchmark's executable");
    // (binary, side): other's plain, this plain, other's Leasehold, this Leasehold.
    let runs: [(&std::path::Path, &str); 4] = [
        (other, "plain"),
        (&this, "plain"),
        (other, "leasehold"),
        (&this, "leasehold"),
    ];
    println!(
        "binary against binary, {messages} messages of 200 bytes, median [min–max] of {reps} \
         rounds, each side a process of its own on a fresh subscription, in an order that \
         rotates:\n  A = {}\n  B = {} (this one)\n",
        other.display(),
        this.display()
    );
    println!(
        "| delivery | streams | plain µs CPU/msg A | plain B | Leasehold A | Leasehold B \
         | Leasehold/plain A | Leasehold/plain B | B/A plain | B/A Leasehold \
         | msg/s plain A, B; Leasehold A, B | allocations/msg plain A, B; Leasehold A, B | notes |"
    );
    println!("|{}", "---|".repeat(13));
    for exactly_once in [false, true] {
        let delivery = if exactly_once {
            "exactly-once"
        } else {
            "at-least-once"
        };
        for streams in [1usize, 5] {
            let mut results: [Vec<Result<sides::Measured, String>>; 4] = Default::default();
            for rep in 0..reps {
                for i in 0..runs.len() {
                    let at = (rep + i) % runs.len();
                    let (binary, side) = runs[at];
                    let made = bench.prepare(messages, exactly_once).await;
                    let mut command = tokio::process::Command::new(binary);
                    command.args(["--side", side]);
                    E2e {
                        host,
                        subscription: &made.1,
                        messages,
                        streams,
                        exactly_once,
                    }
                    .configure(&mut command);
                    let result = sides::measure(command, side_timeout(messages)).await;
                    if let Err(why) = &result {
                        eprintln!(
                            "{side} of {} failed ({delivery}, {streams} stream(s)): {why}",
                            binary.display()
                        );
                    }
                    results[at].push(result);
                    bench.cleanup(made).await;
                }
            }
            let of = |at: usize, figure: fn(&sides::Measured) -> Option<f64>| {
                spread(&results[at], figure)
            };
            let cpu = |at| of(at, |m| Some(m.cpu_us_per_message));
            let rate = |at| of(at, |m| Some(m.per_second));
            let allocs = |at| of(at, |m| m.allocations_per_message);
            let median_of = |v: Option<(f64, f64, f64)>, decimals: usize| match v {
                Some((m, _, _)) => format!("{m:.decimals$}"),
                None => "–".to_string(),
            };
            let failures: Vec<String> = (0..runs.len())
                .filter_map(|at| {
                    let failed = results[at].iter().filter(|r| r.is_err()).count();
                    (failed > 0).then(|| {
                        format!(
                            "{} {} failed in {failed} of {reps} runs",
                            runs[at].1,
                            if at % 2 == 0 { "A" } else { "B" }
                        )
                    })
                })
                .collect();
            let cells = [
                delivery.to_string(),
                streams.to_string(),
                cell(cpu(0), 1),
                cell(cpu(1), 1),
                cell(cpu(2), 1),
                cell(cpu(3), 1),
                ratio(cpu(2), cpu(0), 2),
                ratio(cpu(3), cpu(1), 2),
                ratio(cpu(1), cpu(0), 2),
                ratio(cpu(3), cpu(2), 2),
                (0..4)
                    .map(|at| median_of(rate(at), 0))
                    .collect::<Vec<_>>()
                    .join(", "),
                (0..4)
                    .map(|at| median_of(allocs(at), 1))
                    .collect::<Vec<_>>()
                    .join(", "),
                if failures.is_empty() {
                    "–".to_string()
                } else {
                    failures.join("; ")
                },
            ];
            println!("| {} |", cells.join(" | "));
        }
    }
}

/// Every side on its own fresh subscription, `reps` times, in an order that rotates from one
/// repetition to the next; one table row per delivery type and stream count.
async fn end_to_end_table(
    bench: &Bench,
    host: &str,
    peers: &[peers::Peer],
    messages: usize,
    reps: usize,
) {
    let sides: Vec<Side> = Side::ALL
        .into_iter()
        .filter(|s| s.command(peers).is_some())
        .collect();
    println!(
        "\nend to end, {messages} messages of 200 bytes, median [min–max] of {reps} interleaved \
         runs of each side ({}), each a process of its own on a fresh subscription; CPU is the \
         side's own user + system time, peak RSS its VmHWM\n",
        sides
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| delivery | streams | plain msg/s | Leasehold msg/s | throughput Leasehold/plain \
         | Python msg/s | Node msg/s | gcloud-pubsub msg/s | plain µs CPU/msg \
         | Leasehold µs CPU/msg | Python µs CPU/msg | Node µs CPU/msg | gcloud-pubsub µs CPU/msg \
         | CPU Leasehold/plain | CPU Python/Leasehold | CPU Node/Leasehold \
         | CPU gcloud-pubsub/Leasehold | plain peak RSS MiB | Leasehold peak RSS MiB \
         | Python peak RSS MiB | Node peak RSS MiB | gcloud-pubsub peak RSS MiB \
         | RSS Python/Leasehold | RSS Node/Leasehold | RSS gcloud-pubsub/Leasehold \
         | allocations/msg plain, Leasehold | notes |"
    );
    println!("|{}", "---|".repeat(27));
    for exactly_once in [false, true] {
        let delivery = if exactly_once {
            "exactly-once"
        } else {
            "at-least-once"
        };
        for streams in [1usize, 5] {
            let mut results: [Vec<Result<sides::Measured, String>>; 5] = Default::default();
            for rep in 0..reps {
                for i in 0..sides.len() {
                    let side = sides[(rep + i) % sides.len()];
                    let made = bench.prepare(messages, exactly_once).await;
                    let mut command = side.command(peers).expect("a side that can run");
                    E2e {
                        host,
                        subscription: &made.1,
                        messages,
                        streams,
                        exactly_once,
                    }
                    .configure(&mut command);
                    let result = sides::measure(command, side_timeout(messages)).await;
                    if let Err(why) = &result {
                        eprintln!(
                            "{} failed ({delivery}, {streams} stream(s)): {why}",
                            side.name()
                        );
                    }
                    results[side.index()].push(result);
                    bench.cleanup(made).await;
                }
            }
            let of = |side: Side, figure: fn(&sides::Measured) -> Option<f64>| {
                spread(&results[side.index()], figure)
            };
            let rate = |s| of(s, |m| Some(m.per_second));
            let cpu = |s| of(s, |m| Some(m.cpu_us_per_message));
            let rss = |s| of(s, |m| Some(m.peak_rss_kb / 1024.0));
            let allocs = |s| of(s, |m| m.allocations_per_message);
            let mut notes = Vec::new();
            for side in Side::ALL {
                let runs = &results[side.index()];
                let failed: Vec<&String> = runs.iter().filter_map(|r| r.as_ref().err()).collect();
                if !sides.contains(&side) {
                    notes.push(format!(
                        "{} not run (see the peer lines above)",
                        side.name()
                    ));
                } else if !failed.is_empty() && failed.len() == runs.len() {
                    notes.push(format!(
                        "{} failed in every run ({})",
                        side.name(),
                        failed[0]
                    ));
                } else if !failed.is_empty() {
                    notes.push(format!(
                        "{} failed in {} of {} runs ({}): its figures are of the others",
                        side.name(),
                        failed.len(),
                        runs.len(),
                        failed[0]
                    ));
                }
            }
            let allocations = match (allocs(Side::Plain), allocs(Side::Leasehold)) {
                (Some((p, _, _)), Some((l, _, _))) => format!("{p:.1}, {l:.1}"),
                _ => "–".to_string(),
            };
            let cells = [
                delivery.to_string(),
                streams.to_string(),
                cell(rate(Side::Plain), 0),
                cell(rate(Side::Leasehold), 0),
                ratio(rate(Side::Leasehold), rate(Side::Plain), 2),
                cell(rate(Side::Python), 0),
                cell(rate(Side::Node), 0),
                cell(rate(Side::Gcloud), 0),
                cell(cpu(Side::Plain), 1),
                cell(cpu(Side::Leasehold), 1),
                cell(cpu(Side::Python), 1),
                cell(cpu(Side::Node), 1),
                cell(cpu(Side::Gcloud), 1),
                ratio(cpu(Side::Leasehold), cpu(Side::Plain), 2),
                ratio(cpu(Side::Python), cpu(Side::Leasehold), 1),
                ratio(cpu(Side::Node), cpu(Side::Leasehold), 1),
                ratio(cpu(Side::Gcloud), cpu(Side::Leasehold), 1),
                cell(rss(Side::Plain), 1),
                cell(rss(Side::Leasehold), 1),
                cell(rss(Side::Python), 1),
                cell(rss(Side::Node), 1),
                cell(rss(Side::Gcloud), 1),
                ratio(rss(Side::Python), rss(Side::Leasehold), 1),
                ratio(rss(Side::Node), rss(Side::Leasehold), 1),
                ratio(rss(Side::Gcloud), rss(Side::Leasehold), 1),
                allocations,
                if notes.is_empty() {
                    "–".to_string()
                } else {
                    notes.join("; ")
                },
            ];
            println!("| {} |", cells.join(" | "));
        }
    }
}

/// Running one side as a child and reading its RESULT line.
mod sides {
    use std::process::Stdio;
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

    /// What a side reports about itself.
    #[derive(Debug, Clone, Copy)]
    pub struct Measured {
        pub per_second: f64,
        pub cpu_us_per_message: f64,
        pub peak_rss_kb: f64,
        /// The Rust sides only (the counting allocator).
        pub allocations_per_message: Option<f64>,
    }

    /// Parses `per_second=.. cpu_us_per_message=.. peak_rss_kb=.. [allocations_per_message=..]`.
    pub fn parse(line: &str) -> Result<Measured, String> {
        let field = |name: &str| -> Option<f64> {
            line.split_whitespace()
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        };
        let required = |name: &str| field(name).ok_or_else(|| format!("no {name} in: {line}"));
        Ok(Measured {
            per_second: required("per_second")?,
            cpu_us_per_message: required("cpu_us_per_message")?,
            peak_rss_kb: required("peak_rss_kb")?,
            allocations_per_message: field("allocations_per_message"),
        })
    }

    /// The last line of a failed side's stderr that says what happened: not indented (a stack
    /// frame) and not a hint.
    fn last_word(stderr: &str) -> Option<String> {
        let line = stderr.lines().rev().find(|l| {
            !l.trim().is_empty()
                && !l.starts_with(char::is_whitespace)
                && !l.starts_with("note: ")
                && !l.starts_with("(Use `node")
        })?;
        Some(line.chars().take(200).collect())
    }

    /// Starts `command`, waits at most `timeout` for its RESULT line, then for it to exit
    /// (killing it when it does not within a few seconds, so that it takes no CPU from the next
    /// side). A side that exits without a result, or takes too long, is an error, not a panic.
    pub async fn measure(
        mut command: tokio::process::Command,
        timeout: Duration,
    ) -> Result<Measured, String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("could not start {:?}: {e}", command.as_std().get_program()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let errors = actix_rt::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let result = tokio::time::timeout(timeout, async {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("RESULT ") {
                    return Some(rest.to_string());
                }
            }
            None
        })
        .await;
        match result {
            Ok(Some(line)) => {
                if tokio::time::timeout(Duration::from_secs(15), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
                errors.abort();
                parse(&line)
            }
            Ok(None) => {
                let status = child.wait().await.map_err(|e| e.to_string())?;
                let stderr = errors.await.unwrap_or_default();
                Err(format!(
                    "exited ({status}) without a result{}",
                    last_word(&stderr)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ))
            }
            Err(_) => {
                let _ = child.kill().await;
                errors.abort();
                Err(format!("no result within {} s: killed", timeout.as_secs()))
            }
        }
    }
}

/// Google's Python and Node subscribers (`benches/peers/`), installed into
/// `target/bench-peers/` when missing: a virtualenv from `requirements.txt`, a node_modules from
/// `package.json` and its lock. An install is reused while those files are unchanged.
mod peers {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Python,
        Node,
        /// The community Rust crate `gcloud-pubsub`: a cargo project of its own, built here.
        Gcloud,
    }

    impl Kind {
        fn name(self) -> &'static str {
            match self {
                Kind::Python => "Python",
                Kind::Node => "Node",
                Kind::Gcloud => "gcloud-pubsub",
            }
        }

        /// What could not be done when a peer cannot run.
        fn failed(self) -> &'static str {
            match self {
                Kind::Python | Kind::Node => "could not be installed",
                Kind::Gcloud => "could not be built",
            }
        }
    }

    /// An installed peer.
    pub struct Peer {
        pub kind: Kind,
        program: PathBuf,
        /// The script the interpreter runs; `None` for a compiled peer.
        script: Option<PathBuf>,
        env: Vec<(&'static str, PathBuf)>,
    }

    impl Peer {
        /// The command that runs this peer's subscriber, without its run's arguments.
        pub fn command(&self) -> tokio::process::Command {
            let mut command = tokio::process::Command::new(&self.program);
            if self.kind == Kind::Python {
                command.arg("-u");
            }
            command.args(&self.script);
            for (name, value) in &self.env {
                command.env(name, value);
            }
            command
        }

        /// `subscriber --version`: the versions it runs with. Also the proof that it loads.
        fn versions(&self) -> Result<String, String> {
            let mut command = Command::new(&self.program);
            command.args(&self.script).arg("--version");
            for (name, value) in &self.env {
                command.env(name, value);
            }
            let out = run(&mut command, Duration::from_secs(60))?;
            Ok(out.lines().next().unwrap_or("").trim().to_string())
        }
    }

    fn sources() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers")
    }

    /// `target/bench-peers`, in the target directory this benchmark was built in
    /// (`target/release/deps/throughput-…`).
    fn root() -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
            .filter(|target| target.join("CACHEDIR.TAG").is_file())
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("bench-peers")
    }

    /// Installs (or finds) each peer and prints one line for each: its versions, or why it
    /// could not be installed. Returns those that can run.
    pub fn setup() -> Vec<Peer> {
        let root = root();
        let mut ready = Vec::new();
        for kind in [Kind::Python, Kind::Node, Kind::Gcloud] {
            match install(kind, &root).and_then(|(peer, how)| Ok((peer.versions()?, peer, how))) {
                Ok((versions, peer, how)) => {
                    println!("peer {}: {versions} ({how})", kind.name());
                    ready.push(peer);
                }
                Err(why) => println!(
                    "peer {}: {}, so it is left out of the end-to-end table: {why}",
                    kind.name(),
                    kind.failed()
                ),
            }
        }
        ready
    }

    /// What an install was made from: when it changes, the install is made anew.
    fn manifest(files: &[PathBuf]) -> Result<String, String> {
        let mut text = String::new();
        for file in files {
            if file.is_file() {
                text += &std::fs::read_to_string(file)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
            }
        }
        Ok(text)
    }

    const MARKER: &str = ".leasehold-installed-from";

    fn install(kind: Kind, root: &Path) -> Result<(Peer, String), String> {
        let sources = sources();
        let began = Instant::now();
        let installed_into = |dir: &Path| {
            format!(
                "installed into {} in {:.0} s",
                dir.display(),
                began.elapsed().as_secs_f64()
            )
        };
        let fresh = |dir: &Path| -> Result<(), String> {
            if dir.exists() {
                std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
        };
        let write = |file: PathBuf, text: &str| {
            std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))
        };
        let install_timeout = Duration::from_secs(600);
        match kind {
            Kind::Python => {
                let dir = root.join("venv");
                let requirements = sources.join("requirements.txt");
                let made_from = manifest(std::slice::from_ref(&requirements))?;
                let python = dir.join("bin/python");
                let peer = Peer {
                    kind,
                    program: python.clone(),
                    script: Some(sources.join("subscriber.py")),
                    env: Vec::new(),
                };
                let installed = std::fs::read_to_string(dir.join(MARKER)).ok();
                if python.is_file() && installed.as_deref() == Some(made_from.as_str()) {
                    return Ok((peer, format!("reused {}", dir.display())));
                }
                fresh(&dir)?;
                run(
                    Command::new("python3").args(["-m", "venv"]).arg(&dir),
                    install_timeout,
                )?;
                run(
                    Command::new(&python)
                        .args(["-m", "pip", "install", "--disable-pip-version-check"])
                        .args(["--no-input", "--quiet", "-r"])
                        .arg(&requirements),
                    install_timeout,
                )?;
                write(dir.join(MARKER), &made_from)?;
                Ok((peer, installed_into(&dir)))
            }
            Kind::Node => {
                let dir = root.join("node");
                let files = ["package.json", "package-lock.json", ".npmrc"];
                let made_from = manifest(&files.map(|f| sources.join(f)))?;
                let peer = Peer {
                    kind,
                    program: PathBuf::from("node"),
                    script: Some(sources.join("subscriber.js")),
                    env: vec![("NODE_PATH", dir.join("node_modules"))],
                };
                let installed = std::fs::read_to_string(dir.join(MARKER)).ok();
                if dir.join("node_modules/@google-cloud/pubsub").is_dir()
                    && installed.as_deref() == Some(made_from.as_str())
                {
                    return Ok((peer, format!("reused {}", dir.display())));
                }
                fresh(&dir)?;
                for file in files {
                    let from = sources.join(file);
                    if from.is_file() {
                        std::fs::copy(&from, dir.join(file))
                            .map_err(|e| format!("{}: {e}", from.display()))?;
                    }
                }
                // `npm ci` installs exactly what the lock names.
                let how = if dir.join("package-lock.json").is_file() {
                    "ci"
                } else {
                    "install"
                };
                run(
                    Command::new("npm")
                        .args([how, "--no-audit", "--no-fund"])
                        .current_dir(&dir),
                    install_timeout,
                )?;
                write(dir.join(MARKER), &made_from)?;
                Ok((peer, installed_into(&dir)))
            }
            Kind::Gcloud => {
                // A cargo project of its own, outside the workspace, with its own lock file and
                // target directory: only this benchmark ever compiles gcloud-pubsub. Cargo
                // itself tells whether the build is up to date (then this takes a second).
                let dir = root.join("gcloud");
                let manifest = sources.join("gcloud/Cargo.toml");
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                run(
                    Command::new(cargo)
                        .args(["build", "--release", "--locked", "--quiet"])
                        .arg("--manifest-path")
                        .arg(&manifest)
                        .arg("--target-dir")
                        .arg(&dir),
                    Duration::from_secs(1800),
                )?;
                let peer = Peer {
                    kind,
                    program: dir.join("release/leasehold-bench-gcloud-peer"),
                    script: None,
                    env: Vec::new(),
                };
                Ok((
                    peer,
                    format!(
                        "cargo build --release --locked into {} in {:.0} s",
                        dir.display(),
                        began.elapsed().as_secs_f64()
                    ),
                ))
            }
        }
    }

    /// Runs `command` to the end (killed after `timeout`) and returns its standard output; on
    /// failure, the first line of its output that reports an error.
    fn run(command: &mut Command, timeout: Duration) -> Result<String, String> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{program}: {e}"))?;
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_string(&mut text);
                }
                text
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{program} took longer than {} s",
                        timeout.as_secs()
                    ));
                }
                Err(e) => return Err(format!("{program}: {e}")),
            }
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if status.success() {
            return Ok(stdout);
        }
        let text = format!("{stderr}\n{stdout}");
        let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
        // npm's first error line is only a code ("npm error code ETARGET"): take the next.
        let first = lines()
            .find(|l| l.to_lowercase().contains("error") && !l.starts_with("npm error code "))
            .or_else(|| lines().next());
        Err(match first {
            Some(line) => format!("{program}: {}", line.chars().take(300).collect::<String>()),
            None => format!("{program} exited with {status}"),
        })
    }
}

/// Tracing on against off: every message's span exported through OpenTelemetry, or no
/// subscriber at all. A global subscriber cannot be removed, so each run is a process of its
/// own: this binary again, with `--pipeline-only` and `--otel` or not, alternately. (The
/// runtime's counters and histograms cannot be turned off: both sides pay for them.)
mod observability {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    /// Takes the spans and drops them: the cost measured is making and exporting them.
    #[derive(Debug)]
    struct Discard;

    impl SpanExporter for Discard {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            std::hint::black_box(batch);
            Ok(())
        }
    }

    /// Installs the OpenTelemetry layer, with a batch processor as the service uses.
    pub fn install() -> SdkTracerProvider {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Discard)
            .build();
        tracing_subscriber::registry()
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("bench"))
                    .with_filter(
                        tracing_subscriber::filter::Targets::new()
                            .with_default(tracing::Level::INFO)
                            .with_target("leasehold_actors", tracing::Level::DEBUG),
                    ),
            )
            .init();
        provider
    }

    use tracing_subscriber::Layer;

    fn run(otel: Option<f64>) -> f64 {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command.args(["--pipeline-only", "--messages", "500000"]);
        if let Some(ratio) = otel {
            command
                .arg("--otel")
                .env("LEASEHOLD_BENCH_TRACE_RATIO", ratio.to_string());
        }
        let output = command.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        text.split("cpu_us_per_message: ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no figure in: {text}"))
    }

    /// `runs` alternating runs of each side: traces off, every message's span exported, one
    /// message in a hundred.
    pub fn table(runs: usize) {
        let (mut off, mut all, mut some) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            off.push(run(None));
            all.push(run(Some(1.0)));
            some.push(run(Some(0.01)));
        }
        let (off, off_lo, off_hi) = super::median(off);
        let (all, all_lo, all_hi) = super::median(all);
        let (some, some_lo, some_hi) = super::median(some);
        println!(
            "pipeline alone, 500000 messages, median [min–max] of {runs} alternating runs, \
             µs CPU per message: traces off {off:.2} [{off_lo:.2}–{off_hi:.2}]; every span \
             exported {all:.2} [{all_lo:.2}–{all_hi:.2}] ({:.2}×); trace_sample_ratio 0.01 \
             {some:.2} [{some_lo:.2}–{some_hi:.2}] ({:.2}×)",
            all / off,
            some / off
        );
    }
}
