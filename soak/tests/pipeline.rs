//! The two-stage pipeline of the transactional outbox, on PostgreSQL and on Spanner: stage one
//! (two `leasehold-replica` processes, `*-outbox` stores, each with its relay) consumes
//! `orders`, writes a row and publishes a confirmation through the outbox; stage two (in this
//! process) consumes `confirmations` and writes a row, deduplicating on the outbox's key; a plain
//! subscriber on a second subscription of `confirmations` counts every copy that reached Pub/Sub.
//!
//! The faults, in two phases of orders:
//! 1. the relays' Pub/Sub black-holed while stage one commits (rows wait in the outbox), then
//!    the consumers' too: 10 s with Pub/Sub unreachable; then both back;
//! 2. the relays' Pub/Sub black-holed again, and one replica killed with SIGKILL right after it
//!    committed, its relay in the middle of a send (its publish hanging), and started again;
//!    then Pub/Sub takes what the relays send but its answers are lost for a while, so the
//!    relays send those rows again: copies with new message ids.
//!
//! Pass: each order has exactly one stage-one row and exactly one stage-two row, none lost, no
//! row left in the outbox; the test prints how many copies reached Pub/Sub and how many
//! transactions stage two committed.
//!
//! Stage two deduplicates on `leasehold::OUTBOX_KEY_ATTRIBUTE` with `Registration::dedupe_on`:
//! a copy settles from its first's claim, its handler not run (counted in `deduplicated`).
//!
//! Uses the emulator `PUBSUB_EMULATOR_HOST` names (or starts one), the database `DATABASE_URL`
//! names (or a throwaway cluster; the run has a schema of its own) and the Spanner emulator.

use leasehold::{Delivery, OUTBOX_KEY_ATTRIBUTE, Registration, Subscription};
use leasehold_postgres::{PgTransaction, PostgresStore};
use leasehold_soak::{Report, env};
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_spanner::{SpannerStore, SpannerTransaction};
use leasehold_test_support::{
    PROJECT, Proxy, Scratch, Sink, database_url_in_new_schema, eventually_showing, host,
    spanner_database, spanner_endpoint, unique,
};
use parking_lot::Mutex;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Orders per phase.
const POSTGRES_ORDERS: i64 = 100;
/// Orders per phase on Spanner (its emulator runs one read-write transaction at a time).
const SPANNER_ORDERS: i64 = 40;
/// How long Pub/Sub is unreachable in phase 1.
const OUTAGE: Duration = Duration::from_secs(10);
/// The longest a phase may take to have every row.
const PHASE_WITHIN: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, Debug)]
enum Db {
    Postgres,
    Spanner,
}

/// Where both stages keep their rows: stage one's table (written by the replicas), stage two's
/// (written here), and the outbox of stage one's store.
enum Rows {
    Postgres { store: PostgresStore, url: String },
    Spanner { store: SpannerStore },
}

const STAGE_ONE: &str = "stage_one";
const STAGE_TWO: &str = "stage_two";

impl Rows {
    async fn new(db: Db) -> Self {
        match db {
            Db::Postgres => {
                let url = database_url_in_new_schema().await;
                let store = PostgresStore::connect(&url).await.unwrap();
                store
                    .pool()
                    .get()
                    .await
                    .unwrap()
                    .batch_execute(&format!(
                        "CREATE TABLE {STAGE_ONE} (seq bigint NOT NULL, message_id text NOT NULL, \
                         replica text NOT NULL);
                         CREATE TABLE {STAGE_TWO} (seq bigint NOT NULL, key text NOT NULL, \
                         message_id text NOT NULL)"
                    ))
                    .await
                    .unwrap();
                Self::Postgres { store, url }
            }
            Db::Spanner => {
                let database = spanner_database().await;
                leasehold_spanner::apply_ddl(
                    &spanner_endpoint(),
                    &database,
                    &[
                        &format!(
                            "CREATE TABLE {STAGE_ONE} (id STRING(36) NOT NULL, seq INT64 NOT NULL, \
                             message_id STRING(MAX) NOT NULL, replica STRING(MAX) NOT NULL, \
                             written_at TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) \
                             PRIMARY KEY (id)"
                        ),
                        &format!(
                            "CREATE TABLE {STAGE_TWO} (id STRING(36) NOT NULL, seq INT64 NOT NULL, \
                             key STRING(MAX) NOT NULL, message_id STRING(MAX) NOT NULL) \
                             PRIMARY KEY (id)"
                        ),
                    ],
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
                Self::Spanner { store }
            }
        }
    }

    /// What a stage-one replica needs to reach the database.
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Postgres { url, .. } => vec![
                ("DATABASE_URL", url.clone()),
                (env::STORE, "postgres-outbox".into()),
            ],
            Self::Spanner { store } => {
                let leasehold_spanner::Endpoint::Emulator(host) = spanner_endpoint() else {
                    panic!("the pipeline runs on the Spanner emulator")
                };
                vec![
                    ("SPANNER_EMULATOR_HOST", host),
                    (env::SPANNER_DATABASE, store.database().to_string()),
                    (env::STORE, "spanner-outbox".into()),
                ]
            }
        }
    }

    /// One number a query returns.
    async fn number(&self, sql: &str) -> i64 {
        match self {
            Self::Postgres { store, .. } => {
                let client = store.pool().get().await.unwrap();
                client.query_one(sql, &[]).await.unwrap().get(0)
            }
            Self::Spanner { store } => {
                let mut tx = store.client().single().await.unwrap();
                let mut rows = tx.query(Statement::new(sql)).await.unwrap();
                rows.next().await.unwrap().unwrap().column(0).unwrap()
            }
        }
    }

    /// Rows of `table`, and distinct orders among them.
    async fn counts(&self, table: &str) -> (i64, i64) {
        (
            self.number(&format!("SELECT COUNT(*) FROM {table}")).await,
            self.number(&format!("SELECT COUNT(DISTINCT seq) FROM {table}"))
                .await,
        )
    }

    /// Outbox rows not sent yet.
    async fn pending(&self) -> i64 {
        let unsent = match self {
            Self::Postgres { .. } => "sent_at IS NULL",
            Self::Spanner { .. } => "pending_shard IS NOT NULL",
        };
        self.number(&format!(
            "SELECT COUNT(*) FROM leasehold_outbox WHERE {unsent}"
        ))
        .await
    }

    /// Stage two: each confirmation's row, once per order.
    fn stage_two(&self, subscription: &str) -> Registration {
        let registration = match self {
            Self::Postgres { store, .. } => Registration::transactional_raw(
                subscription,
                store.clone(),
                async |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
                    let (seq, key) = confirmation(&data, &d);
                    let insert = format!(
                        "INSERT INTO {STAGE_TWO} (seq, key, message_id) VALUES ($1, $2, $3)"
                    );
                    tx.execute(&insert, &[&seq, &key, &d.message_id()]).await?;
                    Ok::<_, leasehold_postgres::tokio_postgres::Error>(d.ack())
                },
            ),
            Self::Spanner { store } => Registration::transactional_raw(
                subscription,
                store.clone(),
                async |data: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
                    let (seq, key) = confirmation(&data, &d);
                    let mut insert = Statement::new(format!(
                        "INSERT INTO {STAGE_TWO} (id, seq, key, message_id) \
                         VALUES (GENERATE_UUID(), @seq, @key, @id)"
                    ));
                    insert.add_param("seq", &seq);
                    insert.add_param("key", &key);
                    insert.add_param("id", &d.message_id());
                    tx.update(insert).await?;
                    Ok::<_, leasehold_spanner::gcloud_spanner::client::Error>(d.ack())
                },
            ),
        };
        registration
            .workers(4)
            .max_lease_extension(Duration::from_secs(10))
            .dedupe_on(OUTBOX_KEY_ATTRIBUTE)
    }
}

/// A confirmation's order and key.
fn confirmation(data: &[u8], d: &Delivery) -> (i64, String) {
    let seq = std::str::from_utf8(data).unwrap().parse().unwrap();
    let key = d.attributes()[OUTBOX_KEY_ATTRIBUTE].clone();
    (seq, key)
}

/// A stage-one replica process.
struct Replica {
    env: Vec<(&'static str, String)>,
    child: Child,
    last: Arc<Mutex<Report>>,
    earlier: Report,
}

impl Replica {
    fn spawn(env: Vec<(&'static str, String)>) -> Self {
        let (child, last) = leasehold_soak::launch(env!("CARGO_BIN_EXE_leasehold-replica"), &env);
        Self {
            env,
            child,
            last,
            earlier: Report::default(),
        }
    }

    fn now(&self) -> Report {
        *self.last.lock()
    }

    fn total(&self) -> Report {
        self.earlier.plus(self.now())
    }

    /// SIGKILL, then a new incarnation.
    fn kill_and_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.earlier = self.total();
        let (child, last) =
            leasehold_soak::launch(env!("CARGO_BIN_EXE_leasehold-replica"), &self.env);
        self.child = child;
        self.last = last;
    }

    /// SIGTERM, and the clean stop (its drain, its relay's).
    async fn stop(&mut self) {
        leasehold_soak::terminate(&self.child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "a replica exited with {status}");
                return;
            }
            assert!(Instant::now() < deadline, "a replica did not stop");
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the replicas and the sink say, for a failure's message.
fn state(a: &Replica, b: &Replica, sink: &Sink) -> String {
    format!("a {:?}, b {:?}, sink {}", a.total(), b.total(), sink.len())
}

/// Polls until `table` has `n` distinct orders.
async fn rows_reach(rows: &Rows, table: &str, n: i64, what: &str) {
    let deadline = Instant::now() + PHASE_WITHIN;
    loop {
        let (_, distinct) = rows.counts(table).await;
        if distinct >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {distinct} of {n} orders after {PHASE_WITHIN:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn publish(scratch: &Scratch, from: i64, to: i64) {
    scratch
        .publish_all((from..to).map(|seq| format!("{{\"seq\":{seq}}}")))
        .await;
}

async fn pipeline(db: Db) {
    let started = Instant::now();
    let orders = match db {
        Db::Postgres => POSTGRES_ORDERS,
        Db::Spanner => SPANNER_ORDERS,
    };
    let mut scratch = Scratch::new(|s| s).await;
    let confirmations = format!("{PROJECT}/topics/{}", unique("confirmations"));
    scratch.create_topic(&confirmations).await;
    let stage_two_subscription = format!("{PROJECT}/subscriptions/{}", unique("stage-two"));
    scratch
        .create_subscription(
            google_cloud_pubsub::model::Subscription::new()
                .set_name(&stage_two_subscription)
                .set_topic(&confirmations)
                .set_ack_deadline_seconds(10),
        )
        .await;
    let sink = Sink::on(&mut scratch, &confirmations).await;
    let rows = Rows::new(db).await;
    let consumers = Proxy::start(&host());
    let relays = Proxy::start(&host());

    let stage_two: Subscription =
        leasehold::start(rows.stage_two(&stage_two_subscription), &scratch.connection)
            .await
            .unwrap();
    let mut env = rows.env();
    env.extend([
        ("PUBSUB_EMULATOR_HOST", consumers.host()),
        (env::RELAY_PUBSUB, relays.host()),
        (env::SUBSCRIPTION, scratch.subscription.clone()),
        (env::TABLE, STAGE_ONE.to_string()),
        (env::OUTBOX_TOPIC, confirmations.clone()),
        (env::WORKERS, "4".into()),
    ]);
    let replica = |name: &str| {
        let mut env = env.clone();
        env.push((env::NAME, name.to_string()));
        Replica::spawn(env)
    };
    let mut a = replica("a");
    let mut b = replica("b");

    // Phase 1: rows wait in the outbox, then Pub/Sub is out of reach for everyone.
    let phase = Instant::now();
    relays.black_hole();
    publish(&scratch, 0, orders).await;
    rows_reach(&rows, STAGE_ONE, orders, "phase 1, stage one").await;
    assert_eq!(rows.pending().await, orders, "every confirmation waits");
    consumers.black_hole();
    actix_rt::time::sleep(OUTAGE).await;
    assert_eq!(
        sink.len(),
        0,
        "nothing reached Pub/Sub while it was unreachable"
    );
    consumers.accept();
    relays.accept();
    rows_reach(&rows, STAGE_TWO, orders, "phase 1, stage two").await;
    eprintln!(
        "{db:?} phase 1 (an outage of {OUTAGE:?} with {orders} rows waiting) took {:?}",
        phase.elapsed()
    );

    // Phase 2: a replica killed right after a commit, its relay in the middle of a send.
    let phase = Instant::now();
    relays.black_hole();
    let before = [a.total(), b.total()];
    publish(&scratch, orders, 2 * orders).await;
    // The replica that committed orders of this phase, once its relay failed a send.
    let stuck = |now: Report, before: Report| {
        now.committed > before.committed && now.outbox_failures > before.outbox_failures
    };
    eventually_showing(
        "a replica committed and its relay is stuck in a send",
        PHASE_WITHIN,
        || stuck(a.total(), before[0]) || stuck(b.total(), before[1]),
        || state(&a, &b, &sink),
    )
    .await;
    // Its report is a quarter second old at most: the kill lands right after its commits.
    let victim = if stuck(a.total(), before[0]) {
        &mut a
    } else {
        &mut b
    };
    victim.kill_and_restart();
    // Pub/Sub takes what the relays send but they never hear it: they send it again, copies
    // under new message ids that stage two must know by their key.
    let reached = sink.len();
    relays.accept();
    relays.mute_replies();
    eventually_showing(
        "sends Pub/Sub took while their answers were lost",
        PHASE_WITHIN,
        || sink.len() > reached,
        || state(&a, &b, &sink),
    )
    .await;
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    relays.unmute();
    rows_reach(&rows, STAGE_ONE, 2 * orders, "phase 2, stage one").await;
    rows_reach(&rows, STAGE_TWO, 2 * orders, "phase 2, stage two").await;
    let deadline = Instant::now() + PHASE_WITHIN;
    while rows.pending().await > 0 {
        assert!(
            Instant::now() < deadline,
            "the outbox not empty: {}",
            state(&a, &b, &sink)
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{db:?} phase 2 (SIGKILL mid-send, answers lost) took {:?}",
        phase.elapsed()
    );

    // The end: stage one drains; nothing more comes.
    b.stop().await;
    a.stop().await;
    let (one, one_orders) = rows.counts(STAGE_ONE).await;
    let (two, two_orders) = rows.counts(STAGE_TWO).await;
    let copies = sink.copies();
    let reached = copies.len() as i64;
    let duplicates: usize = copies.values().map(|n| n - 1).sum();
    let sent_copies: usize = copies.values().sum();
    // Stage two has had every copy (its own redeliveries count too).
    let deadline = Instant::now() + PHASE_WITHIN;
    while stage_two.stats().settled() < sent_copies as u64 {
        assert!(
            Instant::now() < deadline,
            "stage two: {:?}",
            stage_two.stats()
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let stage_two_stats = stage_two.stats();
    eprintln!(
        "{db:?} pipeline: {} orders; stage one {one} rows ({one_orders} orders), stage two {two} \
         rows ({two_orders} orders); {sent_copies} copies reached Pub/Sub for {reached} keys \
         ({duplicates} duplicates; the plain subscriber got {} deliveries); stage two \
         committed {} transactions and settled {} copies from their key's claim, without the \
         handler; relays sent {} (failures {}); took {:?}",
        2 * orders,
        sink.len(),
        stage_two_stats.committed,
        stage_two_stats.deduplicated,
        a.total().outbox_sent + b.total().outbox_sent,
        a.total().outbox_failures + b.total().outbox_failures,
        started.elapsed()
    );
    assert_eq!(
        (one, one_orders),
        (2 * orders, 2 * orders),
        "stage one: one row per order"
    );
    assert_eq!(
        (two, two_orders),
        (2 * orders, 2 * orders),
        "stage two: one row per order"
    );
    assert_eq!(
        reached,
        2 * orders,
        "every order's confirmation reached Pub/Sub"
    );
    assert!(duplicates > 0, "the lost answers made copies");
    assert!(
        copies.keys().all(|k| k.contains(&scratch.subscription)),
        "every copy carries the key of its order's message"
    );
    assert_eq!(
        stage_two_stats.committed,
        2 * orders as u64,
        "stage two ran once per order"
    );
    assert!(
        stage_two_stats.deduplicated > 0,
        "the copies settled from their key's claim"
    );
    assert_eq!(
        stage_two_stats.dedupe_fallbacks, 0,
        "every copy had the key"
    );
    stage_two.stop().await;
    drop(sink);
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn the_outbox_pipeline_on_postgres_loses_nothing_and_writes_once() {
    pipeline(Db::Postgres).await;
}

#[actix_rt::test]
async fn the_outbox_pipeline_on_spanner_loses_nothing_and_writes_once() {
    pipeline(Db::Spanner).await;
}
