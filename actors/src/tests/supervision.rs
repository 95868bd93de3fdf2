//! Deaths of Leasehold's own actors and panics in user code: every message still settled.

use crate::FailurePolicy;
use crate::status::{Failure, Role};
use crate::store::{Completed, MemoryStore, ProgressStore, StoreError};
use crate::tests::*;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
    let pubsub = MemoryPubSub::new();
    let (sub, supervisor) = start_actor(registration, pubsub.connector()).await;
    let cut = pubsub.publish(message("m1", "x"));
    eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
    supervisor.do_send(Sabotage::KillWorker(0));
    settled([&cut]).await;
    assert_eq!(cut.action(), Some(Action::Nack), "its message is retried");
    eventually("the worker restarted", || sub.stats().worker_restarts == 1).await;
    let stats = sub.stats();
    assert_eq!((stats.actor_failures, stats.retried), (1, 1));
    assert_eq!(sub.state(), State::Running);
    // The consumer keeps consuming on the new worker.
    let after = pubsub.publish(message("m2", "x"));
    settled([&after]).await;
    assert_eq!(after.action(), Some(Action::Ack));
    sub.stop().await;
    assert_eq!(sub.state(), State::Stopped);
}

#[actix_rt::test]
async fn a_dead_pool_fails_the_subscription_and_nacks_what_it_held() {
    tokio::time::pause();
    let (registration, starts) = counted(Duration::from_secs(3600));
    let registration = registration.workers(1);
    let pubsub = MemoryPubSub::new();
    let (sub, supervisor) = start_actor(registration, pubsub.connector()).await;
    let mut all = Vec::new();
    for n in 0..3 {
        all.push(pubsub.publish(message(&format!("m{n}"), "x")));
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
    assert_eq!(sub.in_flight(), crate::status::InFlight::default());
}

#[actix_rt::test]
async fn a_dead_ack_sink_fails_the_subscription_and_nothing_is_stranded() {
    tokio::time::pause();
    let (registration, starts) = counted(Duration::from_secs(3600));
    let pubsub = MemoryPubSub::new();
    let (sub, supervisor) = start_actor(registration, pubsub.connector()).await;
    let running = pubsub.publish(message("m1", "x"));
    eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
    supervisor.do_send(Sabotage::CrashSink);
    settled([&running]).await;
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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let bad_settled = pubsub.publish(message("m1", "not json"));
    let good_settled = pubsub.publish(message("m2", r#"{"id": 1}"#));
    settled([&bad_settled, &good_settled]).await;
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
        let pubsub = MemoryPubSub::new().exactly_once();
        let sub = start(registration, pubsub.connector()).await.unwrap();
        let all: Vec<Published> = (0..3)
            .map(|n| pubsub.publish(message(&format!("m{n}"), "x")))
            .collect();
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

/// Starts `registration` (handlers on the supervisor's own arbiter) on a new arbiter, a thread
/// of its own, and delivers `messages` messages there. Returns the handle, the messages' fates
/// and the arbiter.
async fn start_on_own_thread(
    registration: Registration,
    messages: usize,
) -> (Subscription, Vec<Published>, actix_rt::Arbiter) {
    let arbiter = actix_rt::Arbiter::new();
    let (started, handed) = tokio::sync::oneshot::channel();
    // The closure crosses to the new thread; the future it spawns there need not be `Send`.
    arbiter.spawn_fn(move || {
        actix_rt::spawn(async move {
            let pubsub = MemoryPubSub::new();
            let sub = start(registration, pubsub.connector()).await.unwrap();
            let mut all = Vec::new();
            for n in 0..messages {
                all.push(pubsub.publish(message(&format!("m{n}"), "x")));
            }
            let _ = started.send((sub, all));
        });
    });
    let (sub, all) = handed.await.expect("started");
    (sub, all, arbiter)
}

/// Polls `done` in real time (another thread does the work), failing after `within`.
async fn within_real_time(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A handler that blocks its thread until `released` is set: with `worker_threads(0)` that
/// thread is the supervisor's, as a user's mistake would make it.
fn blocking_until(released: Arc<AtomicBool>, started: Arc<AtomicU32>) -> Registration {
    Registration::raw(SUB, move |_, d: Delivery| {
        started.fetch_add(1, Ordering::SeqCst);
        while !released.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        async move { d.ack() }
    })
}

#[actix_rt::test]
async fn a_wedged_supervisor_is_not_live_within_its_liveness_timeout_and_recovers() {
    let (released, started) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let registration = blocking_until(released.clone(), Arc::clone(&started))
        .liveness_timeout(Duration::from_secs(1))
        .worker_threads(0);
    let (sub, all, arbiter) = start_on_own_thread(registration, 1).await;
    // Wedged from its first message on.
    within_real_time("the handler blocking", Duration::from_secs(10), || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    let wedged_at = std::time::Instant::now();
    within_real_time("not live", Duration::from_secs(10), || !sub.health().live).await;
    let health = sub.health();
    assert!(
        matches!(health.why, crate::status::HealthReason::Unresponsive { silent_for } if silent_for > Duration::from_secs(1)),
        "{health}"
    );
    assert!(
        wedged_at.elapsed() >= Duration::from_millis(500),
        "not before the timeout could have passed"
    );
    assert_eq!(sub.state(), State::Running, "nothing failed: it is stuck");
    // Unblocked, it answers again.
    released.store(true, Ordering::SeqCst);
    within_real_time("live again", Duration::from_secs(10), || sub.health().live).await;
    within_real_time("acked", Duration::from_secs(10), || {
        all[0].action() == Some(Action::Ack)
    })
    .await;
    sub.stop().await;
    arbiter.stop();
}

/// The one path on which a lease actor ends with its message unsettled: its arbiter ends under
/// it. Its handle's drop nacks the message, and it is counted, so that received = settled.
#[actix_rt::test]
async fn a_supervisor_whose_arbiter_stops_fails_the_subscription_and_every_message_is_nacked() {
    let registration =
        Registration::raw(SUB, |_, _: Delivery| futures::future::pending::<Outcome>())
            .worker_threads(0);
    let (sub, all, arbiter) = start_on_own_thread(registration, 3).await;
    within_real_time("three running", Duration::from_secs(10), || {
        sub.load().running == 3
    })
    .await;
    arbiter.stop();
    within_real_time("every message nacked", Duration::from_secs(10), || {
        all.iter().all(|s| s.action() == Some(Action::Nack))
    })
    .await;
    within_real_time(
        "the handle reports the failure",
        Duration::from_secs(10),
        || sub.state() == State::Failed(Failure::ActorDied(Role::Supervisor)),
    )
    .await;
    let stats = sub.stats();
    assert_eq!(
        (stats.received, stats.retried, stats.unsettled()),
        (3, 3, 0)
    );
    assert_eq!(stats.actor_failures, 1);
    assert!(!sub.health().live);
    // stop() returns: nothing of the subscription is left.
    sub.stop().await;
}
