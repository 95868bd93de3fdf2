//! The PostgreSQL store against a real PostgreSQL: the one `DATABASE_URL` names, or a throwaway
//! cluster this test binary starts (and deletes) on a free port. Each test uses its own
//! subscription name and effects table.

use leasehold_actors::{Claim, Completed, TransactionalStore};
use leasehold_postgres::{PgTransaction, PostgresError, PostgresStore};
use leasehold_test_support::{database_url, unique_sql_name};
use std::time::{Duration, Instant};

/// A store, a subscription name of its own and an effects table of its own.
async fn setup() -> (PostgresStore, String, String) {
    let store = PostgresStore::connect(database_url()).await.unwrap();
    let table = unique_sql_name("effects");
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("CREATE TABLE {table} (message_id text NOT NULL)"))
        .await
        .unwrap();
    (store, unique_sql_name("projects/p/subscriptions/s"), table)
}

async fn claimed(store: &PostgresStore, subscription: &str, id: &str) -> PgTransaction {
    match store.begin(subscription, id).await.unwrap() {
        Claim::Claimed(tx) => tx,
        Claim::Finished(done) => panic!("{id} was finished before ({done:?})"),
    }
}

async fn effect(tx: &PgTransaction, table: &str) {
    tx.execute(
        &format!("INSERT INTO {table} (message_id) VALUES ($1)"),
        &[&tx.message_id()],
    )
    .await
    .unwrap();
}

async fn effects(store: &PostgresStore, table: &str) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Polls until another session waits for a lock; fails after 10 s.
async fn someone_waits_for_a_lock(store: &PostgresStore) {
    let client = store.pool().get().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no claim waited for the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_committed_message_is_finished_for_every_later_claim() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "1").await;
    effect(&tx, &table).await;
    store.commit(tx, Completed::Acked).await.unwrap();
    // Another store (another replica) sees it too.
    let other = PostgresStore::connect(database_url()).await.unwrap();
    match other.begin(&sub, "1").await.unwrap() {
        Claim::Finished(done) => assert_eq!(done, Completed::Acked),
        Claim::Claimed(_) => panic!("claimed a committed message again"),
    }
    assert_eq!(effects(&store, &table).await, 1);
    assert_eq!(
        store.completed(&sub, "1").await.unwrap(),
        Some(Completed::Acked)
    );
    // Records are per subscription: the same id elsewhere is not finished.
    let elsewhere = format!("{sub}-other");
    let tx = claimed(&store, &elsewhere, "1").await;
    store.rollback(tx).await;
}

#[tokio::test]
async fn drop_is_recorded_as_dropped() {
    let (store, sub, _) = setup().await;
    let tx = claimed(&store, &sub, "7").await;
    store.commit(tx, Completed::Dropped).await.unwrap();
    match store.begin(&sub, "7").await.unwrap() {
        Claim::Finished(done) => assert_eq!(done, Completed::Dropped),
        Claim::Claimed(_) => panic!("claimed a dropped message again"),
    }
}

#[tokio::test]
async fn a_rollback_leaves_nothing_and_the_next_claim_runs() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "2").await;
    effect(&tx, &table).await;
    store.rollback(tx).await;
    assert_eq!(effects(&store, &table).await, 0);
    assert_eq!(store.completed(&sub, "2").await.unwrap(), None);
    let tx = claimed(&store, &sub, "2").await;
    store.rollback(tx).await;
}

#[tokio::test]
async fn a_transaction_dropped_unfinished_is_rolled_back_by_the_server() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "3").await;
    effect(&tx, &table).await;
    drop(tx); // as when a stop cuts the handler: the connection is closed, not pooled
    // The claim waits for the server to notice, then takes over.
    let tx = claimed(&store, &sub, "3").await;
    assert_eq!(effects(&store, &table).await, 0);
    store.rollback(tx).await;
    // The pool still works.
    assert_eq!(store.completed(&sub, "3").await.unwrap(), None);
}

#[actix_rt::test]
async fn two_claims_at_once_never_both_commit() {
    let (store, sub, table) = setup().await;
    let first = claimed(&store, &sub, "4").await;
    effect(&first, &table).await;
    // A second replica gets the same message now: its claim waits for the first transaction.
    let second = {
        let store = store.clone();
        let sub = sub.clone();
        tokio::task::spawn_local(async move { store.begin(&sub, "4").await })
    };
    someone_waits_for_a_lock(&store).await;
    assert!(!second.is_finished(), "the second claim did not wait");
    store.commit(first, Completed::Acked).await.unwrap();
    match second.await.unwrap().unwrap() {
        Claim::Finished(done) => assert_eq!(done, Completed::Acked),
        Claim::Claimed(_) => panic!("both claimed the message"),
    }
    assert_eq!(effects(&store, &table).await, 1);
}

#[actix_rt::test]
async fn a_claim_waiting_on_a_rolled_back_transaction_takes_over() {
    let (store, sub, table) = setup().await;
    let first = claimed(&store, &sub, "5").await;
    effect(&first, &table).await;
    let second = {
        let store = store.clone();
        let sub = sub.clone();
        tokio::task::spawn_local(async move { store.begin(&sub, "5").await })
    };
    someone_waits_for_a_lock(&store).await;
    store.rollback(first).await;
    let Claim::Claimed(tx) = second.await.unwrap().unwrap() else {
        panic!("the message was not finished: the second claim must take it");
    };
    effect(&tx, &table).await;
    store.commit(tx, Completed::Acked).await.unwrap();
    assert_eq!(effects(&store, &table).await, 1);
}

#[tokio::test]
async fn a_claim_gives_up_after_the_claim_timeout() {
    let (store, sub, _) = setup().await;
    let first = claimed(&store, &sub, "6").await;
    let impatient = PostgresStore::connect(database_url())
        .await
        .unwrap()
        .claim_timeout(Duration::from_millis(200));
    let error = impatient.begin(&sub, "6").await.unwrap_err();
    let text = format!("{error:?}");
    assert!(text.contains("lock"), "{text}");
    // A conflict, not an outage: retried at once, no backoff.
    assert!(
        matches!(error, leasehold_actors::StoreError::Busy(_)),
        "{text}"
    );
    store.rollback(first).await;
}

#[tokio::test]
async fn a_handler_that_commits_by_itself_does_not_mark_its_message_finished() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "11").await;
    effect(&tx, &table).await;
    // Against the documentation: the handler commits, then returns retry() (a rollback).
    tx.batch_execute("COMMIT").await.unwrap();
    store.rollback(tx).await;
    assert_eq!(store.completed(&sub, "11").await.unwrap(), None);
    // The redelivery runs: its claim takes over the row the handler committed.
    let tx = claimed(&store, &sub, "11").await;
    store.commit(tx, Completed::Acked).await.unwrap();
    assert_eq!(
        store.completed(&sub, "11").await.unwrap(),
        Some(Completed::Acked)
    );
}

#[tokio::test]
async fn the_claim_timeout_bounds_the_claim_only_and_any_length_is_taken() {
    let (_, sub, _) = setup().await;
    for timeout in [
        Duration::from_millis(200),
        Duration::ZERO,
        Duration::from_secs(30 * 86_400),
    ] {
        let store = PostgresStore::connect(database_url())
            .await
            .unwrap()
            .claim_timeout(timeout);
        let id = format!("12-{}", timeout.as_millis());
        let tx = claimed(&store, &sub, &id).await;
        // What the handler's statements get: the session's lock timeout (0: wait).
        let row = tx.query_one("SHOW lock_timeout", &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "0", "claim timeout {timeout:?}");
        store.rollback(tx).await;
    }
}

#[tokio::test]
async fn the_probe_is_answered() {
    let (store, _, _) = setup().await;
    store.probe().await.unwrap();
}

#[tokio::test]
async fn a_failed_statement_makes_the_commit_fail_and_records_nothing() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "8").await;
    effect(&tx, &table).await;
    // The handler's statement fails (and the handler returns ack anyway).
    assert!(
        tx.execute("SELECT * FROM no_such_table", &[])
            .await
            .is_err()
    );
    assert!(store.commit(tx, Completed::Acked).await.is_err());
    assert_eq!(effects(&store, &table).await, 0);
    assert_eq!(store.completed(&sub, "8").await.unwrap(), None);
    let tx = claimed(&store, &sub, "8").await;
    store.rollback(tx).await;
}

#[tokio::test]
async fn records_expire_after_the_ttl_of_their_writer_and_sweep_deletes_them() {
    let (store, sub, _) = setup().await;
    let forgetful = PostgresStore::connect(database_url())
        .await
        .unwrap()
        .ttl(Duration::ZERO);
    let tx = claimed(&forgetful, &sub, "9").await;
    forgetful.commit(tx, Completed::Acked).await.unwrap();
    // Expired at once, for every store: the writer's time to live counts.
    assert_eq!(store.completed(&sub, "9").await.unwrap(), None);
    let tx = claimed(&store, &sub, "9").await;
    store.commit(tx, Completed::Acked).await.unwrap();
    // Now kept for a day, whoever sweeps.
    forgetful.sweep().await.unwrap();
    assert_eq!(
        store.completed(&sub, "9").await.unwrap(),
        Some(Completed::Acked)
    );

    let tx = claimed(&forgetful, &sub, "10").await;
    forgetful.commit(tx, Completed::Acked).await.unwrap();
    // Deleted by this sweep, or by the one a claim started in the background already.
    forgetful.sweep().await.unwrap();
    let client = store.pool().get().await.unwrap();
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM leasehold_progress WHERE subscription = $1 AND message_id = '10'",
            &[&sub],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn replicas_connecting_together_migrate_once() {
    let connects: Vec<_> = (0..4)
        .map(|_| PostgresStore::connect(database_url()))
        .collect();
    for store in futures::future::join_all(connects).await {
        store.unwrap();
    }
    let store = PostgresStore::connect(database_url()).await.unwrap();
    let client = store.pool().get().await.unwrap();
    let rows = client
        .query("SELECT version FROM leasehold_schema", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 2);
}

#[tokio::test]
async fn a_schema_from_a_newer_leasehold_is_refused() {
    // A database of its own, so the others keep theirs.
    let admin = PostgresStore::connect(database_url()).await.unwrap();
    let db = unique_sql_name("newer");
    admin
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let mut config: leasehold_postgres::tokio_postgres::Config = database_url().parse().unwrap();
    config.dbname(&db);
    let (client, connection) = config
        .connect(leasehold_postgres::tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE leasehold_schema (version integer NOT NULL);
             INSERT INTO leasehold_schema VALUES (99);",
        )
        .await
        .unwrap();
    let pool = leasehold_postgres::deadpool_postgres::Pool::builder(
        leasehold_postgres::deadpool_postgres::Manager::new(
            config,
            leasehold_postgres::tokio_postgres::NoTls,
        ),
    )
    .build()
    .unwrap();
    let error = PostgresStore::with_pool(pool).await.unwrap_err();
    assert!(
        matches!(
            error,
            PostgresError::NewerSchema {
                found: 99,
                supported: 2
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("upgrade Leasehold"), "{error}");
}
