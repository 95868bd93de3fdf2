//! Batch handlers: how batches form, and each message settled with its own outcome.

use crate::status::FailureKind;
use crate::store::MemoryStore;
use crate::tests::*;
use crate::{Batch, BatchOutcome};

/// The sizes of the batches a handler got, in order.
type Sizes = Arc<Mutex<Vec<Vec<String>>>>;

/// A batch handler that records each batch's payloads and settles each message as its payload
/// says: `ack`, `retry`, `hold` (retry_after 30 s), `drop`, or `none` (no outcome).
fn by_payload(sizes: &Sizes) -> Registration {
    let seen = sizes.clone();
    Registration::raw_batch(SUB, move |batch: Batch<Bytes>| {
        let seen = seen.clone();
        async move {
            seen.lock().push(
                batch
                    .payloads()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect(),
            );
            let mut outcomes = BatchOutcome::new();
            for item in &batch {
                let d = &item.delivery;
                let outcome = match &item.payload[..] {
                    b"ack" => d.ack(),
                    b"retry" => d.retry(),
                    b"hold" => d.retry_after(Duration::from_secs(30)).unwrap(),
                    b"drop" => d.drop(),
                    _ => continue,
                };
                outcomes.set(d, outcome);
            }
            outcomes
        }
    })
}

#[actix_rt::test]
async fn each_message_of_a_batch_is_settled_with_its_own_outcome() {
    tokio::time::pause();
    let sizes = Sizes::default();
    let registration = by_payload(&sizes).max_batch_messages(5);
    let pubsub = MemoryPubSub::new().dead_letter_after(5);
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let ack = pubsub.publish(message("a", "ack"));
    let retry = pubsub.publish(message("r", "retry"));
    let hold = pubsub.publish(message("h", "hold"));
    let last = pubsub.publish(message("d", "drop").attempt(5));
    let none = pubsub.publish(message("n", "none"));
    settled([&ack, &retry, &last, &none]).await;
    assert_eq!(
        sizes.lock().len(),
        1,
        "one batch of five: {:?}",
        sizes.lock()
    );
    assert_eq!(ack.action(), Some(Action::Ack));
    assert_eq!(retry.action(), Some(Action::Nack));
    assert_eq!(
        last.action(),
        Some(Action::Nack),
        "drop on the last attempt"
    );
    assert_eq!(none.action(), Some(Action::Nack), "no outcome: retried");
    assert_eq!(hold.action(), None, "held 30 s");
    tokio::time::advance(Duration::from_secs(31)).await;
    settled([&hold]).await;
    assert_eq!(hold.action(), Some(Action::Nack));
    let stats = sub.stats();
    assert_eq!(
        (stats.acked, stats.retried, stats.dead_lettered, stats.held),
        (1, 3, 1, 1)
    );
    assert_eq!(stats.batches, 1);
    assert_eq!(sub.histograms().batch_size.count, 1);
    assert_eq!(sub.histograms().batch_size.sum, 5.0);
    let missing: Vec<_> = sub
        .recent_failures()
        .into_iter()
        .filter(|f| f.kind == FailureKind::MissingOutcome)
        .map(|f| f.message_id)
        .collect();
    assert_eq!(missing, ["n"]);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_batch_is_handed_out_when_full_or_its_wait_after_the_first_message_is_over() {
    tokio::time::pause();
    let sizes = Sizes::default();
    let registration = by_payload(&sizes)
        .max_batch_messages(3)
        .max_batch_wait(Duration::from_millis(500));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let full: Vec<_> = (0..3)
        .map(|n| pubsub.publish(message(&format!("f{n}"), "ack")))
        .collect();
    settled(&full).await;
    let one = pubsub.publish(message("late", "ack"));
    tokio::time::advance(Duration::from_millis(400)).await;
    tokio::task::yield_now().await;
    assert_eq!(one.action(), None, "waits for more, up to its wait");
    tokio::time::advance(Duration::from_millis(200)).await;
    settled([&one]).await;
    assert_eq!(
        *sizes.lock(),
        [vec!["ack"; 3], vec!["ack"]],
        "a full batch, then one handed out by its wait"
    );
    sub.stop().await;
}

#[actix_rt::test]
async fn a_batch_holds_at_most_its_bytes_and_a_larger_message_runs_alone() {
    tokio::time::pause();
    let sizes = Sizes::default();
    let registration = Registration::raw_batch(SUB, {
        let seen = sizes.clone();
        move |batch: Batch<Bytes>| {
            seen.lock()
                .push(batch.payloads().map(|p| p.len().to_string()).collect());
            async move { BatchOutcome::all(Outcome::ack()) }
        }
    })
    .max_batch_bytes(10)
    .max_batch_wait(Duration::ZERO);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<_> = ["aaaaaa", "bbbbbb", "cccccccccccccccc"]
        .into_iter()
        .enumerate()
        .map(|(n, p)| pubsub.publish(message(&n.to_string(), p)))
        .collect();
    settled(&all).await;
    assert_eq!(*sizes.lock(), [vec!["6"], vec!["6"], vec!["16"]]);
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    sub.stop().await;
}

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[actix_rt::test]
async fn a_payload_that_does_not_decode_goes_to_the_failure_policy_alone() {
    tokio::time::pause();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let seen = ids.clone();
    let registration = Registration::json_batch(SUB, move |batch: Batch<Order>| {
        seen.lock().extend(batch.payloads().map(|o| o.id));
        async move { BatchOutcome::all(Outcome::ack()) }
    })
    .max_batch_messages(3)
    .failure_policy(crate::FailurePolicy::Retry);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let good = pubsub.publish(message("1", r#"{"id": 1}"#));
    let bad = pubsub.publish(message("2", "not json"));
    let also = pubsub.publish(message("3", r#"{"id": 3}"#));
    settled([&good, &bad, &also]).await;
    assert_eq!(*ids.lock(), [1, 3], "the undecodable one is left out");
    assert_eq!(
        bad.action(),
        Some(Action::Nack),
        "the failure policy: retry"
    );
    assert_eq!(good.action(), Some(Action::Ack));
    assert_eq!(sub.stats().decode_failures, 1);
    sub.stop().await;
}

#[actix_rt::test]
async fn an_error_retries_every_message_and_a_panic_settles_each_by_the_panic_policy() {
    tokio::time::pause();
    let registration = Registration::raw_batch(SUB, |batch: Batch<Bytes>| {
        let boom = batch.iter().any(|item| &item.payload[..] == b"panic");
        async move {
            if boom {
                panic!("batch handler bug");
            }
            Err::<BatchOutcome, _>("database down")
        }
    })
    .max_batch_messages(2)
    .panic_policy(PanicPolicy::Drop);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let failing = [
        pubsub.publish(message("e1", "x")),
        pubsub.publish(message("e2", "x")),
    ];
    settled(&failing).await;
    assert!(failing.iter().all(|p| p.action() == Some(Action::Nack)));
    let panicking = [
        pubsub.publish(message("p1", "panic")),
        pubsub.publish(message("p2", "x")),
    ];
    settled(&panicking).await;
    assert!(panicking.iter().all(|p| p.action() == Some(Action::Ack)));
    let stats = sub.stats();
    assert_eq!((stats.retried, stats.dropped, stats.panics), (2, 2, 1));
    sub.stop().await;
}

#[actix_rt::test]
async fn messages_of_one_ordering_key_join_their_forming_batch_in_order_and_never_two_batches_at_once()
 {
    tokio::time::pause();
    let batches: Sizes = Sizes::default();
    let running = Arc::new(Mutex::new(0usize));
    let overlapped = Arc::new(Mutex::new(false));
    let (seen, now_running, overlap) = (batches.clone(), running.clone(), overlapped.clone());
    let registration = Registration::raw_batch(SUB, move |batch: Batch<Bytes>| {
        let (now_running, overlap) = (now_running.clone(), overlap.clone());
        seen.lock().push(
            batch
                .payloads()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect(),
        );
        async move {
            *now_running.lock() += 1;
            if *now_running.lock() > 1 {
                *overlap.lock() = true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            *now_running.lock() -= 1;
            BatchOutcome::all(Outcome::ack())
        }
    })
    .workers(4)
    .max_batch_messages(3)
    .max_batch_wait(Duration::from_millis(10));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<_> = (0..5)
        .map(|n| pubsub.publish(message(&format!("k{n}"), &format!("{n}")).ordering_key("k")))
        .collect();
    settled(&all).await;
    assert_eq!(
        *batches.lock(),
        [vec!["0", "1", "2"], vec!["3", "4"]],
        "the key's messages join the batch forming; those after a full one wait for it to end"
    );
    assert!(!*overlapped.lock(), "two batches of the key ran at once");
    sub.stop().await;
}

#[actix_rt::test]
async fn a_finished_message_that_comes_back_is_replayed_and_left_out_of_the_batch() {
    tokio::time::pause();
    let sizes = Sizes::default();
    let registration = by_payload(&sizes)
        .max_batch_messages(2)
        .progress_store(MemoryStore::default());
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first = [
        pubsub.publish(message("a", "ack")),
        pubsub.publish(message("b", "ack")),
    ];
    settled(&first).await;
    let again = [
        pubsub.publish(message("a", "ack")),
        pubsub.publish(message("c", "ack")),
        pubsub.publish(message("d", "ack")),
    ];
    settled(&again).await;
    assert!(again.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(sub.stats().replayed, 1);
    assert_eq!(
        sizes.lock().concat().len(),
        4,
        "a ran once: {:?}",
        sizes.lock()
    );
    sub.stop().await;
}

#[actix_rt::test]
async fn a_stop_releases_a_forming_batch_and_gives_a_running_one_the_drain_timeout() {
    tokio::time::pause();
    let registration = Registration::raw_batch(SUB, |batch: Batch<Bytes>| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut outcomes = BatchOutcome::new();
        for item in &batch {
            outcomes.set(&item.delivery, item.delivery.ack());
        }
        outcomes
    })
    .workers(1)
    .max_batch_messages(2)
    .max_batch_wait(Duration::from_secs(50))
    .drain_timeout(Duration::from_secs(10));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let running = [
        pubsub.publish(message("r1", "x")),
        pubsub.publish(message("r2", "x")),
    ];
    eventually("the batch running", || sub.load().running == 2).await;
    // The only worker is busy: this one forms a batch of its own and waits.
    let forming = pubsub.publish(message("f", "x"));
    eventually("received", || sub.stats().received == 3).await;
    sub.stop().await;
    assert_eq!(forming.action(), Some(Action::Nack), "released at the stop");
    assert!(running.iter().all(|p| p.action() == Some(Action::Ack)));
    let stats = sub.stats();
    assert_eq!((stats.released, stats.acked, stats.unsettled()), (1, 2, 0));
}

#[test]
fn batch_options_are_checked_and_refused_on_a_single_message_registration() {
    let single = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() });
    let error = single.max_batch_messages(10).validate().unwrap_err();
    assert_eq!(error.option, "max_batch_messages");
    let batch = |n| {
        Registration::raw_batch(SUB, |_: Batch<Bytes>| async { BatchOutcome::new() })
            .max_batch_messages(n)
    };
    assert!(batch(100).validate().is_ok());
    assert_eq!(
        batch(0).validate().unwrap_err().option,
        "max_batch_messages"
    );
    assert_eq!(
        batch(10_000).validate().unwrap_err().option,
        "max_batch_messages"
    );
    let long_wait = Registration::raw_batch(SUB, |_: Batch<Bytes>| async { BatchOutcome::new() })
        .max_batch_wait(Duration::from_secs(3600));
    assert_eq!(long_wait.validate().unwrap_err().option, "max_batch_wait");
}

#[actix_rt::test]
async fn on_an_exactly_once_subscription_every_message_of_a_batch_is_confirmed() {
    tokio::time::pause();
    let registration = Registration::raw_batch(SUB, |batch: Batch<Bytes>| async move {
        let mut outcomes = BatchOutcome::new();
        for item in &batch {
            outcomes.set(&item.delivery, item.delivery.ack());
        }
        outcomes
    })
    .max_batch_messages(3);
    let pubsub = MemoryPubSub::new().exactly_once();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<_> = (0..3)
        .map(|n| pubsub.publish(message(&n.to_string(), "x")))
        .collect();
    settled(&all).await;
    eventually("every ack confirmed", || sub.stats().confirmed == 3).await;
    assert_eq!(sub.stats().batches, 1);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_blocking_batch_that_panics_leaves_its_undecodable_payloads_to_the_failure_policy() {
    tokio::time::pause();
    let registration =
        Registration::blocking_json_batch(SUB, |_batch: Batch<Order>| -> BatchOutcome {
            panic!("batch handler bug")
        })
        .max_batch_messages(2);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let good = pubsub.publish(message("good", r#"{"id": 1}"#));
    let bad = pubsub.publish(message("bad", "not json"));
    settled([&good, &bad]).await;
    assert_eq!(good.action(), Some(Action::Nack), "the panic policy: retry");
    assert_eq!(
        bad.action(),
        Some(Action::Ack),
        "the failure policy: drop, not the panic policy"
    );
    let (stats, sizes) = (sub.stats(), sub.histograms().batch_size);
    assert_eq!(
        (
            stats.decode_failures,
            stats.panics,
            stats.batches,
            sizes.sum
        ),
        (1, 1, 1, 1.0),
        "one decode failure, and a batch of one"
    );
    sub.stop().await;
}

#[actix_rt::test]
async fn a_batch_is_counted_when_its_handler_gets_it_even_if_the_drain_cuts_it() {
    tokio::time::pause();
    let called = Arc::new(Mutex::new(false));
    let c = called.clone();
    let registration = Registration::raw_batch(SUB, move |_: Batch<Bytes>| {
        *c.lock() = true;
        async {
            tokio::time::sleep(Duration::from_secs(600)).await;
            BatchOutcome::all(Outcome::ack())
        }
    })
    .max_batch_messages(2)
    .drain_timeout(Duration::from_secs(1));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let both = [
        pubsub.publish(message("a", "x")),
        pubsub.publish(message("b", "x")),
    ];
    eventually("the handler called", || *called.lock()).await;
    let (running, sizes) = (sub.stats(), sub.histograms().batch_size);
    assert_eq!(
        (running.batches, sizes.count, sizes.sum),
        (1, 1, 2.0),
        "counted while it runs"
    );
    sub.stop().await;
    assert!(both.iter().all(|p| p.action() == Some(Action::Nack)));
    let stats = sub.stats();
    assert_eq!((stats.batches, stats.retried), (1, 2), "{stats:?}");
}
