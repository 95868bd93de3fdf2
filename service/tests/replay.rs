//! `replay KEY` in the service, against the emulator: the status page shows what was
//! dead-lettered and the command that replays it, the replay runs the key's handler over the
//! dead-letter subscription (its own page and `/metrics` while it runs), a cancel stops it, and
//! bad input is refused before anything is consumed.

use clap::Parser;
use leasehold::{Delivery, Outcome};
use leasehold_service::config::{self, ServiceConfig};
use leasehold_service::replay::{Cli, Command, ReplayArgs};
use leasehold_service::{Service, ServiceError};
use leasehold_test_support::{PROJECT, Scratch, eventually, free_port, host, unique};
use std::time::Duration;

const MAX_ATTEMPTS: u32 = 5;

fn get(address: &str, path: &str) -> Option<(u16, String)> {
    leasehold_test_support::http_get(address, path)
}

fn configuration(subscription: &str, dead: Option<&str>, address: &str) -> ServiceConfig {
    // Where replays report to the serving process: this test binary's own.
    let reports = std::env::temp_dir().join(format!("leasehold-replays-{}", std::process::id()));
    let mut pairs = vec![
        ("LEASEHOLD__CONNECTION__EMULATOR_HOST", host()),
        (
            "LEASEHOLD__HTTP__REPLAYS_DIR",
            reports.display().to_string(),
        ),
        ("LEASEHOLD__HTTP__ADDRESS", address.to_string()),
        (
            "LEASEHOLD__SUBSCRIPTIONS__ORDERS__NAME",
            subscription.to_string(),
        ),
        // The emulator keeps leasing a closed stream's messages for one extension.
        (
            "LEASEHOLD__SUBSCRIPTIONS__ORDERS__MAX_LEASE_EXTENSION",
            "10s".to_string(),
        ),
    ];
    if let Some(dead) = dead {
        pairs.push((
            "LEASEHOLD__SUBSCRIPTIONS__ORDERS__DEAD_LETTER_SUBSCRIPTION",
            dead.to_string(),
        ));
    }
    config::from_sources(None, pairs.into_iter().map(|(k, v)| (k.to_string(), v))).unwrap()
}

/// Refuses until the last attempt, then drops: dead-lettered. `stubborn` is retried on the
/// last attempt too: dead-lettered by Pub/Sub all the same.
async fn refusing(data: bytes::Bytes, d: Delivery) -> Outcome {
    match d.delivery_attempt() {
        Some(attempt) if attempt < MAX_ATTEMPTS => d.retry(),
        _ if &data[..] == b"stubborn" => d.retry(),
        _ => d.drop(),
    }
}

fn replay_args(line: &[&str]) -> ReplayArgs {
    let cli = Cli::try_parse_from(["service"].iter().chain(line)).unwrap();
    match cli.command {
        Some(Command::Replay(args)) => *args,
        other => panic!("not a replay: {other:?}"),
    }
}

#[actix_rt::test]
async fn the_page_shows_what_was_dead_lettered_and_replay_brings_it_back() {
    let (scratch, dead) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS as i32).await;
    let address = format!("127.0.0.1:{}", free_port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = actix_rt::spawn(
        Service::new(configuration(&scratch.subscription, Some(&dead), &address))
            .raw("orders", refusing)
            .run_until(async move {
                let _ = stopped.await;
            }),
    );
    let ids = scratch
        .publish_all(["one", "stubborn"].map(String::from))
        .await;
    eventually(
        "both dead-lettered, on the page",
        Duration::from_secs(60),
        || {
            get(&address, "/").is_some_and(|(_, page)| {
                ids.iter()
                    .all(|id| page.contains(&format!("<td>{id}</td><td>5</td>")))
            })
        },
    )
    .await;
    let (_, page) = get(&address, "/").unwrap();
    assert!(page.contains("<h3>Dead letters</h3>"), "{page}");
    assert!(page.contains("drop() on the last attempt"), "{page}");
    assert!(
        page.contains("retried on the last attempt (retry()"),
        "{page}"
    );
    assert!(
        page.contains(r#"class="dead-letter-topic">projects/"#),
        "{page}"
    );
    assert!(
        page.contains(&format!(r#"class="dead-letter-subscription">{dead}<"#)),
        "{page}"
    );
    assert!(
        page.contains(" CONFIG replay orders --dry-run</code>"),
        "{page}"
    );
    // The replay, with its own page and metrics while it runs, and reported to the serving
    // process's: a slow rate, so it runs a while.
    let replay_address = format!("127.0.0.1:{}", free_port());
    let args = replay_args(&["replay", "orders", "--rate", "1", "--http", &replay_address]);
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let replaying = actix_rt::spawn(
        Service::new(configuration(&scratch.subscription, Some(&dead), &address))
            .raw("orders", |_, d: Delivery| async move { d.ack() })
            .replay_until(args, async move {
                let _ = cancelled.await;
            }),
    );
    // Read on a thread of its own: a blocking read on this one would stall the replay, which
    // runs on it.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let address = replay_address.clone();
        let metrics = actix_rt::task::spawn_blocking(move || get(&address, "/metrics"))
            .await
            .unwrap();
        if metrics.is_some_and(|(_, m)| {
            m.contains(r#"leasehold_replay_replayed_total{subscription="orders"} 1"#)
        }) {
            break;
        }
        assert!(
            !replaying.is_finished(),
            "the replay ended before it was seen"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the replay's counters"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    let page_of = |address: String| async move {
        actix_rt::task::spawn_blocking(move || get(&address, "/"))
            .await
            .unwrap()
            .unwrap()
            .1
    };
    let page = page_of(replay_address.clone()).await;
    assert!(page.contains("<h3>Replay running</h3>"), "{page}");
    // The serving process shows it too, from the replay's report (written every second).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let page = page_of(address.clone()).await;
        if page.contains("<h3>Replay running</h3>") && page.contains(&dead) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{page}");
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(page.contains(&dead), "{page}");
    let end = replaying.await.unwrap().unwrap();
    assert_eq!(
        (end.replayed, end.still_failing, end.left()),
        (2, 0, 0),
        "{end:?}"
    );
    assert!(!end.cancelled);
    drop(cancel);
    // Its last report, ended, on the serving process's page and metrics.
    let page = page_of(address.clone()).await;
    assert!(page.contains("<h3>Replay ended</h3>"), "{page}");
    let metrics = {
        let address = address.clone();
        actix_rt::task::spawn_blocking(move || get(&address, "/metrics"))
            .await
            .unwrap()
            .unwrap()
            .1
    };
    assert!(
        metrics.contains(r#"leasehold_replay_replayed_total{subscription="orders"} 2"#),
        "{metrics}"
    );
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_cancel_stops_the_replay_and_leaves_the_rest() {
    let (scratch, dead) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS as i32).await;
    let address = format!("127.0.0.1:{}", free_port());
    let dead_lettering = leasehold::start(
        leasehold::Registration::raw(&scratch.subscription, refusing),
        &scratch.connection,
    )
    .await
    .unwrap();
    scratch.publish_all((0..4).map(|i| format!("m{i}"))).await;
    eventually("four dead-lettered", Duration::from_secs(60), || {
        dead_lettering.stats().dead_lettered == 4
    })
    .await;
    dead_lettering.stop().await;

    let args = replay_args(&["replay", "orders", "--rate", "1"]);
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let replayed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let r = replayed.clone();
    let replaying = actix_rt::spawn(
        Service::new(configuration(&scratch.subscription, Some(&dead), &address))
            .raw("orders", move |_, d: Delivery| {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move { d.ack() }
            })
            .replay_until(args, async move {
                let _ = cancelled.await;
            }),
    );
    eventually("one replayed", Duration::from_secs(60), || {
        replayed.load(std::sync::atomic::Ordering::SeqCst) >= 1
    })
    .await;
    cancel.send(()).unwrap();
    let end = replaying.await.unwrap().unwrap();
    assert!(end.cancelled, "{end:?}");
    assert!(end.replayed >= 1 && end.replayed < 4, "{end:?}");
    assert_eq!(
        end.replayed,
        replayed.load(std::sync::atomic::Ordering::SeqCst)
    );
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn bad_input_is_refused_with_a_clear_error() {
    let (scratch, dead) = Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS as i32).await;
    let address = format!("127.0.0.1:{}", free_port());
    let run = |dead: Option<&str>, line: &[&str]| {
        Service::new(configuration(&scratch.subscription, dead, &address))
            .raw("orders", |_, d: Delivery| async move { d.ack() })
            .replay_until(replay_args(line), std::future::pending())
    };

    let e = run(Some(&dead), &["replay", "payments"]).await.unwrap_err();
    assert!(matches!(e, ServiceError::NotConfigured { .. }), "{e}");
    assert!(e.to_string().contains("configured: orders"), "{e}");

    let e = run(None, &["replay", "orders"]).await.unwrap_err();
    assert!(
        matches!(e, ServiceError::NoDeadLetterSubscription { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("--from"), "{e}");

    let missing = format!("{PROJECT}/subscriptions/{}", unique("nope"));
    let e = run(None, &["replay", "orders", "--from", &missing])
        .await
        .unwrap_err();
    let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(chain.contains("does not exist"), "{chain}");

    let e = run(Some(&dead), &["replay", "orders", "--rate", "0"])
        .await
        .unwrap_err();
    let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(chain.contains("rate"), "{chain}");

    // Malformed on the command line: refused by the parser, with what was expected.
    let refused = |line: &[&str]| {
        Cli::try_parse_from(["service"].iter().chain(line))
            .unwrap_err()
            .to_string()
    };
    assert!(refused(&["replay", "orders", "--rate", "fast"]).contains("--rate"));
    assert!(refused(&["replay", "orders", "--attribute", "region"]).contains("KEY=VALUE"));
    assert!(refused(&["replay", "orders", "--published-after", "yesterday"]).contains("RFC 3339"));
    assert!(refused(&["replay"]).contains("<KEY>"));
    scratch.cleanup().await;
}
