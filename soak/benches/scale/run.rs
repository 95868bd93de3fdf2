//! One run of one configuration: a fresh subscription with the backlog published, the
//! replicas started on it, measured from their first delivery to their last ack (and their
//! relays' last send, when the handler publishes through the outbox), then checked
//! (every message has its row) and cleaned up.
//!
//! Uses the emulator, PostgreSQL and the Spanner emulator of `leasehold-test-support`, the replicas of
//! [`replicas`](crate::replicas), and a configuration of [`configs`](crate::configs).

use crate::configs::Config;
use crate::replicas::{Progress, Replicas, clock_ticks, machine_ticks};
use leasehold_postgres::PostgresStore;
use leasehold_soak::env;
use leasehold_spanner::SpannerStore;
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_test_support::{
    PROJECT, Scratch, host, spanner_database, spanner_endpoint, unique, unique_sql_name,
};
use std::time::{Duration, Instant};

/// One run's figures.
#[derive(Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) per_second: f64,
    /// CPU of the replica processes, per message.
    pub(crate) replica_us: f64,
    /// CPU of the whole machine (replicas, emulator, PostgreSQL), per message.
    pub(crate) machine_us: f64,
    /// Messages per batch, on average (batch handlers only).
    pub(crate) batch_size: Option<f64>,
}

/// Runs `config` on `messages` published before its replicas start.
pub(crate) async fn run(
    config: &Config,
    messages: usize,
    store: &PostgresStore,
    database: &str,
) -> Sample {
    let mut scratch = Scratch::new(|s| s).await;
    let table = unique_sql_name("scale");
    let client = store.pool().get().await.unwrap();
    let spanner = match config.on_spanner() {
        true => Some(spanner_table(&table).await),
        false => None,
    };
    if config.row && spanner.is_none() {
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
        (env::WORKERS, config.workers.to_string()),
        (env::OUTSTANDING, "1000".to_string()),
        (env::REPORT_MS, "20".to_string()),
    ];
    if config.row {
        env.push((env::TABLE, table.clone()));
    }
    if config.outbox() {
        // A topic with no subscription: Pub/Sub takes the relay's messages and keeps none.
        let topic = format!("{PROJECT}/topics/{}", unique("confirmations"));
        scratch.create_topic(&topic).await;
        env.push((env::OUTBOX_TOPIC, topic));
        if !config.notify {
            env.push((env::OUTBOX_NOTIFY, "off".to_string()));
        }
    }
    if let Some(spanner) = &spanner {
        let leasehold_spanner::Endpoint::Emulator(host) = spanner_endpoint() else {
            panic!("the benchmark runs on the Spanner emulator")
        };
        env.push(("SPANNER_EMULATOR_HOST", host));
        env.push((env::SPANNER_DATABASE, spanner.database().to_string()));
    }
    let mut replicas = Replicas::spawn(config.replicas, &env, messages as u64, config.outbox());

    // Measured from the first delivery (connecting is not consuming) to the last ack, each
    // learnt of from the report line that shows it.
    // Spanner's emulator takes about 10 ms of CPU a transaction: its runs are slower.
    let limit = if config.on_spanner() { 600 } else { 120 };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(limit);
    assert!(
        replicas.reached(Progress::Receiving, deadline).await,
        "nothing was received"
    );
    let (started, cpu_start, machine_start) =
        (Instant::now(), replicas.cpu_ticks(), machine_ticks());
    assert!(
        replicas.reached(Progress::Acked, deadline).await,
        "{} of {messages} acked",
        replicas.total().acked
    );
    let elapsed = started.elapsed().as_secs_f64();
    // From the same report lines: the messages acked so far in the batches counted so far.
    let total = replicas.total();
    let (acked, batches) = (total.acked, total.batches);
    let ticks = clock_ticks();
    let per_message_us = |t: u64| t as f64 / ticks / messages as f64 * 1e6;
    let sample = Sample {
        per_second: messages as f64 / elapsed,
        replica_us: per_message_us(replicas.cpu_ticks() - cpu_start),
        machine_us: per_message_us(machine_ticks() - machine_start),
        batch_size: (batches > 0).then(|| acked as f64 / batches as f64),
    };
    replicas.stop();
    if let Some(spanner) = &spanner {
        let mut tx = spanner.client().single().await.unwrap();
        let count = Statement::new(format!("SELECT COUNT(DISTINCT seq) FROM {table}"));
        let mut rows = tx.query(count).await.unwrap();
        let distinct: i64 = rows.next().await.unwrap().unwrap().column(0).unwrap();
        assert_eq!(distinct, messages as i64, "every message has its row");
    } else if config.row {
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

/// A Spanner database of the run's own, migrated, with the effects table `table`; a store on it.
async fn spanner_table(table: &str) -> SpannerStore {
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
    SpannerStore::connect_to(&spanner_endpoint(), &database, Duration::from_secs(30))
        .await
        .unwrap()
}
