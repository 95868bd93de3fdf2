//! `drop()` on the last attempt sends the message to the dead-letter topic, with the limit read
//! from the subscription's own dead-letter policy.

use leasehold::{Delivery, Registration};
use leasehold_test_support::{Record, Scratch, eventually};
use std::time::Duration;

/// The smallest limit Pub/Sub accepts for a dead-letter policy.
const MAX_ATTEMPTS: i32 = 5;

#[actix_rt::test]
async fn drop_on_the_last_attempt_reaches_the_dead_letter_topic() {
    let (scratch, dead_subscription) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS).await;
    let record = Record::default();
    let r = record.clone();
    // No max_attempts on the registration: the limit comes from the subscription.
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        let data = r.saw_payload(&data, &d);
        async move {
            match data.as_str() {
                // Fails until the end, then gives up: dead-lettered on the last attempt.
                "poison" if d.delivery_attempt() < Some(MAX_ATTEMPTS as u32) => d.retry(),
                _ => d.drop(),
            }
        }
    });
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    assert_eq!(sub.max_attempts(), Some(MAX_ATTEMPTS as u32));

    let dead = Record::default();
    let dl = dead.clone();
    let dead_registration = Registration::raw(&dead_subscription, move |data, d: Delivery| {
        dl.saw_payload(&data, &d);
        async move { d.ack() }
    });
    let dead_sub = leasehold::start(dead_registration, &scratch.connection)
        .await
        .unwrap();

    let poison = scratch.publish("poison", "").await;
    let early = scratch.publish("early", "").await;
    eventually(
        "the poison message on the dead-letter topic",
        Duration::from_secs(60),
        || !dead.of("poison").is_empty(),
    )
    .await;
    let attempts: Vec<_> = record.of("poison").iter().map(|s| s.attempt).collect();
    assert_eq!(attempts, (1..=5).map(Some).collect::<Vec<_>>());
    // Forwarding republishes: the dead-letter copy has its own message id.
    assert!(record.of("poison").iter().all(|s| s.message_id == poison));
    assert_eq!(sub.stats().dead_lettered, 1);

    // A drop() before the last attempt is an ack: it never reaches the dead-letter topic.
    assert_eq!(record.of("early").len(), 1);
    assert_eq!(record.of("early")[0].message_id, early);
    assert!(dead.of("early").is_empty());
    assert_eq!(sub.stats().dropped, 1);

    sub.stop().await;
    dead_sub.stop().await;
    scratch.cleanup().await;
}

/// The limit is the policy's own number, not Pub/Sub's default of 5: a policy of 7, and one that
/// leaves the number unset (Pub/Sub then applies 5).
#[actix_rt::test]
async fn the_limit_is_the_policys_own_and_pub_subs_default_when_unset() {
    let ack = |_, d: Delivery| async move { d.ack() };
    let (seven, _) = Scratch::with_dead_letter_topic(|s| s, 7).await;
    let sub = leasehold::start(
        Registration::raw(&seven.subscription, ack),
        &seven.connection,
    )
    .await
    .unwrap();
    assert_eq!(sub.max_attempts(), Some(7));
    assert_eq!(sub.info().unwrap().max_delivery_attempts, Some(7));
    sub.stop().await;
    seven.cleanup().await;

    let (unset, _) = Scratch::with_dead_letter_topic(|s| s, 0).await;
    let sub = leasehold::start(
        Registration::raw(&unset.subscription, ack),
        &unset.connection,
    )
    .await
    .unwrap();
    assert_eq!(sub.max_attempts(), Some(5), "Pub/Sub's default when unset");
    sub.stop().await;
    unset.cleanup().await;
}
