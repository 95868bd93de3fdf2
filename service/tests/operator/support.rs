//! What the operator tests share: the emulator, a subscription with a dead-letter topic, a
//! service on it fed with messages, a plain HTTP client, polling with a deadline, and the
//! tools (Chromium, Prometheus, promtool) found or explained.

use google_cloud_pubsub::model::Message;
use leasehold::Delivery;
use leasehold_service::{Service, ServiceError, Summary, config};
pub use leasehold_test_support::{Scratch, eventually, tool, unique};
use leasehold_test_support::{free_port, host, spanner_database, spanner_endpoint};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

/// A marker in every payload and attribute: it must reach no page, metric or query result.
pub const SECRET: &str = "card-4111-1111-1111-1111";

/// The key the test service's subscription is configured under.
pub const KEY: &str = "orders";

/// The attempt on which Pub/Sub dead-letters (its smallest allowed limit).
const MAX_ATTEMPTS: i32 = 5;

/// `GET target` on `address` over HTTP/1.0 (so the answer is neither chunked nor kept
/// alive): the status code and the body.
pub fn get(address: &str, target: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {target} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// `text` escaped for a URL's query.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Where the tests leave what a person may look at: `target/test-output`.
pub fn output_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory")
        .join("test-output");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A topic with a dead-letter topic and a subscription dead-lettering on attempt
/// [`MAX_ATTEMPTS`], deleted by `cleanup`.
pub async fn scratch() -> Scratch {
    Scratch::with_dead_letter_topic(|s| s, MAX_ATTEMPTS).await.0
}

/// Publishes on `scratch`'s topic, every 250 ms until the handle is aborted, three messages the
/// handler acks (taking up to 30 ms) and, one time in four, a poison message it retries until
/// the last attempt, then dead-letters. Every payload and attribute carries [`SECRET`].
pub fn keep_publishing(scratch: &Scratch) -> actix_rt::task::JoinHandle<()> {
    let publisher = scratch.publisher.clone();
    actix_rt::spawn(async move {
        for tick in 0u64.. {
            let mut payloads: Vec<String> = (0..3)
                .map(|i| format!("ok {} {SECRET}", tick * 3 + i))
                .collect();
            if tick % 4 == 0 {
                payloads.push(format!("poison {SECRET}"));
            }
            let sent = payloads.into_iter().map(|p| {
                publisher.publish(
                    Message::new()
                        .set_data(p)
                        .set_attributes([("card", SECRET)]),
                )
            });
            for id in futures::future::join_all(sent).await {
                id.unwrap();
            }
            actix_rt::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// What the test handler does: acks, after a few milliseconds; a poison message is retried
/// until its last attempt and dropped there (so dead-lettered).
async fn handle(data: bytes::Bytes, delivery: Delivery) -> leasehold::Outcome {
    let text = String::from_utf8_lossy(&data);
    if text.starts_with("poison") {
        return if delivery.delivery_attempt().unwrap_or(0) >= MAX_ATTEMPTS as u32 {
            delivery.drop()
        } else {
            delivery.retry()
        };
    }
    let n: u64 = text
        .split(' ')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    actix_rt::time::sleep(Duration::from_millis(n % 30)).await;
    delivery.ack()
}

/// The running service.
pub struct Running {
    pub address: String,
    stop: tokio::sync::oneshot::Sender<()>,
    running: actix_rt::task::JoinHandle<Result<Summary, ServiceError>>,
}

impl Running {
    /// Drains and stops the service.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        self.running.await.unwrap().unwrap();
    }
}

/// A service in this process consuming `subscription` under [`KEY`], ready.
pub async fn serve(subscription: &str) -> Running {
    let address = format!("127.0.0.1:{}", free_port());
    // A replay of the key reporting from another process (what `replay orders` writes once a
    // second), so that the replay's metrics are scraped too.
    let replays = std::env::temp_dir().join(format!("leasehold-operator-{}", free_port()));
    std::fs::create_dir_all(&replays).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    std::fs::write(
        replays.join(format!("{KEY}.json")),
        format!(
            r#"{{"from":"projects/p/subscriptions/dead","pid":1,"updated":{now},"ended":false,"cancelled":false,"dry_run":false,"replayed":3,"still_failing":1,"running":1,"filtered":0,"not_taken":0,"released":0,"listed":0}}"#
        ),
    )
    .unwrap();
    let replays = replays.display().to_string();
    let config = config::from_sources(
        None,
        [
            ("LEASEHOLD__CONNECTION__EMULATOR_HOST", host().as_str()),
            ("LEASEHOLD__HTTP__ADDRESS", &address),
            ("LEASEHOLD__HTTP__REPLAYS_DIR", &replays),
            ("LEASEHOLD__SUBSCRIPTIONS__ORDERS__NAME", subscription),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__HEALTH_PROBE_INTERVAL",
                "1s",
            ),
            ("LEASEHOLD__SUBSCRIPTIONS__ORDERS__MAX_LEASE", "10m"),
            // An outage breaker, so that its series are scraped: tripped by nine failures in
            // ten, which the poison messages (one in thirteen) never reach.
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__FAILURE_RATIO",
                "0.9",
            ),
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__BREAKER__CONSECUTIVE_FAILURES",
                "0",
            ),
            // The outbox relay's table, from the environment alone.
            (
                "LEASEHOLD__SUBSCRIPTIONS__ORDERS__OUTBOX__BACKLOG_INTERVAL",
                "1s",
            ),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // A transactional outbox's relay under the key, so that its series are scraped and its rows
    // shown: on a Spanner database of its own (the handler publishes nothing; the relay reads
    // its empty outbox).
    let outbox = leasehold_spanner::SpannerStore::connect_to(
        &spanner_endpoint(),
        &spanner_database().await,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let service = Service::new(config).raw(KEY, handle).outbox(KEY, outbox);
    let running = actix_rt::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    eventually("the service ready", Duration::from_secs(60), || {
        matches!(get(&address, "/readyz"), Some((200, _)))
    })
    .await;
    Running {
        address,
        stop,
        running,
    }
}
