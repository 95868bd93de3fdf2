//! Each outcome becomes the right Pub/Sub action.

use leasehold::{Delivery, Outcome, Registration, StartError, error::PubSubError};
use leasehold_test_support::{Record, Scratch, eventually, never_within};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// The subscriptions' ack deadline in these tests (Pub/Sub's minimum).
const ACK_DEADLINE: Duration = Duration::from_secs(10);

#[derive(serde::Deserialize)]
struct Instruction {
    action: String,
}

#[actix_rt::test]
async fn acked_dropped_and_undecodable_messages_are_not_redelivered() {
    let scratch = Scratch::new(|s| s).await;
    let record = Record::default();
    let r = record.clone();
    let registration =
        Registration::json(&scratch.subscription, move |i: Instruction, d: Delivery| {
            r.saw(&i.action, &d);
            async move {
                match i.action.as_str() {
                    "ack" => d.ack(),
                    _ => d.drop(),
                }
            }
        })
        // The lease extension equals the ack deadline, so a message not acked would be back soon.
        .max_lease_extension(ACK_DEADLINE);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish(r#"{"action":"ack"}"#, "").await;
    scratch.publish(r#"{"action":"drop"}"#, "").await;
    scratch.publish("this is not json", "").await;

    eventually("all three settled", Duration::from_secs(30), || {
        let s = sub.stats();
        s.acked == 1 && s.dropped == 2 && s.decode_failures == 1
    })
    .await;
    never_within(
        "a settled message came back after the ack deadline",
        ACK_DEADLINE + Duration::from_secs(5),
        || sub.stats().received > 3,
    )
    .await;
    assert_eq!(record.of("ack").len(), 1);
    assert_eq!(record.of("drop").len(), 1);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn retry_redelivers_with_the_next_delivery_attempt() {
    // Pub/Sub reports delivery attempts on subscriptions with a dead-letter policy.
    let (scratch, _dead) = Scratch::with_dead_letter_topic(|s| s, 5).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |_, d: Delivery| {
        r.saw("m", &d);
        async move {
            if d.delivery_attempt() == Some(1) {
                d.retry()
            } else {
                d.ack()
            }
        }
    });
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let id = scratch.publish("m", "").await;
    eventually("the redelivery acked", Duration::from_secs(30), || {
        sub.stats().acked == 1
    })
    .await;
    let seen = record.of("m");
    assert_eq!(
        seen.iter().map(|s| s.attempt).collect::<Vec<_>>(),
        vec![Some(1), Some(2)]
    );
    assert!(
        seen.iter().all(|s| s.message_id == id),
        "the same message, not a copy"
    );
    assert_eq!(sub.stats().retried, 1);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn retry_after_holds_the_message_past_the_ack_deadline_then_redelivers() {
    const DELAY: Duration = Duration::from_secs(15);
    let scratch = Scratch::new(|s| s).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |_, d: Delivery| {
        r.saw("m", &d);
        let first = r.of("m").len() == 1;
        async move {
            if first {
                d.retry_after(DELAY)
            } else {
                Ok(d.ack())
            }
        }
    })
    .max_lease_extension(ACK_DEADLINE);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish("m", "").await;
    eventually(
        "the message redelivered after the hold",
        Duration::from_secs(60),
        || record.of("m").len() >= 2,
    )
    .await;
    let seen = record.of("m");
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= DELAY,
        "redelivered after {waited:?}, before the {DELAY:?} hold ended (ack deadline {ACK_DEADLINE:?})"
    );
    let stats = sub.stats();
    assert_eq!((stats.held, stats.retried), (1, 1));
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn retry_after_beyond_the_remaining_lease_is_refused_in_the_call() {
    let scratch = Scratch::new(|s| s).await;
    let refused = Arc::new(Mutex::new(None));
    let r = refused.clone();
    let registration = Registration::raw(&scratch.subscription, move |_, d: Delivery| {
        let result = d.retry_after(Duration::from_secs(120));
        let outcome = match &result {
            Ok(_) => d.retry(),
            Err(_) => d.ack(),
        };
        *r.lock() = Some(result);
        async move { outcome }
    })
    .max_lease(Duration::from_secs(60));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish("m", "").await;
    eventually("the handler ran", Duration::from_secs(30), || {
        sub.stats().acked == 1
    })
    .await;
    let result: Option<Result<Outcome, PubSubError>> = refused.lock().clone();
    match result {
        Some(Err(PubSubError::DelayBeyondLease {
            requested,
            remaining,
        })) => {
            assert_eq!(requested, Duration::from_secs(120));
            assert!(remaining <= Duration::from_secs(60));
        }
        other => panic!("expected DelayBeyondLease, got {other:?}"),
    }
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_missing_subscription_is_a_clear_error_from_start() {
    let connection = leasehold_test_support::connection();
    let name = format!(
        "{}/subscriptions/{}",
        leasehold_test_support::PROJECT,
        leasehold_test_support::unique("missing")
    );
    let registration = Registration::raw(&name, |_, d: Delivery| async move { d.ack() });
    let err = leasehold::start(registration, &connection)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StartError::NotFound { subscription, .. } if *subscription == name),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("subscription {name} does not exist")
    );
}
