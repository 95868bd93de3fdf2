//! Leasehold against the plain official client, the actor pipeline alone, and memory per
//! outstanding message, measured side by side in one run.
//!
//! ```text
//! cargo bench --bench throughput              # full run: the table in BENCHMARKS.md
//! cargo bench --bench throughput -- --quick   # fewer messages and repetitions
//! cargo bench --bench throughput -- --pipeline-only   # the pipeline alone, for a profiler
//! cargo bench --bench throughput -- --cpu-bound       # a CPU-bound handler, 1 thread vs per core
//! cargo bench --bench throughput -- --observability   # traces exported vs not, side by side
//! cargo bench --bench throughput -- --one leasehold 1  # one end-to-end run (or `plain`, and
//!                                                      # `eo` after the streams), for a profiler
//! ```
//!
//! End-to-end runs need the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, or one started here). Each
//! run gets a fresh topic and subscription with the messages published before the clock starts;
//! Leasehold and the plain loop alternate, so drift on the machine hits both alike. CPU is this
//! process's user + system time (the emulator's is not counted).

use google_cloud_pubsub::model::{Message, Subscription as SubscriptionSpec};
use google_cloud_pubsub::subscriber::handler::Handler as ClientHandler;
use leasehold::emulator::EmulatorHost;
use leasehold::{Connection, Delivery, Registration};
use leasehold_actors::testing::MemoryPubSub;
use std::alloc::{GlobalAlloc, Layout, System};
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

async fn pipeline(messages: u64) -> Run {
    let pubsub = memory();
    let mut registration = Registration::raw(BENCH_SUB, |_, d: Delivery| async move { d.ack() })
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
    n: AtomicU64,
}

impl Bench {
    /// The admin clients for `connection`.
    async fn connect(connection: &Connection) -> Self {
        Self {
            topics: connection.topic_admin().await.unwrap(),
            subscriptions: connection.subscription_admin().await.unwrap(),
            connection: connection.clone(),
            n: AtomicU64::new(0),
        }
    }

    /// A fresh topic and subscription with `messages` 200-byte messages waiting.
    async fn prepare(&self, messages: usize, exactly_once: bool) -> (String, String) {
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        let id = format!("bench-{}-{n}", std::process::id());
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

/// The plain loop over the official client: `next()` then ack; on exactly-once subscriptions
/// the confirmed acks are awaited concurrently.
async fn plain(connection: &Connection, subscription: &str, streams: usize, messages: u64) -> Run {
    let subscriber = connection.subscriber().await.unwrap();
    let received = Rc::new(AtomicU64::new(0));
    let clock = Clock::start();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let mut stream = subscriber.subscribe(subscription).build();
        let received = received.clone();
        tasks.push(actix_rt::spawn(async move {
            let mut confirmations = futures::stream::FuturesUnordered::new();
            loop {
                tokio::select! {
                    item = stream.next() => match item {
                        Some(Ok((_m, ClientHandler::ExactlyOnce(h)))) => {
                            confirmations.push(h.confirmed_ack());
                        }
                        Some(Ok((_m, h))) => {
                            h.ack();
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => break,
                    },
                    Some(_) = futures::StreamExt::next(&mut confirmations) => {
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if received.load(Ordering::Relaxed) >= messages {
                    break;
                }
            }
        }));
    }
    while received.load(Ordering::Relaxed) < messages {
        actix_rt::time::sleep(Duration::from_millis(2)).await;
    }
    let run = clock.stop(messages as f64);
    for t in tasks {
        t.abort();
    }
    run
}

async fn with_leasehold(
    connection: &Connection,
    subscription: &str,
    streams: usize,
    messages: u64,
) -> Run {
    let mut registration = Registration::raw(subscription, |_, d: Delivery| async move { d.ack() })
        .streams(streams)
        .workers(64);
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
    let done = |s: leasehold::StatsSnapshot| if exactly_once { s.confirmed } else { s.acked };
    while done(sub.stats()) < messages {
        actix_rt::time::sleep(Duration::from_millis(2)).await;
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
        let run = pipeline(messages).await;
        println!("pipeline alone: {run:?}");
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
    if let Some(at) = args.iter().position(|a| a == "--one") {
        // For a profiler: one end-to-end run of one side.
        let side = args.get(at + 1).map(String::as_str).unwrap_or("leasehold");
        let streams = args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(1);
        let exactly_once = args.get(at + 3).is_some_and(|a| a == "eo");
        let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
        let connection = emulator.connection();
        let bench = Bench::connect(&connection).await;
        let messages = 60_000;
        let made = bench.prepare(messages, exactly_once).await;
        let run = if side == "plain" {
            plain(&connection, &made.1, streams, messages as u64).await
        } else {
            with_leasehold(&connection, &made.1, streams, messages as u64).await
        };
        bench.cleanup(made).await;
        println!("{side}, {streams} stream(s), exactly-once {exactly_once}: {run:?}");
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (messages, reps, pipeline_messages) = if quick {
        (4_000usize, 1usize, 100_000u64)
    } else {
        (20_000, 3, 500_000)
    };
    println!(
        "# Leasehold benchmarks ({})",
        if quick { "quick" } else { "full" }
    );

    // The actor pipeline alone.
    let runs: Vec<Run> = {
        let mut v = Vec::new();
        for _ in 0..reps.max(3) {
            v.push(pipeline(pipeline_messages).await);
        }
        v
    };
    let ((rate, lo, hi), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&runs);
    println!(
        "\npipeline alone (in-memory source, no-op handler, {pipeline_messages} messages, {} runs): \
         {rate:.0} msg/s [{lo:.0}–{hi:.0}], {cpu:.2} µs CPU/msg [{cpu_lo:.2}–{cpu_hi:.2}], \
         {allocs:.1} allocations/msg (3 of them the in-memory source's own)",
        runs.len()
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

    // End to end.
    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let connection = emulator.connection();
    let bench = Bench::connect(&connection).await;
    println!(
        "\nend to end, {messages} messages of 200 bytes, median [min–max] of {reps} interleaved runs\n"
    );
    println!(
        "| delivery | streams | plain msg/s | Leasehold msg/s | ratio | plain µs CPU/msg | Leasehold µs CPU/msg | ratio | allocations/msg plain, Leasehold |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for exactly_once in [false, true] {
        for streams in [1usize, 5] {
            let (mut plain_runs, mut leasehold_runs) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let made = bench.prepare(messages, exactly_once).await;
                plain_runs.push(plain(&connection, &made.1, streams, messages as u64).await);
                bench.cleanup(made).await;
                let made = bench.prepare(messages, exactly_once).await;
                leasehold_runs
                    .push(with_leasehold(&connection, &made.1, streams, messages as u64).await);
                bench.cleanup(made).await;
            }
            let ((p, plo, phi), (pc, pclo, pchi), (pa, _, _)) = summary(&plain_runs);
            let ((l, llo, lhi), (lc, lclo, lchi), (la, _, _)) = summary(&leasehold_runs);
            println!(
                "| {} | {streams} | {p:.0} [{plo:.0}–{phi:.0}] | {l:.0} [{llo:.0}–{lhi:.0}] | {:.2} \
                 | {pc:.1} [{pclo:.1}–{pchi:.1}] | {lc:.1} [{lclo:.1}–{lchi:.1}] | {:.2} \
                 | {pa:.1}, {la:.1} |",
                if exactly_once {
                    "exactly-once"
                } else {
                    "at-least-once"
                },
                l / p,
                lc / pc,
            );
        }
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
