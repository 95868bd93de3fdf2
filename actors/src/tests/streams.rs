//! Streams that fail and reopen, several streams at once.

use crate::error::{Cause, Code};
use crate::tests::*;

fn unavailable() -> SourceError {
    SourceError::Stream {
        code: Some(Code::Unavailable),
        cause: Cause::message("UNAVAILABLE"),
    }
}

#[actix_rt::test]
async fn a_failed_stream_is_reopened_and_leased_messages_survive() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        d.ack()
    });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first_settled = pubsub.publish(message("m1", "x"));
    eventually("the first message leased", || sub.stats().received == 1).await;
    assert!(pubsub.fail_stream(0, unavailable()), "the stream was open");
    eventually("the stream reopened", || pubsub.opened_streams().len() == 2).await;
    assert_eq!(first_settled.action(), None, "still in its handler");
    let second_settled = pubsub.publish(message("m2", "x"));
    settled([&first_settled, &second_settled]).await;
    assert_eq!(first_settled.action(), Some(Action::Ack));
    assert_eq!(second_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().stream_restarts, 1);
    assert_eq!(pubsub.opened_streams()[1].subscription, SUB);
}

/// Every stream reads the in-memory Pub/Sub's one queue, so which stream delivers which message
/// is not the test's to choose: it checks that three streams open and deliver, and that a
/// failure of one reopens that one alone.
#[actix_rt::test]
async fn several_streams_pull_in_parallel_and_reopen_one_at_a_time() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() }).streams(3);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("three streams open", || pubsub.opened_streams().len() == 3).await;
    assert_eq!(sub.open_streams(), 3);
    let all: Vec<Published> = (0..3)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "x")))
        .collect();
    settled(&all).await;
    assert!(pubsub.fail_stream(1, unavailable()), "stream 1 was open");
    eventually("the failed stream reopened", || {
        pubsub.opened_streams().len() == 4
    })
    .await;
    assert_eq!(sub.open_streams(), 3);
    let s = pubsub.publish(message("m3", "x"));
    settled([&s]).await;
    assert_eq!(
        sub.stats().stream_restarts,
        1,
        "only the failed stream restarted"
    );
    assert_eq!(sub.stats().acked, 4);
    assert!(
        !pubsub.fail_stream(1, unavailable()),
        "the failed stream stays ended"
    );
}

#[actix_rt::test]
async fn an_outage_that_fails_every_stream_reopens_each_of_them() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() }).streams(3);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("three streams open", || pubsub.opened_streams().len() == 3).await;
    assert_eq!(pubsub.fail_open_streams(unavailable()), 3);
    eventually("all three reopened", || pubsub.opened_streams().len() == 6).await;
    assert_eq!(sub.stats().stream_restarts, 3);
    assert_eq!(sub.open_streams(), 3);
    let s = pubsub.publish(message("m1", "x"));
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Ack));
    sub.stop().await;
}

#[actix_rt::test]
async fn each_stream_asks_the_server_for_its_share_of_the_limits() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() })
        .streams(3)
        .max_outstanding_messages(10)
        .max_outstanding_bytes(100);
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("three streams open", || pubsub.opened_streams().len() == 3).await;
    let opened = pubsub.opened_streams();
    let shares: Vec<(usize, usize)> = opened
        .iter()
        .map(|s| (s.max_outstanding_messages, s.max_outstanding_bytes))
        .collect();
    assert_eq!(shares, [(4, 34), (3, 33), (3, 33)]);
    assert!(opened.iter().all(|s| (
        s.subscription_max_outstanding_messages,
        s.subscription_max_outstanding_bytes
    ) == (10, 100)));
}
