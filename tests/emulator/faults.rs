//! Real faults between the client and the emulator: cut connections, an outage, a subscription
//! that vanishes, an endpoint that is not there, payloads over the byte limit.

use leasehold::{Connection, Delivery, Registration, StartError};
use leasehold_test_support::{
    Proxy, Record, Scratch, eventually, eventually_showing, free_port, host,
};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Cuts every connection three times while handlers run on messages already delivered: every
/// message received before the cuts is handled and settled, and a message published after them
/// is handled through a new connection.
///
/// The cuts come once the whole first wave has reached Leasehold, so no response is in flight.
/// What is published after the cuts is raced by the emulator's senders, and it keeps one for
/// every dead stream until the subscription is deleted (RELIABILITY.md, "Known limits"): a block
/// that goes to a dead one is leased to it for the 10 s extension, then raced again. With five
/// dead senders and one live after three cuts, a wave published after the cuts missed the live
/// one for over 90 s in about one run in five. So the test publishes a probe every 500 ms until
/// one is handled, which shows that consuming resumed, and leaves the emulator's race out of it.
/// Real Pub/Sub ends a closed stream's leases.
#[actix_rt::test]
async fn cut_connections_lose_nothing() {
    const COUNT: usize = 300;
    let scratch = Scratch::new(|s| s).await;
    let proxy = Proxy::start(&host());
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |_, d: Delivery| {
        r.saw("m", &d);
        async move {
            actix_rt::time::sleep(Duration::from_millis(100)).await;
            d.ack()
        }
    })
    .workers(16)
    .max_lease_extension(Duration::from_secs(10));
    let sub = leasehold::start(registration, &Connection::emulator(&proxy.host()))
        .await
        .unwrap();
    let published: BTreeSet<String> = scratch
        .publish_all((0..COUNT).map(|n| n.to_string()))
        .await
        .into_iter()
        .collect();
    eventually("the first wave delivered", Duration::from_secs(60), || {
        sub.stats().received >= COUNT as u64
    })
    .await;

    // Handlers are running and acks are on their way: cut everything, three times.
    for _ in 0..3 {
        proxy.cut_all();
        actix_rt::time::sleep(Duration::from_millis(300)).await;
    }
    let handled = || {
        record
            .all()
            .into_iter()
            .map(|s| s.message_id)
            .collect::<BTreeSet<_>>()
    };
    eventually_showing(
        "every message of the first wave handled",
        Duration::from_secs(60),
        || published.is_subset(&handled()),
        || {
            let missing: Vec<_> = published.difference(&handled()).cloned().collect();
            format!(
                "{} never handled (first {:?}), {:?}",
                missing.len(),
                &missing[..missing.len().min(10)],
                sub.stats()
            )
        },
    )
    .await;
    let probes = came_through(&scratch, &record, Duration::from_secs(60)).await;
    let others: BTreeSet<String> = handled().difference(&published).cloned().collect();
    assert!(
        !others.is_empty() && others.is_subset(&probes),
        "handled beyond the first wave: a probe, and only probes: {others:?}"
    );
    assert!(
        proxy.accepted() >= 2,
        "the client reconnected ({} connections)",
        proxy.accepted()
    );
    sub.stop().await;
    let stats = sub.stats();
    assert_eq!(
        stats.settled(),
        stats.received,
        "every message received was settled: {stats:?}"
    );
    scratch.cleanup().await;
}

/// Publishes a probe every 500 ms until one has been handled, within `within`; returns the ids
/// of the probes published.
async fn came_through(scratch: &Scratch, record: &Record, within: Duration) -> BTreeSet<String> {
    let began = Instant::now();
    let mut probes = BTreeSet::new();
    loop {
        assert!(
            began.elapsed() < within,
            "none of {} probes handled within {within:?} after the cuts",
            probes.len()
        );
        probes.insert(scratch.publish("probe", "").await);
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_millis(500) {
            if record.all().iter().any(|s| probes.contains(&s.message_id)) {
                eprintln!(
                    "cuts: a probe handled {:?} after the first was published, {} published",
                    began.elapsed(),
                    probes.len()
                );
                return probes;
            }
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs one outage of `OUTAGE` through `fault`, then checks that consuming resumes. Returns the
/// connection attempts the fault saw.
async fn outage(fault: fn(&Proxy), attempts: fn(&Proxy) -> u64) -> u64 {
    const OUTAGE: Duration = Duration::from_secs(8);
    let scratch = Scratch::new(|s| s).await;
    let proxy = Proxy::start(&host());
    // The emulator keeps leasing a closed stream's messages for one extension: keep it short.
    let registration = Registration::raw(
        &scratch.subscription,
        |_, d: Delivery| async move { d.ack() },
    )
    .max_lease_extension(Duration::from_secs(10));
    let sub = leasehold::start(registration, &Connection::emulator(&proxy.host()))
        .await
        .unwrap();
    scratch.publish("before", "").await;
    eventually("the first message", Duration::from_secs(30), || {
        sub.stats().acked == 1
    })
    .await;

    fault(&proxy);
    let began = Instant::now();
    while began.elapsed() < OUTAGE {
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = attempts(&proxy);
    proxy.accept();
    let resumed = Instant::now();

    // A message published now is raced by the emulator's sender for the dead stream (see
    // `cut_connections_lose_nothing`): publish one every 500 ms until one is acked.
    let mut after = 0;
    while sub.stats().acked < 2 {
        assert!(
            resumed.elapsed() < Duration::from_secs(90),
            "consuming did not resume within 90 s of the outage ({after} published)"
        );
        scratch.publish("after", "").await;
        after += 1;
        let asked = Instant::now();
        while sub.stats().acked < 2 && asked.elapsed() < Duration::from_millis(500) {
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "outage: {seen} connection attempts in {OUTAGE:?}, consuming resumed {:?} after it ended \
         ({after} published)",
        resumed.elapsed()
    );
    sub.stop().await;
    scratch.cleanup().await;
    seen
}

#[actix_rt::test]
async fn a_silent_server_does_not_cause_a_reconnect_storm_and_consuming_resumes() {
    let attempts = outage(Proxy::black_hole, Proxy::swallowed).await;
    // A storm would be thousands of attempts; backoff allows a handful.
    assert!(
        attempts <= 20,
        "{attempts} connection attempts during the outage"
    );
}

#[actix_rt::test]
async fn a_subscription_that_vanishes_is_retried_with_backoff() {
    const WATCH: Duration = Duration::from_secs(7);
    let scratch = Scratch::new(|s| s).await;
    let registration = Registration::raw(
        &scratch.subscription,
        |_, d: Delivery| async move { d.ack() },
    );
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.delete_subscription().await;
    eventually("the stream failing", Duration::from_secs(30), || {
        sub.stats().stream_restarts >= 1
    })
    .await;
    let began = Instant::now();
    let first = sub.stats().stream_restarts;
    while began.elapsed() < WATCH {
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let restarts = sub.stats().stream_restarts - first;
    // Backoff from 100 ms doubling: about six reopenings in seven seconds, never a storm.
    assert!(
        (1..=12).contains(&restarts),
        "{restarts} reopenings in {WATCH:?}"
    );
    sub.stop().await;
    scratch.cleanup().await;
}

/// A closed port (a typo in the endpoint) fails `start` at its start timeout, with the last
/// failure as the cause and each attempt logged: not after the client's own minute of retries.
#[actix_rt::test]
async fn an_endpoint_with_nothing_behind_it_fails_start_at_the_start_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(3);
    // A port that was free a moment ago: nothing listens there.
    let port = free_port();
    let connection = Connection::emulator(&format!("127.0.0.1:{port}"));
    let registration = Registration::raw(
        "projects/leasehold-test/subscriptions/nowhere",
        |_, d: Delivery| async move { d.ack() },
    )
    .start_timeout(TIMEOUT);
    let err = leasehold::start(registration, &connection)
        .await
        .unwrap_err();
    let StartError::Timeout { after, last, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*after, TIMEOUT);
    assert!(last.is_some(), "the refused connection is the cause");
    assert!(
        err.to_string().starts_with(
            "cannot read subscription projects/leasehold-test/subscriptions/nowhere: no answer \
             within 3s"
        ),
        "{err}"
    );
    assert!(
        leasehold_test_support::captured_logs()
            .contains("reading the subscription failed; retrying"),
        "each attempt was logged"
    );
}

#[actix_rt::test]
async fn payloads_over_the_byte_limit_run_one_at_a_time_and_are_not_lost() {
    const LIMIT: usize = 1024;
    let scratch = Scratch::new(|s| s).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        r.saw(&data.len().to_string(), &d);
        async move {
            actix_rt::time::sleep(Duration::from_millis(50)).await;
            d.ack()
        }
    })
    .max_outstanding_bytes(LIMIT);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch.publish_all((0..4).map(|_| "x".repeat(5000))).await;
    let mut peak_bytes = 0;
    eventually("all four acked", Duration::from_secs(30), || {
        peak_bytes = peak_bytes.max(sub.in_flight().bytes);
        sub.stats().acked == 4
    })
    .await;
    assert!(peak_bytes <= LIMIT, "{peak_bytes} bytes outstanding");
    assert_eq!(
        sub.stats().peak_outstanding,
        1,
        "each oversize payload ran alone"
    );
    assert_eq!(record.of("5000").len(), 4);
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn five_streams_with_a_small_limit_keep_what_waits_read_ahead_within_its_bound() {
    const LIMIT: usize = 10;
    const READ_AHEAD: usize = 15;
    const MESSAGES: usize = 1000;
    let scratch = Scratch::new(|s| s).await;
    let record = Record::default();
    let r = record.clone();
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        r.saw(std::str::from_utf8(&data).unwrap(), &d);
        async move {
            actix_rt::time::sleep(Duration::from_millis(20)).await;
            d.ack()
        }
    })
    .streams(5)
    .workers(LIMIT)
    .max_outstanding_messages(LIMIT)
    .max_read_ahead_messages(READ_AHEAD);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    scratch
        .publish_all((0..MESSAGES).map(|n| n.to_string()))
        .await;
    // Each stream asks the emulator for 2 of the 10; the emulator sends each what it has, so
    // what the five read beyond flow control waits within the 15 and the rest is given back.
    let (mut peak_read_ahead, mut peak_outstanding) = (0, 0);
    eventually("every message handled", Duration::from_secs(120), || {
        peak_read_ahead = peak_read_ahead.max(sub.load().read_ahead);
        peak_outstanding = peak_outstanding.max(sub.in_flight().messages);
        (0..MESSAGES).all(|n| !record.of(&n.to_string()).is_empty())
    })
    .await;
    let stats = sub.stats();
    eprintln!(
        "five streams, limit {LIMIT}, read-ahead {READ_AHEAD}: {MESSAGES} messages handled; \
         peak read ahead {peak_read_ahead} (counted {}), peak outstanding {peak_outstanding}, \
         given back {}",
        stats.peak_read_ahead, stats.given_back
    );
    assert!(peak_read_ahead <= READ_AHEAD, "{peak_read_ahead}");
    assert!(stats.peak_read_ahead as usize <= READ_AHEAD, "{stats:?}");
    assert!(stats.peak_outstanding as usize <= LIMIT, "{stats:?}");
    assert!(
        stats.given_back > 0,
        "the emulator sent beyond flow control"
    );
    sub.stop().await;
    let stats = sub.stats();
    assert_eq!(stats.unsettled(), 0, "{stats:?}");
    scratch.cleanup().await;
}
