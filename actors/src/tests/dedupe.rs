//! Dedupe on a key: a message published twice (two message ids, one key) runs once.

use crate::store::{Completed, MemoryStore, ProgressStore};
use crate::tests::*;

const KEY: &str = "event-id";

/// A registration that dedupes on [`KEY`], whose handler counts its runs by payload and acks
/// after `work`.
fn deduping(store: Arc<MemoryStore>, work: Duration) -> (Registration, Arc<Mutex<Vec<String>>>) {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let registration = Registration::raw(SUB, move |data: Bytes, d: Delivery| {
        r.lock().push(String::from_utf8_lossy(&data).into_owned());
        async move {
            tokio::time::sleep(work).await;
            d.ack()
        }
    })
    .progress_store(store)
    .dedupe_on(KEY);
    (registration, runs)
}

fn copy(id: &str, key: &str) -> TestMessage {
    message(id, "order-7").attribute(KEY, key)
}

#[actix_rt::test]
async fn a_copy_with_a_new_message_id_settles_with_the_first_ones_outcome_without_the_handler() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = deduping(store.clone(), Duration::ZERO);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first = pubsub.publish(copy("m1", "k-7"));
    settled([&first]).await;
    let second = pubsub.publish(copy("m2", "k-7"));
    settled([&second]).await;
    assert_eq!(*runs.lock(), ["order-7"], "the handler ran once");
    assert_eq!(
        (first.action(), second.action()),
        (Some(Action::Ack), Some(Action::Ack))
    );
    let stats = sub.stats();
    assert_eq!(
        (stats.replayed, stats.deduplicated, stats.dedupe_fallbacks),
        (1, 1, 0)
    );
    assert_eq!(store.completed("event-id=k-7"), Ok(Some(Completed::Acked)));
    assert_eq!(store.completed("m1"), Ok(None), "kept by key, not by id");
}

#[actix_rt::test]
async fn a_copy_that_arrives_while_the_first_runs_waits_for_it_then_is_settled_from_its_record() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = deduping(store, Duration::from_secs(5));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration.workers(4), pubsub.connector())
        .await
        .unwrap();
    let first = pubsub.publish(copy("m1", "k-7"));
    eventually("the first running", || runs.lock().len() == 1).await;
    let second = pubsub.publish(copy("m2", "k-7"));
    eventually("the copy received", || sub.stats().received == 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.lock().len(), 1, "the copy waits for the first run");
    assert_eq!(second.action(), None);
    settled([&first, &second]).await;
    assert_eq!(runs.lock().len(), 1);
    assert_eq!(second.action(), Some(Action::Ack));
    assert_eq!(sub.stats().deduplicated, 1);
}

#[actix_rt::test]
async fn a_message_without_the_attribute_is_kept_under_its_id_and_counted() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = deduping(store.clone(), Duration::ZERO);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let bare = pubsub.publish(message("m1", "order-7"));
    let empty = pubsub.publish(copy("m2", ""));
    let keyed = pubsub.publish(copy("m3", "k-7"));
    settled([&bare, &empty, &keyed]).await;
    assert_eq!(runs.lock().len(), 3, "different messages all run");
    assert_eq!(sub.stats().dedupe_fallbacks, 2);
    assert_eq!(store.completed("m1"), Ok(Some(Completed::Acked)));
    assert_eq!(store.completed("m2"), Ok(Some(Completed::Acked)));
    // The same id again (a redelivery) is settled from its record as ever.
    let again = pubsub.publish(message("m1", "order-7"));
    settled([&again]).await;
    assert_eq!(runs.lock().len(), 3);
    let stats = sub.stats();
    assert_eq!((stats.replayed, stats.deduplicated), (1, 0));
}

#[actix_rt::test]
async fn a_keyed_record_outlives_its_acks_confirmation() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = deduping(store.clone(), Duration::ZERO);
    let pubsub = MemoryPubSub::new().exactly_once();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first = pubsub.publish(copy("m1", "k-7"));
    eventually("the confirmed ack", || sub.stats().confirmed == 1).await;
    assert_eq!(
        store.completed("event-id=k-7"),
        Ok(Some(Completed::Acked)),
        "not cleared: a copy may come minutes later"
    );
    let later = pubsub.publish(copy("m2", "k-7"));
    settled([&first, &later]).await;
    assert_eq!(runs.lock().len(), 1);
    assert_eq!(sub.stats().deduplicated, 1);
}

#[test]
fn dedupe_needs_a_store_and_an_attribute_name() {
    let handler = |_, d: Delivery| async move { d.ack() };
    let none = Registration::raw(SUB, handler)
        .without_progress_store()
        .dedupe_on(KEY);
    assert_eq!(none.validate().unwrap_err().option, "dedupe_on");
    let empty = Registration::raw(SUB, handler).dedupe_on("");
    assert_eq!(
        empty.validate().unwrap_err().to_string(),
        "dedupe_on must be an attribute's name, 1 to 256 bytes"
    );
    assert!(
        Registration::raw(SUB, handler)
            .dedupe_on(KEY)
            .validate()
            .is_ok()
    );
}

#[test]
fn a_delivery_tells_its_dedupe_key_only_when_it_is_keyed() {
    let store = Arc::new(MemoryStore::default());
    let (registration, _) = deduping(store, Duration::ZERO);
    assert_eq!(registration.options().dedupe_on.as_deref(), Some(KEY));
    let plain = crate::testing::delivery().attribute(KEY, "k-7").build();
    assert_eq!(plain.dedupe_key(), None, "its registration does not dedupe");
}
