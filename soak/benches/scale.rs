//! Scale figures for BENCHMARKS.md: the same backlog consumed by one and by three
//! `leasehold-replica` processes on one subscription, and what the store costs per message
//! (the transactional handler on PostgreSQL, and the transactional batch handler writing
//! batches of 100 with one INSERT each, against a plain handler with the in-memory progress
//! store), with one stream (held near the emulator's pace for a stream) and with three (where
//! the machine's CPU limits). Every configuration runs in each round, rounds interleaved;
//! medians and the spread.
//!
//! ```text
//! cargo bench -p leasehold-soak --bench scale
//! ```
//!
//! `LEASEHOLD_SCALE_MESSAGES` (default 10,000) and `LEASEHOLD_SCALE_ROUNDS` (default 3) change
//! the load. Uses the emulator `PUBSUB_EMULATOR_HOST` names (or starts one) and the database
//! `DATABASE_URL` names (or starts a throwaway cluster).

use leasehold_postgres::PostgresStore;
use leasehold_soak::{Report, env};
use leasehold_test_support::{Scratch, database_url, host, unique_sql_name};
use parking_lot::Mutex;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Config {
    name: &'static str,
    store: &'static str,
    /// `env::DRIVER`: where the connections' I/O runs ("" for Leasehold's connection thread).
    driver: &'static str,
    /// Whether the handler inserts a row per message (in the transaction).
    row: bool,
    replicas: usize,
    streams: usize,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "memory store, 1 replica",
        store: "memory",
        driver: "",
        row: false,
        replicas: 1,
        streams: 1,
    },
    Config {
        name: "postgres, no row, 1 replica",
        store: "postgres",
        driver: "",
        row: false,
        replicas: 1,
        streams: 1,
    },
    Config {
        name: "postgres + row, 1 replica",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
    },
    Config {
        name: "postgres + row, 1 replica, opener-driven",
        store: "postgres",
        driver: "opener",
        row: true,
        replicas: 1,
        streams: 1,
    },
    Config {
        name: "postgres + row, 1 replica, 3 streams",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 1,
        streams: 3,
    },
    Config {
        name: "postgres + row, 3 replicas",
        store: "postgres",
        driver: "",
        row: true,
        replicas: 3,
        streams: 1,
    },
    Config {
        name: "postgres batches of 100 + rows, 1 replica",
        store: "postgres-batch",
        driver: "",
        row: true,
        replicas: 1,
        streams: 1,
    },
    Config {
        name: "postgres batches + rows, 1 replica, 3 streams",
        store: "postgres-batch",
        driver: "",
        row: true,
        replicas: 1,
        streams: 3,
    },
    Config {
        name: "memory store, 1 replica, 3 streams",
        store: "memory",
        driver: "",
        row: false,
        replicas: 1,
        streams: 3,
    },
];

/// Where each configuration is in [`CONFIGS`], for the ratios.
const MEMORY: usize = 0;
const NO_ROW: usize = 1;
const ROW: usize = 2;
const OPENER: usize = 3;
const STREAMS: usize = 4;
const REPLICAS: usize = 5;
const BATCHES: usize = 6;
const BATCH_STREAMS: usize = 7;
const MEMORY_STREAMS: usize = 8;

#[derive(Clone, Copy)]
struct Sample {
    per_second: f64,
    /// CPU of the replica processes, per message.
    replica_us: f64,
    /// CPU of the whole machine (replicas, emulator, PostgreSQL), per message.
    machine_us: f64,
    /// Messages per batch, on average (batch handlers only).
    batch_size: Option<f64>,
}

fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// User and system CPU of one process, in clock ticks.
fn process_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields of the line: 12th and 13th after the name.
    field(11) + field(12)
}

/// Busy CPU of the machine (every core, idle and iowait excluded), in clock ticks.
fn machine_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    let f: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal
    f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
}

struct Replica {
    child: Child,
    last: Arc<Mutex<Report>>,
}

impl Replica {
    fn spawn(env: &[(&'static str, String)]) -> Self {
        let (child, last) = leasehold_soak::launch(env!("CARGO_BIN_EXE_leasehold-replica"), env);
        Self { child, last }
    }

    fn stop(mut self) {
        leasehold_soak::terminate(&self.child);
        let _ = self.child.wait();
    }
}

async fn run(config: &Config, messages: usize, store: &PostgresStore, database: &str) -> Sample {
    let scratch = Scratch::new(|s| s).await;
    let table = unique_sql_name("scale");
    let client = store.pool().get().await.unwrap();
    if config.row {
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (seq bigint NOT NULL, message_id text NOT NULL, \
                 replica text NOT NULL)"
            ))
            .await
            .unwrap();
    }
    scratch
        .publish_all((0..messages).map(|seq| format!(r#"{{"seq":{seq}}}"#)))
        .await;
    let mut env = vec![
        ("PUBSUB_EMULATOR_HOST", host()),
        ("DATABASE_URL", database.to_string()),
        (env::SUBSCRIPTION, scratch.subscription.clone()),
        (env::STORE, config.store.to_string()),
        (env::DRIVER, config.driver.to_string()),
        (env::STREAMS, config.streams.to_string()),
        (env::OUTSTANDING, "1000".to_string()),
        (env::REPORT_MS, "20".to_string()),
    ];
    if config.row {
        env.push((env::TABLE, table.clone()));
    }
    let replicas: Vec<Replica> = (0..config.replicas)
        .map(|n| {
            let mut env = env.clone();
            env.push((env::NAME, format!("replica-{n}")));
            Replica::spawn(&env)
        })
        .collect();
    let total = |f: fn(&Report) -> u64| replicas.iter().map(|r| f(&r.last.lock())).sum::<u64>();
    let cpu = || {
        replicas
            .iter()
            .map(|r| process_ticks(r.child.id()))
            .sum::<u64>()
    };

    // Measured from the first delivery (connecting is not consuming) to the last ack.
    let deadline = Instant::now() + Duration::from_secs(120);
    while total(|r| r.received) == 0 {
        assert!(Instant::now() < deadline, "nothing was received");
        std::thread::sleep(Duration::from_millis(2));
    }
    let (started, cpu_start, machine_start) = (Instant::now(), cpu(), machine_ticks());
    while total(|r| r.acked) < messages as u64 {
        assert!(
            Instant::now() < deadline,
            "{} of {messages} acked",
            total(|r| r.acked)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = started.elapsed().as_secs_f64();
    // From the same report lines: the messages acked so far in the batches counted so far.
    let (acked, batches) = (total(|r| r.acked), total(|r| r.batches));
    let ticks = clock_ticks();
    let per_message_us = |t: u64| t as f64 / ticks / messages as f64 * 1e6;
    let sample = Sample {
        per_second: messages as f64 / elapsed,
        replica_us: per_message_us(cpu() - cpu_start),
        machine_us: per_message_us(machine_ticks() - machine_start),
        batch_size: (batches > 0).then(|| acked as f64 / batches as f64),
    };
    for replica in replicas {
        replica.stop();
    }
    if config.row {
        let row = client
            .query_one(&format!("SELECT count(DISTINCT seq) FROM {table}"), &[])
            .await
            .unwrap();
        let distinct: i64 = row.get(0);
        assert_eq!(distinct, messages as i64, "every message has its row");
        client
            .batch_execute(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    }
    scratch.cleanup().await;
    sample
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[actix_rt::main]
async fn main() {
    let messages = number("LEASEHOLD_SCALE_MESSAGES", 10_000);
    let rounds = number("LEASEHOLD_SCALE_ROUNDS", 3);
    let store = PostgresStore::connect(database_url()).await.unwrap();
    println!(
        "scale: {messages} messages published before each run, {rounds} interleaved rounds, \
         handlers of 8 workers per replica that ack at once (batch handlers: 8 batches of up \
         to 100 at once)"
    );
    let mut samples: Vec<Vec<Sample>> = CONFIGS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (config, samples) in CONFIGS.iter().zip(&mut samples) {
            let s = run(config, messages, &store, database_url()).await;
            let batches = s
                .batch_size
                .map_or(String::new(), |n| format!("  {n:.0} messages a batch"));
            println!(
                "  round {round}  {:<42} {:>8.0} msg/s  replicas {:>6.1} µs/msg  machine {:>6.1} µs/msg{batches}",
                config.name, s.per_second, s.replica_us, s.machine_us
            );
            samples.push(s);
        }
    }
    println!(
        "\n{:<42} {:>22} {:>26} {:>26}",
        "configuration", "msg/s (min–max)", "replica CPU µs/msg", "machine CPU µs/msg"
    );
    let mut medians = Vec::new();
    for (config, samples) in CONFIGS.iter().zip(&samples) {
        let (t, t0, t1) = median(samples.iter().map(|s| s.per_second).collect());
        let (r, r0, r1) = median(samples.iter().map(|s| s.replica_us).collect());
        let (m, m0, m1) = median(samples.iter().map(|s| s.machine_us).collect());
        println!(
            "{:<42} {:>7.0} ({:>5.0}–{:>5.0}) {:>8.1} ({:>5.1}–{:>5.1}) {:>8.1} ({:>5.1}–{:>5.1})",
            config.name, t, t0, t1, r, r0, r1, m, m0, m1
        );
        medians.push((t, r, m));
    }
    let ratio =
        |a: usize, b: usize, f: fn(&(f64, f64, f64)) -> f64| f(&medians[a]) / f(&medians[b]);
    println!("\nratios of medians:");
    println!(
        "  3 replicas / 1 replica (postgres + row), throughput  {:.2}×",
        ratio(REPLICAS, ROW, |m| m.0)
    );
    println!(
        "  1 replica with 3 streams / 1 stream, throughput      {:.2}×",
        ratio(STREAMS, ROW, |m| m.0)
    );
    println!(
        "  connections on Leasehold's thread / on the opener's, replica CPU  {:.2}×   machine CPU {:.2}×",
        ratio(ROW, OPENER, |m| m.1),
        ratio(ROW, OPENER, |m| m.2)
    );
    println!(
        "  postgres, no row / memory store, replica CPU         {:.2}×   machine CPU {:.2}×",
        ratio(NO_ROW, MEMORY, |m| m.1),
        ratio(NO_ROW, MEMORY, |m| m.2)
    );
    println!(
        "  postgres + row / memory store, replica CPU           {:.2}×   machine CPU {:.2}×",
        ratio(ROW, MEMORY, |m| m.1),
        ratio(ROW, MEMORY, |m| m.2)
    );
    println!(
        "  batches of 100 + rows / memory store, replica CPU    {:.2}×   machine CPU {:.2}×",
        ratio(BATCHES, MEMORY, |m| m.1),
        ratio(BATCHES, MEMORY, |m| m.2)
    );
    println!(
        "  batches of 100 + rows / postgres + row, throughput   {:.2}×   replica CPU {:.2}×",
        ratio(BATCHES, ROW, |m| m.0),
        ratio(BATCHES, ROW, |m| m.1)
    );
    // One stream holds every configuration near the emulator's pace for a stream; with three
    // the emulator allows about 6,000 msg/s and the machine's CPU is what limits.
    println!(
        "  with 3 streams: batches / postgres + row, throughput  {:.2}×   replica CPU {:.2}×   machine CPU {:.2}×",
        ratio(BATCH_STREAMS, STREAMS, |m| m.0),
        ratio(BATCH_STREAMS, STREAMS, |m| m.1),
        ratio(BATCH_STREAMS, STREAMS, |m| m.2)
    );
    println!(
        "  with 3 streams: batches / memory store, throughput    {:.2}×   replica CPU {:.2}×",
        ratio(BATCH_STREAMS, MEMORY_STREAMS, |m| m.0),
        ratio(BATCH_STREAMS, MEMORY_STREAMS, |m| m.1)
    );
}
