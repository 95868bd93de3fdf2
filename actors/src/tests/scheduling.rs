//! Which message runs when: ordering keys, concurrency, redeliveries of running messages.

use crate::tests::*;

#[actix_rt::test]
async fn one_ordering_key_runs_in_arrival_order_on_many_workers() {
    tokio::time::pause();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        let log = log.clone();
        async move {
            let n: u64 = std::str::from_utf8(&data).unwrap().parse().unwrap();
            log.lock().push(format!("start {n}"));
            // Earlier messages take longer: without ordering, later ones would finish first.
            tokio::time::sleep(Duration::from_millis(100 * (5 - n))).await;
            log.lock().push(format!("end {n}"));
            d.ack()
        }
    })
    .workers(4);
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for n in 0..5 {
        let s =
            pubsub.publish(message(&format!("m{n}"), &n.to_string()).ordering_key("customer-1"));
        all.push(s);
    }
    settled(&all).await;
    let expected: Vec<String> = (0..5)
        .flat_map(|n| [format!("start {n}"), format!("end {n}")])
        .collect();
    assert_eq!(*seen.lock(), expected);
    assert!(all.iter().all(|s| s.action() == Some(Action::Ack)));
}

#[actix_rt::test]
async fn messages_without_a_key_run_concurrently() {
    tokio::time::pause();
    let running = Arc::new(Mutex::new((0usize, 0usize)));
    let r = running.clone();
    let registration = Registration::raw(SUB, move |_, d: Delivery| {
        let r = r.clone();
        async move {
            {
                let mut r = r.lock();
                r.0 += 1;
                r.1 = r.1.max(r.0);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            r.lock().0 -= 1;
            d.ack()
        }
    })
    .workers(3);
    let pubsub = MemoryPubSub::new();
    let _sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for n in 0..6 {
        all.push(pubsub.publish(message(&format!("m{n}"), "x")));
    }
    settled(&all).await;
    assert_eq!(running.lock().1, 3, "peak concurrency is the worker count");
}

#[actix_rt::test]
async fn a_redelivery_of_a_running_message_waits_for_it_and_is_not_run_twice() {
    tokio::time::pause();
    let (handler, runs) = counting_acks_after(Duration::from_secs(30));
    let registration = Registration::raw(SUB, handler).workers(4);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first_settled = pubsub.publish(message("m1", "x"));
    eventually("the first run started", || *runs.lock() == 1).await;
    let again_settled = pubsub.publish(message("m1", "x"));
    settled([&first_settled, &again_settled]).await;
    assert_eq!(
        *runs.lock(),
        1,
        "the redelivery waited and was settled from the store"
    );
    assert_eq!(again_settled.action(), Some(Action::Ack));
    assert_eq!(sub.stats().replayed, 1);
}

/// Real worker threads, real time: an async handler that blocks its thread by mistake, first in
/// a batch of quick ones, holds that thread alone; the other thread takes the rest of the batch.
#[actix_rt::test]
async fn a_handler_blocking_its_thread_leaves_the_rest_of_its_batch_to_the_other_thread() {
    let registration = Registration::raw(SUB, move |data, d: Delivery| {
        if &data[..] == b"block" {
            std::thread::sleep(Duration::from_secs(2));
        }
        async move { d.ack() }
    })
    .workers(8)
    .worker_threads(2);
    let pubsub = MemoryPubSub::new();
    let sub = crate::start(registration, pubsub.connector())
        .await
        .unwrap();
    // Both worker threads up and idle: a first message there and back.
    let first_settled = pubsub.publish(message("first", "quick"));
    within("the first message", Duration::from_secs(10), || {
        is_settled(&first_settled) && sub.load().running == 0
    })
    .await;
    // One batch: the blocking message, then quick ones.
    let block_settled = pubsub.publish(message("block", "block"));
    let quick: Vec<Published> = (0..20)
        .map(|n| pubsub.publish(message(&format!("q{n}"), "quick")))
        .collect();
    within(
        "the quick messages, while one thread is blocked",
        Duration::from_secs(1),
        || quick.iter().all(is_settled),
    )
    .await;
    assert!(
        !is_settled(&block_settled),
        "the blocked handler still runs"
    );
    within("the blocked message", Duration::from_secs(10), || {
        is_settled(&block_settled)
    })
    .await;
    sub.stop().await;
}

/// Polls `done` in real time, failing after `limit`.
async fn within(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
