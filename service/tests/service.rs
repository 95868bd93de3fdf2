//! The service against Google's Pub/Sub emulator (the one `PUBSUB_EMULATOR_HOST` names, or one
//! this test binary starts): the deployable example run as a process and stopped by SIGTERM,
//! health through an outage and a deleted subscription, the status page in a real browser, and
//! an outage breaker seen in `/metrics` and on the page while it is open and after it closes.

use leasehold::Delivery;
use leasehold_service::{Service, config};
use leasehold_test_support::{
    Proxy, Scratch, chromium, eventually, free_port, host, spanner_database, spanner_endpoint,
    unique,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A payload marker that must reach no metric, page, trace or log.
const SECRET: &str = "card-4111-1111-1111-1111";

/// `GET path` on `address`: the status code and the body. A plain HTTP/1.1 client over TCP.
fn get(address: &str, path: &str) -> Option<(u16, String)> {
    leasehold_test_support::http_get(address, path)
}

/// A metric's value in Prometheus text (the first sample whose line starts with `series`).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The example binary, built by `cargo test` with the tests.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().unwrap().parent().unwrap();
    let path = debug.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples; run it from the workspace",
        path.display()
    );
    path
}

#[actix_rt::test]
async fn the_service_reports_what_its_subscriptions_do_and_drains_on_sigterm() {
    let (orders, audit) = (Scratch::new(|s| s).await, Scratch::new(|s| s).await);
    let address = format!("127.0.0.1:{}", free_port());
    let config_path = std::env::temp_dir().join(format!("{}.toml", unique("service")));
    std::fs::write(
        &config_path,
        format!(
            r#"
[connection]
emulator_host = "{host}"
[http]
address = "{address}"
[telemetry]
log_filter = "info,leasehold_actors=trace"
[subscriptions.orders]
name = "{orders}"
health_probe_interval = "1s"
drain_timeout = "20s"
[subscriptions.audit]
name = "{audit}"
workers = 2
"#,
            host = host(),
            orders = orders.subscription,
            audit = audit.subscription,
        ),
    )
    .unwrap();
    let log = std::env::temp_dir().join(format!("{}.log", unique("service")));
    let mut child = std::process::Command::new(example("service"))
        .arg(&config_path)
        .env_remove("RUST_LOG")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::from(
            std::fs::File::options().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    eventually("ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;
    assert_eq!(get(&address, "/livez").unwrap().0, 200);

    let secret_order = format!(r#"{{"id": "{SECRET}"}}"#);
    orders
        .publish_all(
            [
                r#"{"id": 1}"#,
                r#"{"id": 2}"#,
                r#"{"id": 3}"#,
                r#"{"id": 0}"#,
                &secret_order,
            ]
            .map(String::from),
        )
        .await;
    let secret_audit = format!("audit {SECRET}");
    audit
        .publish_all(["a", "b", &secret_audit].map(String::from))
        .await;
    let mut metrics = String::new();
    eventually("the counters moved", Duration::from_secs(60), || {
        metrics = get(&address, "/metrics").map(|r| r.1).unwrap_or_default();
        let settled = |sub: &str, outcome: &str| {
            sample(
                &metrics,
                &format!(
                    "leasehold_messages_settled_total{{subscription=\"{sub}\",outcome=\"{outcome}\"}}"
                ),
            )
        };
        settled("orders", "acked") == Some(3.0)
            && settled("orders", "dropped") == Some(2.0)
            && settled("audit", "acked") == Some(3.0)
    })
    .await;
    let value = |series: &str| sample(&metrics, series);
    assert_eq!(
        value("leasehold_messages_received_total{subscription=\"orders\"}"),
        Some(5.0)
    );
    assert_eq!(
        value("leasehold_decode_failures_total{subscription=\"orders\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("leasehold_handler_duration_seconds_count{subscription=\"orders\"}"),
        Some(5.0)
    );
    assert_eq!(
        value("leasehold_lease_held_seconds_count{subscription=\"audit\"}"),
        Some(3.0)
    );
    assert!(
        value("leasehold_publish_to_settle_seconds_bucket{le=\"+Inf\",subscription=\"orders\"}")
            == Some(5.0),
        "{metrics}"
    );
    assert_eq!(
        value("leasehold_subscription_state{subscription=\"orders\",state=\"running\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("leasehold_streams_open{subscription=\"audit\"}"),
        Some(1.0)
    );
    let page = get(&address, "/").unwrap().1;
    assert!(
        page.contains("orders") && page.contains("running"),
        "{page}"
    );
    assert!(!metrics.contains(SECRET) && !page.contains(SECRET));

    // A slow message is running when SIGTERM comes: readiness turns false at once, and the
    // drain waits for the handler.
    orders.publish(r#"{"id": 7, "slow": true}"#, "").await;
    eventually("the slow handler running", Duration::from_secs(30), || {
        let metrics = get(&address, "/metrics").map(|r| r.1).unwrap_or_default();
        sample(
            &metrics,
            "leasehold_handlers_running{subscription=\"orders\"}",
        ) == Some(1.0)
    })
    .await;
    let pid = child.id() as i32;
    // SAFETY: sending a signal to a child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut while_draining = None;
    eventually("not ready while draining", Duration::from_secs(10), || {
        while_draining = get(&address, "/readyz");
        matches!(while_draining, Some((503, _)))
    })
    .await;
    assert!(while_draining.unwrap().1.contains("draining"));
    let status = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the service did not stop");
            actix_rt::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(status.success(), "{status}");
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(output.contains("stop requested"), "{output}");
    assert!(
        output.contains("orders: received 6, acked 4, retried 0, dropped 2,"),
        "the slow message finished in the drain: {output}"
    );
    assert!(
        !output.contains(SECRET),
        "a payload reached the logs:\n{output}"
    );
    let _ = std::fs::remove_file(config_path);
    let _ = std::fs::remove_file(log);
    orders.cleanup().await;
    audit.cleanup().await;
}

/// An in-process service on one subscription, through `upstream`; its address and the sender
/// that stops it.
fn serve(
    subscription: &str,
    upstream: &str,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    actix_rt::task::JoinHandle<Result<leasehold_service::Summary, leasehold_service::ServiceError>>,
) {
    let address = format!("127.0.0.1:{}", free_port());
    let config = config::from_sources(
        None,
        [
            ("LEASEHOLD__CONNECTION__EMULATOR_HOST", upstream.to_string()),
            ("LEASEHOLD__HTTP__ADDRESS", address.clone()),
            (
                "LEASEHOLD__SUBSCRIPTIONS__EVENTS__NAME",
                subscription.to_string(),
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__EVENTS__HEALTH_PROBE_INTERVAL",
                "1s".to_string(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = Service::new(config).raw("events", |data, d: Delivery| async move {
        if &data[..] == b"undecodable" {
            d.drop()
        } else {
            d.ack()
        }
    });
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    (address, stop, running)
}

#[actix_rt::test]
async fn liveness_survives_an_outage_and_fails_for_a_deleted_subscription() {
    let scratch = Scratch::new(|s| s).await;
    let proxy = Proxy::start(&host());
    let (address, stop, running) = serve(&scratch.subscription, &proxy.host());
    eventually("live and ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;

    // An outage: the probe notices, liveness holds (restarting would not help).
    proxy.black_hole();
    proxy.cut_all();
    let mut during = None;
    eventually("the outage noticed", Duration::from_secs(30), || {
        during = get(&address, "/livez");
        during
            .as_ref()
            .is_some_and(|(_, body)| body.contains("unreachable"))
    })
    .await;
    assert_eq!(during.unwrap().0, 200, "an outage must not fail liveness");
    proxy.accept();
    eventually("reachable again", Duration::from_secs(60), || {
        get(&address, "/livez").is_some_and(|(_, body)| !body.contains("unreachable"))
    })
    .await;

    // Deleted under it: not live.
    scratch.delete_subscription().await;
    let mut broken = None;
    eventually("liveness failing", Duration::from_secs(30), || {
        broken = get(&address, "/livez");
        matches!(broken, Some((503, _)))
    })
    .await;
    assert!(broken.unwrap().1.contains("broken"));
    assert_eq!(get(&address, "/readyz").unwrap().0, 503);

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn the_status_page_renders_in_a_browser() {
    let scratch = Scratch::new(|s| s).await;
    let (address, stop, running) = serve(&scratch.subscription, &host());
    eventually("ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;
    scratch
        .publish_all(["one", "two", "undecodable"].map(String::from))
        .await;
    // Received counts a message when it arrives, before its handler settles it: wait
    // for the settled row itself, or the browser may see the three still running.
    let settled = r#"<th>acked, retried, dropped, dead-lettered, released</th><td class="settled">2, 0, 1, 0, 0<"#;
    eventually("three settled", Duration::from_secs(30), || {
        get(&address, "/").is_some_and(|(_, page)| page.contains(settled))
    })
    .await;
    let url = format!("http://{address}/");
    let dom = chromium(&["--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains(r#"<section class="subscription" id="events">"#),
        "{dom}"
    );
    assert!(
        dom.contains(r#"<span class="state running">running</span>"#),
        "{dom}"
    );
    // Acked, retried, dropped (the undecodable one), dead-lettered, released.
    assert!(dom.contains(settled), "{dom}");
    assert!(
        dom.contains(r#"<td class="health">ready: live</td>"#),
        "{dom}"
    );
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = chromium(&[
        "--window-size=1100,900",
        &format!("--screenshot={}", screenshot.display()),
        &url,
    ]);
    let size = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot of the status page ({size} bytes): {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    eprintln!("status page screenshot: {}", screenshot.display());
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    scratch.cleanup().await;
}

/// Liveness sees a supervisor whose thread is blocked: here a handler that blocks, run with
/// `worker_threads = 0` on the supervisor's own thread (a user's mistake). `/livez` fails within
/// `liveness_timeout` (2 s here) plus one heartbeat interval, and recovers when the thread does.
#[actix_rt::test]
async fn liveness_fails_within_its_timeout_when_a_supervisor_is_wedged() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);
    let scratch = Scratch::new(|s| s).await;
    let address = format!("127.0.0.1:{}", free_port());
    let config = config::from_sources(
        None,
        [
            ("LEASEHOLD__CONNECTION__EMULATOR_HOST", host()),
            ("LEASEHOLD__HTTP__ADDRESS", address.clone()),
            (
                "LEASEHOLD__SUBSCRIPTIONS__EVENTS__NAME",
                scratch.subscription.clone(),
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__EVENTS__WORKER_THREADS",
                "0".into(),
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__EVENTS__LIVENESS_TIMEOUT",
                "2s".into(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
    .unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let wedged_at = Arc::new(parking_lot::Mutex::new(None));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ended, end) = tokio::sync::oneshot::channel();
    // The service on a thread of its own: the one its handler will block.
    let arbiter = actix_rt::Arbiter::new();
    let (r, w) = (released.clone(), wedged_at.clone());
    arbiter.spawn_fn(move || {
        actix_rt::spawn(async move {
            let service = Service::new(config).raw("events", move |_, d: Delivery| {
                w.lock().get_or_insert_with(Instant::now);
                while !r.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                async move { d.ack() }
            });
            let summary = service
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await;
            let _ = ended.send(summary.is_ok());
        });
    });
    eventually("live and ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;

    scratch.publish("wedge", "").await;
    let mut not_live = None;
    eventually("liveness failing", Duration::from_secs(60), || {
        not_live = get(&address, "/livez").filter(|(status, _)| *status == 503);
        not_live.is_some()
    })
    .await;
    let took = wedged_at.lock().expect("the handler ran").elapsed();
    let body = not_live.unwrap().1;
    assert!(
        body.contains("events: not live: the supervisor has not answered its heartbeat"),
        "{body}"
    );
    // The bound: the timeout, one heartbeat interval (a quarter of it), and this test's polling.
    assert!(
        took < LIVENESS_TIMEOUT + LIVENESS_TIMEOUT / 4 + Duration::from_secs(2),
        "not live only after {took:?}"
    );
    assert!(took >= LIVENESS_TIMEOUT / 2, "not live too early: {took:?}");

    released.store(true, Ordering::SeqCst);
    eventually("live again", Duration::from_secs(30), || {
        matches!(get(&address, "/livez"), Some((200, _)))
    })
    .await;
    stop.send(()).unwrap();
    assert!(end.await.unwrap(), "the service drained and ended");
    arbiter.stop();
    scratch.cleanup().await;
}

/// A subscription configured with an outage breaker, whose handler says its dependency is
/// down: the breaker opens at once and holds the message, which `/metrics` and the status page
/// show (a subscription without a breaker has none of its series), liveness holds, and once the
/// dependency is back the next try closes it and the held message is acked, no attempt spent.
#[actix_rt::test]
async fn a_breaker_opened_by_an_outage_shows_in_the_metrics_and_the_page_until_it_closes() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (orders, audit) = (Scratch::new(|s| s).await, Scratch::new(|s| s).await);
    let address = format!("127.0.0.1:{}", free_port());
    let config = config::from_sources(
        None,
        [
            ("LEASEHOLD__CONNECTION__EMULATOR_HOST", host()),
            ("LEASEHOLD__HTTP__ADDRESS", address.clone()),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__NAME",
                orders.subscription.clone(),
            ),
            // The breaker from the environment alone, with short cooldowns.
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__COOLDOWN",
                "1s".into(),
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__MAX_COOLDOWN",
                "2s".into(),
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__AUDIT__NAME",
                audit.subscription.clone(),
            ),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    )
    .unwrap();
    let down = Arc::new(AtomicBool::new(true));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let dependency = down.clone();
    let service = Service::new(config)
        .raw("orders", move |_, d: Delivery| {
            let down = dependency.load(Ordering::SeqCst);
            async move { if down { d.unavailable() } else { d.ack() } }
        })
        .raw("audit", |_, d: Delivery| async move { d.ack() });
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    eventually("ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;
    let metrics = || get(&address, "/metrics").map(|r| r.1).unwrap_or_default();
    let orders_value =
        |metrics: &str, name: &str| sample(metrics, &format!("{name}{{subscription=\"orders\"}}"));
    let before = metrics();
    assert_eq!(
        orders_value(&before, "leasehold_breaker_state"),
        Some(0.0),
        "{before}"
    );
    assert_eq!(orders_value(&before, "leasehold_breaker_held"), Some(0.0));
    assert!(
        !before
            .lines()
            .any(|l| l.starts_with("leasehold_breaker") && l.contains("\"audit\"")),
        "a subscription without a breaker has no breaker series: {before}"
    );

    orders.publish(&format!("order {SECRET}"), "").await;
    let mut open = String::new();
    eventually(
        "the breaker open, holding the message",
        Duration::from_secs(30),
        || {
            open = metrics();
            orders_value(&open, "leasehold_breaker_state") == Some(1.0)
                && orders_value(&open, "leasehold_breaker_held") == Some(1.0)
        },
    )
    .await;
    assert_eq!(
        orders_value(&open, "leasehold_breaker_trips_total"),
        Some(1.0),
        "{open}"
    );
    for counter in [
        "leasehold_breaker_expired_total",
        "leasehold_breaker_released_total",
    ] {
        assert_eq!(orders_value(&open, counter), Some(0.0), "{counter}: {open}");
    }
    assert!(
        open.contains("# TYPE leasehold_breaker_open_seconds counter"),
        "{open}"
    );
    assert!(
        open.contains("# UNIT leasehold_breaker_open_seconds seconds"),
        "{open}"
    );
    assert_eq!(get(&address, "/livez").unwrap().0, 200, "open is not dead");
    // The page: the breaker's row, and (once a reading saw it open) the shaded period.
    let mut page = String::new();
    eventually(
        "the open period on the charts",
        Duration::from_secs(30),
        || {
            page = get(&address, "/").map(|r| r.1).unwrap_or_default();
            page.contains(r#"<rect class="band""#)
        },
    )
    .await;
    assert!(
        page.contains(r#"<td class="breaker"><span class="breaker-state open">open</span> for "#)
            || page.contains(r#"<span class="breaker-state half-open">half-open</span> for "#),
        "{page}"
    );
    assert!(page.contains("; held: 1; trips: 1;"), "{page}");
    assert!(page.contains("breaker not closed"), "{page}");
    assert_eq!(
        page.matches(r#"<td class="breaker">"#).count(),
        1,
        "a row for orders only: {page}"
    );
    // Tries failed meanwhile (each cooldown ends with one), but a failed try is no new trip.
    let still = metrics();
    assert_eq!(
        orders_value(&still, "leasehold_breaker_trips_total"),
        Some(1.0),
        "{still}"
    );

    // The dependency is back: the next try acks the held message and closes the breaker.
    down.store(false, Ordering::SeqCst);
    let mut closed = String::new();
    eventually(
        "the breaker closed, the message acked",
        Duration::from_secs(30),
        || {
            closed = metrics();
            orders_value(&closed, "leasehold_breaker_state") == Some(0.0)
                && sample(
                    &closed,
                    "leasehold_messages_settled_total{subscription=\"orders\",outcome=\"acked\"}",
                ) == Some(1.0)
        },
    )
    .await;
    assert_eq!(
        orders_value(&closed, "leasehold_breaker_held"),
        Some(0.0),
        "{closed}"
    );
    let open_seconds = orders_value(&closed, "leasehold_breaker_open_seconds_total").unwrap();
    assert!(
        open_seconds >= 1.0,
        "open for a cooldown at least: {open_seconds}"
    );
    let page = get(&address, "/").unwrap().1;
    assert!(
        page.contains(r#"<td class="breaker"><span class="breaker-state closed">closed</span>; held: 0; trips: 1;"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<td class="breaker-nacks">0, 0</td>"#),
        "nothing held was nacked: {page}"
    );
    assert!(!closed.contains(SECRET) && !page.contains(SECRET));

    stop.send(()).unwrap();
    let summary = running.await.unwrap().unwrap();
    let stats = &summary.subscriptions["orders"];
    assert_eq!(
        (
            stats.received,
            stats.acked,
            stats.retried,
            stats.breaker_trips
        ),
        (1, 1, 0, 1),
        "held, not nacked: delivered once, acked on the try after the outage: {stats:?}"
    );
    orders.cleanup().await;
    audit.cleanup().await;
}

#[actix_rt::test]
async fn a_spanner_progress_store_keeps_what_finished_for_every_replica_and_a_missing_table_stops_the_start()
 {
    use leasehold::store::{Completed, ProgressStore};
    let leasehold_spanner::Endpoint::Emulator(spanner) = spanner_endpoint() else {
        panic!("the tests run on the Spanner emulator")
    };
    let scratch = Scratch::new(|s| s).await;
    let database = spanner_database().await;
    let with_store = |database: &str| {
        config::from_sources(
            None,
            [
                ("LEASEHOLD__CONNECTION__EMULATOR_HOST", host()),
                (
                    "LEASEHOLD__HTTP__ADDRESS",
                    format!("127.0.0.1:{}", free_port()),
                ),
                (
                    "LEASEHOLD__SUBSCRIPTIONS__EVENTS__NAME",
                    scratch.subscription.clone(),
                ),
                (
                    "LEASEHOLD__SUBSCRIPTIONS__EVENTS__PROGRESS_STORE__KIND",
                    "spanner".to_string(),
                ),
                (
                    "LEASEHOLD__SUBSCRIPTIONS__EVENTS__PROGRESS_STORE__DATABASE",
                    database.to_string(),
                ),
                (
                    "LEASEHOLD__SUBSCRIPTIONS__EVENTS__PROGRESS_STORE__EMULATOR_HOST",
                    spanner.clone(),
                ),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        )
        .unwrap()
    };
    // A database without the claims table: the start stops and says which migration to run.
    let bare = leasehold_test_support::new_spanner_database().await;
    let refused = Service::new(with_store(&bare))
        .raw("events", |_, d: Delivery| async move { d.ack() })
        .run_until(async {})
        .await
        .expect_err("no claims table");
    let mut chain = refused.to_string();
    let mut cause = std::error::Error::source(&refused);
    while let Some(c) = cause {
        chain.push_str(&format!(": {c}"));
        cause = c.source();
    }
    assert!(chain.contains("events"), "{chain}");
    assert!(chain.contains("migrate"), "{chain}");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service =
        Service::new(with_store(&database)).raw("events", |_, d: Delivery| async move { d.ack() });
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    let ids = scratch.publish_all((0..5).map(|n| n.to_string())).await;
    // Another replica's view of the same table: each message finished, recorded before its ack.
    let other = leasehold_spanner::SpannerStore::connect_to(
        &spanner_endpoint(),
        &database,
        Duration::from_secs(30),
    )
    .await
    .unwrap()
    .progress(&scratch.subscription);
    eventually("5 records in Spanner", Duration::from_secs(60), || {
        ids.iter()
            .all(|id| other.completed(id) == Ok(Some(Completed::Acked)))
    })
    .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    scratch.cleanup().await;
}
