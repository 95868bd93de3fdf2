//! The multi-replica soak: three `leasehold-replica` processes consume one subscription with a
//! transactional handler that inserts one row per message in PostgreSQL, while the test cuts
//! every connection to Pub/Sub twice (through a TCP proxy) and kills one replica with SIGKILL
//! twice (restarting it each time). At the end every message's row exists exactly once and
//! nothing more is delivered. Run once on an exactly-once subscription and once on an
//! at-least-once one, each time with the transactional handler (a transaction per message) and,
//! side by side on a subscription of its own, with a transactional batch handler (batches of up
//! to 100, each written with one multi-row INSERT in one transaction).
//!
//! Uses the emulator `PUBSUB_EMULATOR_HOST` names (or starts one) and the database
//! `DATABASE_URL` names (or starts a throwaway cluster). CI runs 1,000 messages per
//! subscription; the figures in RELIABILITY.md come from
//!
//! ```text
//! LEASEHOLD_REPLICA_SOAK_MESSAGES=10000 cargo test --release -p leasehold-soak -- --nocapture
//! ```
//!
//! Each run prints a timeline at its end (the waves, the faults, the rows and each replica's
//! deliveries over time, when the last rows arrived). With `LEASEHOLD_REPLICA_SOAK_LOGS` naming a
//! directory, each replica also logs every delivery it receives and settles to a file there,
//! and the timeline shows what happened to the last messages to get their row.

use leasehold_postgres::PostgresStore;
use leasehold_soak::timeline::{Logged, Row, Timeline};
use leasehold_soak::{Report, env};
use leasehold_test_support::{Proxy, Scratch, database_url, host, unique_sql_name};
use parking_lot::Mutex;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Messages per subscription in CI; `LEASEHOLD_REPLICA_SOAK_MESSAGES` overrides it. (The run
/// time is set by the ack deadline, not the count: see RELIABILITY.md.)
const CI_MESSAGES: usize = 1_000;
const REPLICAS: usize = 3;
/// Published in this many waves; a fault lands in the middle of each wave after the first.
const WAVES: usize = 5;
/// How long each handler keeps its transaction open after its write.
const WORK_MS: &str = "2";
/// The subscription's ack deadline: how soon Pub/Sub redelivers what a killed replica held.
const ACK_DEADLINE: Duration = Duration::from_secs(10);

/// One replica slot: the running process, and what its earlier incarnations last reported.
struct Replica {
    name: String,
    env: Vec<(&'static str, String)>,
    child: Child,
    last: Arc<Mutex<Report>>,
    earlier: Report,
    incarnations: u32,
}

impl Replica {
    fn spawn(name: &str, env: Vec<(&'static str, String)>) -> Self {
        let (child, last) = Self::launch(name, &env);
        Self {
            name: name.to_string(),
            env,
            child,
            last,
            earlier: Report::default(),
            incarnations: 1,
        }
    }

    fn launch(name: &str, env: &[(&'static str, String)]) -> (Child, Arc<Mutex<Report>>) {
        let mut env = env.to_vec();
        env.push((env::NAME, name.to_string()));
        leasehold_soak::launch(env!("CARGO_BIN_EXE_leasehold-replica"), &env)
    }

    /// This incarnation's latest counters.
    fn now(&self) -> Report {
        *self.last.lock()
    }

    /// Every incarnation's counters (a killed one's as it last reported them).
    fn total(&self) -> Report {
        self.earlier.plus(self.now())
    }

    /// SIGKILL, then a new incarnation.
    fn kill_and_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.earlier = self.total();
        let (child, last) = Self::launch(&self.name, &self.env);
        self.child = child;
        self.last = last;
        self.incarnations += 1;
    }

    /// SIGTERM, and wait for the clean stop (its drain).
    fn stop(&mut self) {
        leasehold_soak::terminate(&self.child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{} exited with {status}", self.name);
                // Let the reader thread take the final line.
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
            assert!(Instant::now() < deadline, "{} did not stop", self.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rows in the effects table, and distinct messages among them.
async fn effects(store: &PostgresStore, table: &str) -> (i64, i64) {
    let row = store
        .pool()
        .get()
        .await
        .unwrap()
        .query_one(
            &format!("SELECT count(*), count(DISTINCT seq) FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Every row: which message, which replica wrote it, when.
async fn rows(store: &PostgresStore, table: &str) -> Vec<Row> {
    store
        .pool()
        .get()
        .await
        .unwrap()
        .query(
            &format!(
                "SELECT seq, message_id, replica, extract(epoch FROM at)::float8 FROM {table}"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Row {
            seq: r.get(0),
            message_id: r.get(1),
            replica: r.get(2),
            at: r.get(3),
        })
        .collect()
}

/// What each replica logged about its deliveries, when it logs to a file in `dir`.
fn logged(dir: Option<&std::path::Path>, files: &[(String, String)]) -> Vec<(String, Logged)> {
    let Some(dir) = dir else {
        return Vec::new();
    };
    files
        .iter()
        .flat_map(|(replica, file)| {
            let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            text.lines()
                .filter_map(Logged::parse)
                .map(|l| (replica.clone(), l))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each replica's deliveries so far, every incarnation's.
fn received(replicas: &[Replica]) -> Vec<u64> {
    replicas.iter().map(|r| r.total().received).collect()
}

/// Polls until `n` distinct messages have their row; fails after `within`.
async fn distinct_reach(
    label: &str,
    store: &PostgresStore,
    table: &str,
    n: i64,
    within: Duration,
    timeline: &mut Timeline,
    replicas: &[Replica],
) {
    let deadline = Instant::now() + within;
    loop {
        let (rows, distinct) = effects(store, table).await;
        assert!(
            rows == distinct,
            "{label}: a duplicate effect: {rows} rows, {distinct} messages"
        );
        timeline.sample(distinct, received(replicas));
        if distinct >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: {distinct} of {n} messages have their row after {within:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handler {
    /// A transactional handler, one row and one transaction per message.
    Single,
    /// A transactional batch handler: one transaction and one INSERT per batch.
    Batches,
}

impl Handler {
    /// The replica's `env::STORE`.
    fn store(self) -> &'static str {
        match self {
            Self::Single => "postgres",
            Self::Batches => "postgres-batch",
        }
    }
}

async fn soak(exactly_once: bool, handler: Handler) {
    let messages: usize = std::env::var("LEASEHOLD_REPLICA_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_MESSAGES);
    let delivery = match (exactly_once, handler) {
        (true, Handler::Single) => "exactly-once",
        (false, Handler::Single) => "at-least-once",
        (true, Handler::Batches) => "exactly-once, transactional batches",
        (false, Handler::Batches) => "at-least-once, transactional batches",
    };
    let scratch = Scratch::new(|s| {
        s.set_enable_exactly_once_delivery(exactly_once)
            .set_ack_deadline_seconds(ACK_DEADLINE.as_secs() as i32)
    })
    .await;
    let store = PostgresStore::connect(database_url()).await.unwrap();
    let table = unique_sql_name("soak");
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE {table} (seq bigint NOT NULL, message_id text NOT NULL, \
             replica text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&host());
    let env = vec![
        ("PUBSUB_EMULATOR_HOST", proxy.host()),
        ("DATABASE_URL", database_url().to_string()),
        (env::SUBSCRIPTION, scratch.subscription.clone()),
        (env::TABLE, table.clone()),
        (env::WORK_MS, WORK_MS.to_string()),
        (env::STORE, handler.store().to_string()),
    ];
    let logs = std::env::var_os("LEASEHOLD_REPLICA_SOAK_LOGS").map(std::path::PathBuf::from);
    let names: Vec<String> = (0..REPLICAS).map(|n| format!("replica-{n}")).collect();
    // Each replica's log file, named after the table (unique to the run).
    let files: Vec<(String, String)> = names
        .iter()
        .map(|name| (name.clone(), format!("{table}-{name}.log")))
        .collect();
    let mut replicas: Vec<Replica> = files
        .iter()
        .map(|(name, file)| {
            let mut env = env.clone();
            if let Some(dir) = &logs {
                std::fs::create_dir_all(dir).unwrap();
                env.push((env::LOG, dir.join(file).display().to_string()));
                env.push((
                    "RUST_LOG",
                    "error,leasehold_actors::supervisor=debug".to_string(),
                ));
            }
            Replica::spawn(name, env)
        })
        .collect();
    let started = Instant::now();
    let mut timeline = Timeline::new(delivery);

    let wave = messages / WAVES;
    let mut faults = Vec::new();
    for w in 0..WAVES {
        let from = w * wave;
        let to = if w + 1 == WAVES {
            messages
        } else {
            from + wave
        };
        scratch
            .publish_all((from..to).map(|seq| format!(r#"{{"seq":{seq}}}"#)))
            .await;
        timeline.published(format!("wave {w} published (seq {from} to {})", to - 1));
        // The faults land while this wave is being handled.
        distinct_reach(
            delivery,
            &store,
            &table,
            (from + wave / 2) as i64,
            Duration::from_secs(120),
            &mut timeline,
            &replicas,
        )
        .await;
        timeline.event(format!("wave {w} half done"));
        match w {
            1 | 3 => {
                replicas[0].kill_and_restart();
                faults.push(format!("SIGKILL replica-0 during wave {w}"));
                timeline.event("replica-0 killed and started again".into());
            }
            2 | 4 => {
                proxy.cut_all();
                faults.push(format!("every connection cut during wave {w}"));
                timeline.event("every connection cut".into());
            }
            _ => {}
        }
    }
    distinct_reach(
        delivery,
        &store,
        &table,
        messages as i64,
        Duration::from_secs(180),
        &mut timeline,
        &replicas,
    )
    .await;
    let all_rows = started.elapsed();
    timeline.event("every row exists".into());

    // Settled: what killed replicas held comes back after the ack deadline and must be settled
    // without a second effect. Done when no replica has received anything for longer than the
    // ack deadline.
    let quiet_for = ACK_DEADLINE + Duration::from_secs(2);
    let deadline = Instant::now() + Duration::from_secs(120);
    let all_received = |rs: &[Replica]| received(rs).iter().sum::<u64>();
    let (mut seen, mut since) = (all_received(&replicas), Instant::now());
    while since.elapsed() < quiet_for {
        assert!(
            Instant::now() < deadline,
            "{delivery}: deliveries never stopped"
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
        let now = all_received(&replicas);
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
        let (rows, distinct) = effects(&store, &table).await;
        assert_eq!(rows, distinct, "{delivery}: a duplicate effect");
        timeline.sample(distinct, received(&replicas));
    }
    timeline.event(format!(
        "no delivery for {} s: stopping the replicas",
        quiet_for.as_secs()
    ));
    for replica in &mut replicas {
        replica.stop();
    }
    timeline.sample(effects(&store, &table).await.1, received(&replicas));
    let (rows, distinct) = effects(&store, &table).await;

    println!(
        "\nmulti-replica soak, {delivery}: {messages} messages, {REPLICAS} replicas, \
         every row in {:.1} s",
        all_rows.as_secs_f64()
    );
    for fault in &faults {
        println!("  fault: {fault}");
    }
    println!(
        "  replica    incarnations  received  committed  replayed  failed acks  retried  batches"
    );
    let mut sum = Report::default();
    for r in &replicas {
        let t = r.total();
        sum = sum.plus(t);
        println!(
            "  {:<9}  {:>12}  {:>8}  {:>9}  {:>8}  {:>11}  {:>7}  {:>7}",
            r.name,
            r.incarnations,
            t.received,
            t.committed,
            t.replayed,
            t.failed_acks,
            t.retried,
            t.batches
        );
    }
    println!(
        "  {:<9}  {:>12}  {:>8}  {:>9}  {:>8}  {:>11}  {:>7}  {:>7}",
        "all",
        "",
        sum.received,
        sum.committed,
        sum.replayed,
        sum.failed_acks,
        sum.retried,
        sum.batches
    );
    println!(
        "  rows {rows}, messages with a row {distinct}: duplicate effects {}, lost {}",
        rows - distinct,
        messages as i64 - distinct
    );
    let all = self::rows(&store, &table).await;
    print!(
        "{}",
        timeline.report(&all, wave, &logged(logs.as_deref(), &files), 5.0, 10)
    );
    if let Some(dir) = &logs {
        // The rows beside the logs (seq, message id, replica, epoch seconds), for a closer look.
        let csv: String = all
            .iter()
            .map(|r| format!("{},{},{},{:.6}\n", r.seq, r.message_id, r.replica, r.at))
            .collect();
        std::fs::write(dir.join(format!("{table}-rows.csv")), csv).unwrap();
        println!(
            "  the replicas' logs and the rows: {}/{table}-*",
            dir.display()
        );
    }

    assert_eq!(rows, distinct, "{delivery}: duplicate effects");
    assert_eq!(distinct, messages as i64, "{delivery}: lost messages");
    // Killed incarnations report late, so their counts may fall short; the survivors' may not.
    assert!(
        sum.committed <= messages as u64,
        "{delivery}: more commits than messages: {sum:?}"
    );
    if handler == Handler::Batches {
        // In batches, not one by one (killed incarnations may not have reported theirs).
        assert!(
            sum.batches > 0 && sum.batches < sum.committed,
            "{delivery}: {} batches for {} commits",
            sum.batches,
            sum.committed
        );
    }

    drop(replicas);
    drop(proxy);
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    scratch.cleanup().await;
}

/// The soak with each handler, side by side on one delivery type: a soak's time is set by the ack
/// deadline and the faults, not by the work, so two at once take about as long as one (and CI,
/// which runs two tests at once on two cores, pays for one).
async fn soak_each_handler(exactly_once: bool) {
    tokio::join!(
        soak(exactly_once, Handler::Single),
        soak(exactly_once, Handler::Batches)
    );
}

#[actix_rt::test]
async fn replicas_killed_and_cut_write_each_effect_once_exactly_once_delivery() {
    soak_each_handler(true).await;
}

#[actix_rt::test]
async fn replicas_killed_and_cut_write_each_effect_once_at_least_once_delivery() {
    soak_each_handler(false).await;
}
