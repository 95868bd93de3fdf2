//! Transactional handlers end to end: Google's Pub/Sub emulator (the one
//! `PUBSUB_EMULATOR_HOST` names, or one this binary starts) and a real PostgreSQL (`DATABASE_URL`,
//! or a throwaway cluster this binary starts). Each test makes its own topic, subscription and
//! effects table.

use leasehold::{
    Batch, BatchOutcome, Delivery, Outcome, Registration,
    store::{BatchClaim, BatchClaims, Completed, TransactionalBatchStore, TransactionalStore},
};
use leasehold_postgres::{PgTransaction, PostgresStore};
use leasehold_test_support::{Scratch, database_url, eventually, unique_sql_name};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "emulator/outage.rs"]
mod outage;
#[path = "emulator/outbox.rs"]
mod outbox;

/// A store and an effects table of this test's own.
async fn store_and_table() -> (PostgresStore, String) {
    let store = PostgresStore::connect(database_url()).await.unwrap();
    let table = store_and_table_on(&store).await;
    (store, table)
}

/// An effects table of this test's own, in `store`'s database.
async fn store_and_table_on(store: &PostgresStore) -> String {
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
    table
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
        let leasehold::store::Claim::Claimed(tx) =
            store.begin(&scratch.subscription, id).await.unwrap()
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

// Transactional batches: `Registration::transactional_raw_batch` on `PostgresStore`.

/// The batch's write: one row per message given, in one multi-row INSERT.
async fn write_batch(
    tx: &PgTransaction,
    table: &str,
    rows: &[(String, Arc<str>)],
) -> Result<u64, leasehold_postgres::tokio_postgres::Error> {
    let payloads: Vec<&str> = rows.iter().map(|(p, _)| p.as_str()).collect();
    let ids: Vec<&str> = rows.iter().map(|(_, id)| &**id).collect();
    tx.execute(
        &format!(
            "INSERT INTO {table} (payload, message_id) \
             SELECT * FROM unnest($1::text[], $2::text[])"
        ),
        &[&payloads, &ids],
    )
    .await
}

/// A batch handler that writes every payload of its batch with one INSERT and acks them all;
/// the message ids it was given go to `seen`.
fn writing_each_batch(
    subscription: &str,
    store: &PostgresStore,
    table: &str,
    seen: Arc<Mutex<Vec<String>>>,
) -> Registration {
    let table = table.to_string();
    Registration::transactional_raw_batch(
        subscription,
        store.clone(),
        async move |batch: Batch<bytes::Bytes>, tx: &mut PgTransaction| {
            let rows: Vec<(String, Arc<str>)> = batch
                .iter()
                .map(|item| {
                    let payload = std::str::from_utf8(&item.payload).unwrap().to_string();
                    (payload, Arc::from(item.delivery.message_id()))
                })
                .collect();
            seen.lock()
                .extend(rows.iter().map(|(_, id)| id.to_string()));
            write_batch(tx, &table, &rows).await?;
            Ok::<_, leasehold_postgres::tokio_postgres::Error>(BatchOutcome::all(Outcome::ack()))
        },
    )
    .max_batch_messages(50)
}

async fn two_replicas_write_each_batch_once(exactly_once: bool) {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(exactly_once)).await;
    let (store, table) = store_and_table().await;
    let ids = scratch.publish_all((0..300).map(|n| n.to_string())).await;
    // Another replica committed the first five and died before its acks reached Pub/Sub: their
    // redeliveries are settled from the records, without the handler.
    let BatchClaims {
        transaction,
        claims,
    } = store
        .begin_batch(
            &scratch.subscription,
            &ids[..5]
                .iter()
                .map(|id| Arc::from(id.as_str()))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert_eq!(claims, vec![BatchClaim::Claimed; 5]);
    let tx = transaction.unwrap();
    let committed: Vec<(String, Arc<str>)> = (0..5)
        .map(|n| (n.to_string(), Arc::from(ids[n].as_str())))
        .collect();
    write_batch(&tx, &table, &committed).await.unwrap();
    let finished = committed
        .iter()
        .map(|(_, id)| (id.clone(), Completed::Acked))
        .collect();
    store.commit_batch(tx, finished, Vec::new()).await.unwrap();

    // Two replicas: two subscriptions on the same Pub/Sub subscription, each with its own pool.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = PostgresStore::connect(database_url()).await.unwrap();
        let registration = writing_each_batch(&scratch.subscription, &store, &table, seen.clone());
        replicas.push(
            leasehold::start(registration, &scratch.connection)
                .await
                .unwrap(),
        );
    }
    rows_reach(&store, &table, 300, Duration::from_secs(60)).await;
    let total = |f: fn(&leasehold::status::StatsSnapshot) -> u64| {
        replicas.iter().map(|r| f(&r.stats())).sum::<u64>()
    };
    eventually("300 acks", Duration::from_secs(30), || {
        total(|s| s.acked) >= 300
    })
    .await;
    // Every message written once; the five committed before were never given to the handler.
    assert_eq!(effects(&store, &table).await, (300, 300));
    assert_eq!(total(|s| s.committed), 295);
    assert!(
        total(|s| s.replayed) >= 5,
        "replayed {}",
        total(|s| s.replayed)
    );
    assert_eq!(total(|s| s.store_failures), 0);
    {
        let seen = seen.lock();
        assert!(
            ids[..5].iter().all(|id| !seen.contains(id)),
            "a committed message ran again"
        );
    }
    // In batches, not one by one: fewer batches than messages.
    let batches = total(|s| s.batches);
    assert!(
        batches > 0 && batches < 295,
        "{batches} batches for 295 messages"
    );
    if exactly_once {
        eventually("300 confirmed", Duration::from_secs(30), || {
            total(|s| s.confirmed) >= 300
        })
        .await;
    }
    for id in &ids {
        assert_eq!(
            store.completed(&scratch.subscription, id).await.unwrap(),
            Some(Completed::Acked)
        );
    }
    for replica in replicas {
        replica.stop().await;
    }
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn two_replicas_write_each_batch_once_at_least_once_delivery() {
    two_replicas_write_each_batch_once(false).await;
}

#[actix_rt::test]
async fn two_replicas_write_each_batch_once_exactly_once_delivery() {
    two_replicas_write_each_batch_once(true).await;
}

#[actix_rt::test]
async fn a_message_retried_in_a_batch_is_not_recorded_and_comes_back() {
    let scratch = Scratch::new(|s| s).await;
    let (store, table) = store_and_table().await;
    // Payload n: n % 4 == 0 acks, 1 drops, 2 is retried on its first run and 3 gets no outcome
    // on its first run (retried too); both are acked on their second run. Rows are written for
    // the messages acked or dropped only.
    let runs: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();
    let (t, r) = (table.clone(), runs.clone());
    let registration = Registration::transactional_raw_batch(
        &scratch.subscription,
        store.clone(),
        async move |batch: Batch<bytes::Bytes>, tx: &mut PgTransaction| {
            let mut outcomes = BatchOutcome::new();
            let mut rows = Vec::new();
            for item in &batch {
                let n: u32 = std::str::from_utf8(&item.payload).unwrap().parse().unwrap();
                let run = {
                    let mut runs = r.lock();
                    let run = runs.entry(n).or_default();
                    *run += 1;
                    *run
                };
                let d = &item.delivery;
                let (outcome, written) = match (n % 4, run) {
                    (0, _) => (Some(d.ack()), true),
                    (1, _) => (Some(d.drop()), true),
                    (2, 1) => (Some(d.retry()), false),
                    (3, 1) => (None, false),
                    _ => (Some(d.ack()), true),
                };
                if written {
                    rows.push((n.to_string(), Arc::from(d.message_id())));
                }
                if let Some(outcome) = outcome {
                    outcomes.set(d, outcome);
                }
            }
            write_batch(tx, &t, &rows).await?;
            Ok::<_, leasehold_postgres::tokio_postgres::Error>(outcomes)
        },
    )
    .max_batch_messages(40)
    .max_batch_wait(Duration::from_millis(200));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let ids = scratch.publish_all((0..40).map(|n| n.to_string())).await;
    rows_reach(&store, &table, 40, Duration::from_secs(60)).await;
    eventually("40 settled for good", Duration::from_secs(30), || {
        let s = sub.stats();
        s.acked + s.dropped >= 40
    })
    .await;
    assert_eq!(effects(&store, &table).await, (40, 40));
    let runs = runs.lock().clone();
    for n in 0..40u32 {
        let expected = if n % 4 >= 2 { 2 } else { 1 };
        assert_eq!(runs.get(&n), Some(&expected), "runs of {n}: {runs:?}");
    }
    for (n, id) in ids.iter().enumerate() {
        let expected = if n % 4 == 1 {
            Completed::Dropped
        } else {
            Completed::Acked
        };
        assert_eq!(
            store.completed(&scratch.subscription, id).await.unwrap(),
            Some(expected),
            "message {n}"
        );
    }
    let stats = sub.stats();
    assert_eq!(stats.committed, 40);
    assert_eq!(stats.replayed, 0);
    assert_eq!(stats.retried, 20);
    sub.stop().await;
    scratch.cleanup().await;
}

// Replays of dead letters through a transactional handler.

/// Two replays of one dead-letter subscription at once, each with its own store (two processes):
/// every message's write is committed once. A message one replay has committed and the other
/// receives (a lease that ran out, a redelivery) is settled from the store, without the handler.
#[actix_rt::test]
async fn two_replays_at_once_write_each_dead_letter_once() {
    const N: usize = 30;
    let (scratch, dead) = Scratch::with_dead_letter_topic(|s| s, 5).await;
    let dead_lettering = leasehold::start(
        Registration::raw(&scratch.subscription, |_, d: Delivery| async move {
            match d.delivery_attempt() {
                Some(attempt) if attempt < 5 => d.retry(),
                _ => d.drop(),
            }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();
    scratch.publish_all((0..N).map(|n| n.to_string())).await;
    eventually(
        "every message dead-lettered",
        Duration::from_secs(60),
        || dead_lettering.stats().dead_lettered == N as u64,
    )
    .await;
    dead_lettering.stop().await;

    let (store, table) = store_and_table().await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let store = PostgresStore::connect(database_url()).await.unwrap();
        let table = table.clone();
        // Slow enough that both replays are busy at once.
        let registration = Registration::transactional_raw(
            &scratch.subscription,
            store,
            async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
                write(tx, &table, std::str::from_utf8(&data).unwrap()).await?;
                actix_rt::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, leasehold_postgres::tokio_postgres::Error>(d.ack())
            },
        )
        .max_lease_extension(Duration::from_secs(10));
        let connector = scratch.connection.connect().await.unwrap();
        runs.push(
            leasehold::replay::replay(
                registration,
                &dead,
                leasehold::replay::ReplayOptions::new().idle(Duration::from_secs(3)),
                connector,
            )
            .await
            .unwrap(),
        );
    }
    let ends = futures::future::join_all(runs.into_iter().map(|r| r.finished())).await;
    let replayed: u64 = ends.iter().map(|e| e.replayed).sum();
    assert!(replayed >= N as u64, "{ends:?}");
    assert!(ends.iter().all(|e| e.still_failing == 0), "{ends:?}");
    assert_eq!(
        effects(&store, &table).await,
        (N as i64, N as i64),
        "each write once: {ends:?}"
    );
    scratch.cleanup().await;
}

/// The dedupe contract on PostgreSQL's claims: a publisher's two copies of one event (two message
/// ids) commit one write, for the single and the batch handler.
#[actix_rt::test]
async fn a_message_published_twice_commits_once_single_and_batch() {
    use leasehold_test_support::dedupe::published_twice_runs_once;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (store, table) = store_and_table().await;
    published_twice_runs_once(|subscription, runs: Arc<AtomicUsize>| {
        let table = table.clone();
        Registration::transactional_raw(
            subscription,
            store.clone(),
            async move |data: bytes::Bytes, d: Delivery, tx: &mut PgTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                write(tx, &table, std::str::from_utf8(&data).unwrap()).await?;
                Ok::<_, leasehold_postgres::tokio_postgres::Error>(d.ack())
            },
        )
    })
    .await;
    assert_eq!(
        effects(&store, &table).await,
        (2, 2),
        "order-7 once, and the keyless one"
    );

    let (store, table) = store_and_table().await;
    published_twice_runs_once(|subscription, runs: Arc<AtomicUsize>| {
        let table = table.clone();
        Registration::transactional_raw_batch(
            subscription,
            store.clone(),
            async move |batch: Batch<bytes::Bytes>, tx: &mut PgTransaction| {
                runs.fetch_add(batch.len(), Ordering::SeqCst);
                for item in &batch {
                    write(tx, &table, std::str::from_utf8(&item.payload).unwrap()).await?;
                }
                Ok::<_, leasehold_postgres::tokio_postgres::Error>(
                    BatchOutcome::all(Outcome::ack()),
                )
            },
        )
    })
    .await;
    assert_eq!(
        effects(&store, &table).await,
        (2, 2),
        "order-7 once, and the keyless one"
    );
}
