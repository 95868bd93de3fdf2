//! Exactly-once subscriptions: acks are confirmed; an ack after the lease was lost fails, is
//! counted, and the message comes back.

use leasehold::defaults::DEFAULT_TTL;
use leasehold::{Delivery, Registration, store::RedbStore};
use leasehold_test_support::{Record, Scratch, eventually};
use std::time::Duration;

#[actix_rt::test]
async fn a_confirmed_ack_is_accepted() {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(true)).await;
    let registration = Registration::raw(
        &scratch.subscription,
        |_, d: Delivery| async move { d.ack() },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    assert!(sub.info().unwrap().exactly_once);
    for n in 0..20 {
        scratch.publish(&n.to_string(), "").await;
    }
    eventually("20 confirmed acks", Duration::from_secs(30), || {
        sub.stats().confirmed == 20
    })
    .await;
    let stats = sub.stats();
    assert_eq!((stats.acked, stats.failed_acks), (20, 0));
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_ack_after_the_lease_was_lost_is_a_failed_ack_and_the_redelivery_does_no_work_twice() {
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(true)).await;
    let dir = std::env::temp_dir().join(leasehold_test_support::unique("progress"));
    std::fs::create_dir_all(&dir).unwrap();
    let store = RedbStore::open(
        dir.join("progress.redb"),
        &scratch.subscription,
        DEFAULT_TTL,
    )
    .unwrap();
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |_, d: Delivery| {
        // The side effect: recorded once per run of the handler.
        r.saw("m", &d);
        async move {
            // Outlive the lease budget before acking: the client notices the end of the
            // budget within its 3 s extension period.
            actix_rt::time::sleep(Duration::from_secs(18)).await;
            d.ack()
        }
    })
    // The shortest budget Pub/Sub allows: one 10 s extension.
    .max_lease(Duration::from_secs(10))
    .max_lease_extension(Duration::from_secs(10))
    .progress_store(store);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let id = scratch.publish("m", "").await;
    eventually("the late ack refused", Duration::from_secs(45), || {
        sub.stats().failed_acks == 1
    })
    .await;
    assert_eq!(sub.stats().lost_leases, 1);
    eventually(
        "the message redelivered and confirmed",
        Duration::from_secs(60),
        || sub.stats().confirmed == 1,
    )
    .await;
    let stats = sub.stats();
    assert_eq!(stats.received, 2, "Pub/Sub redelivered the message");
    assert_eq!(
        stats.replayed, 1,
        "the redelivery was settled from the progress store"
    );
    let seen = record.of("m");
    assert_eq!(seen.len(), 1, "the handler's work happened once");
    assert_eq!(seen[0].message_id, id);
    sub.stop().await;
    scratch.cleanup().await;
    let _ = std::fs::remove_dir_all(dir);
}
