//! The progress store: finished messages are not run again.

use crate::error::AckFailure;
use crate::store::{Completed, MemoryStore, ProgressStore};
use crate::tests::*;

/// A registration whose handler counts its runs and settles with `outcome`.
fn counting(
    outcome: fn(&Delivery) -> Outcome,
    store: Arc<MemoryStore>,
) -> (Registration, Arc<Mutex<u32>>) {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        *r.lock() += 1;
        let o = outcome(&d);
        async move { o }
    })
    .progress_store(store);
    (registration, runs)
}

#[actix_rt::test]
async fn a_finished_message_that_comes_back_is_settled_without_the_handler() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = counting(Delivery::ack, store.clone());
    let pubsub = MemoryPubSub::new().exactly_once();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    // Pub/Sub refuses the first ack (say, the lease was lost) and redelivers.
    let refused = message("m1", "x").confirmation_fails(AckFailure::LeaseExpired);
    let first_settled = pubsub.publish(refused);
    eventually("the failed ack", || sub.stats().failed_acks == 1).await;
    assert_eq!(store.completed("m1"), Ok(Some(Completed::Acked)));

    let again_settled = pubsub.publish(message("m1", "x"));
    eventually("the confirmed ack", || sub.stats().confirmed == 1).await;
    assert_eq!(*runs.lock(), 1, "the handler ran once");
    assert_eq!(first_settled.action(), Some(Action::Ack));
    assert_eq!(again_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().replayed, 1);
    assert_eq!(store.completed("m1"), Ok(None), "cleared once confirmed");
}

#[actix_rt::test]
async fn retries_are_not_recorded() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = counting(Delivery::retry, store.clone());
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for _ in 0..2 {
        all.push(pubsub.publish(message("m1", "x")));
    }
    settled(&all).await;
    assert_eq!(*runs.lock(), 2);
    assert!(store.is_empty());
}

#[actix_rt::test]
async fn without_a_store_every_delivery_runs_the_handler() {
    tokio::time::pause();
    let store = Arc::new(MemoryStore::default());
    let (registration, runs) = counting(Delivery::ack, store);
    let registration = registration.without_progress_store();
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for _ in 0..2 {
        all.push(pubsub.publish(message("m1", "x")));
    }
    settled(&all).await;
    assert_eq!(*runs.lock(), 2);
}
