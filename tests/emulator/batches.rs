//! Batch handlers against the real stream: each message of a batch settled with its own
//! outcome, exactly-once confirmations, ordering keys across batches, flow control, decode
//! failures, a panic, and the drain of a forming and a running batch.
//!
//! The emulator paces a streaming pull (about 100 messages per 50 ms), so each test publishes
//! its few messages at its start (in two steps where one batch must come before another), and
//! a `max_batch_wait` long enough for them all makes the batches they form predictable.

use bytes::Bytes;
use google_cloud_pubsub::model::Message;
use leasehold::{
    Batch, BatchOutcome, Delivery, Outcome, Registration, Subscription, status::FailureKind,
};
use leasehold_test_support::{Record, Scratch, Seen, eventually, never_within};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One batch a handler got: its messages, when the handler got it, and when it returned.
#[derive(Debug, Clone)]
struct SeenBatch {
    messages: Vec<Seen>,
    began: Instant,
    ended: Option<Instant>,
}

impl SeenBatch {
    fn payloads(&self) -> Vec<&str> {
        self.messages.iter().map(|m| m.data.as_str()).collect()
    }
    fn ids(&self) -> Vec<&str> {
        self.messages
            .iter()
            .map(|m| m.message_id.as_str())
            .collect()
    }
}

/// Every batch handlers got, in the order they got them; shared between the handler and the
/// test.
#[derive(Debug, Clone, Default)]
struct Batches(Arc<Mutex<Vec<SeenBatch>>>);

impl Batches {
    /// Records a batch of text payloads; returns its index.
    fn saw(&self, batch: &Batch<Bytes>) -> usize {
        self.saw_each(batch.iter().map(|item| {
            (
                String::from_utf8_lossy(&item.payload).into_owned(),
                &item.delivery,
            )
        }))
    }
    /// Records a batch of `(payload as text, delivery)`; returns its index.
    fn saw_each<'a>(&self, items: impl Iterator<Item = (String, &'a Delivery)>) -> usize {
        let began = Instant::now();
        let messages = items
            .map(|(data, d)| Seen {
                message_id: d.message_id().to_string(),
                data,
                attempt: d.delivery_attempt(),
                at: began,
            })
            .collect();
        let mut all = self.0.lock();
        all.push(SeenBatch {
            messages,
            began,
            ended: None,
        });
        all.len() - 1
    }
    /// The handler of batch `index` returned.
    fn ended(&self, index: usize) {
        self.0.lock()[index].ended = Some(Instant::now());
    }
    fn all(&self) -> Vec<SeenBatch> {
        self.0.lock().clone()
    }
    fn sizes(&self) -> Vec<usize> {
        self.0.lock().iter().map(|b| b.messages.len()).collect()
    }
    /// Every delivery of the message with payload `data`, in the order the handler got them.
    fn of(&self, data: &str) -> Vec<Seen> {
        self.0
            .lock()
            .iter()
            .flat_map(|b| b.messages.iter().filter(|m| m.data == data).cloned())
            .collect()
    }
}

/// The runtime counted exactly the batches the handler got, and their sizes.
fn assert_counted(sub: &Subscription, batches: &Batches) {
    let sizes = batches.sizes();
    let histogram = sub.histograms().batch_size;
    assert_eq!(
        (sub.stats().batches, histogram.count, histogram.sum),
        (
            sizes.len() as u64,
            sizes.len() as u64,
            sizes.iter().sum::<usize>() as f64
        ),
        "the batches counted (batches, batch_size count, batch_size sum) against what the \
         handler got: {sizes:?}"
    );
}

/// Pub/Sub's smallest dead-letter limit.
const MAX_ATTEMPTS: u32 = 5;

/// How long the `retry_after` message is held.
const HOLD: Duration = Duration::from_secs(4);

/// The message to drop must be on its last attempt in the batch, and the others not: it is
/// published first and retried alone once, then the other four are published and retried with
/// it, one attempt behind, until it reaches its last. (A first consumer cannot take it through
/// those attempts: the emulator goes on sending new messages to a stopped consumer's stream,
/// where each waits for its lease extension to run out.)
#[actix_rt::test]
async fn each_message_of_one_batch_is_settled_with_its_own_outcome() {
    const KINDS: [&str; 4] = ["ack", "retry", "hold", "none"];
    let (scratch, dead_subscription) =
        Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS as i32).await;
    let batches = Batches::default();
    let b = batches.clone();
    let registration =
        Registration::raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            b.saw(&batch);
            let mut outcomes = BatchOutcome::new();
            for item in &batch {
                let d = &item.delivery;
                let attempt = d
                    .delivery_attempt()
                    .expect("a dead-letter policy counts attempts");
                let outcome = match &item.payload[..] {
                    b"drop" if attempt == MAX_ATTEMPTS => d.drop(),
                    // Retried with the message to drop until it is on its last attempt.
                    _ if attempt < MAX_ATTEMPTS - 1 => d.retry(),
                    b"drop" => d.retry(),
                    // The batch where the message to drop is on its last attempt: each its own.
                    b"ack" if attempt == MAX_ATTEMPTS - 1 => d.ack(),
                    b"retry" if attempt == MAX_ATTEMPTS - 1 => d.retry(),
                    b"hold" if attempt == MAX_ATTEMPTS - 1 => {
                        d.retry_after(HOLD).expect("a 4 s hold fits the lease")
                    }
                    b"none" if attempt == MAX_ATTEMPTS - 1 => continue,
                    // Their redeliveries.
                    _ => d.ack(),
                };
                outcomes.set(d, outcome);
            }
            async move { outcomes }
        })
        .max_batch_messages(5)
        .max_batch_wait(Duration::from_secs(1));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let dead = Record::default();
    let dl = dead.clone();
    let dead_sub = leasehold::start(
        Registration::raw(&dead_subscription, move |data, d: Delivery| {
            dl.saw_payload(&data, &d);
            async move { d.ack() }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();

    let last = scratch.publish("drop", "").await;
    eventually("the first attempt to drop", Duration::from_secs(30), || {
        !batches.all().is_empty()
    })
    .await;
    let ids = scratch.publish_all(KINDS.map(String::from)).await;
    let id_of = |kind: &str| ids[KINDS.iter().position(|k| *k == kind).unwrap()].clone();

    let is_mixed = |b: &SeenBatch| {
        b.messages
            .iter()
            .any(|m| m.data == "drop" && m.attempt == Some(MAX_ATTEMPTS))
    };
    eventually(
        "the batch with the message to drop on its last attempt",
        Duration::from_secs(30),
        || batches.all().iter().any(is_mixed),
    )
    .await;
    let all = batches.all();
    let mixed = all.iter().find(|b| is_mixed(b)).unwrap();
    let mut attempts: Vec<(&str, Option<u32>)> = mixed
        .messages
        .iter()
        .map(|m| (m.data.as_str(), m.attempt))
        .collect();
    attempts.sort_unstable();
    assert_eq!(
        attempts,
        [
            ("ack", Some(4)),
            ("drop", Some(5)),
            ("hold", Some(4)),
            ("none", Some(4)),
            ("retry", Some(4)),
        ],
        "one batch of all five: {:?}",
        all.iter().map(SeenBatch::payloads).collect::<Vec<_>>()
    );

    never_within(
        "the held message came back before its delay",
        HOLD - Duration::from_millis(250),
        || batches.of("hold").len() > 4,
    )
    .await;
    eventually("every message settled", Duration::from_secs(30), || {
        let s = sub.stats();
        s.acked == 4 && s.dead_lettered == 1 && dead.of("drop").len() == 1
    })
    .await;

    let attempts_of = |kind: &str| -> Vec<(String, Option<u32>)> {
        batches
            .of(kind)
            .into_iter()
            .map(|s| (s.message_id, s.attempt))
            .collect()
    };
    let through = |id: &String, n: u32| (1..=n).map(|a| (id.clone(), Some(a))).collect::<Vec<_>>();
    assert_eq!(
        attempts_of("drop"),
        through(&last, 5),
        "dead-lettered after its last"
    );
    assert_eq!(
        attempts_of("ack"),
        through(&id_of("ack"), 4),
        "acked: not redelivered"
    );
    for kind in ["retry", "hold", "none"] {
        assert_eq!(
            attempts_of(kind),
            through(&id_of(kind), 5),
            "{kind}: redelivered, the same message with the next delivery attempt"
        );
    }
    let held = batches.of("hold");
    assert!(
        held[4].at - held[3].at >= HOLD,
        "redelivered {:?} after the hold began, before its {HOLD:?}",
        held[4].at - held[3].at
    );
    assert_eq!(
        dead.all().len(),
        1,
        "only the dropped message was dead-lettered"
    );

    let stats = sub.stats();
    // Retried: the message to drop 4 times, the others 3 times each before the batch with it,
    // then `retry`, `none` and the end of the hold.
    assert_eq!(
        (
            stats.received,
            stats.acked,
            stats.retried,
            stats.held,
            stats.dead_lettered,
            stats.dropped
        ),
        (24, 4, 4 + 4 * 3 + 3, 1, 1, 0),
        "(received, acked, retried, held, dead_lettered, dropped)"
    );
    let missing: Vec<_> = sub
        .recent_failures()
        .into_iter()
        .filter(|f| f.kind == FailureKind::MissingOutcome)
        .map(|f| (f.message_id, f.attempt))
        .collect();
    assert_eq!(missing, [(id_of("none"), Some(4))]);
    assert_counted(&sub, &batches);

    sub.stop().await;
    dead_sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn on_an_exactly_once_subscription_every_ack_of_a_batch_is_confirmed() {
    const COUNT: usize = 20;
    /// The lease extension: an ack that did not hold would bring its message back within it.
    const EXTENSION: Duration = Duration::from_secs(10);
    let scratch = Scratch::new(|s| s.set_enable_exactly_once_delivery(true)).await;
    let published = scratch.publish_all((0..COUNT).map(|n| n.to_string())).await;
    let batches = Batches::default();
    let b = batches.clone();
    let registration =
        Registration::raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            b.saw(&batch);
            async move { BatchOutcome::all(Outcome::ack()) }
        })
        .max_batch_messages(10)
        .max_batch_wait(Duration::from_millis(500))
        .max_lease_extension(EXTENSION);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    assert!(sub.info().unwrap().exactly_once);
    eventually("every ack confirmed", Duration::from_secs(30), || {
        sub.stats().confirmed == COUNT as u64
    })
    .await;
    assert_eq!(batches.sizes(), [10, 10], "two full batches");
    never_within(
        "a confirmed message came back",
        EXTENSION + Duration::from_secs(3),
        || sub.stats().received > COUNT as u64,
    )
    .await;
    let stats = sub.stats();
    assert_eq!((stats.acked, stats.failed_acks), (COUNT as u64, 0));
    let mut seen: Vec<String> = batches
        .all()
        .iter()
        .flat_map(|b| b.ids().into_iter().map(String::from).collect::<Vec<_>>())
        .collect();
    seen.sort_unstable();
    let mut expected = published;
    expected.sort_unstable();
    assert_eq!(seen, expected, "each message once");
    assert_counted(&sub, &batches);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn messages_of_one_ordering_key_keep_their_order_and_never_run_in_two_batches_at_once() {
    const KEYS: [&str; 3] = ["k0", "k1", "k2"];
    const PER_KEY: usize = 6;
    const UNKEYED: usize = 12;
    /// How long each batch's handler runs: long enough for batches to overlap.
    const WORK: Duration = Duration::from_millis(300);
    let scratch = Scratch::new(|s| s.set_enable_message_ordering(true)).await;
    // The publisher keeps each key's messages in the order of these calls.
    let mut messages = Vec::new();
    for n in 0..PER_KEY.max(UNKEYED) {
        for key in KEYS.iter().filter(|_| n < PER_KEY) {
            messages.push(
                Message::new()
                    .set_data(format!("{key}:{n}"))
                    .set_ordering_key(*key),
            );
        }
        if n < UNKEYED {
            messages.push(Message::new().set_data(format!(":{n}")));
        }
    }
    let total = messages.len();
    for id in
        futures::future::join_all(messages.into_iter().map(|m| scratch.publisher.publish(m))).await
    {
        id.unwrap();
    }

    let batches = Batches::default();
    let b = batches.clone();
    let registration =
        Registration::raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            let index = b.saw(&batch);
            let b = b.clone();
            async move {
                actix_rt::time::sleep(WORK).await;
                b.ended(index);
                BatchOutcome::all(Outcome::ack())
            }
        })
        .workers(4)
        .max_batch_messages(8)
        .max_batch_wait(Duration::from_millis(100));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    eventually("every message acked", Duration::from_secs(30), || {
        sub.stats().acked == total as u64
    })
    .await;

    let mut all = batches.all();
    all.sort_by_key(|b| b.began);
    // "k1:3" -> ("k1", 3); unkeyed messages have the key "".
    let key_of = |m: &Seen| {
        let (key, n) = m.data.split_once(':').unwrap();
        (key.to_string(), n.parse::<usize>().unwrap())
    };
    for key in KEYS {
        let of_key: Vec<&SeenBatch> = all
            .iter()
            .filter(|b| b.messages.iter().any(|m| key_of(m).0 == key))
            .collect();
        let order: Vec<usize> = of_key
            .iter()
            .flat_map(|b| b.messages.iter().map(key_of).filter(|(k, _)| k == key))
            .map(|(_, n)| n)
            .collect();
        assert_eq!(
            order,
            (0..PER_KEY).collect::<Vec<_>>(),
            "{key} handled in publish order, within a batch and across them"
        );
        for pair in of_key.windows(2) {
            assert!(
                pair[0].ended.unwrap() <= pair[1].began,
                "two batches with {key} ran at once: {:?} and {:?}",
                pair[0].payloads(),
                pair[1].payloads()
            );
        }
    }
    let unkeyed_together = all
        .iter()
        .map(|b| b.messages.iter().filter(|m| key_of(m).0.is_empty()).count())
        .max()
        .unwrap();
    assert!(
        unkeyed_together > 1,
        "messages without a key batch together: {:?}",
        all.iter().map(SeenBatch::payloads).collect::<Vec<_>>()
    );
    let keyed_together = all.iter().any(|b| {
        KEYS.iter()
            .any(|key| b.messages.iter().filter(|m| key_of(m).0 == *key).count() > 1)
    });
    assert!(
        keyed_together,
        "messages of one key join the batch their key forms: {:?}",
        all.iter().map(SeenBatch::payloads).collect::<Vec<_>>()
    );
    let overlapped = all
        .windows(2)
        .any(|pair| pair[1].began < pair[0].ended.unwrap());
    assert!(
        overlapped,
        "batches ran at once (else the test shows nothing)"
    );
    assert_eq!(sub.stats().received, total as u64, "none redelivered");
    assert_counted(&sub, &batches);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn flow_control_below_the_batch_size_is_never_exceeded_and_batches_go_out_by_their_wait() {
    const COUNT: usize = 40;
    const MAX_OUTSTANDING: usize = 5;
    const MAX_BATCH: usize = 20;
    let scratch = Scratch::new(|s| s).await;
    scratch.publish_all((0..COUNT).map(|n| n.to_string())).await;
    let batches = Batches::default();
    let b = batches.clone();
    // Blocking: the bulk write of each batch holds its thread.
    let registration =
        Registration::blocking_raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            b.saw(&batch);
            std::thread::sleep(Duration::from_millis(20));
            BatchOutcome::all(Outcome::ack())
        })
        .workers(2)
        .max_outstanding_messages(MAX_OUTSTANDING)
        .max_batch_messages(MAX_BATCH)
        .max_batch_wait(Duration::from_millis(150));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let mut peak = 0;
    eventually("every message acked", Duration::from_secs(30), || {
        peak = peak.max(sub.in_flight().messages);
        sub.stats().acked == COUNT as u64
    })
    .await;
    assert!(peak <= MAX_OUTSTANDING, "{peak} outstanding");
    assert_eq!(sub.stats().peak_outstanding, MAX_OUTSTANDING as u64);
    let sizes = batches.sizes();
    assert_eq!(sizes.iter().sum::<usize>(), COUNT, "each message once");
    assert_eq!(
        sizes.iter().max(),
        Some(&MAX_OUTSTANDING),
        "batches fill up to the flow-control limit, never to their own {MAX_BATCH}, so \
         their wait hands them out: {sizes:?}"
    );
    assert_eq!(sub.stats().received, COUNT as u64);
    assert_counted(&sub, &batches);
    sub.stop().await;
    scratch.cleanup().await;
}

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

/// A batch handler of JSON orders that records the ids it got and acks them.
fn on_orders(subscription: &str, batches: &Batches) -> Registration {
    let b = batches.clone();
    Registration::json_batch(subscription, move |batch: Batch<Order>| {
        b.saw_each(
            batch
                .iter()
                .map(|item| (item.payload.id.to_string(), &item.delivery)),
        );
        let mut outcomes = BatchOutcome::new();
        for item in &batch {
            outcomes.set(&item.delivery, item.delivery.ack());
        }
        async move { outcomes }
    })
}

#[actix_rt::test]
async fn payloads_that_do_not_decode_go_to_the_failure_policy_alone_and_are_left_out() {
    let scratch = Scratch::new(|s| s).await;
    let payloads = [
        r#"{"id": 1}"#,
        "not json",
        r#"{"id": 2}"#,
        r#"{"id": "three"}"#,
        r#"{"id": 4}"#,
        r#"{"no_id": 5}"#,
        r#"{"id": 6}"#,
        r#"{"id": 7}"#,
    ];
    let ids = scratch
        .publish_all(payloads.iter().map(|p| p.to_string()))
        .await;
    let batches = Batches::default();
    let registration = on_orders(&scratch.subscription, &batches)
        .max_batch_messages(payloads.len())
        .max_batch_wait(Duration::from_secs(1));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    eventually("every message settled", Duration::from_secs(30), || {
        let s = sub.stats();
        s.acked == 5 && s.dropped == 3
    })
    .await;
    let all = batches.all();
    let mut got: Vec<Vec<&str>> = all.iter().map(SeenBatch::payloads).collect();
    got.iter_mut().for_each(|b| b.sort_unstable());
    assert_eq!(
        got,
        [["1", "2", "4", "6", "7"]],
        "one batch of all eight, without the three that did not decode"
    );
    let stats = sub.stats();
    assert_eq!((stats.decode_failures, stats.received), (3, 8));
    let mut failed: Vec<String> = sub
        .recent_failures()
        .into_iter()
        .filter(|f| f.kind == FailureKind::DecodeFailure)
        .map(|f| f.message_id)
        .collect();
    failed.sort_unstable();
    let mut undecodable: Vec<String> = [1, 3, 5].map(|n| ids[n].clone()).to_vec();
    undecodable.sort_unstable();
    assert_eq!(
        failed, undecodable,
        "each went to the failure policy (drop) on its own"
    );
    assert!(
        all[0]
            .ids()
            .iter()
            .all(|id| !undecodable.iter().any(|u| u == id)),
        "none of them reached the handler"
    );
    sub.stop().await;
    scratch.cleanup().await;
}

/// `stats().batches` and `histograms().batch_size` count the batches handed to the handler and
/// their messages (their docs): a payload that did not decode is not in the batch the handler
/// gets, and a batch none of whose payloads decoded never reaches it.
#[actix_rt::test]
async fn batch_counts_leave_out_payloads_that_did_not_decode() {
    let scratch = Scratch::new(|s| s).await;
    let batches = Batches::default();
    let registration = on_orders(&scratch.subscription, &batches)
        .max_batch_messages(3)
        .max_batch_wait(Duration::from_secs(1));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    // A batch of three of which none decodes, then one of which one does not.
    scratch
        .publish_all(["not json", r#"{"id": "x"}"#, "[]"].map(String::from))
        .await;
    eventually("three decode failures", Duration::from_secs(30), || {
        sub.stats().decode_failures == 3
    })
    .await;
    scratch
        .publish_all([r#"{"id": 1}"#, "{", r#"{"id": 2}"#].map(String::from))
        .await;
    eventually("the second batch settled", Duration::from_secs(30), || {
        sub.stats().acked == 2 && sub.stats().decode_failures == 4
    })
    .await;
    assert_eq!(batches.sizes(), [2], "the handler got one batch, of two");
    assert_counted(&sub, &batches);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_panicking_batch_handler_gets_every_message_of_its_batch_redelivered_and_goes_on() {
    let scratch = Scratch::new(|s| s).await;
    let payloads = ["boom", "a", "b", "c", "d", "e"];
    scratch
        .publish_all(payloads.iter().map(|p| p.to_string()))
        .await;
    let batches = Batches::default();
    let b = batches.clone();
    let exploded = Arc::new(AtomicBool::new(false));
    let e = exploded.clone();
    let registration =
        Registration::raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            b.saw(&batch);
            let boom = batch.iter().any(|item| &item.payload[..] == b"boom")
                && !e.swap(true, Ordering::SeqCst);
            async move {
                if boom {
                    panic!("batch handler bug");
                }
                BatchOutcome::all(Outcome::ack())
            }
        })
        .workers(1)
        .max_batch_messages(3)
        .max_batch_wait(Duration::from_millis(500));
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    eventually("every message acked", Duration::from_secs(30), || {
        sub.stats().acked == payloads.len() as u64
    })
    .await;
    let all = batches.all();
    let panicked = all.iter().find(|b| b.payloads().contains(&"boom")).unwrap();
    assert_eq!(panicked.messages.len(), 3, "a full batch: {panicked:?}");
    for m in &panicked.messages {
        let seen = batches.of(&m.data);
        assert_eq!(seen.len(), 2, "{} redelivered after the panic", m.data);
        assert!(seen.iter().all(|s| s.message_id == m.message_id));
    }
    let in_panicked: HashSet<&str> = panicked.payloads().into_iter().collect();
    for p in payloads.iter().filter(|p| !in_panicked.contains(*p)) {
        assert_eq!(batches.of(p).len(), 1, "{p} handled once");
    }
    let stats = sub.stats();
    assert_eq!(
        (stats.panics, stats.retried, stats.received),
        (1, 3, 9),
        "(panics, retried by the panic policy, received)"
    );
    let mut failed: Vec<String> = sub
        .recent_failures()
        .into_iter()
        .filter(|f| f.kind == FailureKind::Panic)
        .map(|f| f.message_id)
        .collect();
    failed.sort_unstable();
    let mut expected: Vec<String> = panicked.ids().into_iter().map(String::from).collect();
    expected.sort_unstable();
    assert_eq!(failed, expected, "each message of the batch counted");
    assert!(
        all.len() >= 3,
        "the only worker went on after the panic: {:?}",
        all.iter().map(SeenBatch::payloads).collect::<Vec<_>>()
    );
    assert_counted(&sub, &batches);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn stop_finishes_a_running_batch_and_releases_a_forming_one() {
    let scratch = Scratch::new(|s| s).await;
    let ids = scratch
        .publish_all(["m0", "m1", "m2", "m3"].map(String::from))
        .await;
    let batches = Batches::default();
    let b = batches.clone();
    let stopping = Arc::new(AtomicBool::new(false));
    let s = stopping.clone();
    let registration =
        Registration::raw_batch(&scratch.subscription, move |batch: Batch<Bytes>| {
            b.saw(&batch);
            let stopping = s.clone();
            async move {
                // Runs until the stop has begun, and a little into the drain.
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stopping.load(Ordering::SeqCst) && Instant::now() < deadline {
                    actix_rt::time::sleep(Duration::from_millis(10)).await;
                }
                actix_rt::time::sleep(Duration::from_millis(300)).await;
                BatchOutcome::all(Outcome::ack())
            }
        })
        // Two workers: the second is free, so the fourth message forms a batch (it does not wait
        // for a worker), which waits for more until long after the stop.
        .workers(2)
        .max_batch_messages(3)
        .max_batch_wait(Duration::from_secs(50))
        .drain_timeout(Duration::from_secs(10))
        // After the stop, the emulator goes on sending messages (the released one too) to this
        // consumer's stream, where each waits for its lease extension to run out before it is
        // sent again: keep that short.
        .max_lease_extension(Duration::from_secs(10));
    let first = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    eventually(
        "a batch of three running, the fourth received",
        Duration::from_secs(30),
        || batches.sizes() == [3] && first.stats().received == 4 && first.load().waiting == 0,
    )
    .await;
    // The second consumer starts before the stop. The released message is nacked at once and
    // the emulator hands it straight back to one of the subscription's senders: with the second
    // consumer's stream open, that may be it. Started after the stop, it would not be: the only
    // sender then is the stopping consumer's stream, which the emulator keeps sending to after
    // it closed (RELIABILITY.md, "Known limits"), and each message it takes waits there for the
    // 10 s lease extension, then goes to one of the two senders again. Measured on 2026-12-06:
    // started after the stop, the message came 10.1, 10.1 and 20.1 s after it, never sooner.
    let record = Record::default();
    let r = record.clone();
    let second = leasehold::start(
        Registration::raw(&scratch.subscription, move |data, d: Delivery| {
            r.saw_payload(&data, &d);
            async move { d.ack() }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();
    eventually("the second stream open", Duration::from_secs(30), || {
        second.open_streams() == 1
    })
    .await;
    stopping.store(true, Ordering::SeqCst);
    let stop_began = Instant::now();
    first.stop().await;
    let stopped_after = stop_began.elapsed();
    let stats = first.stats();
    assert_eq!(
        (stats.acked, stats.released, stats.retried),
        (3, 1, 0),
        "(acked, released, retried)"
    );
    assert_eq!(stats.settled(), stats.received, "{stats:?}");
    assert_eq!(batches.sizes(), [3], "the forming batch never ran");
    let ran: HashSet<String> = batches.all()[0]
        .ids()
        .into_iter()
        .map(String::from)
        .collect();
    let forming: Vec<&String> = ids.iter().filter(|id| !ran.contains(*id)).collect();
    assert_eq!(forming.len(), 1);

    // The second consumer gets the released message, and not the acked ones: at once, or after
    // one or more rounds of 10 s in the stopped stream's sender.
    eventually(
        "the released message again",
        Duration::from_secs(120),
        || second.stats().acked == 1,
    )
    .await;
    eprintln!(
        "stop took {stopped_after:?}; the released message reached the second consumer {:?} \
         after the stop began; stream restarts: the first's {}, the second's {}",
        stop_began.elapsed(),
        stats.stream_restarts,
        second.stats().stream_restarts
    );
    let again: Vec<String> = record.all().into_iter().map(|s| s.message_id).collect();
    assert_eq!(again, [forming[0].clone()]);
    second.stop().await;
    scratch.cleanup().await;
}
