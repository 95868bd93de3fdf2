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
    .max_read_ahead_messages(2)
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
    assert_eq!((sub.load().read_ahead, sub.load().read_ahead_bytes), (2, 2));
    assert_eq!(*started.lock(), ["m0"]);
    sub.stop().await;
    assert!(all.iter().all(|p| p.action() == Some(Action::Nack)));
    let stats = sub.stats();
    assert_eq!(
        (stats.received, stats.released, stats.unsettled()),
        (3, 2, 0)
    );
}

/// A handler that never ends on its own (only a stop ends it), recording what started.
fn forever(started: &Arc<Mutex<Vec<String>>>) -> Registration {
    let s = started.clone();
    Registration::raw(SUB, move |_, d: Delivery| {
        s.lock().push(d.message_id().to_string());
        async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            d.ack()
        }
    })
    .drain_timeout(Duration::ZERO)
}

#[actix_rt::test]
async fn what_is_read_beyond_the_read_ahead_while_flow_control_is_full_is_given_back_at_once() {
    tokio::time::pause();
    let started = Arc::new(Mutex::new(Vec::new()));
    let registration = forever(&started)
        .max_outstanding_messages(2)
        .max_read_ahead_messages(3);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let all: Vec<Published> = (0..8)
        .map(|n| pubsub.publish(message(&format!("m{n}"), "x")))
        .collect();
    // Two run, three wait read ahead, and the server's other three are given back (nacked) at
    // once, for a consumer with room.
    eventually("three given back", || sub.stats().given_back == 3).await;
    assert_eq!(pubsub.unread(), 0);
    assert!(all[..5].iter().all(|p| p.action().is_none()));
    assert!(all[5..].iter().all(|p| p.action() == Some(Action::Nack)));
    assert_eq!(*started.lock(), ["m0", "m1"]);
    let load = sub.load();
    assert_eq!((load.running, load.read_ahead), (2, 3));
    let stats = sub.stats();
    assert_eq!((stats.received, stats.peak_read_ahead), (2, 3));
    assert_eq!(
        stats.unsettled(),
        2,
        "the two running; the read ahead are not received yet, the given back never"
    );
    sub.stop().await;
    let stats = sub.stats();
    assert_eq!(
        (
            stats.received,
            stats.given_back,
            stats.released,
            stats.unsettled()
        ),
        (5, 3, 3, 0)
    );
    assert_eq!(sub.load().read_ahead, 0);
}

#[actix_rt::test]
async fn the_read_ahead_bound_holds_across_five_streams_and_in_bytes() {
    tokio::time::pause();
    let started = Arc::new(Mutex::new(Vec::new()));
    let registration = forever(&started)
        .streams(5)
        .max_outstanding_messages(2)
        .max_read_ahead_messages(4)
        .max_read_ahead_bytes(30);
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    eventually("five streams open", || pubsub.opened_streams().len() == 5).await;
    let all: Vec<Published> = (0..60)
        .map(|n| pubsub.publish(message(&format!("m{n:02}"), "0123456789")))
        .collect();
    let peak = Arc::new(Mutex::new((0, 0)));
    let (p, s) = (peak.clone(), sub.clone());
    eventually("every message read", || {
        let load = s.load();
        let mut peak = p.lock();
        *peak = (
            peak.0.max(load.read_ahead),
            peak.1.max(load.read_ahead_bytes),
        );
        // Each message is running (received), read ahead, or given back.
        let stats = s.stats();
        pubsub.unread() == 0 && (stats.received + stats.given_back) as usize + load.read_ahead == 60
    })
    .await;
    // Ten-byte payloads under a 30-byte bound: three wait, not four, whichever stream read
    // them. (A stream waiting for its next message holds room for it, so one or two run.)
    assert_eq!(*peak.lock(), (3, 30));
    assert_eq!(sub.stats().peak_read_ahead, 3);
    let unsettled = all.iter().filter(|p| p.action().is_none()).count();
    assert_eq!(unsettled, 3 + sub.load().running);
    assert_eq!(sub.stats().given_back as usize, 60 - unsettled);
    sub.stop().await;
    assert_eq!(sub.stats().unsettled(), 0);
}

#[actix_rt::test]
async fn a_message_read_ahead_until_near_the_end_of_its_lease_is_given_back() {
    tokio::time::pause();
    let started = Arc::new(Mutex::new(Vec::new()));
    let registration = forever(&started)
        .max_outstanding_messages(1)
        .max_lease(Duration::from_secs(60));
    let pubsub = MemoryPubSub::new();
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let running = pubsub.publish(message("m0", "x"));
    eventually("the first running", || started.lock().len() == 1).await;
    let waiting = pubsub.publish(message("m1", "x"));
    eventually("the second read ahead", || sub.load().read_ahead == 1).await;
    let read_at = Instant::now();
    eventually("the second given back", || waiting.action().is_some()).await;
    // A tenth of the budget before its end, as the breaker gives back what it holds.
    let after = read_at.elapsed();
    assert!(
        (Duration::from_secs(53)..=Duration::from_secs(55)).contains(&after),
        "{after:?}"
    );
    assert_eq!(waiting.action(), Some(Action::Nack));
    assert_eq!((sub.stats().given_back, sub.load().read_ahead), (1, 0));
    assert_eq!(*started.lock(), ["m0"], "it never ran");
    assert_eq!(running.action(), None);
    sub.stop().await;
}

#[actix_rt::test]
async fn a_message_on_its_last_attempt_is_not_given_back_to_be_dead_lettered_unrun() {
    tokio::time::pause();
    let started = Arc::new(Mutex::new(Vec::new()));
    let registration = forever(&started)
        .max_outstanding_messages(1)
        .max_read_ahead_messages(1);
    let pubsub = MemoryPubSub::new().dead_letter_after(5);
    let sub = start(registration, pubsub.connector()).await.unwrap();
    let running = pubsub.publish(message("m0", "x").attempt(1));
    eventually("the first running", || started.lock().len() == 1).await;
    let waiting = pubsub.publish(message("m1", "x").attempt(1));
    let beyond = pubsub.publish(message("m2", "x").attempt(4));
    let last = pubsub.publish(message("m3", "x").attempt(5));
    eventually("all read", || pubsub.unread() == 0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // m2 is given back (it has an attempt to spare); m3, whose nack would dead-letter it, waits
    // past the registration's bound, within the breaker's (ten times the limit by default).
    assert_eq!(beyond.action(), Some(Action::Nack));
    assert_eq!(
        (running.action(), waiting.action(), last.action()),
        (None, None, None)
    );
    assert_eq!((sub.stats().given_back, sub.load().read_ahead), (1, 2));
    sub.stop().await;
    assert_eq!(sub.stats().unsettled(), 0);
}
