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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let boom_settled = pubsub.publish(message("m1", "boom"));
    let fine_settled = pubsub.publish(message("m2", "fine"));
    settled([&boom_settled, &fine_settled]).await;
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
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "x"));
    settled([&s]).await;
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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "not json").attempt(1));
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Ack));
    let stats = sub.stats();
    assert_eq!((stats.decode_failures, stats.dropped), (1, 1));
}

#[actix_rt::test]
async fn the_failure_policy_can_retry() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |_: Order, d: Delivery| async move { d.ack() })
        .failure_policy(crate::FailurePolicy::Retry);
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "{}"));
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Nack));
}

async fn drop_on_attempt(
    pubsub: MemoryPubSub,
    max_attempts: Option<u32>,
    attempt: u32,
) -> (Option<Action>, Option<u32>) {
    let mut registration = Registration::raw(SUB, |_, d: Delivery| async move { d.drop() });
    if let Some(n) = max_attempts {
        registration = registration.max_attempts(n);
    }
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "x").attempt(attempt));
    settled([&s]).await;
    (s.action(), sub.max_attempts())
}

#[actix_rt::test]
async fn the_limit_comes_from_the_subscription_when_the_registration_has_none() {
    tokio::time::pause();
    assert_eq!(
        drop_on_attempt(MemoryPubSub::new().dead_letter_after(5), None, 5).await,
        (Some(Action::Nack), Some(5))
    );
    assert_eq!(
        drop_on_attempt(MemoryPubSub::new().dead_letter_after(5), None, 4).await,
        (Some(Action::Ack), Some(5))
    );
}

#[actix_rt::test]
async fn the_registration_limit_wins() {
    tokio::time::pause();
    assert_eq!(
        drop_on_attempt(MemoryPubSub::new().dead_letter_after(10), Some(3), 3).await,
        (Some(Action::Nack), Some(3))
    );
}

#[actix_rt::test]
async fn without_permission_to_read_the_subscription_drop_acks() {
    tokio::time::pause();
    let denied = MemoryPubSub::new().dead_letter_after(5);
    denied.answer_reads(ReadAnswer::Error(ReadError::PermissionDenied(
        Cause::message("no"),
    )));
    assert_eq!(
        drop_on_attempt(denied, None, 5).await,
        (Some(Action::Ack), None)
    );
}

#[actix_rt::test]
async fn start_refuses_a_missing_subscription_and_a_bad_name() {
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() });
    let pubsub = MemoryPubSub::new();
    pubsub.answer_reads(ReadAnswer::Error(ReadError::NotFound(Cause::message(
        "gone",
    ))));
    let err = start(registration.clone(), pubsub.connector())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StartError::NotFound {
            subscription: SUB.into(),
            cause: Cause::message("gone")
        }
    );

    let pubsub = MemoryPubSub::new();
    let bad = Registration::raw("orders", |_, d: Delivery| async move { d.ack() });
    let err = start(bad, pubsub.connector()).await.unwrap_err();
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
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "x"));
    settled([&s]).await;
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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let slow_settled = pubsub.publish(message("m1", "slow"));
    let quick_settled = pubsub.publish(message("m2", "quick"));
    settled([&quick_settled]).await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(sub.stats().lost_leases, 0, "not before the budget ends");
    eventually("the budget to run out", || sub.stats().lost_leases == 1).await;
    assert!(!is_settled(&slow_settled), "the handler still runs");
    release.notify_one();
    settled([&slow_settled]).await;
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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "7"));
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Ack));
    sub.stop().await;
}
