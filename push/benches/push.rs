//! Pushes per second and CPU per message of the push endpoint on loopback, against the pull
//! path's CPU per message, measured side by side in one run (BENCHMARKS.md, "Push against
//! pull").
//!
//! ```text
//! cargo bench -p leasehold-push --bench push              # 5 interleaved rounds
//! cargo bench -p leasehold-push --bench push -- --quick   # 1 round, short runs: a smoke test
//! cargo bench -p leasehold-push --bench push -- --rounds 3 --seconds 5 --concurrency 1,16,64
//! cargo bench -p leasehold-push --bench push -- --pull-streams '' --concurrency 64 --seconds 20
//!                                             # pushes alone, long enough for a profiler
//! cargo bench -p leasehold-push --bench push -- --http-workers 2   # actix-web workers (default 1)
//! ```
//!
//! Only `cargo bench` runs it (it passes `--bench`): under `cargo test --benches` the binary
//! says so and returns. Needs the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, or one started
//! here). Every measured side is this binary again in a child mode, a process of its own, so
//! that its CPU is its own:
//!
//! ```text
//! push --serve --subscription NAME [--http-workers N]    # the push endpoint + a registration
//! push --pull --subscription NAME --messages N --streams K   # the pull path, as benches/throughput.rs
//! ```
//!
//! - **push**: `Push::allow_unauthenticated("/push")` bound to a registration of
//!   `Registration::raw(..).workers(64)` with a no-op handler that acks, served by actix-web on
//!   127.0.0.1. Its subscription is real, created on the emulator and read at start (its ack
//!   deadline becomes the push deadline); it is a plain pull subscription that nobody pulls and
//!   nothing is published to: the requests are Pub/Sub-shaped pushes that this benchmark sends
//!   itself. The load generator is in this process (the parent): `C` keep-alive HTTP/1.1
//!   connections, each sending one push and waiting for its answer before the next (a closed
//!   loop: C pushes outstanding at most), every push with its own message id.
//!   Its CPU is the parent's, not the server's; it is printed too.
//! - **pull**: the same registration started with `leasehold::start` on a subscription holding
//!   `N` messages of 200 bytes published before the child starts: the Leasehold side of
//!   benches/throughput.rs (`with_leasehold`), repeated here so that both figures come from one
//!   run.
//!
//! Each child measures its own user + system time (`CLOCK_PROCESS_CPUTIME_ID`) and allocations
//! (a counting global allocator, the same as benches/throughput.rs's) over the measured window
//! and prints one `RESULT ..` line. The push server's window is opened and closed by the parent
//! on its stdin, around the measured load (after a warm-up on the same connections); the pull
//! side's runs from just before the stream opens to its last ack. The rounds run every
//! configuration once, in an order that rotates from one round to the next.

use actix_web::{App, HttpServer};
use google_cloud_pubsub::client::{SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{Message, Subscription as SubscriptionSpec};
use leasehold::emulator::EmulatorHost;
use leasehold::{Connection, Delivery, Registration};
use leasehold_push::Push;
use leasehold_test_support::unique;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::Stdio;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The path pushes are sent to.
const PATH: &str = "/push";
/// The payload of every message, pushed or pulled: 200 bytes, as in benches/throughput.rs.
const PAYLOAD_BYTES: usize = 200;
/// The handler slots; flow control is above every concurrency measured.
const WORKERS: usize = 64;
const MAX_OUTSTANDING: usize = 1000;

// ---------- measurement helpers (as in benches/throughput.rs) ----------

/// Counts allocations, sharded by thread so that the count costs the threaded runtime no more
/// than a single-threaded loop.
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

/// This process's CPU time, all threads, user + system, in seconds.
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

/// This process image's peak resident set (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The machine's load averages, as `uptime` prints them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Where a measured window starts.
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

    /// `RESULT` fields for `messages` messages settled since the start.
    fn result(&self, messages: u64) -> String {
        let elapsed = self.began.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let allocations = allocations() - self.allocations;
        let n = messages.max(1) as f64;
        format!(
            "messages={messages} per_second={:.1} cpu_us_per_message={:.3} \
             allocations_per_message={:.2} peak_rss_kb={}",
            messages as f64 / elapsed,
            cpu * 1e6 / n,
            allocations as f64 / n,
            peak_rss_kb()
        )
    }
}

fn median(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

fn cell(value: Option<(f64, f64, f64)>, decimals: usize) -> String {
    match value {
        Some((m, lo, hi)) => format!("{m:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
        None => "–".to_string(),
    }
}

/// The value after `flag` in `args`.
fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The fields of a `RESULT` line.
fn field(line: &str, name: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

// ---------- the children ----------

fn emulator_connection() -> Connection {
    Connection::emulator(&std::env::var("PUBSUB_EMULATOR_HOST").expect("PUBSUB_EMULATOR_HOST"))
}

/// The registration both sides run: a no-op handler that acks.
fn registration(subscription: &str) -> Registration {
    Registration::raw(subscription, |_, d: Delivery| async move { d.ack() })
        .workers(WORKERS)
        .max_outstanding_messages(MAX_OUTSTANDING)
}

/// Lines from stdin, read on a thread of their own (EOF ends the channel).
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// The push server: prints `READY port=P`, then on stdin `start` opens the measured window
/// (answered `STARTED`) and `stop` closes it (answered with the `RESULT` line); EOF stops it.
async fn serve(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let http_workers: usize = value(args, "--http-workers")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let inner = emulator_connection().connect().await.expect("connect");
    let (sub, endpoint) = Push::allow_unauthenticated(PATH)
        .start(registration(subscription), inner)
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

/// The pull side: `messages` already on the subscription, `streams` streams; prints `RESULT`
/// at its last ack.
async fn pull(args: &[String]) {
    let subscription = value(args, "--subscription").expect("--subscription NAME");
    let messages: u64 = value(args, "--messages")
        .and_then(|n| n.parse().ok())
        .expect("--messages N");
    let streams: usize = value(args, "--streams")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let connection = emulator_connection();
    // As in benches/throughput.rs: the clients are built outside the window; the stream opens
    // after `start` returns, when the supervisor starts.
    let sub = leasehold::start(registration(subscription).streams(streams), &connection)
        .await
        .expect("start the pull registration");
    let clock = Clock::start();
    while sub.stats().acked < messages {
        actix_rt::time::sleep(Duration::from_millis(2)).await;
    }
    println!("RESULT {}", clock.result(messages));
    sub.stop().await;
}

// ---------- the load generator ----------

/// One push request, its message id rewritten in place for every push.
struct Request {
    bytes: Vec<u8>,
    /// Where the two copies of the id are (Pub/Sub writes `messageId` and `message_id`).
    ids: [usize; 2],
}

/// Digits of every message id: fixed, so the content length is too.
const ID_DIGITS: usize = 16;

impl Request {
    /// A wrapped push as Pub/Sub documents it, for `subscription`.
    fn new(subscription: &str) -> Self {
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD.encode([b'x'; PAYLOAD_BYTES]);
        let id = "0".repeat(ID_DIGITS);
        let body = format!(
            r#"{{"message":{{"data":"{data}","messageId":"{id}","message_id":"{id}","publishTime":"2026-12-01T10:00:00.000Z","publish_time":"2026-12-01T10:00:00.000Z"}},"subscription":"{subscription}"}}"#
        );
        let head = format!(
            "POST {PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             user-agent: APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        let bytes = format!("{head}{body}").into_bytes();
        let first = head.len() + body.find(&id).expect("the id");
        let second = first + id.len() + body[first - head.len() + id.len()..].find(&id).unwrap();
        Self {
            bytes,
            ids: [first, second],
        }
    }

    /// The request for message `id`.
    fn with_id(&mut self, id: u64) -> &[u8] {
        let digits = format!("{id:0ID_DIGITS$}");
        for at in self.ids {
            self.bytes[at..at + ID_DIGITS].copy_from_slice(digits.as_bytes());
        }
        &self.bytes
    }
}

/// What one connection saw.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    no_content: u64,
    other: u64,
    reconnects: u64,
}

/// Reads one response; its status and whether the server keeps the connection.
async fn response(
    stream: &mut tokio::net::TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<(u16, bool)> {
    let eof = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end]).map_err(|_| eof())?;
            let mut lines = head.split("\r\n");
            let status = lines
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|s| s.parse().ok())
                .ok_or_else(eof)?;
            let (mut length, mut keep) = (0usize, true);
            for line in lines {
                let Some((name, value)) = line.split_once(':') else {
                    continue;
                };
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().map_err(|_| eof())?;
                } else if name.eq_ignore_ascii_case("connection") {
                    keep = !value.trim().eq_ignore_ascii_case("close");
                }
            }
            let total = end + 4 + length;
            while buffer.len() < total {
                if stream.read_buf(buffer).await? == 0 {
                    return Err(eof());
                }
            }
            buffer.drain(..total);
            return Ok((status, keep));
        }
        if stream.read_buf(buffer).await? == 0 {
            return Err(eof());
        }
    }
}

async fn connect(port: u16) -> tokio::net::TcpStream {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the push endpoint");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    stream
}

/// When the measured pushes end, once the warm-up is over and the server's window open.
type Go = tokio::sync::watch::Receiver<Option<Instant>>;

/// One keep-alive connection, one push at a time: until `warm_until`, then (on the same
/// connection) from the moment `go` gives the end until that end.
async fn pusher(
    port: u16,
    subscription: String,
    ids: Rc<Cell<u64>>,
    warm_until: Instant,
    warmed: Rc<tokio::sync::Barrier>,
    mut go: Go,
) -> Tally {
    let mut request = Request::new(&subscription);
    let mut stream = connect(port).await;
    let mut buffer = Vec::with_capacity(4096);
    let mut tally = Tally::default();
    let mut until = warm_until;
    for measured in [false, true] {
        if measured {
            warmed.wait().await;
            let end = *go.wait_for(Option::is_some).await.expect("the end");
            until = end.expect("an end");
            tally = Tally::default();
        }
        while Instant::now() < until {
            let id = ids.get();
            ids.set(id + 1);
            let answered = async {
                stream.write_all(request.with_id(id)).await?;
                response(&mut stream, &mut buffer).await
            }
            .await;
            let keep = match answered {
                Ok((status, keep)) => {
                    if status == 204 {
                        tally.no_content += 1;
                    } else {
                        tally.other += 1;
                    }
                    keep
                }
                Err(_) => {
                    tally.other += 1;
                    false
                }
            };
            if !keep {
                stream = connect(port).await;
                buffer.clear();
                tally.reconnects += 1;
            }
        }
    }
    tally
}

/// What a push run's load did: its tallies summed, its wall time and the load generator's CPU.
struct Load {
    tally: Tally,
    elapsed: f64,
    cpu: f64,
}

/// `connections` pushers warming up for `warm_up`, then `open_window()` (the server's measured
/// window opens), then pushing for `duration` on the same connections.
async fn load(
    port: u16,
    subscription: &str,
    ids: &Rc<Cell<u64>>,
    connections: usize,
    (warm_up, duration): (Duration, Duration),
    open_window: impl AsyncFnOnce(),
) -> Load {
    let warm_until = Instant::now() + warm_up;
    let warmed = Rc::new(tokio::sync::Barrier::new(connections + 1));
    let (end, go) = tokio::sync::watch::channel(None);
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            actix_rt::spawn(pusher(
                port,
                subscription.to_string(),
                ids.clone(),
                warm_until,
                warmed.clone(),
                go.clone(),
            ))
        })
        .collect();
    warmed.wait().await;
    open_window().await;
    let cpu = cpu_seconds();
    let began = Instant::now();
    end.send_replace(Some(began + duration));
    let mut tally = Tally::default();
    for t in tasks {
        let t = t.await.expect("a pusher");
        tally.no_content += t.no_content;
        tally.other += t.other;
        tally.reconnects += t.reconnects;
    }
    Load {
        tally,
        elapsed: began.elapsed().as_secs_f64(),
        cpu: cpu_seconds() - cpu,
    }
}

// ---------- the parent ----------

struct Admin {
    topics: TopicAdmin,
    subscriptions: SubscriptionAdmin,
    connection: Connection,
}

impl Admin {
    /// A fresh topic and a pull subscription on it (ack deadline 60 s, as benches/throughput.rs),
    /// with `messages` messages of 200 bytes published.
    async fn prepare(&self, messages: usize) -> (String, String) {
        let id = unique("push-bench");
        let topic = format!("projects/leasehold-bench/topics/{id}");
        let subscription = format!("projects/leasehold-bench/subscriptions/{id}");
        self.topics
            .create_topic()
            .set_name(&topic)
            .send()
            .await
            .expect("create the topic");
        self.subscriptions
            .create_subscription()
            .with_request(
                SubscriptionSpec::new()
                    .set_name(&subscription)
                    .set_topic(&topic)
                    .set_ack_deadline_seconds(60),
            )
            .send()
            .await
            .expect("create the subscription");
        if messages > 0 {
            let publisher = self.connection.publisher(&topic).await.unwrap();
            let payload = bytes::Bytes::from(vec![b'x'; PAYLOAD_BYTES]);
            for chunk in (0..messages).collect::<Vec<_>>().chunks(2000) {
                let sent: Vec<_> = chunk
                    .iter()
                    .map(|_| publisher.publish(Message::new().set_data(payload.clone())))
                    .collect();
                for r in futures::future::join_all(sent).await {
                    r.expect("publish");
                }
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

/// A child of this binary in one of its modes, its stdin and stdout piped.
fn child(host: &str, mode: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().expect("this benchmark's executable"))
        .args(mode)
        .env("PUBSUB_EMULATOR_HOST", host)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start a child of this benchmark")
}

/// Lines of a child's stdout, skipping to the one that starts with `prefix`.
async fn expect_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    let wait = async {
        while let Some(line) = lines.next_line().await.expect("the child's stdout") {
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_string();
            }
        }
        panic!("the child ended before {prefix:?}");
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("no {prefix:?} from the child within 120 s"))
}

/// One push run's figures.
#[derive(Debug, Clone, Copy)]
struct PushRun {
    per_second: f64,
    cpu_us: f64,
    allocations: f64,
    load_cpu_us: f64,
    not_204: u64,
}

/// One push run: a server child on a fresh subscription, `connections` pushers warming up,
/// then pushing for `duration` inside the server's measured window.
async fn push_run(
    admin: &Admin,
    host: &str,
    connections: usize,
    warm_up: Duration,
    duration: Duration,
    ids: &Rc<Cell<u64>>,
    http_workers: usize,
) -> PushRun {
    let made = admin.prepare(0).await;
    let http_workers = http_workers.to_string();
    let mut server = child(
        host,
        &[
            "--serve",
            "--subscription",
            &made.1,
            "--http-workers",
            &http_workers,
        ],
    );
    let mut stdin = server.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(server.stdout.take().expect("piped stdout")).lines();
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
        &made.1,
        ids,
        connections,
        (warm_up, duration),
        async || {
            stdin.write_all(b"start\n").await.unwrap();
            expect_line(&mut lines, "STARTED").await;
        },
    )
    .await;
    stdin.write_all(b"stop\n").await.unwrap();
    let result = expect_line(&mut lines, "RESULT ").await;
    drop(stdin);
    if tokio::time::timeout(Duration::from_secs(15), server.wait())
        .await
        .is_err()
    {
        let _ = server.kill().await;
    }
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

/// One pull run's figures.
#[derive(Debug, Clone, Copy)]
struct PullRun {
    per_second: f64,
    cpu_us: f64,
    allocations: f64,
}

async fn pull_run(admin: &Admin, host: &str, messages: usize, streams: usize) -> PullRun {
    let made = admin.prepare(messages).await;
    let mut side = child(
        host,
        &[
            "--pull",
            "--subscription",
            &made.1,
            "--messages",
            &messages.to_string(),
            "--streams",
            &streams.to_string(),
        ],
    );
    let mut lines = BufReader::new(side.stdout.take().expect("piped stdout")).lines();
    let result = expect_line(&mut lines, "RESULT ").await;
    if tokio::time::timeout(Duration::from_secs(15), side.wait())
        .await
        .is_err()
    {
        let _ = side.kill().await;
    }
    admin.cleanup(made).await;
    PullRun {
        per_second: field(&result, "per_second").expect("per_second"),
        cpu_us: field(&result, "cpu_us_per_message").expect("cpu_us_per_message"),
        allocations: field(&result, "allocations_per_message").unwrap_or(f64::NAN),
    }
}

#[derive(Debug, Clone, Copy)]
enum Config {
    Push(usize),
    Pull(usize),
}

#[actix_rt::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve") {
        serve(&args).await;
        return;
    }
    if args.iter().any(|a| a == "--pull") {
        pull(&args).await;
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not, and
    // a test run must not start an emulator and load the machine for minutes.
    if !args.iter().any(|a| a == "--bench") {
        println!("push benchmark: not run without --bench (run it with `cargo bench`)");
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let rounds: usize = value(&args, "--rounds")
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 1 } else { 5 });
    let seconds: f64 = value(&args, "--seconds")
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 1.0 } else { 5.0 });
    let pull_messages: usize = value(&args, "--pull-messages")
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 4_000 } else { 20_000 });
    let concurrency: Vec<usize> = value(&args, "--concurrency")
        .unwrap_or("1,16,64")
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().parse().expect("--concurrency 1,16,64"))
        .collect();
    let streams: Vec<usize> = value(&args, "--pull-streams")
        .unwrap_or("1,5")
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().parse().expect("--pull-streams 1,5"))
        .collect();
    assert!(
        concurrency
            .iter()
            .all(|c| (1..=MAX_OUTSTANDING).contains(c)),
        "concurrency 1 to {MAX_OUTSTANDING}: flow control would refuse pushes (429)"
    );
    // One actix-web worker thread by default: the figures are per message, and a second worker
    // would take the core the load generator runs on.
    let http_workers: usize = value(&args, "--http-workers")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let duration = Duration::from_secs_f64(seconds);
    let warm_up = Duration::from_secs_f64((seconds / 5.0).max(0.5));

    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let connection = emulator.connection();
    let admin = Admin {
        topics: connection.topic_admin().await.unwrap(),
        subscriptions: connection.subscription_admin().await.unwrap(),
        connection: connection.clone(),
    };
    let configs: Vec<Config> = concurrency
        .iter()
        .map(|&c| Config::Push(c))
        .chain(streams.iter().map(|&s| Config::Pull(s)))
        .collect();
    println!(
        "# Push against pull ({rounds} round(s); push: {seconds} s per run after a {:.1} s \
         warm-up, concurrency {concurrency:?}; pull: {pull_messages} messages per run, \
         streams {streams:?}; {http_workers} actix-web worker thread(s); load average at start \
         {})",
        warm_up.as_secs_f64(),
        load_average()
    );
    let ids = Rc::new(Cell::new(1_000_000_000_000_000u64));
    let mut pushes: Vec<Vec<PushRun>> = vec![Vec::new(); concurrency.len()];
    let mut pulls: Vec<Vec<PullRun>> = vec![Vec::new(); streams.len()];
    for round in 0..rounds {
        for i in 0..configs.len() {
            let config = configs[(round + i) % configs.len()];
            match config {
                Config::Push(c) => {
                    let run = push_run(
                        &admin,
                        emulator.host(),
                        c,
                        warm_up,
                        duration,
                        &ids,
                        http_workers,
                    )
                    .await;
                    eprintln!("round {round}: push, {c} connection(s): {run:?}");
                    let at = concurrency.iter().position(|&x| x == c).unwrap();
                    pushes[at].push(run);
                }
                Config::Pull(s) => {
                    let run = pull_run(&admin, emulator.host(), pull_messages, s).await;
                    eprintln!("round {round}: pull, {s} stream(s): {run:?}");
                    let at = streams.iter().position(|&x| x == s).unwrap();
                    pulls[at].push(run);
                }
            }
        }
    }

    println!("\nload average at the end: {}\n", load_average());
    let pull_cpu: Vec<Option<(f64, f64, f64)>> = pulls
        .iter()
        .map(|runs| median(runs.iter().map(|r| r.cpu_us).collect()))
        .collect();
    let mut header = "| side | msg/s | µs CPU/msg (server or consumer) | allocations/msg \
                      | load generator µs CPU/push | answers not 204"
        .to_string();
    for s in &streams {
        header.push_str(&format!(" | CPU ÷ pull {s} stream(s)"));
    }
    println!("{header} |");
    println!("|{}", "---|".repeat(6 + streams.len()));
    let ratios = |cpu: Option<(f64, f64, f64)>| -> String {
        pull_cpu
            .iter()
            .map(|p| match (cpu, p) {
                (Some((a, _, _)), Some((b, _, _))) => format!(" | {:.2}", a / b),
                _ => " | –".to_string(),
            })
            .collect()
    };
    for (c, runs) in concurrency.iter().zip(&pushes) {
        let cpu = median(runs.iter().map(|r| r.cpu_us).collect());
        println!(
            "| push, {c} connection(s) | {} | {} | {} | {} | {}{} |",
            cell(median(runs.iter().map(|r| r.per_second).collect()), 0),
            cell(cpu, 1),
            cell(median(runs.iter().map(|r| r.allocations).collect()), 1),
            cell(median(runs.iter().map(|r| r.load_cpu_us).collect()), 1),
            runs.iter().map(|r| r.not_204).sum::<u64>(),
            ratios(cpu),
        );
    }
    for (s, runs) in streams.iter().zip(&pulls) {
        let cpu = median(runs.iter().map(|r| r.cpu_us).collect());
        println!(
            "| pull, {s} stream(s), {pull_messages} messages | {} | {} | {} | – | –{} |",
            cell(median(runs.iter().map(|r| r.per_second).collect()), 0),
            cell(cpu, 1),
            cell(median(runs.iter().map(|r| r.allocations).collect()), 1),
            ratios(cpu),
        );
    }
}
