//! Deaths of Leasehold's own actors and panics in user code: every message still settled.

use crate::FailurePolicy;
use crate::error::AckFailure;
use crate::fake::{FakeHandle, received_with};
use crate::progress::{Completed, MemoryStore, ProgressStore, StoreError};
use crate::shared::{Failure, Role};
use crate::tests::*;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU32, Ordering};

/// A handler that counts its starts and acks after `delay`.
fn counted(delay: Duration) -> (Registration, Arc<AtomicU32>) {
    let starts = Arc::new(AtomicU32::new(0));
    let s = starts.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        s.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(delay).await;
            d.ack()
        }
    });
    (registration, starts)
}

#[actix_rt::test]
async fn a_worker_that_dies_is_restarted_and_the_message_it_ran_is_retried() {
    tokio::time::pause();
    let (registration, starts) = counted(Duration::from_secs(10));
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let (sub, supervisor) = start_actor(registration, Rc::new(connector)).await;
    let (r, cut) = received("m1", "", None, "x");
    streams[0].send(Ok(r)).unwrap();
    eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
    supervisor.do_send(Sabotage::KillWorker(0));
    settled(std::slice::from_ref(&cut)).await;
    assert_eq!(cut.action(), Some(Action::Nack), "its message is retried");
    eventually("the worker restarted", || sub.stats().worker_restarts == 1).await;
    let stats = sub.stats();
    assert_eq!((stats.actor_failures, stats.retried), (1, 1));
    assert_eq!(sub.state(), State::Running);
    // The consumer keeps consuming on the new worker.
    let (r, after) = received("m2", "", None, "x");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&after)).await;
    assert_eq!(after.action(), Some(Action::Ack));
    sub.stop().await;
    assert_eq!(sub.state(), State::Stopped);
}

#[actix_rt::test]
async fn a_dead_pool_fails_the_subscription_and_nacks_what_it_held() {
    tokio::time::pause();
    let (registration, starts) = counted(Duration::from_secs(3600));
    let registration = registration.workers(1);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let (sub, supervisor) = start_actor(registration, Rc::new(connector)).await;
    let mut all = Vec::new();
    for n in 0..3 {
        let (r, s) = received(&format!("m{n}"), "", None, "x");
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    eventually("a handler running, two waiting", || {
        starts.load(Ordering::SeqCst) == 1 && sub.load().waiting == 2
    })
    .await;
    supervisor.do_send(Sabotage::CrashPool);
    settled(&all).await;
    assert!(all.iter().all(|s| s.action() == Some(Action::Nack)));
    eventually("the failure reported", || {
        matches!(sub.state(), State::Failed(_))
    })
    .await;
    assert_eq!(
        sub.state(),
        State::Failed(Failure::ActorDied(Role::WorkerPool))
    );
    assert_eq!(sub.stats().actor_failures, 1);
    // Pulling stopped; a stop still ends it cleanly.
    sub.stop().await;
    assert_eq!(
        sub.state(),
        State::Failed(Failure::ActorDied(Role::WorkerPool))
    );
    assert_eq!(sub.in_flight(), crate::InFlight::default());
}

#[actix_rt::test]
async fn a_dead_ack_sink_fails_the_subscription_and_nothing_is_stranded() {
    tokio::time::pause();
    let (registration, starts) = counted(Duration::from_secs(3600));
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let (sub, supervisor) = start_actor(registration, Rc::new(connector)).await;
    let (r, running) = received("m1", "", None, "x");
    streams[0].send(Ok(r)).unwrap();
    eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
    supervisor.do_send(Sabotage::CrashSink);
    settled(std::slice::from_ref(&running)).await;
    assert_eq!(running.action(), Some(Action::Nack));
    eventually("the failure reported", || {
        sub.state() == State::Failed(Failure::ActorDied(Role::AckSink))
    })
    .await;
    assert_eq!(sub.stats().actor_failures, 1);
    sub.stop().await;
}

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    id: u64,
}

#[actix_rt::test]
async fn a_panicking_failure_policy_settles_by_the_panic_policy_and_consuming_goes_on() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |_: Order, d: Delivery| async move { d.ack() })
        .failure_policy(FailurePolicy::custom(|_, _| panic!("policy bug")));
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (bad, bad_settled) = received("m1", "", None, "not json");
    let (good, good_settled) = received("m2", "", None, r#"{"id": 1}"#);
    streams[0].send(Ok(bad)).unwrap();
    streams[0].send(Ok(good)).unwrap();
    settled(&[bad_settled.clone(), good_settled.clone()]).await;
    assert_eq!(
        bad_settled.action(),
        Some(Action::Nack),
        "the panic policy: retry"
    );
    assert_eq!(good_settled.action(), Some(Action::Ack));
    let stats = sub.stats();
    assert_eq!((stats.decode_failures, stats.panics), (1, 1));
}

/// A store that panics in one of its methods, and otherwise keeps records in memory.
struct Panicky {
    method: &'static str,
    inner: MemoryStore,
}

impl ProgressStore for Panicky {
    fn completed(&self, id: &str) -> Result<Option<Completed>, StoreError> {
        assert_ne!(self.method, "completed", "store bug in completed");
        self.inner.completed(id)
    }
    fn record(&self, id: &str, c: Completed) -> BoxFuture<'static, Result<(), StoreError>> {
        assert_ne!(self.method, "record", "store bug in record");
        if self.method == "record-future" {
            return Box::pin(async { panic!("store bug in record's future") });
        }
        self.inner.record(id, c)
    }
    fn clear(&self, id: &str) {
        assert_ne!(self.method, "clear", "store bug in clear");
        self.inner.clear(id)
    }
}

#[actix_rt::test]
async fn a_panicking_progress_store_is_counted_and_every_message_still_settles() {
    tokio::time::pause();
    for method in ["completed", "record", "record-future", "clear"] {
        let store = Arc::new(Panicky {
            method,
            inner: MemoryStore::default(),
        });
        let registration =
            Registration::raw(SUB, |_, d: Delivery| async move { d.ack() }).progress_store(store);
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        let mut all = Vec::new();
        for n in 0..3 {
            let confirming = FakeHandle::confirming(Some(Ok::<(), AckFailure>(())));
            let (r, s) = received_with(confirming, &format!("m{n}"), "", None, "x");
            streams[0].send(Ok(r)).unwrap();
            all.push(s);
        }
        settled(&all).await;
        eventually("all confirmed", || sub.stats().confirmed == 3).await;
        assert!(
            all.iter().all(|s| s.action() == Some(Action::Ack)),
            "{method}: every message acked"
        );
        assert_eq!(sub.stats().panics, 3, "{method}: each panic counted");
        sub.stop().await;
        assert_eq!(sub.state(), State::Stopped, "{method}");
    }
}
