//! Streams that fail and reopen, several streams at once.

use crate::error::{Cause, Code};
use crate::tests::*;

#[actix_rt::test]
async fn a_failed_stream_is_reopened_and_leased_messages_survive() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        d.ack()
    });
    let (connector, streams) = FakeConnector::new(info(None), 2);
    let opened = connector.opened.clone();
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    let (first, first_settled) = received("m1", "", None, "x");
    streams[0].send(Ok(first)).unwrap();
    streams[0]
        .send(Err(SourceError::Stream {
            code: Some(Code::Unavailable),
            cause: Cause::message("UNAVAILABLE"),
        }))
        .unwrap();
    eventually("the stream reopened", || opened.lock().len() == 2).await;
    let (second, second_settled) = received("m2", "", None, "x");
    streams[1].send(Ok(second)).unwrap();
    settled(&[first_settled.clone(), second_settled.clone()]).await;
    assert_eq!(first_settled.action(), Some(Action::Ack));
    assert_eq!(second_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().stream_restarts, 1);
    assert_eq!(opened.lock()[1].subscription, SUB);
}

#[actix_rt::test]
async fn several_streams_pull_in_parallel_and_reopen_one_at_a_time() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() }).streams(3);
    let (connector, streams) = FakeConnector::new(info(None), 4);
    let opened = connector.opened.clone();
    let sub = start(registration, Rc::new(connector)).await.unwrap();
    eventually("three streams open", || opened.lock().len() == 3).await;
    let mut all = Vec::new();
    for (n, stream) in streams.iter().take(3).enumerate() {
        let (r, s) = received(&format!("m{n}"), "", None, "x");
        stream.send(Ok(r)).unwrap();
        all.push(s);
    }
    settled(&all).await;
    streams[1]
        .send(Err(SourceError::Stream {
            code: Some(Code::Unavailable),
            cause: Cause::message("UNAVAILABLE"),
        }))
        .unwrap();
    eventually("the failed stream reopened", || opened.lock().len() == 4).await;
    let (r, s) = received("m3", "", None, "x");
    streams[3].send(Ok(r)).unwrap();
    settled(std::slice::from_ref(&s)).await;
    assert_eq!(
        sub.stats().stream_restarts,
        1,
        "only the failed stream restarted"
    );
    assert_eq!(sub.stats().acked, 4);
}
