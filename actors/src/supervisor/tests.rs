//! The whole actor pipeline on in-memory fakes, with paused time.

use super::*;
use crate::fake::{FakeConnector, Settled, received};
use crate::outcome::Action;
use crate::{Outcome, PanicPolicy};
use parking_lot::Mutex;

/// Starts a subscription whose handlers run on the test's own arbiter (`worker_threads(0)`),
/// so that paused time governs them too.
async fn start(
    registration: Registration,
    connector: Rc<dyn Connector>,
) -> Result<Subscription, StartError> {
    super::start(registration.worker_threads(0), connector).await
}

const SUB: &str = "projects/p/subscriptions/orders";

fn info(max_delivery_attempts: Option<u32>) -> Result<SubscriptionInfo, ReadError> {
    Ok(SubscriptionInfo {
        exactly_once: false,
        max_delivery_attempts,
        ack_deadline: Duration::from_secs(10),
    })
}

/// Polls `done` in paused time, failing after a virtual minute.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn settled(all: &[Settled]) {
    eventually("all messages settled", || all.iter().all(Settled::dropped)).await;
}

#[actix_rt::test]
async fn one_ordering_key_runs_in_arrival_order_on_many_workers() {
    tokio::time::pause();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        let log = log.clone();
        async move {
            let n: u64 = std::str::from_utf8(&data).unwrap().parse().unwrap();
            log.lock().push(format!("start {n}"));
            // Earlier messages take longer: without ordering, later ones would finish first.
            tokio::time::sleep(Duration::from_millis(100 * (5 - n))).await;
            log.lock().push(format!("end {n}"));
            d.ack()
        }
    })
    .workers(4);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    for n in 0..5 {
        let (r, s) = received(&format!("m{n}"), "customer-1", None, &n.to_string());
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    settled(&all).await;
    let expected: Vec<String> = (0..5)
        .flat_map(|n| [format!("start {n}"), format!("end {n}")])
        .collect();
    assert_eq!(*seen.lock(), expected);
    assert!(all.iter().all(|s| s.action() == Some(Action::Ack)));
}

#[actix_rt::test]
async fn messages_without_a_key_run_concurrently() {
    tokio::time::pause();
    let running = Arc::new(Mutex::new((0usize, 0usize)));
    let r = running.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        let r = r.clone();
        async move {
            {
                let mut r = r.lock();
                r.0 += 1;
                r.1 = r.1.max(r.0);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            r.lock().0 -= 1;
            d.ack()
        }
    })
    .workers(3);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    for n in 0..6 {
        let (r, s) = received(&format!("m{n}"), "", None, "x");
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    settled(&all).await;
    assert_eq!(running.lock().1, 3, "peak concurrency is the worker count");
}

#[actix_rt::test]
async fn a_panicking_handler_retries_its_message_and_the_pool_keeps_serving() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |data, d: Delivery| async move {
        if &data[..] == b"boom" {
            panic!("handler bug");
        }
        d.ack()
    })
    .workers(1);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (boom, boom_settled) = received("m1", "", None, "boom");
    let (fine, fine_settled) = received("m2", "", None, "fine");
    streams[0].send(Ok(boom)).unwrap();
    streams[0].send(Ok(fine)).unwrap();
    settled(&[boom_settled.clone(), fine_settled.clone()]).await;
    assert_eq!(boom_settled.action(), Some(Action::Nack));
    assert_eq!(fine_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().panics, 1);
}

#[actix_rt::test]
async fn the_panic_policy_can_drop() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, _: Delivery| async move {
        panic!("always");
        #[allow(unreachable_code)]
        Outcome::ack()
    })
    .panic_policy(PanicPolicy::Drop);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let (r, s) = received("m1", "", None, "x");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(s.action(), Some(Action::Ack));
}

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    id: u64,
}

#[actix_rt::test]
async fn an_undecodable_payload_is_dropped_by_default() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |_: Order, d: Delivery| async move { d.retry() });
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (r, s) = received("m1", "", Some(1), "not json");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(s.action(), Some(Action::Ack));
    let stats = sub.stats();
    assert_eq!((stats.decode_failures, stats.dropped), (1, 1));
}

#[actix_rt::test]
async fn the_failure_policy_can_retry() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |_: Order, d: Delivery| async move { d.ack() })
        .failure_policy(crate::FailurePolicy::Retry);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let (r, s) = received("m1", "", None, "{}");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(s.action(), Some(Action::Nack));
}

async fn drop_on_attempt(
    read: Result<SubscriptionInfo, ReadError>,
    max_attempts: Option<u32>,
    attempt: u32,
) -> (Option<Action>, Option<u32>) {
    let mut registration = Registration::raw(SUB, |_, d: Delivery| async move { d.drop() });
    if let Some(n) = max_attempts {
        registration = registration.max_attempts(n);
    }
    let (connector, streams) = FakeConnector::new(read, 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (r, s) = received("m1", "", Some(attempt), "x");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    (s.action(), sub.max_attempts())
}

#[actix_rt::test]
async fn the_limit_comes_from_the_subscription_when_the_registration_has_none() {
    tokio::time::pause();
    assert_eq!(
        drop_on_attempt(info(Some(5)), None, 5).await,
        (Some(Action::Nack), Some(5))
    );
    assert_eq!(
        drop_on_attempt(info(Some(5)), None, 4).await,
        (Some(Action::Ack), Some(5))
    );
}

#[actix_rt::test]
async fn the_registration_limit_wins() {
    tokio::time::pause();
    assert_eq!(
        drop_on_attempt(info(Some(10)), Some(3), 3).await,
        (Some(Action::Nack), Some(3))
    );
}

#[actix_rt::test]
async fn without_permission_to_read_the_subscription_drop_acks() {
    tokio::time::pause();
    let denied = Err(ReadError::PermissionDenied("no".into()));
    assert_eq!(
        drop_on_attempt(denied, None, 5).await,
        (Some(Action::Ack), None)
    );
}

#[actix_rt::test]
async fn start_refuses_a_missing_subscription_and_a_bad_name() {
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() });
    let (connector, _) = FakeConnector::new(Err(ReadError::NotFound("gone".into())), 1);
    let err = start(registration.clone(), Rc::new(connector))
        .await
        .unwrap_err();
    assert_eq!(err, StartError::NotFound(SUB.into()));

    let (connector, _) = FakeConnector::new(info(None), 1);
    let bad = Registration::raw("orders", |_, d: Delivery| async move { d.ack() });
    let err = start(bad, Rc::new(connector)).await.unwrap_err();
    assert_eq!(err, StartError::InvalidName("orders".into()));
}

#[actix_rt::test]
async fn a_failed_stream_is_reopened_and_leased_messages_survive() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        d.ack()
    });
    let (connector, streams) = FakeConnector::new(info(None), 2);
    let opened = connector.opened.clone();
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (first, first_settled) = received("m1", "", None, "x");
    streams[0].send(Ok(first)).unwrap();
    streams[0]
        .send(Err(SourceError::Stream("UNAVAILABLE".into())))
        .unwrap();
    eventually("the stream reopened", || opened.lock().len() == 2).await;
    let (second, second_settled) = received("m2", "", None, "x");
    streams[1].send(Ok(second)).unwrap();
    settled(&[first_settled.clone(), second_settled.clone()]).await;
    assert_eq!(first_settled.action(), Some(Action::Ack));
    assert_eq!(second_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().stream_restarts, 1);
    assert_eq!(opened.lock()[1].subscription, SUB);
}

#[actix_rt::test]
async fn a_settler_sent_elsewhere_settles_and_a_lost_one_retries() {
    tokio::time::pause();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        let k = k.clone();
        async move {
            let (outcome, settler) = d.settle_later();
            if &data[..] == b"keep" {
                k.lock().push(settler);
            }
            outcome
        }
    });
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let (keep, keep_settled) = received("m1", "", None, "keep");
    let (lose, lose_settled) = received("m2", "", None, "lose");
    streams[0].send(Ok(keep)).unwrap();
    streams[0].send(Ok(lose)).unwrap();
    settled(std::slice::from_ref(&lose_settled)).await;
    assert_eq!(lose_settled.action(), Some(Action::Nack));
    assert_eq!(
        keep_settled.action(),
        None,
        "held until its settler is used"
    );
    let settler = kept.lock().pop().unwrap();
    settler.ack();
    settled(std::slice::from_ref(&keep_settled)).await;
    assert_eq!(keep_settled.action(), Some(Action::Ack));
}

#[actix_rt::test]
async fn retry_after_beyond_the_remaining_lease_is_refused_in_the_call() {
    tokio::time::pause();
    let refused = Arc::new(Mutex::new(None));
    let r = refused.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        let r = r.clone();
        async move {
            let result = d.retry_after(Duration::from_secs(120));
            *r.lock() = Some(result.clone());
            result
        }
    })
    .max_lease(Duration::from_secs(60));
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let _sub = start(registration, Rc::new(connector)).await.unwrap();
    let (m, s) = received("m1", "", None, "x");
    streams[0].send(Ok(m)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert!(matches!(
        refused.lock().clone(),
        Some(Err(crate::PubSubError::DelayBeyondLease { requested, .. }))
            if requested == Duration::from_secs(120)
    ));
    // The handler returned the error: the message is retried.
    assert_eq!(s.action(), Some(Action::Nack));
}

#[test]
fn subscription_names_follow_pub_sub_rules() {
    assert_eq!(validate_subscription_name(SUB), Ok(()));
    for bad in [
        "orders",
        "projects/p/subscriptions/ab",
        "projects/p/subscriptions/1abc",
        "projects/p/topics/orders",
        "projects//subscriptions/orders",
        "projects/p/subscriptions/or ders",
    ] {
        assert!(validate_subscription_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn limits_resolve_registration_first_and_flag_a_mismatch() {
    assert_eq!(resolve_limit(None, Some(5)), (Some(5), false));
    assert_eq!(resolve_limit(Some(3), Some(5)), (Some(3), true));
    assert_eq!(resolve_limit(Some(5), Some(5)), (Some(5), false));
    assert_eq!(resolve_limit(None, None), (None, false));
}

#[test]
fn backoff_doubles_up_to_the_cap_and_resets() {
    let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
    let full: Vec<_> = (0..4).map(|_| b.next_delay(1.0)).collect();
    assert_eq!(
        full,
        [100, 200, 400, 400].map(Duration::from_millis).to_vec()
    );
    assert_eq!(
        b.next_delay(0.0),
        Duration::from_millis(200),
        "jitter halves at most"
    );
    b.reset(Duration::from_millis(100));
    assert_eq!(b.next_delay(1.0), Duration::from_millis(100));
}

#[actix_rt::test]
async fn flow_control_bounds_messages_in_handlers_and_held() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |data, d: Delivery| async move {
        if &data[..] == b"hold" {
            return d.retry_after(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(d.ack())
    })
    .workers(8)
    .max_outstanding_messages(3);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    for n in 0..12 {
        let (r, s) = received(
            &format!("m{n}"),
            "",
            None,
            if n % 4 == 0 { "hold" } else { "x" },
        );
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    let peak = Arc::new(Mutex::new(0));
    let p = peak.clone();
    let s = sub.clone();
    eventually("all settled", || {
        let now = s.in_flight().messages;
        let mut peak = p.lock();
        *peak = now.max(*peak);
        all.iter().all(Settled::dropped)
    })
    .await;
    assert_eq!(*peak.lock(), 3, "never more than max_outstanding_messages");
    assert_eq!(sub.stats().peak_outstanding, 3);
    assert_eq!(sub.in_flight(), crate::InFlight::default());
}

#[actix_rt::test]
async fn flow_control_bounds_bytes() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        d.ack()
    })
    .max_outstanding_bytes(10);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    // Four 4-byte payloads and one far over the limit, which must run alone.
    for (n, data) in ["aaaa", "bbbb", "cccc", &"x".repeat(1000), "dddd"]
        .iter()
        .enumerate()
    {
        let (r, s) = received(&format!("m{n}"), "", None, data);
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    let s = sub.clone();
    let over = Arc::new(Mutex::new(false));
    let o = over.clone();
    eventually("all settled", || {
        if s.in_flight().bytes > 10 {
            *o.lock() = true;
        }
        all.iter().all(Settled::dropped)
    })
    .await;
    assert!(!*over.lock(), "outstanding bytes went over the limit");
    assert!(all.iter().all(|s| s.action() == Some(Action::Ack)));
}

async fn started_with(
    handler: impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome>
    + Send
    + Sync
    + 'static,
    drain_timeout: Duration,
    payloads: &[&str],
) -> (Subscription, Vec<Settled>) {
    let registration = Registration::raw(SUB, handler).drain_timeout(drain_timeout);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    for (n, data) in payloads.iter().enumerate() {
        let (r, s) = received(&format!("m{n}"), "", None, data);
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    let s = sub.clone();
    let count = payloads.len() as u64;
    eventually("all received", move || s.stats().received == count).await;
    (sub, all)
}

use bytes::Bytes;
use futures::FutureExt;

/// A handler that acks after `delay`.
fn acks_after(
    delay: Duration,
) -> impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome> + Send + Sync {
    move |_, d| {
        async move {
            tokio::time::sleep(delay).await;
            d.ack()
        }
        .boxed()
    }
}

/// A handler that counts its runs and acks after `delay`.
fn counting_acks_after(
    delay: Duration,
) -> (
    impl Fn(Bytes, Delivery) -> futures::future::BoxFuture<'static, Outcome> + Send + Sync,
    Arc<Mutex<u32>>,
) {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let ack = acks_after(delay);
    (
        move |data, d| {
            *r.lock() += 1;
            ack(data, d)
        },
        runs,
    )
}

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
    assert_eq!(sub.in_flight(), crate::InFlight::default());
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

mod progress {
    use super::*;
    use crate::error::AckFailure;
    use crate::fake::{FakeHandle, received_with};
    use crate::progress::{Completed, MemoryStore, ProgressStore};

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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        // Pub/Sub refuses the first ack (say, the lease was lost) and redelivers.
        let refused = FakeHandle::confirming(Some(Err(AckFailure::LeaseExpired)));
        let (first, first_settled) = received_with(refused, "m1", "", None, "x");
        streams[0].send(Ok(first)).unwrap();
        eventually("the failed ack", || sub.stats().failed_acks == 1).await;
        assert_eq!(store.completed("m1"), Ok(Some(Completed::Acked)));

        let accepted = FakeHandle::confirming(Some(Ok(())));
        let (again, again_settled) = received_with(accepted, "m1", "", None, "x");
        streams[0].send(Ok(again)).unwrap();
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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let _sub = start(registration, Rc::new(connector)).await.unwrap();
        let mut all = Vec::new();
        for _ in 0..2 {
            let (r, s) = received("m1", "", None, "x");
            streams[0].send(Ok(r)).unwrap();
            all.push(s);
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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let _sub = start(registration, Rc::new(connector)).await.unwrap();
        let mut all = Vec::new();
        for _ in 0..2 {
            let (r, s) = received("m1", "", None, "x");
            streams[0].send(Ok(r)).unwrap();
            all.push(s);
        }
        settled(&all).await;
        assert_eq!(*runs.lock(), 2);
    }
}

#[actix_rt::test]
async fn a_redelivery_of_a_running_message_waits_for_it_and_is_not_run_twice() {
    tokio::time::pause();
    let (handler, runs) = counting_acks_after(Duration::from_secs(30));
    let registration = Registration::raw(SUB, handler).workers(4);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (first, first_settled) = received("m1", "", None, "x");
    streams[0].send(Ok(first)).unwrap();
    eventually("the first run started", || *runs.lock() == 1).await;
    let (again, again_settled) = received("m1", "", None, "x");
    streams[0].send(Ok(again)).unwrap();
    settled(&[first_settled.clone(), again_settled.clone()]).await;
    assert_eq!(
        *runs.lock(),
        1,
        "the redelivery waited and was settled from the store"
    );
    assert_eq!(again_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().replayed, 1);
}

#[actix_rt::test]
async fn several_streams_pull_in_parallel_and_reopen_one_at_a_time() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() }).streams(3);
    let (connector, streams) = FakeConnector::new(info(None), 4);
    let opened = connector.opened.clone();
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    eventually("three streams open", || opened.lock().len() == 3).await;
    let mut all = Vec::new();
    for (n, stream) in streams.iter().take(3).enumerate() {
        let (r, s) = received(&format!("m{n}"), "", None, "x");
        stream.send(Ok(r)).unwrap();
        all.push(s);
    }
    settled(&all).await;
    streams[1]
        .send(Err(SourceError::Stream("UNAVAILABLE".into())))
        .unwrap();
    eventually("the failed stream reopened", || opened.lock().len() == 4).await;
    let (r, s) = received("m3", "", None, "x");
    streams[3].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(
        sub.stats().stream_restarts,
        1,
        "only the failed stream restarted"
    );
    assert_eq!(sub.stats().acked, 4);
}

#[actix_rt::test]
async fn stop_releases_what_the_client_still_buffers_without_running_it() {
    tokio::time::pause();
    let (handler, runs) = counting_acks_after(Duration::from_secs(1));
    let registration = Registration::raw(SUB, handler).max_outstanding_messages(1);
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let mut all = Vec::new();
    for n in 0..3 {
        let (r, s) = received(&format!("m{n}"), "", None, "x");
        streams[0].send(Ok(r)).unwrap();
        all.push(s);
    }
    eventually("the first handler running", || *runs.lock() == 1).await;
    sub.stop().await;
    assert_eq!(all[0].action(), Some(Action::Ack));
    assert_eq!(all[1].action(), Some(Action::Nack));
    assert_eq!(all[2].action(), Some(Action::Nack));
    assert_eq!(*runs.lock(), 1);
    assert_eq!(sub.stats().released, 2);
}

mod supervision {
    //! Deaths of Leasehold's own actors and panics in user code: every message still settled.
    use super::*;
    use crate::FailurePolicy;
    use crate::error::AckFailure;
    use crate::fake::{FakeHandle, received_with};
    use crate::progress::{Completed, MemoryStore, ProgressStore, StoreError};
    use crate::worker_pool::KillWorker;
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
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        let (r, cut) = received("m1", "", None, "x");
        streams[0].send(Ok(r)).unwrap();
        eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
        sub.pool.do_send(KillWorker(0));
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
        let sub = start(registration, Rc::new(connector)).await.unwrap();
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
        sub.pool.do_send(crate::worker_pool::Crash);
        settled(&all).await;
        assert!(all.iter().all(|s| s.action() == Some(Action::Nack)));
        eventually("the failure reported", || {
            matches!(sub.state(), State::Failed(_))
        })
        .await;
        assert_eq!(sub.state(), State::Failed("the worker pool died".into()));
        assert_eq!(sub.stats().actor_failures, 1);
        // Pulling stopped; a stop still ends it cleanly.
        sub.stop().await;
        assert_eq!(sub.state(), State::Failed("the worker pool died".into()));
        assert_eq!(sub.in_flight(), crate::InFlight::default());
    }

    #[actix_rt::test]
    async fn a_dead_ack_sink_fails_the_subscription_and_nothing_is_stranded() {
        tokio::time::pause();
        let (registration, starts) = counted(Duration::from_secs(3600));
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        let (r, running) = received("m1", "", None, "x");
        streams[0].send(Ok(r)).unwrap();
        eventually("the handler started", || starts.load(Ordering::SeqCst) == 1).await;
        sub.sink.do_send(crate::ack_sink::Crash);
        settled(std::slice::from_ref(&running)).await;
        assert_eq!(running.action(), Some(Action::Nack));
        eventually("the failure reported", || {
            sub.state() == State::Failed("the ack sink died".into())
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
            let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() })
                .progress_store(store);
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
}

mod stopping {
    //! What a stop leaves behind: nothing running, nothing held.
    use super::*;
    use crate::progress::{Completed, MemoryStore, ProgressStore, StoreError};
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        let mut all = Vec::new();
        for n in 0..10 {
            let (r, s) = received(&format!("m{n}"), "", None, &n.to_string());
            streams[0].send(Ok(r)).unwrap();
            all.push(s);
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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let sub = start(registration, Rc::new(connector)).await.unwrap();
        let (first, first_settled) = received("m1", "", None, "x");
        streams[0].send(Ok(first)).unwrap();
        eventually("the handler ran", || settlers.lock().len() == 1).await;
        let settler = settlers.lock().pop().unwrap();
        settler.ack();
        settled(std::slice::from_ref(&first_settled)).await;
        assert_eq!(first_settled.action(), Some(Action::Ack));
        // The ack was lost; Pub/Sub redelivers.
        let (again, again_settled) = received("m1", "", None, "x");
        streams[0].send(Ok(again)).unwrap();
        settled(std::slice::from_ref(&again_settled)).await;
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
        let (connector, streams) = FakeConnector::new(info(None), 1);
        let _sub = start(registration, Rc::new(connector)).await.unwrap();
        let (m, s) = received("m1", "", None, "x");
        streams[0].send(Ok(m)).unwrap();
        eventually("the handler ran", || settlers.lock().len() == 1).await;
        let settler = settlers.lock().pop().unwrap();
        let refused = settler.retry_after(Duration::from_secs(120)).unwrap_err();
        assert!(matches!(
            refused.error(),
            crate::PubSubError::DelayBeyondLease { .. }
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(s.action(), None, "not settled by the refusal");
        refused
            .into_settler()
            .retry_after(Duration::from_secs(5))
            .unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(s.action(), None, "held for the delay");
        settled(std::slice::from_ref(&s)).await;
        assert_eq!(s.action(), Some(Action::Nack));
    }
}
