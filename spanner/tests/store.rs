//! `SpannerStore` on Google's Spanner emulator (the one `SPANNER_EMULATOR_HOST` names, or one
//! this binary starts), without Pub/Sub: connecting and its errors, the migration step, claims,
//! commits, and two replicas contending for one message. Each test makes its own database.

use leasehold::store::{BatchClaim, Claim, Completed, TransactionalBatchStore, TransactionalStore};
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_spanner::{Endpoint, Migrated, SpannerError, SpannerStore, apply_ddl, migrate};
use leasehold_test_support::{
    Proxy, free_port, new_spanner_database, spanner_database, spanner_endpoint,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn store(database: &str) -> SpannerStore {
    SpannerStore::connect_to(&spanner_endpoint(), database, TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {database}: {e}"))
}

#[tokio::test]
async fn an_unreachable_emulator_is_a_clear_error_within_the_timeout() {
    let endpoint = Endpoint::Emulator(format!("127.0.0.1:{}", free_port()));
    let began = Instant::now();
    let result = SpannerStore::connect_to(
        &endpoint,
        "projects/p/instances/i/databases/d",
        Duration::from_secs(3),
    )
    .await;
    let error = result.expect_err("nothing listens there");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    let text = error.to_string();
    assert!(matches!(error, SpannerError::Unreachable { .. }), "{text}");
    assert!(
        text.contains("127.0.0.1") || text.contains("Spanner"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_database_and_a_missing_table_say_what_to_do() {
    let missing = "projects/leasehold/instances/leasehold/databases/not_there";
    // The instance exists once any database was made in it.
    let database = new_spanner_database().await;
    let error = SpannerStore::connect_to(&spanner_endpoint(), missing, TIMEOUT)
        .await
        .expect_err("no such database");
    assert!(
        matches!(error, SpannerError::DatabaseNotFound(_)),
        "{error}: {error:?}"
    );
    let error = SpannerStore::connect_to(&spanner_endpoint(), &database, TIMEOUT)
        .await
        .expect_err("no table yet");
    assert!(matches!(error, SpannerError::SchemaMissing(_)), "{error}");
    assert!(
        error.to_string().contains("leasehold_spanner::migrate"),
        "{error}"
    );
    // The migration step creates the table once; run again, it changes nothing.
    assert_eq!(
        migrate(&spanner_endpoint(), &database).await.unwrap(),
        Migrated::Created
    );
    assert_eq!(
        migrate(&spanner_endpoint(), &database).await.unwrap(),
        Migrated::AlreadyThere
    );
    store(&database).await;
    // A database migrated before the outbox: the migration adds the outbox's table and indexes.
    let before_outbox = new_spanner_database().await;
    apply_ddl(
        &spanner_endpoint(),
        &before_outbox,
        &leasehold_spanner::SCHEMA[..1],
    )
    .await
    .unwrap();
    assert_eq!(
        migrate(&spanner_endpoint(), &before_outbox).await.unwrap(),
        Migrated::Created
    );
    assert_eq!(
        migrate(&spanner_endpoint(), &before_outbox).await.unwrap(),
        Migrated::AlreadyThere
    );
    let error = migrate(&spanner_endpoint(), missing)
        .await
        .expect_err("no database");
    assert!(
        matches!(error, SpannerError::DatabaseNotFound(_)),
        "{error}"
    );
    let error = SpannerStore::connect_to(&spanner_endpoint(), "orders", TIMEOUT)
        .await
        .expect_err("not a database name");
    assert!(matches!(error, SpannerError::Name(_)), "{error}");
}

/// Begins until the claim is had (the emulator aborts a transaction begun beside another).
async fn begin(store: &SpannerStore, id: &str) -> Claim<leasehold_spanner::SpannerTransaction> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match store.begin("orders", id).await {
            Ok(claim) => return claim,
            Err(leasehold::store::StoreError::Aborted(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("begin {id}: {e:?}"),
        }
    }
}

#[tokio::test]
async fn a_commit_records_the_outcome_and_a_rollback_records_nothing() {
    let database = spanner_database().await;
    let store = store(&database).await;
    let Claim::Claimed(tx) = begin(&store, "m1").await else {
        panic!("m1 is new");
    };
    assert_eq!(tx.message_id(), "m1");
    store.rollback(tx).await;
    assert_eq!(store.completed("orders", "m1").await.unwrap(), None);
    let Claim::Claimed(tx) = begin(&store, "m1").await else {
        panic!("m1 was rolled back");
    };
    store.commit(tx, Completed::Dropped).await.unwrap();
    assert_eq!(
        store.completed("orders", "m1").await.unwrap(),
        Some(Completed::Dropped)
    );
    assert!(matches!(
        begin(&store, "m1").await,
        Claim::Finished(Completed::Dropped)
    ));
    // Claims are per subscription.
    assert_eq!(store.completed("audit", "m1").await.unwrap(), None);
}

#[tokio::test]
async fn two_replicas_with_one_message_commit_one_effect() {
    let database = spanner_database().await;
    let (a, b) = (store(&database).await, store(&database).await);
    create_effects(&database).await;
    // Replica a claims and writes, then commits.
    let Claim::Claimed(mut tx) = begin(&a, "m1").await else {
        panic!("m1 is new")
    };
    effect(&mut tx, "a").await.unwrap();
    a.commit(tx, Completed::Acked).await.unwrap();
    // Replica b had the message too: its claim now finds a's commit, so it does not run.
    assert!(matches!(
        begin(&b, "m1").await,
        Claim::Finished(Completed::Acked)
    ));
    // Both run at once: b claims while a's transaction is open; one commit wins, the other
    // fails with nothing kept.
    let Claim::Claimed(mut ta) = begin(&a, "m2").await else {
        panic!("m2 is new")
    };
    let _ = effect(&mut ta, "a").await;
    let second = b.begin("orders", "m2").await;
    let first = a.commit(ta, Completed::Acked).await;
    let second = match second {
        Ok(Claim::Claimed(mut tb)) => {
            let _ = effect(&mut tb, "b").await;
            b.commit(tb, Completed::Acked).await
        }
        Ok(Claim::Finished(_)) => Ok(()),
        Err(e) => Err(e),
    };
    assert!(
        first.is_ok() || second.is_ok(),
        "one of them commits: {first:?} {second:?}"
    );
    assert_eq!(effects(&a, "m2").await, 1, "{first:?} {second:?}");
    assert_eq!(effects(&a, "m1").await, 1);
}

/// The effects table of a database: one row per write, so a duplicate effect shows.
async fn create_effects(database: &str) {
    apply_ddl(
        &spanner_endpoint(),
        database,
        &["CREATE TABLE effects (
            id STRING(36) NOT NULL,
            message_id STRING(MAX) NOT NULL,
            writer STRING(MAX) NOT NULL,
        ) PRIMARY KEY (id)"],
    )
    .await
    .unwrap();
}

/// The handler's write, in the message's transaction.
async fn effect(
    tx: &mut leasehold_spanner::SpannerTransaction,
    writer: &str,
) -> Result<i64, leasehold_spanner::gcloud_spanner::client::Error> {
    let mut insert = Statement::new(
        "INSERT INTO effects (id, message_id, writer) VALUES (GENERATE_UUID(), @m, @w)",
    );
    insert.add_param("m", &tx.message_id().to_string());
    insert.add_param("w", &writer);
    Ok(tx.update(insert).await?)
}

/// The committed effects of `id`.
async fn effects(store: &SpannerStore, id: &str) -> i64 {
    let mut tx = store.client().single().await.unwrap();
    let mut count = Statement::new("SELECT COUNT(*) FROM effects WHERE message_id = @m");
    count.add_param("m", &id);
    let mut rows = tx.query(count).await.unwrap();
    rows.next()
        .await
        .unwrap()
        .unwrap()
        .column::<i64>(0)
        .unwrap()
}

#[tokio::test]
async fn a_batch_claims_what_is_unfinished_and_commits_the_finished_rows() {
    let database = spanner_database().await;
    let store = store(&database).await;
    let Claim::Claimed(tx) = begin(&store, "b").await else {
        panic!("b is new")
    };
    store.commit(tx, Completed::Acked).await.unwrap();
    let ids: Vec<Arc<str>> = ["a", "b", "c"].map(Arc::from).to_vec();
    let claims = loop {
        match store.begin_batch("orders", &ids).await {
            Ok(claims) => break claims,
            Err(leasehold::store::StoreError::Aborted(_)) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(
        claims.claims,
        [
            BatchClaim::Claimed,
            BatchClaim::Finished(Completed::Acked),
            BatchClaim::Claimed
        ]
    );
    let tx = claims.transaction.expect("a and c are claimed");
    assert_eq!(
        tx.message_ids(),
        &ids[..1]
            .iter()
            .chain(&ids[2..])
            .cloned()
            .collect::<Vec<_>>()[..]
    );
    store
        .commit_batch(
            tx,
            vec![(ids[0].clone(), Completed::Dropped)],
            vec![ids[2].clone()],
        )
        .await
        .unwrap();
    assert_eq!(
        store.completed("orders", "a").await.unwrap(),
        Some(Completed::Dropped)
    );
    assert_eq!(
        store.completed("orders", "c").await.unwrap(),
        None,
        "released"
    );
}

#[tokio::test]
async fn the_plain_progress_store_records_looks_up_and_clears_for_every_replica() {
    use leasehold::store::ProgressStore;
    let database = spanner_database().await;
    let (a, b) = (store(&database).await, store(&database).await);
    let (here, there) = (a.progress("orders"), b.progress("orders"));
    assert_eq!(here.completed("m1"), Ok(None));
    here.record("m1", Completed::Dropped).await.unwrap();
    // Another replica, with a client of its own, finds it.
    assert_eq!(there.completed("m1"), Ok(Some(Completed::Dropped)));
    assert_eq!(
        b.progress("audit").completed("m1"),
        Ok(None),
        "per subscription"
    );
    // Recorded again (a second record of one message), it keeps the last outcome.
    here.record("m1", Completed::Acked).await.unwrap();
    assert_eq!(there.completed("m1"), Ok(Some(Completed::Acked)));
    // Cleared when the ack is confirmed: the delete runs in the background.
    there.clear("m1");
    let deadline = Instant::now() + TIMEOUT;
    while here.completed("m1") != Ok(None) {
        assert!(Instant::now() < deadline, "the record was never deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A Spanner gone silent: the lookup fails within its timeout (and the handler runs).
    let endpoint = spanner_endpoint();
    let Endpoint::Emulator(host) = &endpoint else {
        panic!("the tests run on the emulator")
    };
    let proxy = Proxy::start(host);
    let through = SpannerStore::connect_to(&Endpoint::Emulator(proxy.host()), &database, TIMEOUT)
        .await
        .unwrap()
        .progress("orders")
        .lookup_timeout(Duration::from_millis(500));
    here.record("m2", Completed::Acked).await.unwrap();
    assert_eq!(through.completed("m2"), Ok(Some(Completed::Acked)));
    proxy.black_hole();
    let began = Instant::now();
    let looked = through.completed("m2");
    assert!(looked.is_err(), "{looked:?}");
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn a_commit_refused_for_the_handlers_own_row_is_a_failure_not_an_abort_and_quotes_no_data() {
    use leasehold::store::StoreError;
    use leasehold_spanner::gcloud_spanner::mutation::insert;
    let database = spanner_database().await;
    apply_ddl(
        &spanner_endpoint(),
        &database,
        &["CREATE TABLE people (email STRING(MAX) NOT NULL) PRIMARY KEY (email)"],
    )
    .await
    .unwrap();
    let store = store(&database).await;
    let row = || insert("people", &["email"], &[&"secret@example.com"]);
    store.client().apply(vec![row()]).await.unwrap();
    let Claim::Claimed(mut tx) = begin(&store, "m1").await else {
        panic!("m1 is new")
    };
    // The handler's own insert of a key that exists: refused at the commit.
    tx.buffer_write(vec![row()]);
    let error = store
        .commit(tx, Completed::Acked)
        .await
        .expect_err("the key exists");
    assert!(
        matches!(error, StoreError::Backend(_)),
        "not an abort: {error:?}"
    );
    let mut chain = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(c) = cause {
        chain.push_str(&format!(": {c}"));
        cause = c.source();
    }
    assert!(!chain.contains("secret@example.com"), "{chain}");
    assert_eq!(
        store.completed("orders", "m1").await.unwrap(),
        None,
        "nothing committed"
    );
    // Another replica's claim row committed first: that is an abort (the run again finds it).
    let Claim::Claimed(tx) = begin(&store, "m2").await else {
        panic!("m2 is new")
    };
    let Claim::Claimed(other) = begin(&store, "m2").await else {
        panic!("m2 is new")
    };
    let first = store.commit(other, Completed::Acked).await;
    let second = store.commit(tx, Completed::Acked).await;
    assert!(first.is_ok() || second.is_ok(), "{first:?} {second:?}");
    for result in [first, second] {
        if let Err(e) = result {
            assert!(matches!(e, StoreError::Aborted(_)), "{e:?}");
        }
    }
}
