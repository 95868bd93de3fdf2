//! Dead letters replayed through the subscription's own handler, from a subscription on the
//! dead-letter topic: what is acked there is gone, what still fails stays, nothing is
//! republished, and the options (rate, maximum, filter, dry run, cancel) hold.

use leasehold::error::{ReplayError, StartError};
use leasehold::replay::{self, Candidate, Filter, ReplayOptions, ReplayProgress};
use leasehold::{Delivery, Outcome, Registration, Subscription};
use leasehold_test_support::{PROJECT, Record, Scratch, Seen, eventually, never_within, unique};
use std::time::{Duration, Instant};

/// The smallest limit Pub/Sub accepts for a dead-letter policy.
const MAX_ATTEMPTS: u32 = 5;

/// Short, so that a run over an emptied subscription ends soon (a fresh stream on the emulator
/// delivers its first message well within it).
const IDLE: Duration = Duration::from_secs(3);

/// A topic with a dead-letter policy, a second subscription on the same topic that acks
/// everything it gets, and `payloads` dead-lettered from the main subscription (retried until
/// the last attempt, then dropped).
struct DeadLetters {
    scratch: Scratch,
    dead: String,
    other_name: String,
    other: Subscription,
    other_record: Record,
    /// The main subscription's consumer, which fails everything until it is dead-lettered. It
    /// runs to the end: a consumer started again on the emulator may not get what is published
    /// next for a while (it keeps sending messages to the closed stream until their lease ends).
    failing: Subscription,
    /// What it got, every attempt.
    main_record: Record,
}

impl DeadLetters {
    async fn new(payloads: &[(&str, &[(&str, &str)])]) -> Self {
        let (mut scratch, dead) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS as i32).await;
        let other_name = format!("{PROJECT}/subscriptions/{}", unique("other"));
        scratch
            .create_subscription(
                google_cloud_pubsub::model::Subscription::new()
                    .set_name(&other_name)
                    .set_topic(scratch.topic())
                    .set_ack_deadline_seconds(10),
            )
            .await;
        let other_record = Record::default();
        let r = other_record.clone();
        let other = leasehold::start(
            Registration::raw(&other_name, move |data, d: Delivery| {
                r.saw_payload(&data, &d);
                async move { d.ack() }
            }),
            &scratch.connection,
        )
        .await
        .unwrap();

        let main_record = Record::default();
        let r = main_record.clone();
        let failing = leasehold::start(
            Registration::raw(&scratch.subscription, move |data, d: Delivery| {
                r.saw_payload(&data, &d);
                async move {
                    if d.delivery_attempt() < Some(MAX_ATTEMPTS) {
                        d.retry()
                    } else {
                        d.drop()
                    }
                }
            }),
            &scratch.connection,
        )
        .await
        .unwrap();
        let dl = Self {
            scratch,
            dead,
            other_name,
            other,
            other_record,
            failing,
            main_record,
        };
        dl.add(payloads).await;
        dl
    }

    /// Publishes `payloads` and has them dead-lettered (retried until the last attempt, then
    /// dropped); the other subscription acks them.
    async fn add(&self, payloads: &[(&str, &[(&str, &str)])]) {
        let failing = &self.failing;
        let dead_lettered = failing.stats().dead_lettered;
        let before = self.other.stats().acked;
        for (data, attributes) in payloads {
            self.scratch.publish_with(data, attributes).await;
        }
        let n = payloads.len() as u64;
        eventually(
            "every message dead-lettered",
            Duration::from_secs(60),
            || {
                failing.stats().dead_lettered == dead_lettered + n
                    && self.other.stats().acked == before + n
            },
        )
        .await;
    }

    /// The registration a replay runs: the main subscription's, with `handler`.
    fn registration<F>(&self, handler: F) -> Registration
    where
        F: Fn(String, Delivery) -> Outcome + Send + Sync + 'static,
    {
        Registration::raw(&self.scratch.subscription, move |data, d: Delivery| {
            let outcome = handler(String::from_utf8_lossy(&data).into_owned(), d);
            async move { outcome }
        })
        // The emulator keeps leasing a closed stream's messages for one extension: keep it
        // short, so that what a run leaves is back soon for the test to look at.
        .max_lease_extension(Duration::from_secs(10))
    }

    async fn replay(&self, registration: Registration, options: ReplayOptions) -> replay::Replay {
        self.replay_idle(registration, options, IDLE).await
    }

    async fn replay_idle(
        &self,
        registration: Registration,
        options: ReplayOptions,
        idle: Duration,
    ) -> replay::Replay {
        let connector = self.scratch.connection.connect().await.unwrap();
        replay::replay(registration, &self.dead, options.idle(idle), connector)
            .await
            .unwrap()
    }

    /// A dry run's list (which leaves everything there). Only over messages no earlier run
    /// held: the emulator gives a closed stream's messages back only when their lease ends.
    async fn listed(&self) -> Vec<Candidate> {
        let mut run = self
            .replay(
                self.registration(|_, d| d.ack()),
                ReplayOptions::new().dry_run(),
            )
            .await;
        let mut candidates = run.candidates().unwrap();
        let end = run.finished().await;
        let mut listed = Vec::new();
        while let Ok(c) = candidates.try_recv() {
            listed.push(c);
        }
        assert_eq!(end.listed, listed.len() as u64);
        assert_eq!(
            (end.replayed, end.still_failing),
            (0, 0),
            "a dry run settles nothing"
        );
        listed
    }

    /// What is left on the dead-letter subscription: `n` messages, taken (and acked) by a plain
    /// consumer. The emulator keeps leasing a closed stream's messages (about 20 s here, and
    /// it may send them to a closed stream again when that lease ends), so this waits for them.
    async fn remaining(&self, n: usize) -> Vec<Seen> {
        let record = Record::default();
        let r = record.clone();
        let consumer = leasehold::start(
            Registration::raw(&self.dead, move |data, d: Delivery| {
                r.saw_payload(&data, &d);
                async move { d.ack() }
            }),
            &self.scratch.connection,
        )
        .await
        .unwrap();
        eventually(
            "what is left on the dead-letter subscription",
            // Each closed stream of the subscription may still be sent a message whose lease
            // ran out: with two or three of them, a message can take several lease rounds to
            // reach the live one (seen up to about two minutes).
            Duration::from_secs(240),
            || record.all().len() >= n,
        )
        .await;
        never_within("more left than expected", Duration::from_secs(2), || {
            record.all().len() > n
        })
        .await;
        consumer.stop().await;
        record.all()
    }

    fn other_subscription_name(&self) -> String {
        self.other_name.clone()
    }

    async fn cleanup(self) {
        self.failing.stop().await;
        self.other.stop().await;
        self.scratch.cleanup().await;
    }
}

fn payloads<'a>(names: &'a [&'a str]) -> Vec<(&'a str, &'a [(&'a str, &'a str)])> {
    names.iter().map(|n| (*n, &[][..])).collect()
}

fn ids(seen: &[Seen]) -> Vec<String> {
    let mut ids: Vec<String> = seen.iter().map(|s| s.message_id.clone()).collect();
    ids.sort();
    ids
}

/// A handler that records what it saw and acks.
fn acking(seen: &Record) -> impl Fn(String, Delivery) -> Outcome + Send + Sync + 'static {
    let seen = seen.clone();
    move |data, d| {
        seen.saw(&data, &d);
        d.ack()
    }
}

#[actix_rt::test]
async fn a_replay_runs_the_handler_once_for_each_and_nobody_else_sees_them_again() {
    let dl = DeadLetters::new(&payloads(&["a", "b", "c"])).await;
    let seen = Record::default();
    let run = dl
        .replay(dl.registration(acking(&seen)), ReplayOptions::new())
        .await;
    let end = run.finished().await;
    assert_eq!(
        (end.replayed, end.still_failing, end.left()),
        (3, 0, 0),
        "{end:?}"
    );
    let mut data: Vec<String> = seen.all().into_iter().map(|s| s.data).collect();
    data.sort();
    assert_eq!(data, ["a", "b", "c"], "the handler ran once for each");

    // Gone from the dead-letter subscription, and nothing was republished: the main
    // subscription (its consumer still running) and the topic's other subscription get
    // nothing more.
    let on_main = dl.main_record.all().len();
    let dead = Record::default();
    let r = dead.clone();
    let consumer = leasehold::start(
        Registration::raw(&dl.dead, move |data, d: Delivery| {
            r.saw_payload(&data, &d);
            async move { d.ack() }
        }),
        &dl.scratch.connection,
    )
    .await
    .unwrap();
    // Longer than the emulator keeps a closed stream's lease (20 s here, seen).
    never_within(
        "a replayed message delivered again",
        Duration::from_secs(25),
        || {
            dl.main_record.all().len() != on_main
                || !dead.all().is_empty()
                || dl.other_record.all().len() != 3
        },
    )
    .await;
    consumer.stop().await;
    dl.cleanup().await;
}

#[actix_rt::test]
async fn a_replay_whose_handler_still_fails_leaves_everything_and_ends() {
    let dl = DeadLetters::new(&payloads(&["a", "b"])).await;
    let seen = Record::default();
    let s = seen.clone();
    let run = dl
        .replay(
            dl.registration(move |data, d| {
                s.saw(&data, &d);
                d.retry()
            }),
            ReplayOptions::new(),
        )
        .await;
    let end = run.finished().await;
    assert_eq!(
        (end.replayed, end.still_failing, end.left()),
        (0, 2, 2),
        "{end:?}"
    );
    assert_eq!(
        seen.all().len(),
        2,
        "not taken again in the same run: {end:?}"
    );
    assert_eq!(
        ids(&dl.remaining(2).await),
        ids(&seen.all()),
        "both still there"
    );
    dl.cleanup().await;
}

#[actix_rt::test]
async fn the_rate_and_the_maximum_hold() {
    let dl = DeadLetters::new(&payloads(&["a", "b", "c", "d", "e", "f"])).await;
    let seen = Record::default();
    let rate = 4.0;
    let end = dl
        .replay(
            dl.registration(acking(&seen)),
            ReplayOptions::new().rate(rate).max(4),
        )
        .await
        .finished()
        .await;
    assert_eq!(
        (end.replayed, end.not_taken),
        (4, 2),
        "the maximum: {end:?}"
    );
    let at: Vec<Instant> = seen.all().iter().map(|s| s.at).collect();
    assert_eq!(at.len(), 4);
    // The k-th message no earlier than k / rate after the first (a little slack for the timer).
    for (k, t) in at.iter().enumerate() {
        let earliest =
            Duration::from_secs_f64(k as f64 / rate).saturating_sub(Duration::from_millis(20));
        assert!(
            t.duration_since(at[0]) >= earliest,
            "message {k} after {:?}, the rate allows it after {earliest:?}",
            t.duration_since(at[0])
        );
    }
    let left = dl.remaining(2).await;
    assert!(
        ids(&left).iter().all(|id| !ids(&seen.all()).contains(id)),
        "the two over the maximum are left"
    );
    dl.cleanup().await;
}

#[actix_rt::test]
async fn the_filter_takes_exactly_what_it_says() {
    let dl = DeadLetters::new(&[
        ("eu-1", &[("region", "eu")][..]),
        ("eu-2", &[("region", "eu"), ("tier", "gold")][..]),
        ("us-1", &[("region", "us")][..]),
        ("none", &[][..]),
    ])
    .await;
    let seen = Record::default();
    let end = dl
        .replay(
            dl.registration(acking(&seen)),
            ReplayOptions::new().filter(Filter::new().attribute("region", "eu")),
        )
        .await
        .finished()
        .await;
    let mut data: Vec<String> = seen.all().into_iter().map(|s| s.data).collect();
    data.sort();
    assert_eq!(data, ["eu-1", "eu-2"], "by attribute");
    assert_eq!(
        (end.replayed, end.filtered, end.left()),
        (2, 2, 2),
        "{end:?}"
    );

    let mut left: Vec<String> = dl.remaining(2).await.into_iter().map(|s| s.data).collect();
    left.sort();
    assert_eq!(left, ["none", "us-1"], "the two left out are still there");
    dl.cleanup().await;
}

#[actix_rt::test]
async fn a_dry_run_lists_settles_nothing_and_an_id_filter_takes_the_one_named() {
    let dl = DeadLetters::new(&[
        ("a", &[("tenant", "secret-tenant")][..]),
        ("bb", &[][..]),
        ("ccc", &[][..]),
    ])
    .await;
    let listed = dl.listed().await;
    assert_eq!(listed.len(), 3);
    let source = dl.scratch.subscription.clone();
    for c in &listed {
        assert_eq!(
            c.source_subscription.as_deref(),
            Some(source.as_str()),
            "{c:?}"
        );
        assert_eq!(c.source_delivery_count, Some(MAX_ATTEMPTS), "{c:?}");
        assert!(
            c.publish_time.is_some() && c.source_publish_time.is_some(),
            "{c:?}"
        );
        assert!(!format!("{c:?}").contains("secret-tenant"), "never a value");
    }
    let mut sizes: Vec<usize> = listed.iter().map(|c| c.size).collect();
    sizes.sort();
    assert_eq!(sizes, [1, 2, 3]);
    assert!(listed.iter().any(|c| c.attribute_keys == ["tenant"]));

    // Everything is still there: a replay of the one named, published in a window around its
    // publish time, takes it and leaves the other two. The emulator gives back what the dry run
    // held only when its lease ends (about 20 s): a long idle, and `max(1)` ends the run as
    // soon as the one is replayed.
    let chosen = listed[0].message_id.clone();
    let published = listed[0].publish_time.unwrap();
    let seen = Record::default();
    let end = dl
        .replay_idle(
            dl.registration(acking(&seen)),
            ReplayOptions::new().max(1).filter(
                Filter::new()
                    .message_id(&chosen)
                    .published_after(published - Duration::from_secs(1))
                    .published_before(published + Duration::from_secs(1)),
            ),
            // Ended as soon as the one is replayed (`max(1)`); long only when the emulator is
            // slow to give it back.
            Duration::from_secs(240),
        )
        .await
        .finished()
        .await;
    assert_eq!(ids(&seen.all()), std::slice::from_ref(&chosen));
    assert_eq!(end.replayed, 1, "{end:?}");
    let left = dl.remaining(2).await;
    assert!(ids(&left).iter().all(|id| *id != chosen));
    dl.cleanup().await;
}

#[actix_rt::test]
async fn a_cancel_loses_nothing() {
    let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let dl = DeadLetters::new(&payloads(&refs)).await;
    let seen = Record::default();
    let run = dl
        .replay(
            dl.registration(acking(&seen)),
            ReplayOptions::new().rate(2.0),
        )
        .await;
    eventually("two replayed", Duration::from_secs(30), || {
        run.progress().replayed >= 2
    })
    .await;
    run.cancel();
    let end: ReplayProgress = run.finished().await;
    assert!(end.cancelled);
    assert!(end.replayed >= 2 && end.replayed < 6, "{end:?}");
    // What waited for its slot (the rate) is released, not left running.
    assert_eq!(end.running, 0, "{end:?}");
    let replayed = ids(&seen.all());
    assert_eq!(
        replayed.len() as u64,
        end.replayed,
        "every handler that ran settled"
    );
    let left = dl.remaining(6 - replayed.len()).await;
    assert!(
        ids(&left).iter().all(|id| !replayed.contains(id)),
        "left {:?}, replayed {replayed:?}",
        ids(&left)
    );
    dl.cleanup().await;
}

#[actix_rt::test]
async fn bad_input_is_refused_before_anything_is_taken() {
    let dl = DeadLetters::new(&payloads(&["a"])).await;
    let connector = dl.scratch.connection.connect().await.unwrap();
    let ran = Record::default();
    let registration = dl.registration(acking(&ran));
    let attempt = |registration: Registration, from: &str, options: ReplayOptions| {
        replay::replay(registration, from.to_string(), options, connector.clone())
    };

    let e = attempt(
        registration.clone(),
        &dl.dead,
        ReplayOptions::new().rate(0.0),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, ReplayError::InvalidOption(o) if o.option == "rate"),
        "{e}"
    );

    let missing = format!("{PROJECT}/subscriptions/{}", unique("nope"));
    let e = attempt(registration.clone(), &missing, ReplayOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(e, ReplayError::DeadLetterSubscriptionNotFound { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("create a subscription on"), "{e}");

    // The topic's other subscription is not on the dead-letter topic.
    let other = dl.other_subscription_name();
    let e = attempt(registration.clone(), &other, ReplayOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, ReplayError::NotOnDeadLetterTopic { .. }), "{e}");

    // A subscription without a dead-letter policy.
    let e = attempt(
        Registration::raw(&other, |_, d: Delivery| async move { d.ack() }),
        &dl.dead,
        ReplayOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ReplayError::NoDeadLetterPolicy { .. }), "{e}");

    let e = attempt(
        Registration::raw(&missing, |_, d: Delivery| async move { d.ack() }),
        &dl.dead,
        ReplayOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, ReplayError::Start(StartError::NotFound { .. })),
        "{e}"
    );

    assert!(ran.all().is_empty(), "no handler ran");
    assert_eq!(dl.remaining(1).await.len(), 1, "nothing consumed");
    dl.cleanup().await;
}
