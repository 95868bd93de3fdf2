//! Stopping: what is released, what finishes, what is left behind.

use crate::store::{Completed, MemoryStore, ProgressStore, StoreError};
use crate::tests::*;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

#[actix_rt::test]
async fn stop_nacks_holds_at_once_and_waits_for_running_handlers() {
    tokio::time::pause();
    let (sub, all) = started_with(
        |data, d| {
            async move {
                if &data[..] == b"hold" {
                    return d.retry_after(Duration::from_secs(600)).unwrap();
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
                d.ack()
            }
            .boxed()
        },
        Duration::from_secs(25),
        &["hold", "work"],
    )
    .await;
    eventually("the hold started", || sub.stats().held == 1).await;
    let began = Instant::now();
    sub.stop().await;
    let took = began.elapsed();
    assert_eq!(all[0].action(), Some(Action::Nack), "the hold was nacked");
    assert_eq!(
        all[1].action(),
        Some(Action::Ack),
        "the running handler finished"
    );
    assert!(
        took < Duration::from_secs(6),
        "stop waited for the handler, not for the 600 s hold: {took:?}"
    );
    assert_eq!(sub.in_flight(), crate::status::InFlight::default());
}

#[actix_rt::test]
async fn at_the_drain_timeout_unsettled_messages_are_nacked() {
    tokio::time::pause();
    let (sub, all) = started_with(
        acks_after(Duration::from_secs(3600)),
        Duration::from_secs(2),
        &["stuck"],
    )
    .await;
    let began = Instant::now();
    sub.stop().await;
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(all[0].action(), Some(Action::Nack));
    assert_eq!(sub.stats().retried, 1);
}

#[actix_rt::test]
async fn stop_is_idempotent() {
    tokio::time::pause();
    let (sub, all) = started_with(
        acks_after(Duration::from_secs(1)),
        Duration::from_secs(25),
        &["a"],
    )
    .await;
    let (first, second) = (sub.clone(), sub.clone());
    futures::join!(first.stop(), second.stop());
    assert_eq!(all[0].action(), Some(Action::Ack));
    // And once more after it has stopped.
    sub.stop().await;
    assert_eq!(sub.stats().acked, 1);
}

#[actix_rt::test]
async fn stop_releases_what_the_client_still_buffers_without_running_it() {
    tokio::time::pause();
    let (handler, runs) = counting_acks_after(Duration::from_secs(1));
    let registration = Registration::raw(SUB, handler)
        .max_outstanding_messages(1)
        .max_read_ahead_messages(2);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for n in 0..3 {
        all.push(pubsub.publish(message(&format!("m{n}"), "x")));
    }
    eventually("the first handler running", || *runs.lock() == 1).await;
    sub.stop().await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(all[1].action(), Some(Action::Nack));
    assert_eq!(all[2].action(), Some(Action::Nack));
    assert_eq!(*runs.lock(), 1);
    // What the client buffered was received from the stream and released: every delivery is
    // counted settled once.
    let stats = sub.stats();
    assert_eq!((stats.received, stats.released, stats.settled()), (3, 2, 3));
}

/// A store that says when it is dropped.
struct DropCounted {
    inner: MemoryStore,
    dropped: Arc<AtomicBool>,
}

impl Drop for DropCounted {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl ProgressStore for DropCounted {
    fn completed(&self, id: &str) -> Result<Option<Completed>, StoreError> {
        self.inner.completed(id)
    }
    fn record(&self, id: &str, c: Completed) -> BoxFuture<'static, Result<(), StoreError>> {
        self.inner.record(id, c)
    }
    fn clear(&self, id: &str) {
        self.inner.clear(id)
    }
}

#[actix_rt::test]
async fn no_handler_starts_once_the_drain_began_and_the_store_is_dropped_when_stop_returns() {
    tokio::time::pause();
    let dropped = Arc::new(AtomicBool::new(false));
    let store = Arc::new(DropCounted {
        inner: MemoryStore::default(),
        dropped: dropped.clone(),
    });
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = starts.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        s.lock()
            .push((String::from_utf8_lossy(&data).into_owned(), Instant::now()));
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            d.ack()
        }
    })
    .workers(2)
    .progress_store(store);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for n in 0..10 {
        all.push(pubsub.publish(message(&format!("m{n}"), &n.to_string())));
    }
    eventually("two running, eight waiting", || {
        starts.lock().len() == 2 && sub.load().waiting == 8
    })
    .await;
    let began = Instant::now();
    sub.stop().await;
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the stop waited for the two running handlers only: {took:?}"
    );
    assert!(
        starts.lock().iter().all(|(_, at)| *at < began),
        "no handler started after the drain began: {:?}",
        starts.lock()
    );
    let acked: Vec<usize> = (0..10)
        .filter(|&n| all[n].action() == Some(Action::Ack))
        .collect();
    assert_eq!(acked, vec![0, 1], "the two that ran were acked");
    assert!(all[2..].iter().all(|s| s.action() == Some(Action::Nack)));
    assert_eq!(sub.stats().released, 8);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the progress store was dropped by the time stop returned"
    );
    assert_eq!(sub.state(), State::Stopped);
}

#[actix_rt::test]
async fn a_message_settled_later_is_recorded_and_its_redelivery_does_not_run_the_handler() {
    tokio::time::pause();
    let runs = Arc::new(AtomicU32::new(0));
    let settlers = Arc::new(Mutex::new(Vec::new()));
    let (r, k) = (runs.clone(), settlers.clone());
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        r.fetch_add(1, Ordering::SeqCst);
        let (later, settler) = d.settle_later();
        k.lock().push(settler);
        async move { later }
    });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first_settled = pubsub.publish(message("m1", "x"));
    eventually("the handler ran", || settlers.lock().len() == 1).await;
    let settler = settlers.lock().pop().unwrap();
    settler.ack();
    settled([&first_settled]).await;
    assert_eq!(first_settled.action(), Some(Action::Ack));
    // The ack was lost; Pub/Sub redelivers.
    let again_settled = pubsub.publish(message("m1", "x"));
    settled([&again_settled]).await;
    assert_eq!(again_settled.action(), Some(Action::Ack));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "settled from the store");
    assert_eq!(sub.stats().replayed, 1);
}

#[actix_rt::test]
async fn a_settler_refused_a_long_delay_gives_itself_back() {
    tokio::time::pause();
    let settlers = Arc::new(Mutex::new(Vec::new()));
    let k = settlers.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        let (later, settler) = d.settle_later();
        k.lock().push(settler);
        async move { later }
    })
    .max_lease(Duration::from_secs(60));
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "x"));
    eventually("the handler ran", || settlers.lock().len() == 1).await;
    let settler = settlers.lock().pop().unwrap();
    let refused = settler.retry_after(Duration::from_secs(120)).unwrap_err();
    assert!(matches!(
        refused.error(),
        crate::RetryAfterError::DelayBeyondLease { .. }
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.action(), None, "not settled by the refusal");
    refused
        .into_settler()
        .retry_after(Duration::from_secs(5))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(s.action(), None, "held for the delay");
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Nack));
}

#[actix_rt::test]
async fn a_settler_kept_after_the_stop_does_not_keep_the_store_open() {
    tokio::time::pause();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = DropCounted {
        inner: MemoryStore::default(),
        dropped: dropped.clone(),
    };
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        let (later, settler) = d.settle_later();
        k.lock().push((settler, d));
        async move { later }
    })
    .drain_timeout(Duration::from_secs(1))
    .progress_store(store);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "x"));
    eventually("the handler ran", || kept.lock().len() == 1).await;
    sub.stop().await;
    assert_eq!(
        s.action(),
        Some(Action::Nack),
        "unsettled at the drain timeout"
    );
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the store is dropped though a settler and a delivery are still kept"
    );
    // Using the settler now does nothing harmful.
    let (settler, _delivery) = kept.lock().pop().unwrap();
    settler.ack();
}
