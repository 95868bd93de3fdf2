//! Flow control: messages and bytes outstanding.

use crate::tests::*;

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
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<Published> = (0..12)
        .map(|n| {
            let data = if n % 4 == 0 { "hold" } else { "x" };
            pubsub.publish(message(&format!("m{n}"), data))
        })
        .collect();
    let peak = Arc::new(Mutex::new(0));
    let p = peak.clone();
    let s = sub.clone();
    eventually("all settled", || {
        let now = s.in_flight().messages;
        let mut peak = p.lock();
        *peak = now.max(*peak);
        all.iter().all(is_settled)
    })
    .await;
    assert_eq!(*peak.lock(), 3, "never more than max_outstanding_messages");
    assert_eq!(sub.stats().peak_outstanding, 3);
    assert_eq!(sub.in_flight(), crate::status::InFlight::default());
}

#[actix_rt::test]
async fn flow_control_bounds_bytes() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        d.ack()
    })
    .max_outstanding_bytes(10);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    // Four 4-byte payloads and one far over the limit, which must run alone.
    for (n, data) in ["aaaa", "bbbb", "cccc", &"x".repeat(1000), "dddd"]
        .iter()
        .enumerate()
    {
        all.push(pubsub.publish(message(&format!("m{n}"), data)));
    }
    let s = sub.clone();
    let over = Arc::new(Mutex::new(false));
    let o = over.clone();
    eventually("all settled", || {
        if s.in_flight().bytes > 10 {
            *o.lock() = true;
        }
        all.iter().all(is_settled)
    })
    .await;
    assert!(!*over.lock(), "outstanding bytes went over the limit");
    assert!(all.iter().all(|s| s.action() == Some(Action::Ack)));
}

#[actix_rt::test]
async fn what_the_stream_gives_while_flow_control_is_full_waits_its_turn_and_a_stop_releases_it() {
    tokio::time::pause();
    let started = Arc::new(Mutex::new(Vec::new()));
    let s = started.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        s.lock().push(d.message_id().to_string());
        async move {
            // Longer than the test: only the stop ends it.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            d.ack()
        }
    })
    .max_outstanding_messages(1)
    .drain_timeout(Duration::from_secs(1));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<Published> = (0..3)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "x")))
        .collect();
    eventually("the first running", || started.lock().len() == 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Read ahead from the stream (so the client leases them), the other two are neither
    // counted received nor started.
    assert_eq!(pubsub.unread(), 0);
    assert_eq!(sub.stats().received, 1);
    assert_eq!(sub.in_flight().messages, 1);
    assert_eq!(*started.lock(), ["m0"]);
    sub.stop().await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    let stats = sub.stats();
    assert_eq!(
        (stats.received, stats.released, stats.unsettled()),
        (3, 2, 0)
    );
}
