//! Transactional handlers end to end: Google's Pub/Sub emulator (the one
//! `PUBSUB_EMULATOR_HOST` names, or one this binary starts) and a real PostgreSQL (`DATABASE_URL`,
//! or a throwaway cluster this binary starts). Each test makes its own topic, subscription and
//! effects table.

use leasehold::{Completed, Delivery, Outcome, Registration, TransactionalStore};
use leasehold_postgres::{PgTransaction, PostgresStore};
use leasehold_test_support::{Scratch, database_url, eventually, unique_sql_name};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store and an effects table of this test's own.
async fn store_and_table() -> (PostgresStore, String) {
    let store = PostgresStore::connect(database_url()).await.unwrap();
    let table = unique_sql_name("effects");
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE {table} (payload text NOT NULL, message_id text NOT NULL)"
        ))
        .await
        .unwrap();
    (store, table)
}

/// Rows in `table`, and distinct payloads among them.
async fn effects(store: &PostgresStore, table: &str) -> (i64, i64) {
    let row = store
        .pool()
        .get()
        .await
        .unwrap()
        .query_one(
            &format!("SELECT count(*), count(DISTINCT payload) FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Polls until `table` holds `n` rows; fails after `within`.
async fn rows_reach(store: &PostgresStore, table: &str, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (rows, _) = effects(store, table).await;
        if rows >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of {n} rows after {within:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The handler's write, in the message's transaction.
async fn write(
    tx: &PgTransaction,
    table: &str,
    payload: &str,
) -> Result<u64, leasehold_postgres::tokio_postgres::Error> {
    tx.execute(
        &format!("INSERT INTO {table} (payload, message_id) VALUES ($1, $2)"),
        &[&payload, &tx.message_id()],
    )
    .await
}

/// A handler that writes each payload in its transaction and acks.
fn writing_each_payload(subscription: &str, store: &PostgresStore, table: &str) -> Registration {
    let table = table.to_string();
    Registration::transactional_raw(
        subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
            write(tx, &table, std::str::from_utf8(&data).unwrap()).await?;
            Ok::<_, leasehold_postgres::tokio_postgres::Error>(d.ack())
        },
    )
}

async fn each_message_commits_its_write_once(exactly_once: bool) {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(exactly_once)).await;
    let (store, table) = store_and_table().await;
    let registration = writing_each_payload(&scratch.subscription, &store, &table);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all((0..200).map(|n| n.to_string())).await;
    rows_reach(&store, &table, 200, Duration::from_secs(60)).await;
    eventually("200 acks", Duration::from_secs(30), || {
        sub.stats().acked == 200
    })
    .await;
    let stats = sub.stats();
    assert_eq!(stats.committed, 200);
    assert_eq!(stats.store_failures, 0);
    if exactly_once {
        eventually("200 confirmed", Duration::from_secs(30), || {
            sub.stats().confirmed == 200
        })
        .await;
    }
    assert_eq!(effects(&store, &table).await, (200, 200));
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn each_message_commits_its_write_once_at_least_once_delivery() {
    each_message_commits_its_write_once(false).await;
}

#[actix_rt::test]
async fn each_message_commits_its_write_once_exactly_once_delivery() {
    each_message_commits_its_write_once(true).await;
}

#[actix_rt::test]
async fn a_handler_that_fails_after_writing_leaves_nothing_and_the_redelivery_runs_cleanly() {
    let scratch = Scratch::new(|s| s).await;
    let (store, table) = store_and_table().await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let (t, r) = (table.clone(), runs.clone());
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
            let payload = std::str::from_utf8(&data).unwrap().to_string();
            write(tx, &t, &payload).await.unwrap();
            let run = {
                let mut runs = r.lock();
                let run = runs.entry(payload).or_default();
                *run += 1;
                *run
            };
            if run == 1 {
                // After the write: as if the process died here. Nothing may remain of it.
                panic!("the first run fails after its write (test)");
            }
            d.ack()
        },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all((0..20).map(|n| n.to_string())).await;
    eventually("20 acks", Duration::from_secs(60), || {
        sub.stats().acked == 20
    })
    .await;
    assert_eq!(effects(&store, &table).await, (20, 20));
    assert!(runs.lock().values().all(|&n| n == 2), "{:?}", runs.lock());
    assert_eq!(sub.stats().panics, 20);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_message_committed_before_its_ack_was_lost_is_settled_without_the_handler() {
    let scratch = Scratch::new(|s| s).await;
    let (store, table) = store_and_table().await;
    let ids = scratch.publish_all((0..5).map(|n| n.to_string())).await;
    // Another replica committed these and died before its acks reached Pub/Sub.
    for id in &ids {
        let leasehold::Claim::Claimed(tx) = store.begin(&scratch.subscription, id).await.unwrap()
        else {
            panic!("{id} finished before it was delivered");
        };
        write(&tx, &table, id).await.unwrap();
        store.commit(tx, Completed::Acked).await.unwrap();
    }
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |_: bytes::Bytes, d: Delivery, _: &mut PgTransaction| -> Outcome {
            *r.lock() += 1;
            d.ack()
        },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    eventually("5 replays", Duration::from_secs(30), || {
        sub.stats().replayed == 5
    })
    .await;
    eventually("5 acks", Duration::from_secs(30), || sub.stats().acked == 5).await;
    assert_eq!(*runs.lock(), 0);
    assert_eq!(sub.stats().committed, 0);
    assert_eq!(effects(&store, &table).await, (5, 5));
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn connections_the_handlers_opened_outlive_the_worker_threads() {
    let scratch = Scratch::new(|s| s).await;
    let (store, table) = store_and_table().await;
    let registration =
        writing_each_payload(&scratch.subscription, &store, &table).worker_threads(2);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all((0..50).map(|n| n.to_string())).await;
    rows_reach(&store, &table, 50, Duration::from_secs(60)).await;
    // The worker threads end with the subscription; the pooled connections must not.
    sub.stop().await;
    scratch.cleanup().await;
    let status = store.pool().status();
    assert!(status.size > 0, "{status:?}");
    for _ in 0..status.size {
        let client = store.pool().get().await.unwrap();
        assert!(
            leasehold_postgres::deadpool_postgres::Object::metrics(&client).recycle_count > 0,
            "a connection the handlers used was replaced: it died with its worker thread"
        );
        client.query_one("SELECT 1", &[]).await.unwrap();
        // Kept out of the pool, so the next get takes the next connection.
        drop(leasehold_postgres::deadpool_postgres::Object::take(client));
    }
}
