//! The PostgreSQL store against a real PostgreSQL: the one `DATABASE_URL` names, or a throwaway
//! cluster this test binary starts (and deletes) on a free port. Each test uses its own
//! subscription name and effects table.

use leasehold_actors::{
    error::StoreError,
    store::{
        BatchClaim, BatchClaims, Claim, Completed, TransactionalBatchStore, TransactionalStore,
    },
};
use leasehold_postgres::{PgTransaction, PostgresError, PostgresStore};
use leasehold_test_support::{database_url, unique_sql_name};
use std::sync::Arc;
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
        matches!(error, leasehold_actors::error::StoreError::Busy(_)),
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
    // Now kept for a week, whoever sweeps.
    forgetful.sweep().await.unwrap();
    assert_eq!(
        store.completed(&sub, "9").await.unwrap(),
        Some(Completed::Acked)
    );

    let tx = claimed(&forgetful, &sub, "10").await;
    forgetful.commit(tx, Completed::Acked).await.unwrap();
    // Deleted by this sweep, or by the one a claim started in the background already: a sweep
    // skips a row another sweep holds (SKIP LOCKED), so when the background one holds it, it is
    // gone once that one commits. Poll for it, sweeping again.
    forgetful.sweep().await.unwrap();
    let client = store.pool().get().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut left: i64 = 1;
    while std::time::Instant::now() < deadline {
        left = client
            .query_one(
                "SELECT count(*) FROM leasehold_progress WHERE subscription = $1 AND message_id = '10'",
                &[&sub],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        forgetful.sweep().await.unwrap();
    }
    assert_eq!(left, 0, "the expired record was swept");
}

#[tokio::test]
async fn a_sweep_deletes_in_batches_until_nothing_expired_is_left_and_skips_a_held_row() {
    let (store, sub, _) = setup().await;
    let client = store.pool().get().await.unwrap();
    // 2,500 expired records: three statements of at most a thousand.
    client
        .execute(
            "INSERT INTO leasehold_progress (subscription, message_id, outcome, expires_at) \
             SELECT $1, 'swept-' || n, 'acked', now() - interval '1 minute' \
             FROM generate_series(1, 2500) AS n",
            &[&sub],
        )
        .await
        .unwrap();
    // One more, expired and locked by another session (as a claim taking it over locks it): a
    // sweep skips it, it does not wait for it.
    let held = expired_record(&store, &sub, "held").await;
    client
        .execute(
            "UPDATE leasehold_progress SET expires_at = now() - interval '1 minute' \
             WHERE subscription = $1 AND message_id = 'held'",
            &[&sub],
        )
        .await
        .unwrap();
    let deleted = store.sweep().await.unwrap();
    let left = |client: leasehold_postgres::deadpool_postgres::Object, sub: String| async move {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM leasehold_progress WHERE subscription = $1",
                &[&sub],
            )
            .await
            .unwrap()
            .get(0);
        n
    };
    // Another test's store may have swept some of them in the background first.
    assert!(deleted <= 2500 + 1, "{deleted}");
    let others = store.pool().get().await.unwrap();
    assert_eq!(
        left(others, sub.clone()).await,
        1,
        "only the held one is left"
    );
    held.batch_execute("ROLLBACK").await.unwrap();
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
    assert_eq!(
        rows[0].get::<_, i32>(0),
        3,
        "every step applied once (3: the outbox)"
    );
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
                supported: 3
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("upgrade Leasehold"), "{error}");
}

// Batches: `TransactionalBatchStore`.

fn ids(ids: &[&str]) -> Vec<Arc<str>> {
    ids.iter().map(|&id| Arc::from(id)).collect()
}

/// Claims a batch; fails if it waits longer than 10 s (every claim timeout here is a minute: a
/// batch must never wait on another transaction's claim).
async fn batch(
    store: &PostgresStore,
    subscription: &str,
    asked: &[&str],
) -> BatchClaims<PgTransaction> {
    let claiming = store.begin_batch(subscription, &ids(asked));
    tokio::time::timeout(Duration::from_secs(10), claiming)
        .await
        .expect("the batch claim waited")
        .unwrap()
}

/// The batch's write: one row per message it claimed, in one multi-row INSERT.
async fn batch_effects(tx: &PgTransaction, table: &str) {
    let claimed: Vec<&str> = tx.message_ids().iter().map(|id| &**id).collect();
    tx.execute(
        &format!("INSERT INTO {table} (message_id) SELECT * FROM unnest($1::text[])"),
        &[&claimed],
    )
    .await
    .unwrap();
}

/// Rows left in `leasehold_progress` for `id` of `subscription`, whatever their outcome.
async fn records(store: &PostgresStore, subscription: &str, id: &str) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        .query_one(
            "SELECT count(*) FROM leasehold_progress WHERE subscription = $1 AND message_id = $2",
            &[&subscription, &id],
        )
        .await
        .unwrap()
        .get(0)
}

/// A record of `id`, acked, kept from the sweeps (which delete expired records, and run in the
/// background of every store's claims) by the returned session's key-share lock on it, until
/// that session rolls back: a claim's takeover updates no key column and goes ahead, a sweep
/// skips it (its rows are chosen `FOR UPDATE SKIP LOCKED`).
async fn expired_record(
    store: &PostgresStore,
    subscription: &str,
    id: &str,
) -> leasehold_postgres::deadpool_postgres::Object {
    let client = store.pool().get().await.unwrap();
    client
        .execute(
            "INSERT INTO leasehold_progress (subscription, message_id, outcome, expires_at) \
             VALUES ($1, $2, 'acked', now() + interval '1 hour')",
            &[&subscription, &id],
        )
        .await
        .unwrap();
    let kept = store.pool().get().await.unwrap();
    kept.batch_execute("BEGIN").await.unwrap();
    kept.execute(
        "SELECT 1 FROM leasehold_progress WHERE subscription = $1 AND message_id = $2 \
         FOR KEY SHARE",
        &[&subscription, &id],
    )
    .await
    .unwrap();
    client
        .execute(
            "UPDATE leasehold_progress SET expires_at = now() - interval '1 hour' \
             WHERE subscription = $1 AND message_id = $2",
            &[&subscription, &id],
        )
        .await
        .unwrap();
    assert_eq!(store.completed(subscription, id).await.unwrap(), None);
    kept
}

#[tokio::test]
async fn a_batch_claims_every_new_message_in_one_transaction() {
    let (store, sub, table) = setup().await;
    let claims = batch(&store, &sub, &["1", "2", "3", "4"]).await;
    assert_eq!(claims.claims, vec![BatchClaim::Claimed; 4]);
    let tx = claims
        .transaction
        .expect("claimed: a transaction to run in");
    assert_eq!(tx.message_ids(), &ids(&["1", "2", "3", "4"])[..]);
    batch_effects(&tx, &table).await;
    let finished = ids(&["1", "2", "3", "4"])
        .into_iter()
        .map(|id| (id, Completed::Acked))
        .collect();
    store.commit_batch(tx, finished, Vec::new()).await.unwrap();
    assert_eq!(effects(&store, &table).await, 4);
    for id in ["1", "2", "3", "4"] {
        assert_eq!(
            store.completed(&sub, id).await.unwrap(),
            Some(Completed::Acked)
        );
    }
    // Redelivered, to this replica or another: every message is finished, nothing is claimed.
    let other = PostgresStore::connect(database_url()).await.unwrap();
    let again = batch(&other, &sub, &["3", "1"]).await;
    assert_eq!(
        again.claims,
        vec![BatchClaim::Finished(Completed::Acked); 2]
    );
    assert!(again.transaction.is_none());
}

#[tokio::test]
async fn finished_messages_come_back_finished_and_the_rest_are_claimed() {
    let (store, sub, table) = setup().await;
    let tx = claimed(&store, &sub, "acked").await;
    store.commit(tx, Completed::Acked).await.unwrap();
    let tx = claimed(&store, &sub, "dropped").await;
    store.commit(tx, Completed::Dropped).await.unwrap();
    let claims = batch(
        &store,
        &sub,
        &["acked", "new", "dropped", "new", "also new"],
    )
    .await;
    assert_eq!(
        claims.claims,
        vec![
            BatchClaim::Finished(Completed::Acked),
            BatchClaim::Claimed,
            BatchClaim::Finished(Completed::Dropped),
            // Asked twice: claimed once, the second ask waits on the first.
            BatchClaim::Busy,
            BatchClaim::Claimed,
        ]
    );
    let tx = claims.transaction.unwrap();
    assert_eq!(tx.message_ids(), &ids(&["new", "also new"])[..]);
    assert_eq!(tx.message_id(), "new");
    batch_effects(&tx, &table).await;
    store.rollback(tx).await;
    assert_eq!(effects(&store, &table).await, 0);
}

#[actix_rt::test]
async fn a_message_another_open_transaction_claims_is_busy_at_once() {
    let (store, sub, table) = setup().await;
    // Held by a single claim (a new row, uncommitted), and by a single claim that took over an
    // expired record (a row lock on an existing row).
    let kept = expired_record(&store, &sub, "expired").await;
    let inserting = claimed(&store, &sub, "inserted").await;
    let taking_over = claimed(&store, &sub, "expired").await;
    // Taken over: the claim's row lock keeps it now.
    kept.batch_execute("ROLLBACK").await.unwrap();
    let other = PostgresStore::connect(database_url()).await.unwrap();
    let started = Instant::now();
    let claims = batch(&other, &sub, &["inserted", "free", "expired"]).await;
    assert_eq!(
        claims.claims,
        vec![BatchClaim::Busy, BatchClaim::Claimed, BatchClaim::Busy]
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the batch waited {:?} (the claim timeout is a minute)",
        started.elapsed()
    );
    let held_by_batch = claims.transaction.unwrap();
    // The other way round: a single claim of what the batch holds waits for the batch.
    let single = {
        let store = store.clone();
        let sub = sub.clone();
        tokio::task::spawn_local(async move { store.begin(&sub, "free").await })
    };
    someone_waits_for_a_lock(&store).await;
    assert!(!single.is_finished(), "the single claim did not wait");
    // So does another batch: busy.
    let claims = batch(&store, &sub, &["free"]).await;
    assert_eq!(claims.claims, vec![BatchClaim::Busy]);
    assert!(claims.transaction.is_none());
    batch_effects(&held_by_batch, &table).await;
    other
        .commit_batch(
            held_by_batch,
            vec![(Arc::from("free"), Completed::Acked)],
            Vec::new(),
        )
        .await
        .unwrap();
    match single.await.unwrap().unwrap() {
        Claim::Finished(done) => assert_eq!(done, Completed::Acked),
        Claim::Claimed(_) => panic!("both claimed the message"),
    }
    // Once the single claims end, a batch gets them: one finished, one free again.
    store.commit(inserting, Completed::Dropped).await.unwrap();
    store.rollback(taking_over).await;
    let claims = batch(&other, &sub, &["inserted", "expired"]).await;
    assert_eq!(
        claims.claims,
        vec![
            BatchClaim::Finished(Completed::Dropped),
            BatchClaim::Claimed
        ]
    );
    other.rollback(claims.transaction.unwrap()).await;
    assert_eq!(effects(&store, &table).await, 1);
}

#[actix_rt::test]
async fn a_message_finished_while_the_batch_claims_comes_back_finished() {
    let (store, sub, _) = setup().await;
    // A record the batch takes over first (committed still claimed, by a handler that ran
    // COMMIT itself), locked meanwhile by another session, as a sweep deleting an expired record
    // would: the batch's statement waits there, after its snapshot was taken.
    let tx = claimed(&store, &sub, "left claimed").await;
    tx.batch_execute("COMMIT").await.unwrap();
    store.rollback(tx).await;
    let sweeper = store.pool().get().await.unwrap();
    sweeper.batch_execute("BEGIN").await.unwrap();
    sweeper
        .execute(
            "SELECT 1 FROM leasehold_progress \
             WHERE subscription = $1 AND message_id = 'left claimed' FOR UPDATE",
            &[&sub],
        )
        .await
        .unwrap();
    let single = claimed(&store, &sub, "finishing").await;
    let claiming = {
        let store = store.clone();
        let sub = sub.clone();
        tokio::task::spawn_local(async move {
            store
                .begin_batch(&sub, &ids(&["left claimed", "finishing"]))
                .await
        })
    };
    someone_waits_for_a_lock(&store).await;
    // Committed after the batch's snapshot, before the batch tries its lock.
    store.commit(single, Completed::Dropped).await.unwrap();
    sweeper.batch_execute("ROLLBACK").await.unwrap();
    let claims = claiming.await.unwrap().unwrap();
    assert_eq!(
        claims.claims,
        vec![
            BatchClaim::Claimed,
            BatchClaim::Finished(Completed::Dropped)
        ]
    );
    let tx = claims.transaction.unwrap();
    assert_eq!(tx.message_ids(), &ids(&["left claimed"])[..]);
    store
        .commit_batch(
            tx,
            vec![(Arc::from("left claimed"), Completed::Acked)],
            Vec::new(),
        )
        .await
        .unwrap();
    // The finished record is as its commit left it.
    assert_eq!(
        store.completed(&sub, "finishing").await.unwrap(),
        Some(Completed::Dropped)
    );
    assert_eq!(
        store.completed(&sub, "left claimed").await.unwrap(),
        Some(Completed::Acked)
    );
}

#[tokio::test]
async fn a_batch_takes_over_expired_records_and_claims_a_handler_committed_itself() {
    let (store, sub, _) = setup().await;
    let kept = expired_record(&store, &sub, "expired").await;
    // Against the documentation: the handler commits, then returns retry() (a rollback).
    let tx = claimed(&store, &sub, "committed claimed").await;
    tx.batch_execute("COMMIT").await.unwrap();
    store.rollback(tx).await;
    let claims = batch(&store, &sub, &["expired", "committed claimed"]).await;
    kept.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(claims.claims, vec![BatchClaim::Claimed; 2]);
    let finished = vec![
        (Arc::from("expired"), Completed::Dropped),
        (Arc::from("committed claimed"), Completed::Acked),
    ];
    store
        .commit_batch(claims.transaction.unwrap(), finished, Vec::new())
        .await
        .unwrap();
    assert_eq!(
        store.completed(&sub, "expired").await.unwrap(),
        Some(Completed::Dropped)
    );
    assert_eq!(
        store.completed(&sub, "committed claimed").await.unwrap(),
        Some(Completed::Acked)
    );
}

#[tokio::test]
async fn commit_batch_records_each_outcome_and_releases_the_other_claims() {
    let (store, sub, table) = setup().await;
    let claims = batch(&store, &sub, &["ack", "drop", "retry", "no outcome"]).await;
    assert_eq!(claims.claims, vec![BatchClaim::Claimed; 4]);
    let tx = claims.transaction.unwrap();
    batch_effects(&tx, &table).await;
    let finished = vec![
        (Arc::from("ack"), Completed::Acked),
        (Arc::from("drop"), Completed::Dropped),
        // Not this transaction's claim: ignored.
        (Arc::from("someone else's"), Completed::Acked),
    ];
    store
        .commit_batch(tx, finished, ids(&["retry"]))
        .await
        .unwrap();
    // The handler's writes committed (all four rows: what it writes is its business).
    assert_eq!(effects(&store, &table).await, 4);
    assert_eq!(
        store.completed(&sub, "ack").await.unwrap(),
        Some(Completed::Acked)
    );
    assert_eq!(
        store.completed(&sub, "drop").await.unwrap(),
        Some(Completed::Dropped)
    );
    for released in ["retry", "no outcome", "someone else's"] {
        assert_eq!(records(&store, &sub, released).await, 0, "{released}");
    }
    // The redelivery claims the released ones again.
    let again = batch(&store, &sub, &["retry", "ack", "no outcome", "drop"]).await;
    assert_eq!(
        again.claims,
        vec![
            BatchClaim::Claimed,
            BatchClaim::Finished(Completed::Acked),
            BatchClaim::Claimed,
            BatchClaim::Finished(Completed::Dropped),
        ]
    );
    store.rollback(again.transaction.unwrap()).await;
}

#[tokio::test]
async fn a_failed_batch_commit_leaves_nothing() {
    let (store, sub, table) = setup().await;
    let claims = batch(&store, &sub, &["1", "2"]).await;
    let tx = claims.transaction.unwrap();
    batch_effects(&tx, &table).await;
    // The handler's statement fails (and the handler acks every message anyway).
    assert!(
        tx.execute("SELECT * FROM no_such_table", &[])
            .await
            .is_err()
    );
    let finished = ids(&["1", "2"])
        .into_iter()
        .map(|id| (id, Completed::Acked))
        .collect();
    assert!(store.commit_batch(tx, finished, Vec::new()).await.is_err());
    assert_eq!(effects(&store, &table).await, 0);
    for id in ["1", "2"] {
        assert_eq!(records(&store, &sub, id).await, 0);
    }
    let again = batch(&store, &sub, &["1", "2"]).await;
    assert_eq!(again.claims, vec![BatchClaim::Claimed; 2]);
    store.rollback(again.transaction.unwrap()).await;
}

#[tokio::test]
async fn batches_overlapping_from_two_replicas_never_both_claim_a_message() {
    let (store, sub, table) = setup().await;
    let other = PostgresStore::connect(database_url()).await.unwrap();
    let mut claimed_once = 0;
    for round in 0..20 {
        // 0..60 against 30..90, the second in reverse order: 30 messages asked by both.
        let first: Vec<String> = (0..60).map(|n| format!("{round}-{n}")).collect();
        let second: Vec<String> = (30..90).rev().map(|n| format!("{round}-{n}")).collect();
        let first_ids: Vec<&str> = first.iter().map(String::as_str).collect();
        let second_ids: Vec<&str> = second.iter().map(String::as_str).collect();
        let run = async |store: &PostgresStore, asked: &[&str]| {
            let claims = batch(store, &sub, asked).await;
            let mine: Vec<String> = asked
                .iter()
                .zip(&claims.claims)
                .filter(|(_, c)| **c == BatchClaim::Claimed)
                .map(|(id, _)| id.to_string())
                .collect();
            if let Some(tx) = claims.transaction {
                batch_effects(&tx, &table).await;
                let finished = tx
                    .message_ids()
                    .iter()
                    .map(|id| (id.clone(), Completed::Acked))
                    .collect();
                store.commit_batch(tx, finished, Vec::new()).await.unwrap();
            }
            (mine, claims.claims)
        };
        let ((a, a_claims), (b, b_claims)) =
            futures::join!(run(&store, &first_ids), run(&other, &second_ids));
        let both: Vec<&String> = a.iter().filter(|id| b.contains(id)).collect();
        assert!(both.is_empty(), "round {round}: claimed by both: {both:?}");
        // Each message asked by only one batch is claimed by it.
        assert!(a_claims[..30].iter().all(|c| *c == BatchClaim::Claimed));
        assert!(b_claims[..30].iter().all(|c| *c == BatchClaim::Claimed));
        claimed_once += a.len() + b.len();
    }
    // Every message claimed by exactly one batch (the other found it busy or finished), its row
    // written once.
    assert_eq!(claimed_once, 20 * 90);
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one(
            &format!("SELECT count(*), count(DISTINCT message_id) FROM {table}"),
            &[],
        )
        .await
        .unwrap();
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, distinct, "a message written twice");
    assert_eq!(rows, claimed_once as i64);
}

#[tokio::test]
async fn a_batch_waits_out_a_claim_without_the_advisory_lock_then_is_busy() {
    // A claim by a Leasehold from before batches (no advisory lock): the batch's INSERT waits on
    // its row, up to the claim timeout; then the whole batch is retried, as a conflict.
    let (store, sub, _) = setup().await;
    let old = store.pool().get().await.unwrap();
    old.batch_execute(&format!(
        "BEGIN; INSERT INTO leasehold_progress (subscription, message_id, outcome, expires_at) \
         VALUES ('{sub}', 'old', 'claimed', now() + interval '1 hour')"
    ))
    .await
    .unwrap();
    let impatient = PostgresStore::connect(database_url())
        .await
        .unwrap()
        .claim_timeout(Duration::from_millis(200));
    let error = impatient
        .begin_batch(&sub, &ids(&["new", "old"]))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    old.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(records(&store, &sub, "new").await, 0);
}
