//! The multi-replica soak: three `leasehold-replica` processes consume one subscription with a
//! transactional handler that inserts one row per message in PostgreSQL, while the test cuts
//! every connection to Pub/Sub twice (through a TCP proxy) and kills one replica with SIGKILL
//! twice (restarting it each time). At the end every message's row exists exactly once and
//! nothing more is delivered. Run once on an exactly-once subscription and once on an
//! at-least-once one, each time with the transactional handler (a transaction per message) and,
//! side by side on a subscription of its own, with a transactional batch handler (batches of up
//! to 100, each written with one multi-row INSERT in one transaction). The exactly-once run is
//! made on Spanner too, beside it (`spanner` and `spanner-batch` replicas, on the Spanner
//! emulator, each effect an INSERT of a fresh key, so a duplicate shows).
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
use leasehold_spanner::SpannerStore;
use leasehold_test_support::{
    Proxy, Scratch, database_url, host, spanner_database, spanner_endpoint, unique_sql_name,
};
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
/// How long a wave may take to reach its mark, and the last wave to have every row. The
/// emulator's senders for dead streams take messages 100 at a time and hold them for an ack
/// deadline, again and again, and they outnumber the live streams after the faults: a hundred
/// messages reached a live replica 210 s after they were published in a run that passed
/// (RELIABILITY.md, "Waits that ran out" and "Known limits"). Real Pub/Sub ends a closed
/// stream's leases.
const WAVE_WITHIN: Duration = Duration::from_secs(300);

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

/// Where the replicas write their effects: a table of this run's own, in PostgreSQL or in a
/// Spanner database of its own.
enum Effects {
    Postgres { store: PostgresStore, table: String },
    Spanner { store: SpannerStore, table: String },
}

impl Effects {
    async fn new(db: Db) -> Self {
        let table = unique_sql_name("soak");
        match db {
            Db::Postgres => {
                let store = PostgresStore::connect(database_url()).await.unwrap();
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
                Self::Postgres { store, table }
            }
            Db::Spanner => {
                let database = spanner_database().await;
                leasehold_spanner::apply_ddl(
                    &spanner_endpoint(),
                    &database,
                    &[&format!(
                        "CREATE TABLE {table} (id STRING(36) NOT NULL, seq INT64 NOT NULL, \
                         message_id STRING(MAX) NOT NULL, replica STRING(MAX) NOT NULL, \
                         written_at TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) \
                         PRIMARY KEY (id)"
                    )],
                )
                .await
                .unwrap();
                let store = SpannerStore::connect_to(
                    &spanner_endpoint(),
                    &database,
                    Duration::from_secs(30),
                )
                .await
                .unwrap();
                Self::Spanner { store, table }
            }
        }
    }

    fn table(&self) -> &str {
        match self {
            Self::Postgres { table, .. } | Self::Spanner { table, .. } => table,
        }
    }

    /// What a replica needs to reach the database.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Postgres { .. } => vec![("DATABASE_URL", database_url().to_string())],
            Self::Spanner { store, .. } => {
                let leasehold_spanner::Endpoint::Emulator(host) = spanner_endpoint() else {
                    panic!("the soak runs on the Spanner emulator")
                };
                vec![
                    ("SPANNER_EMULATOR_HOST", host),
                    (env::SPANNER_DATABASE, store.database().to_string()),
                ]
            }
        }
    }

    /// Rows in the effects table, and distinct messages among them.
    async fn counts(&self) -> (i64, i64) {
        match self {
            Self::Postgres { store, table } => {
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
            Self::Spanner { store, table } => {
                let sql = format!("SELECT COUNT(*), COUNT(DISTINCT seq) FROM {table}");
                let row = spanner_rows(store, &sql).await.remove(0);
                (row.column(0).unwrap(), row.column(1).unwrap())
            }
        }
    }

    /// Every row: which message, which replica wrote it, when.
    async fn rows(&self) -> Vec<Row> {
        match self {
            Self::Postgres { store, table } => store
                .pool()
                .get()
                .await
                .unwrap()
                .query(
                    &format!(
                        "SELECT seq, message_id, replica, extract(epoch FROM at)::float8 \
                         FROM {table}"
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
                .collect(),
            Self::Spanner { store, table } => {
                let sql = format!(
                    "SELECT seq, message_id, replica, UNIX_MICROS(written_at) FROM {table}"
                );
                spanner_rows(store, &sql)
                    .await
                    .iter()
                    .map(|r| Row {
                        seq: r.column(0).unwrap(),
                        message_id: r.column(1).unwrap(),
                        replica: r.column(2).unwrap(),
                        at: r.column::<i64>(3).unwrap() as f64 / 1e6,
                    })
                    .collect()
            }
        }
    }

    /// Drops the table (a Spanner database of the run's own is left to the emulator's end).
    async fn drop_table(&self) {
        if let Self::Postgres { store, table } = self {
            store
                .pool()
                .get()
                .await
                .unwrap()
                .batch_execute(&format!("DROP TABLE {table}"))
                .await
                .unwrap();
        }
    }
}

/// A query's rows, read in a strong single-use read.
async fn spanner_rows(
    store: &SpannerStore,
    sql: &str,
) -> Vec<leasehold_spanner::gcloud_spanner::row::Row> {
    let mut tx = store.client().single().await.unwrap();
    let mut rows = tx
        .query(leasehold_spanner::gcloud_spanner::statement::Statement::new(sql))
        .await
        .unwrap();
    let mut all = Vec::new();
    while let Some(row) = rows.next().await.unwrap() {
        all.push(row);
    }
    all
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
    effects: &Effects,
    n: i64,
    within: Duration,
    timeline: &mut Timeline,
    replicas: &[Replica],
) {
    let deadline = Instant::now() + within;
    loop {
        let (rows, distinct) = effects.counts().await;
        assert!(
            rows == distinct,
            "{label}: a duplicate effect: {rows} rows, {distinct} messages"
        );
        timeline.sample(distinct, received(replicas));
        if distinct >= n {
            return;
        }
        if Instant::now() >= deadline {
            // What each replica holds now says whether the rest is in a replica or in Pub/Sub.
            let now: Vec<String> = replicas
                .iter()
                .map(|r| format!("{}: {}", r.name, r.now().line()))
                .collect();
            panic!(
                "{label}: {distinct} of {n} messages have their row after {within:?}; the \
                 replicas now:\n{}",
                now.join("\n")
            );
        }
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

/// The database the effects and the claims are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Db {
    Postgres,
    Spanner,
}

impl Handler {
    /// The replica's `env::STORE`.
    fn store(self, db: Db) -> &'static str {
        match (self, db) {
            (Self::Single, Db::Postgres) => "postgres",
            (Self::Batches, Db::Postgres) => "postgres-batch",
            (Self::Single, Db::Spanner) => "spanner",
            (Self::Batches, Db::Spanner) => "spanner-batch",
        }
    }
}

async fn soak(exactly_once: bool, handler: Handler, db: Db) {
    let messages: usize = std::env::var("LEASEHOLD_REPLICA_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_MESSAGES);
    let delivery = match (exactly_once, handler, db) {
        (true, Handler::Single, Db::Postgres) => "exactly-once",
        (false, Handler::Single, Db::Postgres) => "at-least-once",
        (true, Handler::Batches, Db::Postgres) => "exactly-once, transactional batches",
        (false, Handler::Batches, Db::Postgres) => "at-least-once, transactional batches",
        (true, Handler::Single, Db::Spanner) => "exactly-once, on Spanner",
        (false, Handler::Single, Db::Spanner) => "at-least-once, on Spanner",
        (true, Handler::Batches, Db::Spanner) => "exactly-once, transactional batches on Spanner",
        (false, Handler::Batches, Db::Spanner) => "at-least-once, transactional batches on Spanner",
    };
    let scratch = Scratch::new(|s| {
        s.set_enable_exactly_once_delivery(exactly_once)
            .set_ack_deadline_seconds(ACK_DEADLINE.as_secs() as i32)
    })
    .await;
    let effects = Effects::new(db).await;
    let table = effects.table().to_string();
    let proxy = Proxy::start(&host());
    let mut env = vec![
        ("PUBSUB_EMULATOR_HOST", proxy.host()),
        (env::SUBSCRIPTION, scratch.subscription.clone()),
        (env::TABLE, table.clone()),
        (env::WORK_MS, WORK_MS.to_string()),
        (env::STORE, handler.store(db).to_string()),
    ];
    env.extend(effects.env());
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
            &effects,
            (from + wave / 2) as i64,
            WAVE_WITHIN,
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
        &effects,
        messages as i64,
        WAVE_WITHIN,
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
        let (rows, distinct) = effects.counts().await;
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
    timeline.sample(effects.counts().await.1, received(&replicas));
    let (rows, distinct) = effects.counts().await;

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
    let all = effects.rows().await;
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
    effects.drop_table().await;
    scratch.cleanup().await;
}

/// The soak with each handler, side by side on one delivery type and on each database: a
/// soak's time is set by the ack deadline and the faults, not by the work, so several at once
/// take about as long as one (and CI, which runs two tests at once on two cores, pays for one).
async fn soak_each_handler(exactly_once: bool, dbs: &[Db]) {
    futures::future::join_all(dbs.iter().flat_map(|&db| {
        [
            soak(exactly_once, Handler::Single, db),
            soak(exactly_once, Handler::Batches, db),
        ]
    }))
    .await;
}

/// On PostgreSQL and, beside it, on Spanner (the Spanner emulator).
#[actix_rt::test]
async fn replicas_killed_and_cut_write_each_effect_once_exactly_once_delivery() {
    soak_each_handler(true, &[Db::Postgres, Db::Spanner]).await;
}

/// On PostgreSQL (on Spanner the at-least-once run differs only in Pub/Sub's confirmations,
/// which this run covers on PostgreSQL; one Spanner run keeps CI's time).
#[actix_rt::test]
async fn replicas_killed_and_cut_write_each_effect_once_at_least_once_delivery() {
    soak_each_handler(false, &[Db::Postgres]).await;
}
