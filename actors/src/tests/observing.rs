//! What a running subscription tells an operator: health from its probes, latency
//! histograms, the oldest lease, the recent failures.

use crate::FailurePolicy;
use crate::error::{Cause, Code};
use crate::status::FailureKind;
use crate::status::shared::{Connectivity, HealthReason};
use crate::tests::*;

#[actix_rt::test]
async fn probes_tell_an_outage_from_a_broken_subscription() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() })
        .health_probe_interval(Duration::from_secs(1));
    let sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("connected", || {
        matches!(sub.connectivity(), Connectivity::Connected { .. })
    })
    .await;
    assert!(sub.health().ready);

    // An outage: still live (a restart would not help), still ready.
    let outage = ReadError::Other {
        code: Some(Code::Unavailable),
        cause: Cause::message("connection refused"),
    };
    pubsub.script_reads(vec![ReadAnswer::Error(outage); 3]);
    eventually("unreachable", || {
        matches!(sub.connectivity(), Connectivity::Unreachable { .. })
    })
    .await;
    let health = sub.health();
    assert!(health.live && health.ready, "{health:?}");
    assert_eq!(
        health.why,
        HealthReason::Unreachable {
            last_error: "reading the subscription failed: connection refused".into()
        }
    );
    assert_eq!(
        health.to_string(),
        "ready: Pub/Sub unreachable (an outage, retried): reading the subscription failed: \
         connection refused"
    );

    // Deleted: not live any more.
    pubsub.script_reads([ReadAnswer::Error(ReadError::NotFound(Cause::message(
        "gone",
    )))]);
    eventually("broken", || {
        matches!(sub.connectivity(), Connectivity::Broken { .. })
    })
    .await;
    assert!(!sub.health().live);
    assert!(!sub.health().ready);

    // Back again.
    eventually("connected again", || {
        matches!(sub.connectivity(), Connectivity::Connected { .. })
    })
    .await;
    assert!(sub.health().live);
    sub.stop().await;
    let health = sub.health();
    assert!(
        !health.ready && health.why == HealthReason::Stopped,
        "{health:?}"
    );
}

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    id: u64,
}

#[actix_rt::test]
async fn latencies_the_oldest_lease_and_recent_failures_are_measured() {
    tokio::time::pause();
    let registration = Registration::json(SUB, |order: Order, d: Delivery| async move {
        let _ = order;
        tokio::time::sleep(Duration::from_secs(3)).await;
        d.ack()
    })
    .failure_policy(FailurePolicy::Retry);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s1 = pubsub.publish(message("m1", r#"{"id": 1}"#).attempt(2));
    eventually("a lease a second old", || {
        sub.oldest_lease() >= Duration::from_secs(1)
    })
    .await;
    assert_eq!(sub.open_streams(), 1);
    let s2 = pubsub.publish(message("m2", "not json").attempt(4));
    settled([&s1, &s2]).await;

    let histograms = sub.histograms();
    assert_eq!(histograms.handler.count, 2);
    assert!(histograms.handler.sum >= 3.0, "{}", histograms.handler.sum);
    assert_eq!(histograms.lease_held.count, 2);
    assert_eq!(
        histograms.confirmation.count, 0,
        "at-least-once: no confirmations"
    );
    let failures = sub.recent_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].message_id, "m2");
    assert_eq!(failures[0].attempt, Some(4));
    assert_eq!(failures[0].kind, FailureKind::DecodeFailure);
    eventually("no lease left", || sub.oldest_lease() == Duration::ZERO).await;
}

#[actix_rt::test]
async fn the_in_memory_source_says_when_a_count_of_acks_is_reached() {
    tokio::time::pause();
    let pubsub = MemoryPubSub::new();
    let registration = Registration::raw(SUB, |data: Bytes, d: Delivery| async move {
        if &data[..] == b"retry" {
            d.retry()
        } else {
            d.ack()
        }
    });
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let waiting = pubsub.acked_reach(2);
    futures::pin_mut!(waiting);
    let m1 = pubsub.publish(message("m1", "ack"));
    let m2 = pubsub.publish(message("m2", "retry"));
    eventually("m1 acked and m2 nacked", || {
        pubsub.acked() == 1 && pubsub.nacked() == 1
    })
    .await;
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "one ack and a nack do not reach two acks"
    );
    let m3 = pubsub.publish(message("m3", "ack"));
    tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the second ack wakes the wait");
    // A count already reached resolves at once.
    pubsub
        .acked_reach(1)
        .now_or_never()
        .expect("reached before");
    assert_eq!(
        [m1.action(), m2.action(), m3.action()],
        [Some(Action::Ack), Some(Action::Nack), Some(Action::Ack)]
    );
    sub.stop().await;
}
