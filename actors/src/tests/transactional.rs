//! Transactional handlers: claim, handler, commit or roll back, and only then the ack.

use crate::error::Cause;
use crate::status::FailureKind;
use crate::store::{BatchClaim, BatchClaims, Claim, TransactionalBatchStore, TransactionalStore};
use crate::store::{Completed, MemoryStore, StoreError};
use crate::tests::*;
use crate::{Batch, BatchOutcome};
use futures::future::LocalBoxFuture;
use std::collections::HashMap;
use tokio::sync::Notify;

/// What the fake database holds and did.
#[derive(Default)]
struct Db {
    /// Finished messages, by id.
    records: HashMap<String, Completed>,
    /// Writes of committed transactions.
    effects: Vec<String>,
    /// "begin m1", "commit m1", "rollback m1", in order.
    log: Vec<String>,
    fail_begin: bool,
    /// Begin fails with `Busy` (a claim held elsewhere).
    busy_begin: bool,
    fail_commit: bool,
    /// The health probe's answer is an error.
    fail_probe: bool,
    /// Ids another (simulated) transaction holds: a batch finds them busy.
    held_elsewhere: std::collections::HashSet<String>,
    /// Commits still to abort (`StoreError::Aborted`) before one goes through.
    abort_commits: u32,
    /// Batch claims still to abort before one goes through.
    abort_batch_claims: u32,
    /// Transactions still to abort under the handler (a statement's abort, which the store
    /// notes in the transaction).
    abort_statements: u32,
    /// Ids finished by another (simulated) replica when a transaction of theirs aborts.
    finish_elsewhere_on_abort: Vec<String>,
}

/// A transactional store in memory; its commits may be held until the test lets them go.
#[derive(Clone, Default)]
struct FakeStore {
    db: Arc<Mutex<Db>>,
    hold_commits: Option<Arc<Notify>>,
    /// How many times a handler may run again after an abort (none: never).
    reruns: Option<u32>,
}

impl FakeStore {
    /// A store with these messages finished before.
    fn finished(records: &[(&str, Completed)]) -> Self {
        let store = Self::default();
        let mut db = store.db.lock();
        for (id, completed) in records {
            db.records.insert((*id).into(), *completed);
        }
        drop(db);
        store
    }
}

/// An open fake transaction: the writes made in it.
struct FakeTx {
    id: String,
    writes: Vec<String>,
    /// A statement in it was aborted by the database.
    aborted: bool,
}

impl FakeTx {
    fn new(id: &str) -> Self {
        Self {
            id: id.into(),
            writes: Vec::new(),
            aborted: false,
        }
    }
}

/// The fake database aborts a transaction: what another replica finished meanwhile is recorded.
fn abort(db: &mut Db) -> StoreError {
    for id in std::mem::take(&mut db.finish_elsewhere_on_abort) {
        db.records.insert(id, Completed::Acked);
    }
    StoreError::Aborted(Cause::message("wounded by an older transaction"))
}

impl TransactionalStore for FakeStore {
    type Transaction = FakeTx;

    fn begin(
        &self,
        _subscription: &str,
        message_id: &str,
    ) -> LocalBoxFuture<'static, Result<Claim<FakeTx>, StoreError>> {
        let mut db = self.db.lock();
        db.log.push(format!("begin {message_id}"));
        let result = if db.fail_begin {
            Err(StoreError::Backend(Cause::message("database down")))
        } else if db.busy_begin {
            Err(StoreError::Busy(Cause::message("claimed elsewhere")))
        } else if db.held_elsewhere.remove(message_id) {
            // Waited for the transaction that held it, which committed it.
            db.records.insert(message_id.to_string(), Completed::Acked);
            Ok(Claim::Finished(Completed::Acked))
        } else if let Some(done) = db.records.get(message_id) {
            Ok(Claim::Finished(*done))
        } else {
            Ok(Claim::Claimed(FakeTx::new(message_id)))
        };
        async move { result }.boxed_local()
    }

    fn commit(
        &self,
        tx: FakeTx,
        completed: Completed,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let db = self.db.clone();
        let hold = self.hold_commits.clone();
        async move {
            if let Some(hold) = hold {
                hold.notified().await;
            }
            let mut db = db.lock();
            db.log.push(format!("commit {}", tx.id));
            if db.fail_commit {
                return Err(StoreError::Backend(Cause::message("commit refused")));
            }
            if db.abort_commits > 0 {
                db.abort_commits -= 1;
                return Err(abort(&mut db));
            }
            db.records.insert(tx.id, completed);
            db.effects.extend(tx.writes);
            Ok(())
        }
        .boxed_local()
    }

    fn rollback(&self, tx: FakeTx) -> LocalBoxFuture<'static, ()> {
        self.db.lock().log.push(format!("rollback {}", tx.id));
        async {}.boxed_local()
    }

    fn probe(&self) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let down = self.db.lock().fail_probe;
        async move {
            match down {
                true => Err(StoreError::Backend(Cause::message("database down"))),
                false => Ok(()),
            }
        }
        .boxed_local()
    }

    fn aborted(&self, tx: &FakeTx) -> bool {
        tx.aborted
    }

    fn rerun_after(&self, aborts: u32) -> Option<Duration> {
        self.reruns
            .filter(|&max| aborts <= max)
            .map(|_| Duration::from_millis(10) * aborts)
    }
}

impl TransactionalBatchStore for FakeStore {
    fn begin_batch(
        &self,
        _subscription: &str,
        message_ids: &[Arc<str>],
    ) -> LocalBoxFuture<'static, Result<BatchClaims<FakeTx>, StoreError>> {
        let mut db = self.db.lock();
        db.log.push(format!("begin batch of {}", message_ids.len()));
        let result = if db.fail_begin {
            Err(StoreError::Backend(Cause::message("database down")))
        } else if db.abort_batch_claims > 0 {
            db.abort_batch_claims -= 1;
            Err(abort(&mut db))
        } else {
            let claims: Vec<BatchClaim> = message_ids
                .iter()
                .map(|id| match db.records.get(&**id) {
                    Some(done) => BatchClaim::Finished(*done),
                    None if db.held_elsewhere.contains(&**id) => BatchClaim::Busy,
                    None => BatchClaim::Claimed,
                })
                .collect();
            let any = claims.contains(&BatchClaim::Claimed);
            Ok(BatchClaims {
                transaction: any.then(|| FakeTx::new("batch")),
                claims,
            })
        };
        async move { result }.boxed_local()
    }

    fn commit_batch(
        &self,
        tx: FakeTx,
        finished: Vec<(Arc<str>, Completed)>,
        released: Vec<Arc<str>>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let db = self.db.clone();
        async move {
            let mut db = db.lock();
            db.log.push(format!(
                "commit batch: {} finished, {} released",
                finished.len(),
                released.len()
            ));
            if db.fail_commit {
                return Err(StoreError::Backend(Cause::message("commit refused")));
            }
            if db.abort_commits > 0 {
                db.abort_commits -= 1;
                return Err(abort(&mut db));
            }
            for (id, completed) in finished {
                db.records.insert(id.to_string(), completed);
            }
            db.effects.extend(tx.writes);
            Ok(())
        }
        .boxed_local()
    }
}

/// A registration whose handler writes the payload in the transaction, counts its runs and
/// settles with `outcome`.
fn writing(store: FakeStore, outcome: fn(&Delivery) -> Outcome) -> (Registration, Arc<Mutex<u32>>) {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let registration = Registration::transactional_raw(
        SUB,
        store,
        async move |data: Bytes, d: Delivery, tx: &mut FakeTx| {
            *r.lock() += 1;
            tx.writes.push(String::from_utf8_lossy(&data).into_owned());
            outcome(&d)
        },
    );
    (registration, runs)
}

/// A registration whose handler's one statement may be aborted by `store`'s database: then it
/// returns the statement's error, as a handler would.
fn writing_or_aborted(store: FakeStore) -> (Registration, Arc<Mutex<u32>>) {
    let runs = Arc::new(Mutex::new(0));
    let (r, db) = (runs.clone(), store.db.clone());
    let registration = Registration::transactional_raw(
        SUB,
        store,
        async move |data: Bytes, d: Delivery, tx: &mut FakeTx| {
            *r.lock() += 1;
            let mut db = db.lock();
            if db.abort_statements > 0 {
                db.abort_statements -= 1;
                tx.aborted = true;
                return Err("the statement was aborted");
            }
            tx.writes.push(String::from_utf8_lossy(&data).into_owned());
            Ok(d.ack())
        },
    );
    (registration, runs)
}

/// Starts `registration` and delivers one message per id, payload `data-<id>`.
async fn deliver(registration: Registration, ids: &[&str]) -> (Subscription, Vec<Published>) {
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for id in ids {
        all.push(pubsub.publish(message(id, &format!("data-{id}"))));
    }
    (sub, all)
}

#[actix_rt::test]
async fn ack_commits_the_writes_with_the_record_then_acks() {
    tokio::time::pause();
    let hold = Arc::new(Notify::new());
    let store = FakeStore {
        hold_commits: Some(hold.clone()),
        ..FakeStore::default()
    };
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let (sub, all) = deliver(registration, &["m1"]).await;
    eventually("the handler ran", || *runs.lock() == 1).await;
    // The commit is held: nothing may be acked before it.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(all[0].action(), None, "acked before the commit");
    }
    hold.notify_one();
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    let db = store.db.lock();
    assert_eq!(db.effects, ["data-m1"]);
    assert_eq!(db.records.get("m1"), Some(&Completed::Acked));
    assert_eq!(db.log, ["begin m1", "commit m1"]);
    assert_eq!(sub.stats().committed, 1);
}

#[actix_rt::test]
async fn a_committed_message_that_comes_back_is_settled_without_the_handler() {
    tokio::time::pause();
    let store = FakeStore::finished(&[("m1", Completed::Dropped)]);
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(*runs.lock(), 0);
    // Settled as recorded: drop() acks before the last attempt.
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(sub.stats().replayed, 1);
    assert_eq!(sub.stats().dropped, 1);
    assert!(store.db.lock().effects.is_empty());
}

#[actix_rt::test]
async fn retry_and_errors_roll_back_and_nack() {
    tokio::time::pause();
    let store = FakeStore::default();
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let registration = Registration::transactional_raw(
        SUB,
        store.clone(),
        async move |data: Bytes, d: Delivery, tx: &mut FakeTx| {
            *r.lock() += 1;
            tx.writes.push(String::from_utf8_lossy(&data).into_owned());
            if data.ends_with(b"m1") {
                Ok(d.retry())
            } else {
                Err("the downstream call failed")
            }
        },
    );
    let (sub, all) = deliver(registration, &["m1", "m2"]).await;
    settled(&all).await;
    assert_eq!(*runs.lock(), 2);
    assert!(all.iter().all(|s| s.action() == Some(Action::Nack)));
    let db = store.db.lock();
    assert!(db.effects.is_empty() && db.records.is_empty());
    assert!(db.log.contains(&"rollback m1".to_string()));
    assert!(db.log.contains(&"rollback m2".to_string()));
    assert_eq!(sub.stats().committed, 0);
    let kinds: Vec<_> = sub.recent_failures().iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FailureKind::HandlerError]);
}

#[actix_rt::test]
async fn a_store_that_cannot_begin_or_commit_retries_the_message() {
    tokio::time::pause();
    for fail_begin in [true, false] {
        let store = FakeStore::default();
        {
            let mut db = store.db.lock();
            db.fail_begin = fail_begin;
            db.fail_commit = !fail_begin;
        }
        let (registration, runs) = writing(store.clone(), Delivery::ack);
        let began = tokio::time::Instant::now();
        let (sub, all) = deliver(registration, &["m1"]).await;
        settled(&all).await;
        assert_eq!(all[0].action(), Some(Action::Nack));
        // Held before the nack: an outage does not become a storm of redeliveries.
        assert!(began.elapsed() >= Duration::from_millis(100));
        assert_eq!(*runs.lock(), u32::from(!fail_begin));
        assert_eq!(sub.stats().store_failures, 1);
        assert_eq!(sub.stats().committed, 0);
        assert_eq!(
            sub.recent_failures()[0].kind,
            FailureKind::StoreFailure,
            "fail_begin {fail_begin}"
        );
        assert!(store.db.lock().effects.is_empty());
    }
}

#[actix_rt::test]
async fn a_panicking_handler_rolls_back_and_the_panic_policy_settles() {
    tokio::time::pause();
    let store = FakeStore::default();
    let registration = Registration::transactional_raw(
        SUB,
        store.clone(),
        async move |_: Bytes, d: Delivery, tx: &mut FakeTx| -> Outcome {
            tx.writes.push("half done".into());
            if d.message_id() == "m1" {
                panic!("a bug in the handler (test)");
            }
            d.ack()
        },
    )
    .panic_policy(PanicPolicy::Drop);
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    // The panic policy says drop: acked, without the half-done writes.
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(sub.stats().panics, 1);
    let db = store.db.lock();
    assert_eq!(db.log, ["begin m1", "rollback m1"]);
    assert!(db.effects.is_empty());
}

#[actix_rt::test]
async fn settle_later_is_refused_in_a_transaction() {
    tokio::time::pause();
    let store = FakeStore::default();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    let registration = Registration::transactional_raw(
        SUB,
        store.clone(),
        async move |_: Bytes, d: Delivery, _: &mut FakeTx| {
            let (later, settler) = d.settle_later();
            k.lock().push(settler);
            later
        },
    );
    let (_sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Nack));
    assert_eq!(store.db.lock().log, ["begin m1", "rollback m1"]);
    // The settler, used late, changes nothing.
    kept.lock().pop().unwrap().ack();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(all[0].action(), Some(Action::Nack));
}

#[actix_rt::test]
async fn a_settler_used_inside_a_transactional_handler_settles_nothing() {
    tokio::time::pause();
    for batch in [false, true] {
        let store = FakeStore::default();
        let registration = if batch {
            Registration::transactional_raw_batch(
                SUB,
                store.clone(),
                async move |batch: Batch<Bytes>, tx: &mut FakeTx| {
                    tx.writes.push("written".into());
                    for item in &batch {
                        // An ack of writes that are about to be rolled back.
                        let (_, settler) = item.delivery.clone().settle_later();
                        settler.ack();
                    }
                    Err::<BatchOutcome, _>("failed after the settler's ack")
                },
            )
        } else {
            Registration::transactional_raw(
                SUB,
                store.clone(),
                async move |_: Bytes, d: Delivery, tx: &mut FakeTx| {
                    tx.writes.push("written".into());
                    let (_, settler) = d.clone().settle_later();
                    settler.ack();
                    Err::<Outcome, _>("failed after the settler's ack")
                },
            )
        };
        let (_sub, all) = deliver(registration, &["m1"]).await;
        settled(&all).await;
        assert_eq!(
            all[0].action(),
            Some(Action::Nack),
            "batch {batch}: rolled back"
        );
        assert!(store.db.lock().effects.is_empty());
    }
}

#[test]
fn a_transactional_registration_refuses_a_progress_store() {
    let (registration, _) = writing(FakeStore::default(), Delivery::ack);
    assert_eq!(registration.validate(), Ok(()));
    let both = registration.progress_store(MemoryStore::default());
    assert_eq!(both.validate().unwrap_err().option, "progress_store");
}

#[test]
fn store_failures_in_a_row_hold_the_message_longer_each_time_up_to_ten_seconds() {
    use crate::transactional::single::store_retry_delay;
    let ms = |n| store_retry_delay(n).as_millis();
    assert_eq!((ms(1), ms(2), ms(3)), (100, 200, 400));
    assert_eq!(ms(7), 6_400);
    assert_eq!((ms(8), ms(9), ms(u32::MAX)), (10_000, 10_000, 10_000));
}

#[actix_rt::test]
async fn a_store_that_does_not_answer_the_probe_makes_the_subscription_not_ready() {
    tokio::time::pause();
    let store = FakeStore::default();
    let (registration, _) = writing(store.clone(), Delivery::ack);
    let registration = registration.health_probe_interval(Duration::from_secs(1));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("ready", || sub.health().ready).await;
    store.db.lock().fail_probe = true;
    eventually("not ready", || !sub.health().ready).await;
    assert!(
        sub.health().live,
        "a database outage is no reason to restart"
    );
    store.db.lock().fail_probe = false;
    eventually("ready again", || sub.health().ready).await;
    sub.stop().await;
}

#[actix_rt::test]
async fn a_claim_held_elsewhere_is_retried_at_once_not_held_like_an_outage() {
    tokio::time::pause();
    let store = FakeStore::default();
    store.db.lock().busy_begin = true;
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let began = tokio::time::Instant::now();
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Nack));
    assert!(
        began.elapsed() < Duration::from_millis(100),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(*runs.lock(), 0);
    assert_eq!(sub.stats().store_failures, 1);
    sub.stop().await;
}

#[actix_rt::test]
async fn conflicts_do_not_trip_a_breaker_and_an_outage_does() {
    tokio::time::pause();
    let store = FakeStore::default();
    store.db.lock().busy_begin = true;
    let (registration, _) = writing(store.clone(), Delivery::ack);
    let registration = registration.breaker(
        crate::Breaker::new()
            .consecutive_failures(Some(2))
            .cooldown(Duration::from_secs(1), Duration::from_secs(1)),
    );
    let (sub, all) = deliver(registration, &["m1", "m2", "m3"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    assert_eq!(sub.stats().breaker_trips, 0, "a conflict is not an outage");
    sub.stop().await;

    let store = FakeStore::default();
    store.db.lock().fail_begin = true;
    let (registration, _) = writing(store.clone(), Delivery::ack);
    let registration = registration.breaker(crate::Breaker::new().consecutive_failures(Some(2)));
    let (sub, _all) = deliver(registration, &["m1", "m2", "m3"]).await;
    eventually("the trip", || sub.stats().breaker_trips == 1).await;
    sub.stop().await;
}

/// A transactional batch registration whose handler writes each payload in the batch's
/// transaction (one "statement" for the batch), counts its batches, and settles each message as
/// its payload says: `data-ack...` acks, `data-retry...` retries, anything else acks.
fn writing_batches(store: FakeStore) -> (Registration, Arc<Mutex<Vec<usize>>>) {
    let batches = Arc::new(Mutex::new(Vec::new()));
    let b = batches.clone();
    let registration = Registration::transactional_raw_batch(
        SUB,
        store,
        async move |batch: Batch<Bytes>, tx: &mut FakeTx| {
            b.lock().push(batch.len());
            let mut outcomes = BatchOutcome::new();
            for item in &batch {
                let data = String::from_utf8_lossy(&item.payload).into_owned();
                let retry = data.contains("retry");
                tx.writes.push(data);
                let d = &item.delivery;
                outcomes.set(d, if retry { d.retry() } else { d.ack() });
            }
            outcomes
        },
    )
    .max_batch_messages(3);
    (registration, batches)
}

#[actix_rt::test]
async fn a_batch_commits_once_with_every_record_then_acks() {
    tokio::time::pause();
    let store = FakeStore::default();
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["a1", "a2", "a3"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(*batches.lock(), [3]);
    let db = store.db.lock();
    assert_eq!(
        db.log,
        ["begin batch of 3", "commit batch: 3 finished, 0 released"]
    );
    assert_eq!(db.records.len(), 3);
    assert_eq!(sub.stats().committed, 3);
}

#[actix_rt::test]
async fn a_retried_message_is_not_recorded_and_a_finished_one_is_replayed_without_the_handler() {
    tokio::time::pause();
    let store = FakeStore::finished(&[("done", Completed::Acked)]);
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["ok", "retry", "done"]).await;
    settled(&all).await;
    let actions: Vec<_> = all.iter().map(Published::action).collect();
    assert_eq!(
        actions,
        [Some(Action::Ack), Some(Action::Nack), Some(Action::Ack)]
    );
    assert_eq!(*batches.lock(), [2], "the finished one is left out");
    let db = store.db.lock();
    assert!(db.records.contains_key("ok") && !db.records.contains_key("retry"));
    assert_eq!(db.log[1], "commit batch: 1 finished, 1 released");
    let stats = sub.stats();
    assert_eq!((stats.committed, stats.replayed, stats.retried), (1, 1, 1));
}

#[actix_rt::test]
async fn a_message_another_transaction_holds_is_left_out_and_settled_once_that_claim_resolves() {
    tokio::time::pause();
    let store = FakeStore::default();
    store.db.lock().held_elsewhere.insert("held".into());
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["a", "held"]).await;
    settled(&all).await;
    assert_eq!(*batches.lock(), [1], "only the claimed one ran");
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    let log = store.db.lock().log.clone();
    assert!(
        log.contains(&"begin held".to_string()),
        "its own claim waited for the other: {log:?}"
    );
    assert_eq!(sub.stats().replayed, 1, "the other committed it: replayed");
}

#[actix_rt::test]
async fn when_the_wait_for_a_held_claim_times_out_the_other_held_messages_do_not_wait_in_turn() {
    tokio::time::pause();
    let store = FakeStore::default();
    {
        let mut db = store.db.lock();
        db.held_elsewhere
            .extend(["h1".into(), "h2".into(), "h3".into()]);
        // The single claim a held message waits with runs into the claim timeout.
        db.busy_begin = true;
    }
    let (registration, batches) = writing_batches(store.clone());
    // One batch (of at most 3).
    let (sub, all) = deliver(registration, &["a", "h1", "h2"]).await;
    settled(&all).await;
    assert_eq!(*batches.lock(), [1], "only the claimed one ran");
    let actions: Vec<_> = all.iter().map(Published::action).collect();
    assert_eq!(
        actions,
        [Some(Action::Ack), Some(Action::Nack), Some(Action::Nack)]
    );
    let log = store.db.lock().log.clone();
    let waits = log.iter().filter(|l| l.starts_with("begin h")).count();
    assert_eq!(waits, 1, "one wait, the others retried with it: {log:?}");
    assert_eq!(sub.stats().store_failures, 2);
}

#[actix_rt::test]
async fn a_batch_whose_messages_are_all_retried_rolls_back() {
    tokio::time::pause();
    let store = FakeStore::default();
    let (registration, _) = writing_batches(store.clone());
    let (_sub, all) = deliver(registration, &["retry-1", "retry-2"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    let db = store.db.lock();
    assert!(db.effects.is_empty(), "nothing committed");
    assert!(
        db.log.contains(&"rollback batch".to_string()),
        "{:?}",
        db.log
    );
}

#[actix_rt::test]
async fn a_failed_commit_holds_and_retries_every_message_of_the_batch() {
    tokio::time::pause();
    let store = FakeStore::default();
    store.db.lock().fail_commit = true;
    let (registration, _) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["a", "b"]).await;
    eventually("held after the failure", || sub.holding() == 2).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    let stats = sub.stats();
    assert_eq!(
        (stats.store_failures, stats.held, stats.committed),
        (2, 2, 0)
    );
}

#[actix_rt::test]
async fn a_panicking_batch_handler_rolls_back_and_the_panic_policy_settles_each_message() {
    tokio::time::pause();
    let store = FakeStore::default();
    let registration = Registration::transactional_raw_batch(
        SUB,
        store.clone(),
        async move |_: Batch<Bytes>, _: &mut FakeTx| -> BatchOutcome { panic!("handler bug") },
    )
    .max_batch_messages(2)
    .panic_policy(PanicPolicy::Drop);
    let (sub, all) = deliver(registration, &["a", "b"]).await;
    settled(&all).await;
    assert!(
        all.iter().all(|p| p.action() == Some(Action::Ack)),
        "dropped"
    );
    assert!(store.db.lock().log.contains(&"rollback batch".to_string()));
    let stats = sub.stats();
    assert_eq!((stats.panics, stats.dropped), (1, 2));
}

#[actix_rt::test]
async fn a_batch_whose_messages_were_all_finished_before_never_reaches_the_handler_and_is_not_counted()
 {
    tokio::time::pause();
    let store = FakeStore::finished(&[("a", Completed::Acked), ("b", Completed::Acked)]);
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration.max_batch_messages(2), &["a", "b"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    assert!(batches.lock().is_empty(), "the handler never ran");
    let (stats, sizes) = (sub.stats(), sub.histograms().batch_size);
    assert_eq!(
        (stats.replayed, stats.batches, sizes.count, sizes.sum),
        (2, 0, 0, 0.0),
        "replayed, and no batch counted as handed to the handler"
    );
}

#[actix_rt::test]
async fn an_aborted_commit_runs_the_handler_again_on_a_fresh_transaction_and_commits_once() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(5),
        ..FakeStore::default()
    };
    store.db.lock().abort_commits = 2;
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(*runs.lock(), 3);
    let db = store.db.lock();
    assert_eq!(db.effects, ["data-m1"], "the aborted runs' writes are gone");
    assert_eq!(
        db.log,
        [
            "begin m1",
            "commit m1",
            "begin m1",
            "commit m1",
            "begin m1",
            "commit m1"
        ]
    );
    let stats = sub.stats();
    assert_eq!(
        (stats.store_aborts, stats.committed, stats.store_failures),
        (2, 1, 0)
    );
}

#[actix_rt::test]
async fn aborts_past_the_stores_reruns_are_a_retry_at_once_counted_but_not_an_outage() {
    tokio::time::pause();
    for reruns in [None, Some(2)] {
        let store = FakeStore {
            reruns,
            ..FakeStore::default()
        };
        store.db.lock().abort_commits = 10;
        let (registration, runs) = writing(store.clone(), Delivery::ack);
        let (sub, all) = deliver(registration, &["m1"]).await;
        settled(&all).await;
        assert_eq!(all[0].action(), Some(Action::Nack));
        let ran = 1 + reruns.unwrap_or(0);
        assert_eq!(*runs.lock(), ran, "reruns {reruns:?}");
        let stats = sub.stats();
        assert_eq!(
            (
                stats.store_aborts,
                stats.store_failures,
                stats.held,
                stats.committed
            ),
            (u64::from(ran), 1, 0, 0),
            "reruns {reruns:?}: not held as in an outage"
        );
        assert!(store.db.lock().effects.is_empty());
    }
}

#[actix_rt::test]
async fn a_statement_aborted_under_the_handler_runs_it_again_whatever_it_returned() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(5),
        ..FakeStore::default()
    };
    store.db.lock().abort_statements = 1;
    let (registration, runs) = writing_or_aborted(store.clone());
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(*runs.lock(), 2);
    let db = store.db.lock();
    assert_eq!(db.effects, ["data-m1"]);
    assert_eq!(db.log, ["begin m1", "rollback m1", "begin m1", "commit m1"]);
    let stats = sub.stats();
    assert_eq!((stats.store_aborts, stats.committed), (1, 1));
    assert!(
        sub.recent_failures().is_empty(),
        "the abort is no handler error"
    );
}

#[actix_rt::test]
async fn a_rerun_after_an_abort_finds_what_another_replica_committed_and_does_not_run_it() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(5),
        ..FakeStore::default()
    };
    {
        let mut db = store.db.lock();
        db.abort_commits = 1;
        db.finish_elsewhere_on_abort = vec!["m1".into()];
    }
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let (sub, all) = deliver(registration, &["m1"]).await;
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(
        *runs.lock(),
        1,
        "the other replica's commit stands: not run again"
    );
    assert!(
        store.db.lock().effects.is_empty(),
        "this replica wrote nothing"
    );
    let stats = sub.stats();
    assert_eq!((stats.store_aborts, stats.replayed), (1, 1));
}

#[actix_rt::test]
async fn an_aborted_batch_claims_again_and_reruns_the_handler_on_what_is_still_unfinished() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(5),
        ..FakeStore::default()
    };
    {
        let mut db = store.db.lock();
        db.abort_commits = 1;
        // Another replica commits b while this batch's first transaction is aborted.
        db.finish_elsewhere_on_abort = vec!["b".into()];
    }
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["a", "b", "c"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(*batches.lock(), [3, 2], "run again on a and c only");
    let db = store.db.lock();
    assert_eq!(db.effects, ["data-a", "data-c"]);
    assert_eq!(
        db.log,
        [
            "begin batch of 3",
            "commit batch: 3 finished, 0 released",
            "begin batch of 3",
            "commit batch: 2 finished, 0 released"
        ]
    );
    let stats = sub.stats();
    assert_eq!(
        (stats.store_aborts, stats.committed, stats.replayed),
        (1, 2, 1)
    );
}

#[actix_rt::test]
async fn a_batch_aborted_past_the_reruns_retries_every_message_at_once() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(1),
        ..FakeStore::default()
    };
    store.db.lock().abort_commits = 10;
    let (registration, batches) = writing_batches(store.clone());
    let (sub, all) = deliver(registration, &["a", "b"]).await;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    assert_eq!(*batches.lock(), [2, 2]);
    assert!(store.db.lock().effects.is_empty());
    let stats = sub.stats();
    assert_eq!(
        (stats.store_aborts, stats.store_failures, stats.held),
        (2, 2, 0)
    );
}

#[actix_rt::test]
async fn a_batch_claimed_again_after_an_aborted_commit_waits_out_an_abort_of_that_claim() {
    tokio::time::pause();
    let store = FakeStore {
        reruns: Some(5),
        ..FakeStore::default()
    };
    {
        let mut db = store.db.lock();
        db.abort_commits = 1;
    }
    let (registration, batches) = writing_batches(store.clone());
    // The claim after the aborted commit aborts too: set once the first claim went through.
    let db = store.db.clone();
    let (sub, all) = deliver(registration, &["a", "b"]).await;
    eventually("the first batch ran", || !batches.lock().is_empty()).await;
    db.lock().abort_batch_claims = 1;
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    let stats = sub.stats();
    assert_eq!(
        (stats.store_aborts, stats.committed, stats.store_failures),
        (2, 2, 0)
    );
}

#[actix_rt::test]
async fn an_aborted_batch_claim_is_claimed_again_and_past_the_reruns_retried() {
    tokio::time::pause();
    for (aborted, reruns, acked) in [(2, 5, true), (3, 2, false)] {
        let store = FakeStore {
            reruns: Some(reruns),
            ..FakeStore::default()
        };
        store.db.lock().abort_batch_claims = aborted;
        let (registration, batches) = writing_batches(store.clone());
        let (sub, all) = deliver(registration, &["a", "b"]).await;
        settled(&all).await;
        let action = if acked { Action::Ack } else { Action::Nack };
        assert!(
            all.iter().all(|p| p.action() == Some(action)),
            "{aborted} aborts"
        );
        let stats = sub.stats();
        if acked {
            assert_eq!(*batches.lock(), [2], "claimed again, run once");
            assert_eq!((stats.store_aborts, stats.committed), (2, 2));
        } else {
            assert!(batches.lock().is_empty(), "never claimed: never run");
            assert_eq!(
                (stats.store_aborts, stats.store_failures, stats.held),
                (3, 2, 0)
            );
        }
    }
}

#[actix_rt::test]
async fn a_transactional_registration_that_dedupes_claims_the_key_and_a_copy_runs_nothing() {
    tokio::time::pause();
    let store = FakeStore::default();
    let (registration, runs) = writing(store.clone(), Delivery::ack);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration.dedupe_on("event-id"), pubsub.connector())
        .await
        .unwrap();
    let first = pubsub.publish(message("m1", "data").attribute("event-id", "k-1"));
    settled([&first]).await;
    let copy = pubsub.publish(message("m2", "data").attribute("event-id", "k-1"));
    settled([&copy]).await;
    assert_eq!(*runs.lock(), 1);
    assert_eq!(copy.action(), Some(Action::Ack));
    let db = store.db.lock();
    assert_eq!(
        db.log,
        [
            "begin event-id=k-1",
            "commit event-id=k-1",
            "begin event-id=k-1"
        ]
    );
    assert_eq!(db.effects, ["data"]);
    let stats = sub.stats();
    assert_eq!(
        (stats.committed, stats.replayed, stats.deduplicated),
        (1, 1, 1)
    );
}

#[actix_rt::test]
async fn a_transactional_batch_that_dedupes_claims_keys_and_leaves_a_copy_out() {
    tokio::time::pause();
    let store = FakeStore::default();
    let (registration, batches) = writing_batches(store.clone());
    let pubsub = MemoryPubSub::new();
    let sub = start(registration.dedupe_on("event-id"), pubsub.connector())
        .await
        .unwrap();
    let first: Vec<Published> = ["a", "b"]
        .iter()
        .map(|k| pubsub.publish(message(&format!("m-{k}"), k).attribute("event-id", *k)))
        .collect();
    settled(&first).await;
    // A copy of b (a new id), and a new message c, in one batch.
    let second: Vec<Published> = [("m-b2", "b"), ("m-c", "c")]
        .iter()
        .map(|(id, k)| pubsub.publish(message(id, k).attribute("event-id", *k)))
        .collect();
    settled(&second).await;
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|p| p.action() == Some(Action::Ack))
    );
    let db = store.db.lock();
    assert_eq!(db.effects, ["a", "b", "c"], "b's copy wrote nothing");
    let mut keys: Vec<&String> = db.records.keys().collect();
    keys.sort();
    assert_eq!(keys, ["event-id=a", "event-id=b", "event-id=c"]);
    assert_eq!(batches.lock().iter().sum::<usize>(), 3);
    assert_eq!(sub.stats().deduplicated, 1);
}

#[actix_rt::test]
async fn a_decoders_fetch_comes_before_the_transaction_and_an_outage_opens_none() {
    use crate::tests::decoders::{Answer, Numbers, numbered};
    tokio::time::pause();
    let store = FakeStore::default();
    let decoder = Numbers::new(&[("r1", Answer::Found), ("down", Answer::Down)]);
    let registration = Registration::transactional_decoded(
        SUB,
        store.clone(),
        decoder,
        async |n: u64, d: Delivery, tx: &mut FakeTx| {
            tx.writes.push(n.to_string());
            d.ack()
        },
    );
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all = [
        pubsub.publish(numbered("m1", "1", "r1")),
        pubsub.publish(numbered("m2", "2", "down")),
    ];
    settled(&all).await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(all[1].action(), Some(Action::Nack));
    {
        let db = store.db.lock();
        assert_eq!(db.log, ["begin m1", "commit m1"], "no transaction for m2");
        assert_eq!(db.effects, ["1"]);
    }
    sub.stop().await;
}

#[actix_rt::test]
async fn a_transactional_batch_decodes_with_its_decoder_and_leaves_out_what_did_not() {
    use crate::tests::decoders::{Answer, Numbers, numbered};
    tokio::time::pause();
    let store = FakeStore::default();
    let decoder = Numbers::new(&[("r1", Answer::Found)]);
    let registration = Registration::transactional_decoded_batch(
        SUB,
        store.clone(),
        decoder,
        async |batch: Batch<u64>, tx: &mut FakeTx| {
            tx.writes.extend(batch.payloads().map(u64::to_string));
            BatchOutcome::all(Outcome::ack())
        },
    )
    .max_batch_messages(3);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all = [
        pubsub.publish(numbered("m1", "1", "r1")),
        pubsub.publish(numbered("m2", "two", "r1")),
        pubsub.publish(numbered("m3", "3", "r1")),
    ];
    settled(&all).await;
    assert!(
        all.iter().all(|p| p.action() == Some(Action::Ack)),
        "m2 dropped by the policy"
    );
    assert_eq!(store.db.lock().effects, ["1", "3"]);
    assert_eq!(sub.stats().decode_failures, 1);
    sub.stop().await;
}
