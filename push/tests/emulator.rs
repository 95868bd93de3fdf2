//! Push delivery against Google's emulator pushing to the test's own endpoint on 127.0.0.1:
//! each outcome becomes the status Pub/Sub reads, and Pub/Sub acts on it.

mod support;

use leasehold::{Delivery, Registration};
use leasehold_push::Push;
use leasehold_test_support::{Record, Scratch, eventually, never_within};
use std::time::Duration;
use support::{PATH, Served, push_to};

/// Starts `registration` behind an unauthenticated endpoint (the emulator sends no token), on
/// a push subscription of the test's own.
async fn pushed(
    make: impl FnOnce(&str) -> Registration,
) -> (
    Scratch,
    leasehold::Subscription,
    leasehold_push::PushEndpoint,
    Served,
) {
    pushed_with(make, |s| s, |p| p).await
}

/// A subscription name of the test's own, its endpoint (unauthenticated, shaped by `push`)
/// bound and served, and the connector to start its registration with.
async fn bound(
    push: impl FnOnce(Push) -> Push,
) -> (
    String,
    std::rc::Rc<dyn leasehold::source::Connector>,
    leasehold_push::PushEndpoint,
    Served,
) {
    let name = format!(
        "{}/subscriptions/{}",
        leasehold_test_support::PROJECT,
        leasehold_test_support::unique("push")
    );
    let connector = leasehold_test_support::connection()
        .connect()
        .await
        .unwrap();
    let (connector, endpoint) = push(Push::allow_unauthenticated(PATH)).bind(&name, connector);
    let served = Served::start(&endpoint);
    (name, connector, endpoint, served)
}

async fn pushed_with(
    make: impl FnOnce(&str) -> Registration,
    shape: impl FnOnce(
        google_cloud_pubsub::model::Subscription,
    ) -> google_cloud_pubsub::model::Subscription,
    push: impl FnOnce(Push) -> Push,
) -> (
    Scratch,
    leasehold::Subscription,
    leasehold_push::PushEndpoint,
    Served,
) {
    // The server must listen before the subscription pushes to it, and the subscription must
    // exist before the registration reads it: bind first, serve, subscribe, start.
    let (name, connector, endpoint, served) = bound(push).await;
    let url = served.url();
    let scratch = Scratch::named(&name, move |s| shape(push_to(url)(s))).await;
    let subscription = leasehold::start_with(make(&name), connector).await.unwrap();
    (scratch, subscription, endpoint, served)
}

#[actix_rt::test]
async fn acked_and_dropped_pushes_are_answered_with_success_and_not_pushed_again() {
    let record = Record::default();
    let r = record.clone();
    let (scratch, sub, endpoint, served) = pushed(|name| {
        Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
            r.saw_payload(&data, &d);
            async move {
                match &data[..] {
                    b"ack" => d.ack(),
                    _ => d.drop(),
                }
            }
        })
    })
    .await;
    scratch.publish("ack", "").await;
    scratch.publish("drop", "").await;
    eventually("both settled", Duration::from_secs(30), || {
        let s = sub.stats();
        s.acked == 1 && s.dropped == 1
    })
    .await;
    never_within("a settled push came again", Duration::from_secs(12), || {
        sub.stats().received > 2
    })
    .await;
    assert_eq!(record.all().len(), 2);
    assert_eq!(endpoint.stats().refused_total(), 0);
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_retried_push_is_pushed_again() {
    let record = Record::default();
    let r = record.clone();
    let (scratch, sub, _endpoint, served) = pushed(|name| {
        Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
            let seen = r.saw_payload(&data, &d);
            let _ = seen;
            let again = r.all().len() > 1;
            async move { if again { d.ack() } else { d.retry() } }
        })
    })
    .await;
    scratch.publish("m", "").await;
    eventually("pushed again and acked", Duration::from_secs(40), || {
        sub.stats().acked == 1
    })
    .await;
    let seen = record.all();
    assert_eq!(seen.len(), 2, "one retry, one ack");
    assert_eq!(sub.stats().retried, 1);
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn retry_after_holds_the_answer_then_the_push_comes_again_no_sooner() {
    const HOLD: Duration = Duration::from_secs(3);
    let record = Record::default();
    let r = record.clone();
    let (scratch, sub, endpoint, served) = pushed(|name| {
        Registration::raw(name, move |data: bytes::Bytes, d: Delivery| {
            r.saw_payload(&data, &d);
            let first = r.all().len() == 1;
            async move {
                if first {
                    d.retry_after(HOLD).unwrap_or_else(|_| d.retry())
                } else {
                    d.ack()
                }
            }
        })
    })
    .await;
    assert_eq!(
        endpoint.deadline(),
        Duration::from_secs(10),
        "the ack deadline, read at start"
    );
    scratch.publish("m", "").await;
    eventually("held, pushed again, acked", Duration::from_secs(40), || {
        sub.stats().acked == 1
    })
    .await;
    let seen = record.all();
    assert_eq!(seen.len(), 2);
    assert!(
        seen[1].at - seen[0].at >= HOLD,
        "pushed again after {:?}, sooner than the hold",
        seen[1].at - seen[0].at
    );
    assert_eq!(sub.stats().held, 1);
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn retry_after_beyond_the_push_deadline_is_refused_in_the_call() {
    let refused = std::sync::Arc::new(parking_lot::Mutex::new(None));
    let seen = refused.clone();
    let (scratch, sub, _endpoint, served) = pushed(|name| {
        Registration::raw(name, move |_, d: Delivery| {
            // The lease of a push is its deadline (the ack deadline, 10 s): nothing extends it.
            *seen.lock() = Some((
                d.retry_after(Duration::from_secs(30)).is_err(),
                d.remaining_lease(),
            ));
            async move { d.ack() }
        })
    })
    .await;
    scratch.publish("m", "").await;
    eventually("acked", Duration::from_secs(30), || sub.stats().acked == 1).await;
    let (was_refused, remaining) = refused.lock().expect("the handler ran");
    assert!(was_refused, "a hold past the push deadline must be refused");
    assert!(
        remaining <= Duration::from_secs(10),
        "remaining lease {remaining:?}"
    );
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_undecodable_push_goes_to_the_failure_policy_and_a_panic_is_pushed_again() {
    #[derive(serde::Deserialize)]
    struct Order {
        #[allow(dead_code)]
        id: u32,
    }
    let panicked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let p = panicked.clone();
    let (scratch, sub, _endpoint, served) = pushed(|name| {
        Registration::json(name, move |_order: Order, d: Delivery| {
            let first = !p.swap(true, std::sync::atomic::Ordering::SeqCst);
            async move {
                if first {
                    panic!("the handler's first run fails");
                }
                d.ack()
            }
        })
    })
    .await;
    scratch.publish("this is not json", "").await;
    scratch.publish(r#"{"id": 1}"#, "").await;
    eventually(
        "the undecodable dropped, the panicked acked",
        Duration::from_secs(40),
        || {
            let s = sub.stats();
            s.decode_failures == 1 && s.dropped == 1 && s.panics == 1 && s.acked == 1
        },
    )
    .await;
    never_within(
        "the undecodable came again",
        Duration::from_secs(12),
        || sub.stats().decode_failures > 1,
    )
    .await;
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn pushes_of_one_ordering_key_run_one_at_a_time() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let running = std::sync::Arc::new(AtomicUsize::new(0));
    let most = std::sync::Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let (scratch, sub, _endpoint, served) = pushed_with(
        |name| {
            Registration::raw(name, move |_, d: Delivery| {
                let (r, m) = (r.clone(), m.clone());
                async move {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    d.ack()
                }
            })
            .workers(8)
        },
        |s| s.set_enable_message_ordering(true),
        |p| p,
    )
    .await;
    for i in 0..4 {
        scratch.publish(&format!("m{i}"), "customer-1").await;
    }
    eventually("all four acked", Duration::from_secs(40), || {
        sub.stats().acked == 4
    })
    .await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "two of one key ran at once");
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_batch_registration_serves_pushes_too() {
    use leasehold::{Batch, BatchOutcome, Outcome};
    let (scratch, sub, _endpoint, served) = pushed(|name| {
        Registration::raw_batch(name, move |_batch: Batch<bytes::Bytes>| async move {
            BatchOutcome::all(Outcome::ack())
        })
        .max_batch_messages(10)
        .max_batch_wait(Duration::from_millis(200))
    })
    .await;
    scratch.publish_all((0..5).map(|i| format!("m{i}"))).await;
    eventually("all five acked", Duration::from_secs(30), || {
        sub.stats().acked == 5
    })
    .await;
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_push_retried_on_every_attempt_is_dead_lettered_by_the_emulator() {
    const MAX_ATTEMPTS: i32 = 5;
    let (name, connector, _endpoint, served) = bound(|p| p).await;
    let (scratch, dead) =
        Scratch::named_with_dead_letter_topic(&name, push_to(served.url()), MAX_ATTEMPTS).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&name, move |data: bytes::Bytes, d: Delivery| {
        r.saw_payload(&data, &d);
        async move { d.retry() }
    });
    let sub = leasehold::start_with(registration, connector)
        .await
        .unwrap();
    assert_eq!(
        sub.info().unwrap().max_delivery_attempts,
        Some(MAX_ATTEMPTS as u32)
    );
    let dead_seen = Record::default();
    let ds = dead_seen.clone();
    let dead_sub = leasehold::start(
        Registration::raw(&dead, move |data: bytes::Bytes, d: Delivery| {
            ds.saw_payload(&data, &d);
            async move { d.ack() }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();
    let id = scratch.publish("always retried", "").await;
    eventually(
        "on the dead-letter subscription",
        Duration::from_secs(90),
        || !dead_seen.all().is_empty(),
    )
    .await;
    let pushes = record.all();
    assert_eq!(
        pushes.len(),
        MAX_ATTEMPTS as usize,
        "pushed once per attempt the policy allows"
    );
    assert!(pushes.iter().all(|s| s.message_id == id));
    // The emulator (0.8.20) sends no deliveryAttempt even with a dead-letter policy, where real
    // Pub/Sub does: drop() on the last attempt is tested with Pub/Sub-shaped requests instead
    // (tests/requests.rs).
    assert!(
        pushes.iter().all(|s| s.attempt.is_none()),
        "the emulator now sends attempts: test drop() on the last attempt here"
    );
    sub.stop().await;
    dead_sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn while_the_breaker_is_open_pushes_are_answered_503_and_the_held_one_runs_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let down = Arc::new(AtomicBool::new(true));
    let d0 = down.clone();
    let (scratch, sub, endpoint, served) = pushed(|name| {
        Registration::raw(name, move |_, d: Delivery| {
            let down = d0.load(Ordering::SeqCst);
            async move { if down { d.unavailable() } else { d.ack() } }
        })
        .breaker(leasehold::Breaker::new().cooldown(Duration::from_secs(1), Duration::from_secs(2)))
    })
    .await;
    scratch.publish("first", "").await;
    eventually("the trip", Duration::from_secs(30), || {
        sub.breaker().is_some_and(|b| b.held == 1)
    })
    .await;
    scratch.publish("second", "").await;
    scratch.publish("third", "").await;
    eventually(
        "a push refused by the open breaker",
        Duration::from_secs(30),
        || endpoint.stats().refused("breaker_open") > 0,
    )
    .await;
    down.store(false, Ordering::SeqCst);
    eventually("all three acked", Duration::from_secs(60), || {
        sub.stats().acked == 3
    })
    .await;
    let stats = sub.stats();
    assert_eq!((stats.breaker_trips, stats.dead_lettered), (1, 0));
    // The held push was answered by its own run, not let go: nothing was nacked.
    assert_eq!(stats.retried, 0, "{stats:?}");
    sub.stop().await;
    served.stop().await;
    scratch.cleanup().await;
}
