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
