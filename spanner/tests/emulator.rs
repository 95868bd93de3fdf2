//! Transactional handlers on Spanner end to end: Google's Pub/Sub emulator (the one
//! `PUBSUB_EMULATOR_HOST` names, or one this binary starts) and Google's Spanner emulator
//! (`SPANNER_EMULATOR_HOST`, or one this binary starts). Each test makes its own topic,
//! subscription and database.
//!
//! The Spanner emulator runs one read-write transaction at a time and aborts a transaction
//! begun beside another: every test here meets aborts, and the handlers run again.

use leasehold::{Batch, BatchOutcome, Delivery, Outcome, Registration, Subscription};
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_spanner::{SpannerStore, SpannerTransaction, apply_ddl};
use leasehold_test_support::{Proxy, Scratch, eventually, spanner_database, spanner_endpoint};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "emulator/outbox.rs"]
mod outbox;

type SpannerResult<T> = Result<T, leasehold_spanner::gcloud_spanner::client::Error>;

/// A database of this test's own with an effects table (one row per write, so a duplicate
/// effect shows) and a counter, and a store on it.
async fn store_and_tables() -> SpannerStore {
    let database = spanner_database().await;
    apply_ddl(
        &spanner_endpoint(),
        &database,
        &[
            "CREATE TABLE effects (
                id STRING(36) NOT NULL,
                message_id STRING(MAX) NOT NULL,
                payload STRING(MAX) NOT NULL,
            ) PRIMARY KEY (id)",
            "CREATE TABLE counters (id STRING(16) NOT NULL, n INT64 NOT NULL) PRIMARY KEY (id)",
        ],
    )
    .await
    .unwrap();
    SpannerStore::connect_to(&spanner_endpoint(), &database, Duration::from_secs(30))
        .await
        .unwrap()
}

/// The handler's write: one effect row, in the message's transaction.
async fn write(tx: &mut SpannerTransaction, message_id: &str, payload: &str) -> SpannerResult<()> {
    let mut insert = Statement::new(
        "INSERT INTO effects (id, message_id, payload) VALUES (GENERATE_UUID(), @m, @p)",
    );
    insert.add_param("m", &message_id);
    insert.add_param("p", &payload);
    tx.update(insert).await?;
    Ok(())
}

/// Effect rows, and distinct payloads among them.
async fn effects(store: &SpannerStore) -> (i64, i64) {
    let mut tx = store.client().single().await.unwrap();
    let statement = Statement::new("SELECT COUNT(*), COUNT(DISTINCT payload) FROM effects");
    let mut rows = tx.query(statement).await.unwrap();
    let row = rows.next().await.unwrap().unwrap();
    (row.column(0).unwrap(), row.column(1).unwrap())
}

/// Polls until the effects table holds `n` rows; fails after `within`.
async fn effects_reach(store: &SpannerStore, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (rows, _) = effects(store).await;
        if rows >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of {n} effects after {within:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A handler that writes each payload in its transaction and acks.
fn writing_each_payload(subscription: &str, store: &SpannerStore) -> Registration {
    Registration::transactional_raw(
        subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
            write(tx, d.message_id(), std::str::from_utf8(&data).unwrap()).await?;
            SpannerResult::Ok(d.ack())
        },
    )
    .workers(4)
}

async fn acked(sub: &Subscription, n: u64, within: Duration) {
    eventually(&format!("{n} acks"), within, || sub.stats().acked >= n).await;
}

async fn each_message_commits_its_write_once(exactly_once: bool) {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(exactly_once)).await;
    let store = store_and_tables().await;
    let sub = leasehold::start(
        writing_each_payload(&scratch.subscription, &store),
        &scratch.connection,
    )
    .await
    .unwrap();
    scratch.publish_all((0..100).map(|n| n.to_string())).await;
    effects_reach(&store, 100, Duration::from_secs(120)).await;
    acked(&sub, 100, Duration::from_secs(60)).await;
    let stats = sub.stats();
    assert_eq!(stats.committed, 100, "{stats:?}");
    if exactly_once {
        eventually("100 confirmed", Duration::from_secs(30), || {
            sub.stats().confirmed >= 100
        })
        .await;
    }
    assert_eq!(effects(&store).await, (100, 100), "{stats:?}");
    println!(
        "exactly once {exactly_once}: 100 messages, {} committed, {} aborts run again, {} \
         retried",
        stats.committed, stats.store_aborts, stats.store_failures
    );
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
async fn a_retried_message_leaves_no_write_and_its_redelivery_commits_once() {
    let scratch = Scratch::new(|s| s).await;
    let store = store_and_tables().await;
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let r = runs.clone();
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |data: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
            let payload = std::str::from_utf8(&data).unwrap().to_string();
            write(tx, d.message_id(), &payload).await?;
            let run = {
                let mut runs = r.lock();
                let run = runs.entry(payload).or_default();
                *run += 1;
                *run
            };
            // After the write: a retry must take the write back with it.
            SpannerResult::Ok(if run == 1 { d.retry() } else { d.ack() })
        },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all((0..10).map(|n| n.to_string())).await;
    acked(&sub, 10, Duration::from_secs(120)).await;
    assert_eq!(effects(&store).await, (10, 10));
    assert!(runs.lock().values().all(|&n| n >= 2), "{:?}", runs.lock());
    sub.stop().await;
    scratch.cleanup().await;
}

/// Adds `by` to the counter in a transaction of its own, begun beside the handler's: it
/// commits once Spanner (the emulator) has aborted the handler's.
async fn add_beside(store: &SpannerStore, by: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = async {
            let mut tx = store
                .client()
                .begin_read_write_transaction()
                .await
                .map_err(|e| e.to_string())?;
            let mut add = Statement::new("UPDATE counters SET n = n + @by WHERE id = 'c'");
            add.add_param("by", &by);
            let updated = tx.update(add).await;
            tx.end(updated, None)
                .await
                .map(|_| ())
                .map_err(|e: gcloud_gax::grpc::Status| e.to_string())
        }
        .await;
        if committed.is_ok() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the other transaction never committed: {committed:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The counter's value.
async fn counter(store: &SpannerStore) -> i64 {
    let mut tx = store.client().single().await.unwrap();
    let mut rows = tx
        .query(Statement::new("SELECT n FROM counters WHERE id = 'c'"))
        .await
        .unwrap();
    rows.next().await.unwrap().unwrap().column(0).unwrap()
}

#[actix_rt::test]
async fn a_handler_whose_transaction_is_aborted_by_another_runs_again_and_commits_once() {
    let scratch = Scratch::new(|s| s).await;
    let store = store_and_tables().await;
    store
        .client()
        .apply(vec![leasehold_spanner::gcloud_spanner::mutation::insert(
            "counters",
            &["id", "n"],
            &[&"c", &0i64],
        )])
        .await
        .unwrap();
    let runs = Arc::new(Mutex::new(0u32));
    let (r, other) = (runs.clone(), store.clone());
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        store.clone(),
        async move |_: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
            let run = {
                let mut runs = r.lock();
                *runs += 1;
                *runs
            };
            let add = Statement::new("UPDATE counters SET n = n + 1 WHERE id = 'c'");
            tx.update(add).await?;
            if run == 1 {
                // Another transaction on the same row, begun while this one is open: the
                // emulator aborts one of the two until the other commits.
                add_beside(&other, 100).await;
                let read = Statement::new("SELECT n FROM counters WHERE id = 'c'");
                tx.query(read).await?;
            }
            SpannerResult::Ok(d.ack())
        },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all(["one".to_string()]).await;
    acked(&sub, 1, Duration::from_secs(60)).await;
    let stats = sub.stats();
    assert!(
        *runs.lock() >= 2,
        "run again after the abort: {} runs",
        runs.lock()
    );
    assert!(stats.store_aborts >= 1, "{stats:?}");
    assert_eq!((stats.committed, stats.store_failures), (1, 0), "{stats:?}");
    assert_eq!(
        counter(&store).await,
        101,
        "the handler's add once, the other's once"
    );
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_abort_past_max_aborts_is_a_counted_retry_and_the_redelivery_commits_once() {
    let scratch = Scratch::new(|s| s).await;
    let store = store_and_tables().await;
    store
        .client()
        .apply(vec![leasehold_spanner::gcloud_spanner::mutation::insert(
            "counters",
            &["id", "n"],
            &[&"c", &0i64],
        )])
        .await
        .unwrap();
    let runs = Arc::new(Mutex::new(0u32));
    let (r, other) = (runs.clone(), store.clone());
    let registration = Registration::transactional_raw(
        &scratch.subscription,
        // No run again after an abort: the message is retried instead.
        store.clone().max_aborts(0),
        async move |_: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
            let run = {
                let mut runs = r.lock();
                *runs += 1;
                *runs
            };
            let add = Statement::new("UPDATE counters SET n = n + 1 WHERE id = 'c'");
            tx.update(add).await?;
            if run == 1 {
                add_beside(&other, 100).await;
                let read = Statement::new("SELECT n FROM counters WHERE id = 'c'");
                tx.query(read).await?;
            }
            SpannerResult::Ok(d.ack())
        },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all(["one".to_string()]).await;
    acked(&sub, 1, Duration::from_secs(60)).await;
    let stats = sub.stats();
    assert_eq!(*runs.lock(), 2, "retried, then run on its redelivery");
    assert_eq!(
        (
            stats.store_aborts,
            stats.store_failures,
            stats.retried,
            stats.committed
        ),
        (1, 1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(
        counter(&store).await,
        101,
        "the handler's add once, the other's once"
    );
    sub.stop().await;
    scratch.cleanup().await;
}

/// A batch handler that writes every payload of its batch in one batch of DML statements and
/// acks them all.
fn writing_each_batch(subscription: &str, store: &SpannerStore) -> Registration {
    Registration::transactional_raw_batch(
        subscription,
        store.clone(),
        async move |batch: Batch<bytes::Bytes>, tx: &mut SpannerTransaction| {
            let inserts = batch
                .iter()
                .map(|item| {
                    let mut insert = Statement::new(
                        "INSERT INTO effects (id, message_id, payload) \
                         VALUES (GENERATE_UUID(), @m, @p)",
                    );
                    insert.add_param("m", &item.delivery.message_id());
                    insert.add_param("p", &std::str::from_utf8(&item.payload).unwrap());
                    insert
                })
                .collect();
            tx.batch_update(inserts).await?;
            SpannerResult::Ok(BatchOutcome::all(Outcome::ack()))
        },
    )
    .max_batch_messages(50)
}

#[actix_rt::test]
async fn two_replicas_write_each_batch_once() {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(true)).await;
    let store = store_and_tables().await;
    scratch.publish_all((0..300).map(|n| n.to_string())).await;
    // Two replicas: two subscriptions on the same Pub/Sub subscription, each with its own
    // client and sessions.
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let own = SpannerStore::connect_to(
            &spanner_endpoint(),
            store.database(),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let sub = leasehold::start(
            writing_each_batch(&scratch.subscription, &own),
            &scratch.connection,
        )
        .await
        .unwrap();
        replicas.push(sub);
    }
    effects_reach(&store, 300, Duration::from_secs(120)).await;
    eventually("300 acks", Duration::from_secs(60), || {
        replicas.iter().map(|s| s.stats().acked).sum::<u64>() >= 300
    })
    .await;
    assert_eq!(effects(&store).await, (300, 300));
    let total = |f: fn(&leasehold::status::StatsSnapshot) -> u64| {
        replicas.iter().map(|s| f(&s.stats())).sum::<u64>()
    };
    println!(
        "two replicas: 300 messages, {} committed, {} replayed, {} aborts, {} batches",
        total(|s| s.committed),
        total(|s| s.replayed),
        total(|s| s.store_aborts),
        total(|s| s.batches)
    );
    // Each message commits once at most; those whose ack was lost are replayed, not run.
    assert!(total(|s| s.committed) <= 300);
    for sub in replicas {
        sub.stop().await;
    }
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn spanner_gone_silent_mid_run_commits_nothing_twice_and_the_subscription_recovers() {
    let scratch = Scratch::new(|s| s).await;
    let store = store_and_tables().await;
    // The subscription's store reaches Spanner through a proxy that can go silent.
    let leasehold_spanner::Endpoint::Emulator(host) = spanner_endpoint() else {
        panic!("the tests run on the emulator")
    };
    let proxy = Proxy::start(&host);
    let through = SpannerStore::connect_to(
        &leasehold_spanner::Endpoint::Emulator(proxy.host()),
        store.database(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let sub = leasehold::start(
        writing_each_payload(&scratch.subscription, &through),
        &scratch.connection,
    )
    .await
    .unwrap();
    scratch.publish_all((0..60).map(|n| n.to_string())).await;
    effects_reach(&store, 10, Duration::from_secs(60)).await;
    proxy.black_hole();
    eventually(
        "a store failure while Spanner is silent",
        Duration::from_secs(60),
        || sub.stats().store_failures > 0,
    )
    .await;
    let during = effects(&store).await;
    proxy.accept();
    effects_reach(&store, 60, Duration::from_secs(180)).await;
    acked(&sub, 60, Duration::from_secs(60)).await;
    let stats = sub.stats();
    println!(
        "silent mid-run: {} effects before the silence, {} store failures, {} aborts, \
         60 committed once each",
        during.0, stats.store_failures, stats.store_aborts
    );
    assert_eq!(effects(&store).await, (60, 60), "{stats:?}");
    sub.stop().await;
    scratch.cleanup().await;
}

/// The dedupe contract on Spanner's claims: a publisher's two copies of one event (two message
/// ids) commit one write, with the transactional single and batch handlers and with the claims
/// table as a plain progress store (`SpannerProgress`).
#[actix_rt::test]
async fn a_message_published_twice_commits_once_single_batch_and_plain() {
    use leasehold_test_support::dedupe::published_twice_runs_once;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let store = store_and_tables().await;
    published_twice_runs_once(|subscription, runs: Arc<AtomicUsize>| {
        Registration::transactional_raw(
            subscription,
            store.clone(),
            async move |data: bytes::Bytes, d: Delivery, tx: &mut SpannerTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                write(tx, d.message_id(), std::str::from_utf8(&data).unwrap()).await?;
                SpannerResult::Ok(d.ack())
            },
        )
    })
    .await;
    assert_eq!(
        effects(&store).await,
        (2, 2),
        "order-7 once, and the keyless one"
    );

    let store = store_and_tables().await;
    published_twice_runs_once(|subscription, runs: Arc<AtomicUsize>| {
        Registration::transactional_raw_batch(
            subscription,
            store.clone(),
            async move |batch: Batch<bytes::Bytes>, tx: &mut SpannerTransaction| {
                runs.fetch_add(batch.len(), Ordering::SeqCst);
                for item in &batch {
                    let payload = std::str::from_utf8(&item.payload).unwrap();
                    write(tx, item.delivery.message_id(), payload).await?;
                }
                SpannerResult::Ok(BatchOutcome::all(Outcome::ack()))
            },
        )
    })
    .await;
    assert_eq!(
        effects(&store).await,
        (2, 2),
        "order-7 once, and the keyless one"
    );

    let store = store_and_tables().await;
    published_twice_runs_once(|subscription, runs: Arc<AtomicUsize>| {
        Registration::raw(subscription, move |_, d: Delivery| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { d.ack() }
        })
        .progress_store(store.progress(subscription))
    })
    .await;
}
