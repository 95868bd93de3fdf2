//! The transactional outbox's figures for BENCHMARKS.md, side by side in one run: how long a
//! message takes from its transaction's commit to a subscriber (the relay woken by PostgreSQL's
//! `NOTIFY`), beside a direct publish from its call to the subscriber; and how many messages a
//! second one relay sends from a backlog, beside one publisher publishing as many at once. The
//! CPU a transactional handler spends per message with and without one outbox publish is the
//! scale benchmark's (`cargo bench -p leasehold-soak --bench scale`, `LEASEHOLD_SCALE_ONLY=outbox`),
//! which measures the replica processes.
//!
//! ```text
//! cargo bench -p leasehold-soak --bench outbox
//! ```
//!
//! `LEASEHOLD_OUTBOX_LATENCY_MESSAGES` (default 500), `LEASEHOLD_OUTBOX_BACKLOG` (default
//! 10,000) and `LEASEHOLD_OUTBOX_ROUNDS` (default 3) change the load. Uses the emulator
//! `PUBSUB_EMULATOR_HOST` names (or starts one) and the database `DATABASE_URL` names (or a
//! throwaway cluster; the run has a schema of its own).

use google_cloud_pubsub::model::Message;
use leasehold::OutboxMessage;
use leasehold_postgres::PostgresStore;
use leasehold_relay::{Relay, RelayOptions};
use leasehold_test_support::{PROJECT, Scratch, Sink, database_url_in_new_schema, unique};
use std::time::{Duration, Instant};

fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median and the 99th percentile of `v`, in milliseconds.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e3;
    (at(0.5), at(0.99))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A topic of the run's own (deleted with `scratch`).
async fn topic(scratch: &mut Scratch, name: &str) -> String {
    let topic = format!("{PROJECT}/topics/{}", unique(name));
    scratch.create_topic(&topic).await;
    topic
}

/// Waits until `sink` has a message whose payload is `data`; when it arrived.
async fn arrival(sink: &Sink, data: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(a) = sink.all().into_iter().find(|a| a.data == data) {
            return a.at;
        }
        assert!(Instant::now() < deadline, "{data} never arrived");
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Commit (or publish call) to arrival, for `messages` of each, one after the other, a direct
/// publish and an outbox commit in turn.
async fn latency(scratch: &mut Scratch, store: &PostgresStore, messages: usize) {
    let (direct_topic, outbox_topic) = (
        topic(scratch, "direct").await,
        topic(scratch, "outboxed").await,
    );
    let direct_sink = Sink::on(scratch, &direct_topic).await;
    let outbox_sink = Sink::on(scratch, &outbox_topic).await;
    let publisher = scratch.connection.publisher(&direct_topic).await.unwrap();
    let relay = Relay::start(store.clone(), &scratch.connection, RelayOptions::default())
        .await
        .unwrap();
    let (mut direct, mut outboxed) = (Vec::new(), Vec::new());
    let mut client = store.pool().get().await.unwrap();
    for n in 0..messages {
        let data = n.to_string();
        let called = Instant::now();
        publisher
            .publish(Message::new().set_data(data.clone()))
            .await
            .unwrap();
        direct.push(arrival(&direct_sink, &data).await - called);

        let tx = client.transaction().await.unwrap();
        leasehold_postgres::publish(&*tx, OutboxMessage::new(&outbox_topic, data.clone()))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let committed = Instant::now();
        outboxed.push(arrival(&outbox_sink, &data).await - committed);
    }
    relay.stop().await;
    let (d50, d99) = percentiles(direct);
    let (o50, o99) = percentiles(outboxed);
    println!(
        "latency, {messages} messages one at a time, to a subscriber (ms):\n  \
         direct publish (call to arrival)        median {d50:>6.1}   p99 {d99:>6.1}\n  \
         outbox (commit to arrival, NOTIFY wake) median {o50:>6.1}   p99 {o99:>6.1}\n  \
         outbox / direct                         median {:>5.2}×   p99 {:>5.2}×",
        o50 / d50,
        o99 / d99
    );
}

/// One publisher publishing `backlog` messages at once: messages a second until every publish
/// is answered.
async fn direct_rate(scratch: &Scratch, topic: &str, backlog: usize) -> f64 {
    let publisher = scratch.connection.publisher(topic).await.unwrap();
    let started = Instant::now();
    let sends: Vec<_> = (0..backlog)
        .map(|n| publisher.publish(Message::new().set_data(n.to_string())))
        .collect();
    for sent in futures::future::join_all(sends).await {
        sent.unwrap();
    }
    backlog as f64 / started.elapsed().as_secs_f64()
}

/// A backlog of `backlog` committed rows, then a relay started on it: messages a second until it
/// sent them all.
async fn relay_rate(scratch: &Scratch, store: &PostgresStore, topic: &str, backlog: usize) -> f64 {
    let mut client = store.pool().get().await.unwrap();
    for chunk in (0..backlog).collect::<Vec<_>>().chunks(500) {
        let tx = client.transaction().await.unwrap();
        for n in chunk {
            leasehold_postgres::publish(&*tx, OutboxMessage::new(topic, n.to_string()))
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
    }
    let started = Instant::now();
    let relay = Relay::start(store.clone(), &scratch.connection, RelayOptions::default())
        .await
        .unwrap();
    while relay.stats().sent < backlog as u64 {
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = backlog as f64 / started.elapsed().as_secs_f64();
    relay.stop().await;
    rate
}

#[actix_rt::main]
async fn main() {
    let messages = number("LEASEHOLD_OUTBOX_LATENCY_MESSAGES", 500);
    let backlog = number("LEASEHOLD_OUTBOX_BACKLOG", 10_000);
    let rounds = number("LEASEHOLD_OUTBOX_ROUNDS", 3);
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("outbox benchmark at {commit}, PostgreSQL and the Pub/Sub emulator on this machine");
    let mut scratch = Scratch::new(|s| s).await;
    let store = PostgresStore::connect(&database_url_in_new_schema().await)
        .await
        .unwrap();
    latency(&mut scratch, &store, messages).await;

    let (mut direct, mut relayed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let direct_topic = topic(&mut scratch, "rate-direct").await;
        let relay_topic = topic(&mut scratch, "rate-relay").await;
        let d = direct_rate(&scratch, &direct_topic, backlog).await;
        let r = relay_rate(&scratch, &store, &relay_topic, backlog).await;
        println!("  round {round}: direct publish {d:>7.0} msg/s   relay {r:>7.0} msg/s");
        direct.push(d);
        relayed.push(r);
    }
    let (d, r) = (median(direct), median(relayed));
    println!(
        "throughput, a backlog of {backlog} (medians of {rounds} rounds):\n  \
         one publisher, all at once  {d:>7.0} msg/s\n  \
         one relay, from the outbox  {r:>7.0} msg/s\n  \
         relay / direct              {:>5.2}×",
        r / d
    );
    scratch.cleanup().await;
}
