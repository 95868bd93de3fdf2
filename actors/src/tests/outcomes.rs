//! What outcomes, panics, decode failures and the dead-letter limit become.

use crate::error::Cause;
use crate::tests::*;

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
    let denied = Err(ReadError::PermissionDenied(Cause::message("no")));
    assert_eq!(
        drop_on_attempt(denied, None, 5).await,
        (Some(Action::Ack), None)
    );
}

#[actix_rt::test]
async fn start_refuses_a_missing_subscription_and_a_bad_name() {
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() });
    let (connector, _) = FakeConnector::new(Err(ReadError::NotFound(Cause::message("gone"))), 1);
    let err = start(registration.clone(), Rc::new(connector))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StartError::NotFound {
            subscription: SUB.into(),
            cause: Cause::message("gone")
        }
    );

    let (connector, _) = FakeConnector::new(info(None), 1);
    let bad = Registration::raw("orders", |_, d: Delivery| async move { d.ack() });
    let err = start(bad, Rc::new(connector)).await.unwrap_err();
    assert_eq!(err, StartError::InvalidName("orders".into()));
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
        Some(Err(crate::RetryAfterError::DelayBeyondLease { requested, .. }))
            if requested == Duration::from_secs(120)
    ));
    // The handler returned the error: the message is retried.
    assert_eq!(s.action(), Some(Action::Nack));
}

#[actix_rt::test]
async fn a_lease_whose_budget_runs_out_is_counted_lost_and_its_late_ack_still_goes_out() {
    tokio::time::pause();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        let gate = gate.clone();
        async move {
            if &data[..] == b"slow" {
                gate.notified().await;
            }
            d.ack()
        }
    })
    .worker_threads(0)
    .max_lease(Duration::from_secs(30));
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (slow, slow_settled) = received("m1", "", None, "slow");
    let (quick, quick_settled) = received("m2", "", None, "quick");
    streams[0].send(Ok(slow)).unwrap();
    streams[0].send(Ok(quick)).unwrap();
    settled(std::slice::from_ref(&quick_settled)).await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(sub.stats().lost_leases, 0, "not before the budget ends");
    eventually("the budget to run out", || sub.stats().lost_leases == 1).await;
    assert!(!slow_settled.dropped(), "the handler still runs");
    release.notify_one();
    settled(std::slice::from_ref(&slow_settled)).await;
    assert_eq!(slow_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().lost_leases, 1);
}

/// A handler's future is created and polled on the worker thread that runs it: it may hold
/// what is not `Send` (an `Rc`, a `RefCell` borrow's owner) across an `.await`.
#[actix_rt::test]
async fn an_async_handler_may_hold_what_is_not_send_across_an_await() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |n: u32, d: Delivery| async move {
        let local = std::rc::Rc::new(std::cell::RefCell::new(n));
        tokio::time::sleep(Duration::from_millis(10)).await;
        *local.borrow_mut() += 1;
        if *local.borrow() == 8 {
            d.ack()
        } else {
            d.retry()
        }
    });
    let (connector, streams) = FakeConnector::new(info(None), 1);
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (r, s) = received("m1", "", None, "7");
    streams[0].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(s.action(), Some(Action::Ack));
    sub.stop().await;
}
