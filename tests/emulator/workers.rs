//! The worker pool against the real stream: panics, ordering keys.

use leasehold::{Delivery, Registration};
use leasehold_test_support::{Record, Scratch, eventually};
use std::time::Duration;

#[actix_rt::test]
async fn a_panicking_handler_gets_its_message_redelivered_and_the_worker_keeps_serving() {
    let scratch = Scratch::new(|s| s).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        let data = r.saw_payload(&data, &d);
        let first = r.of(&data).len() == 1;
        async move {
            if data == "boom" && first {
                panic!("handler bug on the first delivery");
            }
            d.ack()
        }
    })
    .workers(1);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let boom = scratch.publish("boom", "").await;
    eventually("the panic", Duration::from_secs(30), || {
        sub.stats().panics == 1
    })
    .await;
    scratch.publish("after", "").await;
    eventually("both acked", Duration::from_secs(30), || {
        sub.stats().acked == 2
    })
    .await;
    let seen = record.of("boom");
    assert_eq!(seen.len(), 2, "redelivered after the panic");
    assert!(seen.iter().all(|s| s.message_id == boom));
    assert_eq!(
        record.of("after").len(),
        1,
        "the single worker kept serving"
    );
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn one_ordering_key_is_processed_in_publish_order_on_many_workers() {
    const COUNT: usize = 30;
    let scratch = Scratch::new(|s| s.set_enable_message_ordering(true)).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        let r = r.clone();
        async move {
            let data = String::from_utf8_lossy(&data).to_string();
            let n: u64 = data.parse().unwrap();
            // Earlier messages take longer: only ordering keeps them first.
            actix_rt::time::sleep(Duration::from_millis(5 * (COUNT as u64 - n))).await;
            r.saw(&data, &d);
            d.ack()
        }
    })
    .workers(8);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    for n in 0..COUNT {
        scratch.publish(&n.to_string(), "customer-7").await;
    }
    eventually("all processed", Duration::from_secs(30), || {
        record.all().len() >= COUNT
    })
    .await;
    let order: Vec<String> = record.all().into_iter().map(|s| s.data).collect();
    let expected: Vec<String> = (0..COUNT).map(|n| n.to_string()).collect();
    assert_eq!(order, expected);
    sub.stop().await;
    scratch.cleanup().await;
}
