//! The outage breaker: what trips it, what it holds, how it tries again and closes.

use crate::Breaker;
use crate::status::BreakerState;
use crate::tests::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// A dependency the handler writes to: up or down.
#[derive(Clone, Default)]
struct Dependency {
    down: Arc<AtomicBool>,
    /// Every handler call, by message id, in order.
    calls: Arc<Mutex<Vec<String>>>,
}

impl Dependency {
    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }
    fn calls_of(&self, id: &str) -> usize {
        self.calls.lock().iter().filter(|c| *c == id).count()
    }
}

const COOLDOWN: Duration = Duration::from_secs(2);

fn breaker() -> Breaker {
    Breaker::new().cooldown(COOLDOWN, Duration::from_secs(8))
}

/// A handler that says `unavailable()` while the dependency is down, acks otherwise.
fn reporting(dependency: &Dependency) -> Registration {
    let dependency = dependency.clone();
    Registration::raw(SUB, move |_, d: Delivery| {
        let dependency = dependency.clone();
        async move {
            dependency.calls.lock().push(d.message_id().to_string());
            if dependency.down.load(Ordering::SeqCst) {
                d.unavailable()
            } else {
                d.ack()
            }
        }
    })
    .breaker(breaker())
}

fn state(sub: &Subscription) -> BreakerState {
    sub.breaker().expect("a breaker is set").state
}

#[actix_rt::test]
async fn a_dependency_reported_down_trips_at_once_and_nothing_is_nacked_through_the_outage() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let pubsub = MemoryPubSub::new();
    let sub = start(reporting(&dependency).workers(1), pubsub.connector())
        .await
        .unwrap();
    assert_eq!(state(&sub), BreakerState::Closed);
    let first = pubsub.publish(message("m1", "a"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    assert_eq!(sub.stats().breaker_trips, 1);
    assert_eq!(first.action(), None, "held, not nacked");
    assert_eq!(sub.breaker().unwrap().held, 1);

    // Published while open: read (so the client leases them) and kept waiting, unrun.
    let later: Vec<_> = (2..=5)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "a")))
        .collect();
    eventually("the later ones read", || sub.stats().received == 5).await;
    assert_eq!(sub.load().waiting, 4);
    assert_eq!(dependency.calls(), ["m1"], "nothing new started");
    assert!(later.iter().all(|p| p.action().is_none()));

    // The try after the cooldown fails again (the dependency is still down): open again.
    eventually("the first try", || dependency.calls_of("m1") == 2).await;
    assert_eq!(state(&sub), BreakerState::Open);
    assert_eq!(first.action(), None);

    dependency.set_down(false);
    settled(std::iter::once(&first).chain(&later)).await;
    assert_eq!(first.action(), Some(Action::Ack));
    assert!(later.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(state(&sub), BreakerState::Closed);
    let stats = sub.stats();
    assert_eq!((stats.retried, stats.acked, stats.breaker_trips), (0, 5, 1));
    let report = sub.breaker().unwrap();
    assert_eq!((report.held, report.open_for), (0, None));
    assert!(report.open_total > Duration::ZERO);
}

#[actix_rt::test]
async fn a_failed_try_opens_again_for_twice_the_cooldown() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let pubsub = MemoryPubSub::new();
    let sub = start(reporting(&dependency), pubsub.connector())
        .await
        .unwrap();
    let held = pubsub.publish(message("m1", "a"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    let tripped = Instant::now();
    let mut tries = Vec::new();
    for n in 2..=4 {
        eventually("the next try", || dependency.calls_of("m1") == n).await;
        tries.push(Instant::now().duration_since(tripped));
    }
    // Tried after 2 s, then 4 s later, then 8 s later (the cap): 2, 6, 14 s after the trip.
    let seconds: Vec<f64> = tries.iter().map(|d| d.as_secs_f64().round()).collect();
    assert_eq!(seconds, [2.0, 6.0, 14.0]);
    assert_eq!(held.action(), None);
    assert_eq!(
        sub.stats().breaker_trips,
        1,
        "a failed try is not a new trip"
    );
    sub.stop().await;
}

#[actix_rt::test]
async fn a_poison_message_among_good_ones_does_not_trip_it() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |data, d: Delivery| async move {
        if &data[..] == b"poison" {
            d.retry()
        } else {
            d.ack()
        }
    })
    .breaker(Breaker::new().consecutive_failures(Some(3)).min_messages(5));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let mut all = Vec::new();
    for attempt in 1..=10 {
        // The same message redelivered, with good ones between.
        all.push(pubsub.publish(message("poison", "poison").attempt(attempt)));
        all.push(pubsub.publish(message(&format!("good{attempt}"), "fine")));
    }
    settled(&all).await;
    assert_eq!(state(&sub), BreakerState::Closed);
    let stats = sub.stats();
    assert_eq!(
        (stats.breaker_trips, stats.retried, stats.acked),
        (0, 10, 10)
    );
}

#[actix_rt::test]
async fn consecutive_failures_of_different_messages_trip_it_and_hold_each() {
    tokio::time::pause();
    let down = Arc::new(AtomicBool::new(true));
    let registration = Registration::raw(SUB, {
        let down = down.clone();
        move |_, d: Delivery| {
            let down = down.clone();
            async move {
                if down.load(Ordering::SeqCst) {
                    d.retry()
                } else {
                    d.ack()
                }
            }
        }
    })
    .workers(1)
    .breaker(breaker().consecutive_failures(Some(3)));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<_> = (1..=5)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "a")))
        .collect();
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    // The first two failures were nacked while it was closed; the third tripped it and is held.
    assert_eq!(all[0].action(), Some(Action::Nack));
    assert_eq!(all[1].action(), Some(Action::Nack));
    assert_eq!(all[2].action(), None);
    assert_eq!(sub.breaker().unwrap().held, 1);
    down.store(false, Ordering::SeqCst);
    settled(&all[2..]).await;
    assert!(all[2..].iter().all(|p| p.action() == Some(Action::Ack)));
}

#[actix_rt::test]
async fn ordering_keys_keep_their_order_through_a_trip() {
    tokio::time::pause();
    let dependency = Dependency::default();
    let pubsub = MemoryPubSub::new();
    let sub = start(reporting(&dependency).workers(4), pubsub.connector())
        .await
        .unwrap();
    dependency.set_down(true);
    let all: Vec<_> = (1..=6)
        .map(|n| {
            let key = if n % 2 == 0 { "even" } else { "odd" };
            pubsub.publish(message(&format!("m{n}"), "a").ordering_key(key))
        })
        .collect();
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    dependency.set_down(false);
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    // Each key's messages ran in publish order, each acked once after its failed runs.
    let calls = dependency.calls();
    for key in [["m1", "m3", "m5"], ["m2", "m4", "m6"]] {
        let firsts: Vec<usize> = key
            .iter()
            .map(|id| calls.iter().rposition(|c| c == id).unwrap())
            .collect();
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{calls:?}");
    }
    assert_eq!(sub.stats().retried, 0);
}

#[actix_rt::test]
async fn a_held_message_is_nacked_before_its_lease_runs_out_and_counted() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let registration = reporting(&dependency)
        .max_lease(Duration::from_secs(60))
        .breaker(Breaker::new().cooldown(Duration::from_secs(30), Duration::from_secs(30)));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let received = Instant::now();
    let held = pubsub.publish(message("m1", "a").attempt(1));
    settled([&held]).await;
    assert_eq!(held.action(), Some(Action::Nack));
    // A tenth of the budget before its end: 54 s after receipt.
    let after = Instant::now().duration_since(received);
    assert!(
        (Duration::from_secs(53)..Duration::from_secs(56)).contains(&after),
        "{after:?}"
    );
    let stats = sub.stats();
    assert_eq!(
        (stats.breaker_expired, stats.retried, stats.lost_leases),
        (1, 1, 0)
    );
    assert_eq!(sub.breaker().unwrap().held, 0);
}

#[actix_rt::test]
async fn a_stop_while_open_nacks_what_is_held_and_counts_it() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let pubsub = MemoryPubSub::new();
    let sub = start(reporting(&dependency).workers(2), pubsub.connector())
        .await
        .unwrap();
    let all: Vec<_> = (1..=2)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "a")))
        .collect();
    eventually("both held", || sub.breaker().is_some_and(|b| b.held == 2)).await;
    sub.stop().await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    let stats = sub.stats();
    assert_eq!((stats.breaker_released, stats.retried), (2, 2));
    assert_eq!(stats.unsettled(), 0);
}

#[actix_rt::test]
async fn the_readiness_check_keeps_it_open_without_spending_a_message() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let checks = Arc::new(Mutex::new(0u32));
    let registration = reporting(&dependency).breaker_readiness({
        let (down, checks) = (dependency.down.clone(), checks.clone());
        move || {
            *checks.lock() += 1;
            let up = !down.load(Ordering::SeqCst);
            async move { up }
        }
    });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let held = pubsub.publish(message("m1", "a"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    eventually("three checks", || *checks.lock() >= 3).await;
    assert_eq!(dependency.calls_of("m1"), 1, "no message spent on a check");
    dependency.set_down(false);
    settled([&held]).await;
    assert_eq!(held.action(), Some(Action::Ack));
    assert_eq!(dependency.calls_of("m1"), 2);
}

#[actix_rt::test]
async fn without_a_breaker_unavailable_is_a_retry() {
    tokio::time::pause();
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.unavailable() });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let s = pubsub.publish(message("m1", "a"));
    settled([&s]).await;
    assert_eq!(s.action(), Some(Action::Nack));
    assert_eq!(sub.breaker(), None);
}

#[test]
fn a_readiness_check_without_a_breaker_is_refused() {
    let registration = Registration::raw(SUB, |_, d: Delivery| async move { d.ack() })
        .breaker_readiness(|| async { true });
    assert_eq!(
        registration.validate().unwrap_err().option,
        "breaker_readiness"
    );
}

#[actix_rt::test]
async fn a_batch_holds_its_failed_messages_and_runs_them_again_in_a_batch_once_it_closes() {
    tokio::time::pause();
    let down = Arc::new(AtomicBool::new(true));
    let batches: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let registration = Registration::raw_batch(SUB, {
        let (down, batches) = (down.clone(), batches.clone());
        move |batch: crate::Batch<Bytes>| {
            let down = down.load(Ordering::SeqCst);
            batches.lock().push(
                batch
                    .payloads()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect(),
            );
            let mut outcomes = crate::BatchOutcome::new();
            for item in &batch {
                let d = &item.delivery;
                // One message acks whatever happens; the others need the dependency.
                let outcome = if down && &item.payload[..] != b"fine" {
                    d.unavailable()
                } else {
                    d.ack()
                };
                outcomes.set(d, outcome);
            }
            async move { outcomes }
        }
    })
    .max_batch_messages(3)
    .breaker(breaker());
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<_> = ["a", "fine", "b"]
        .iter()
        .map(|p| pubsub.publish(message(p, p)))
        .collect();
    eventually("the two failed ones held", || {
        sub.breaker().is_some_and(|b| b.held == 2)
    })
    .await;
    assert_eq!(all[1].action(), Some(Action::Ack), "its success is settled");
    assert_eq!((all[0].action(), all[2].action()), (None, None));
    down.store(false, Ordering::SeqCst);
    settled(&all).await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Ack)));
    let batches = batches.lock().clone();
    // The first batch, then the try (the first held message alone), then the other held one.
    assert_eq!(batches[0], ["a", "fine", "b"]);
    assert_eq!(batches[1], ["a"], "{batches:?}");
    assert_eq!(batches[2..].concat(), ["b"], "{batches:?}");
    assert_eq!(sub.stats().retried, 0);
}

#[actix_rt::test]
async fn a_held_message_that_keeps_failing_does_not_keep_it_open_for_the_others() {
    tokio::time::pause();
    let down = Arc::new(AtomicBool::new(true));
    let registration = Registration::raw(SUB, {
        let down = down.clone();
        move |data, d: Delivery| {
            let down = down.load(Ordering::SeqCst);
            async move {
                match &data[..] {
                    b"poison" => d.retry(),
                    _ if down => d.unavailable(),
                    _ => d.ack(),
                }
            }
        }
    })
    .workers(1)
    .breaker(breaker().consecutive_failures(Some(1)));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    // The poison message trips it and is the one held; the others wait behind it.
    let poison = pubsub.publish(message("p", "poison"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    let good: Vec<_> = (1..=3)
        .map(|n| pubsub.publish(message(&format!("g{n}"), "fine")))
        .collect();
    down.store(false, Ordering::SeqCst);
    // Its own try fails; the next try is a waiting message, which succeeds and closes it.
    settled(&good).await;
    assert!(good.iter().all(|p| p.action() == Some(Action::Ack)));
    assert_eq!(state(&sub), BreakerState::Closed);
    // Closed, the poison message goes the normal way: retried.
    settled([&poison]).await;
    assert_eq!(poison.action(), Some(Action::Nack));
}

#[actix_rt::test]
async fn a_try_that_says_nothing_of_the_dependency_is_followed_by_another_at_once() {
    tokio::time::pause();
    let down = Arc::new(AtomicBool::new(true));
    let registration = Registration::raw(SUB, {
        let down = down.clone();
        move |data, d: Delivery| {
            let down = down.load(Ordering::SeqCst);
            async move {
                if down {
                    return d.unavailable();
                }
                if &data[..] == b"defer" {
                    // Settled elsewhere: neither a success nor a failure of the dependency.
                    let (later, settler) = d.settle_later();
                    settler.ack();
                    return later;
                }
                d.ack()
            }
        }
    })
    .workers(2)
    .breaker(breaker());
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let deferred = pubsub.publish(message("m1", "defer"));
    let plain = pubsub.publish(message("m2", "fine").ordering_key("k"));
    eventually("both held", || sub.breaker().is_some_and(|b| b.held == 2)).await;
    down.store(false, Ordering::SeqCst);
    let began = Instant::now();
    settled([&deferred, &plain]).await;
    assert_eq!(
        (deferred.action(), plain.action()),
        (Some(Action::Ack), Some(Action::Ack))
    );
    assert_eq!(state(&sub), BreakerState::Closed);
    // Both within the first cooldown's try, not a cooldown apart.
    assert!(Instant::now() - began <= COOLDOWN + Duration::from_millis(100));
}

#[actix_rt::test]
async fn a_message_waiting_to_start_is_nacked_before_its_lease_runs_out_and_counted() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let registration = reporting(&dependency)
        .workers(1)
        .max_lease(Duration::from_secs(60))
        .breaker(Breaker::new().cooldown(Duration::from_secs(100), Duration::from_secs(100)));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let held = pubsub.publish(message("m1", "a"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    let waiting = pubsub.publish(message("m2", "a"));
    settled([&held, &waiting]).await;
    assert_eq!(
        (held.action(), waiting.action()),
        (Some(Action::Nack), Some(Action::Nack))
    );
    assert_eq!(dependency.calls(), ["m1"], "the waiting one never ran");
    let stats = sub.stats();
    assert_eq!((stats.breaker_expired, stats.lost_leases), (2, 0));
    assert_eq!(stats.unsettled(), 0);
}

#[actix_rt::test]
async fn a_readiness_check_that_panics_is_not_ready_and_the_subscription_goes_on() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let checks = Arc::new(Mutex::new(0u32));
    let registration = reporting(&dependency).breaker_readiness({
        let checks = checks.clone();
        move || {
            *checks.lock() += 1;
            async move {
                panic!("a bug in the check (test)");
                #[allow(unreachable_code)]
                true
            }
        }
    });
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let held = pubsub.publish(message("m1", "a"));
    eventually("two checks", || *checks.lock() >= 2).await;
    assert_eq!(state(&sub), BreakerState::Open);
    assert!(sub.health().live);
    assert!(sub.stats().panics >= 2);
    assert_eq!(held.action(), None, "still held");
    sub.stop().await;
    assert_eq!(held.action(), Some(Action::Nack));
}

#[derive(serde::Deserialize)]
struct Numbered {
    n: u32,
}

#[actix_rt::test]
async fn a_batchs_held_messages_of_one_key_run_again_in_publish_order() {
    tokio::time::pause();
    let down = Arc::new(AtomicBool::new(true));
    let batches: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
    let registration = Registration::json_batch(SUB, {
        let (down, batches) = (down.clone(), batches.clone());
        move |batch: crate::Batch<Numbered>| {
            let down = down.load(Ordering::SeqCst);
            batches
                .lock()
                .push(batch.iter().map(|item| item.payload.n).collect());
            let outcome = if down {
                Outcome::unavailable()
            } else {
                Outcome::ack()
            };
            async move { crate::BatchOutcome::all(outcome) }
        }
    })
    .max_batch_messages(5)
    .breaker(breaker());
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    // One key; the second does not decode (the failure policy drops it), the others are held.
    let all: Vec<_> = [
        "{\"n\":1}",
        "not json",
        "{\"n\":3}",
        "{\"n\":4}",
        "{\"n\":5}",
    ]
    .iter()
    .enumerate()
    .map(|(i, data)| pubsub.publish(message(&format!("m{i}"), data).ordering_key("k")))
    .collect();
    eventually("four held", || sub.breaker().is_some_and(|b| b.held == 4)).await;
    down.store(false, Ordering::SeqCst);
    settled(&all).await;
    let batches = batches.lock().clone();
    assert_eq!(batches[0], [1, 3, 4, 5]);
    assert_eq!(batches[1], [1], "the try: the first of the key");
    assert_eq!(batches[2..].concat(), [3, 4, 5], "{batches:?}");
}

#[actix_rt::test]
async fn while_open_nothing_is_given_back_and_reading_stops_at_the_breakers_bound() {
    tokio::time::pause();
    let dependency = Dependency::default();
    dependency.set_down(true);
    let registration = reporting(&dependency)
        .workers(1)
        .max_outstanding_messages(2)
        .max_read_ahead_messages(1)
        .breaker(breaker().read_ahead(3, 1 << 20));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let first = pubsub.publish(message("m00", "a"));
    eventually("the trip", || state(&sub) == BreakerState::Open).await;
    let later: Vec<_> = (1..=10)
        .map(|n| pubsub.publish(message(&format!("m{n:02}"), "a")))
        .collect();
    // One waits for a worker with the held one; three wait read ahead (the breaker's bound, not
    // the registration's one); the other six stay unread, unleased and unspent.
    eventually("the breaker's read-ahead full", || {
        sub.load().read_ahead == 3
    })
    .await;
    tokio::time::sleep(COOLDOWN / 2).await;
    assert_eq!(pubsub.unread(), 6);
    let stats = sub.stats();
    assert_eq!((stats.given_back, stats.retried, stats.received), (0, 0, 2));
    assert!(later.iter().all(|p| p.action().is_none()));
    assert_eq!(sub.load().waiting, 1);

    // Closed again: everything runs, what waited read ahead in order; what is read beyond the
    // registration's bound while the others run is given back, never lost.
    dependency.set_down(false);
    settled(std::iter::once(&first).chain(&later)).await;
    let stats = sub.stats();
    assert_eq!(stats.acked + stats.given_back, 11);
    assert!(
        later[..4].iter().all(|p| p.action() == Some(Action::Ack)),
        "what was read ahead while open ran"
    );
    assert_eq!(stats.peak_read_ahead, 3);
    assert_eq!(state(&sub), BreakerState::Closed);
}
