//! Quickstart: every outcome, end to end, against a real Pub/Sub emulator.
//!
//! With no setup it starts Google's Pub/Sub emulator on a free local port (or uses the one
//! `PUBSUB_EMULATOR_HOST` names), creates a topic, a dead-letter topic and a subscription with a
//! dead-letter policy, publishes five messages and settles each with a different outcome. It
//! prints what became of each, deletes what it created and exits 0.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use google_cloud_pubsub::model::{DeadLetterPolicy, Message, Subscription};
use leasehold::emulator::EmulatorHost;
use leasehold::{Delivery, Outcome, Registration};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROJECT: &str = "projects/leasehold-quickstart";
/// The dead-letter policy's limit (Pub/Sub's minimum).
const MAX_ATTEMPTS: u32 = 5;

/// Each message: its payload, what should become of it, and the last step that shows it did.
const MESSAGES: [(&str, &str, &str); 5] = [
    ("invoice-1", "acked", "attempt 1: ack"),
    ("flaky-2", "retried, then acked", "attempt 2: ack"),
    ("slow-3", "held 2 s, retried, then acked", "attempt 2: ack"),
    ("junk-4", "dropped", "attempt 1: drop"),
    (
        "poison-5",
        "dead-lettered",
        "arrived on the dead-letter topic",
    ),
];

/// The handler: one branch per outcome.
async fn handle(
    label: String,
    delivery: Delivery,
    log: Log,
) -> Result<Outcome, leasehold::RetryAfterError> {
    let attempt = delivery.delivery_attempt().unwrap_or(1);
    let outcome = match (label.as_str(), attempt) {
        ("flaky-2", 1) => ("retry", delivery.retry()),
        ("slow-3", 1) => (
            "retry_after(2s)",
            delivery.retry_after(Duration::from_secs(2))?,
        ),
        ("junk-4", _) => ("drop", delivery.drop()),
        // Fails on every attempt; on the last one drop() nacks, so Pub/Sub dead-letters it.
        ("poison-5", n) if n < MAX_ATTEMPTS => ("retry", delivery.retry()),
        ("poison-5", _) => ("drop", delivery.drop()),
        _ => ("ack", delivery.ack()),
    };
    log.note(&label, format!("attempt {attempt}: {}", outcome.0));
    Ok(outcome.1)
}

/// What happened to each message, by label.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl Log {
    fn note(&self, label: &str, what: String) {
        self.0
            .lock()
            .entry(label.to_string())
            .or_default()
            .push(what);
    }
    fn last(&self, label: &str) -> Option<String> {
        self.0.lock().get(label).and_then(|v| v.last().cloned())
    }
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();

    let emulator = EmulatorHost::from_env_or_start()?;
    println!("Pub/Sub emulator at {}", emulator.host());
    let connection = emulator.connection();

    let run = std::process::id();
    let topic = format!("{PROJECT}/topics/orders-{run}");
    let dead_topic = format!("{PROJECT}/topics/orders-dead-{run}");
    let subscription = format!("{PROJECT}/subscriptions/orders-{run}");
    let dead_subscription = format!("{PROJECT}/subscriptions/orders-dead-{run}");
    let topics = connection.topic_admin().await?;
    let subscriptions = connection.subscription_admin().await?;
    for t in [&topic, &dead_topic] {
        topics.create_topic().set_name(t).send().await?;
    }
    subscriptions
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(&subscription)
                .set_topic(&topic)
                .set_ack_deadline_seconds(10)
                .set_dead_letter_policy(
                    DeadLetterPolicy::new()
                        .set_dead_letter_topic(&dead_topic)
                        .set_max_delivery_attempts(MAX_ATTEMPTS as i32),
                ),
        )
        .send()
        .await?;
    subscriptions
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(&dead_subscription)
                .set_topic(&dead_topic),
        )
        .send()
        .await?;

    let log = Log::default();
    let l = log.clone();
    let orders = leasehold::start(
        Registration::raw(&subscription, move |data, delivery| {
            handle(
                String::from_utf8_lossy(&data).into_owned(),
                delivery,
                l.clone(),
            )
        }),
        &connection,
    )
    .await?;
    let l = log.clone();
    let dead_letters = leasehold::start(
        Registration::raw(&dead_subscription, move |data, delivery: Delivery| {
            l.note(
                &String::from_utf8_lossy(&data),
                "arrived on the dead-letter topic".into(),
            );
            async move { delivery.ack() }
        }),
        &connection,
    )
    .await?;

    let publisher = connection.publisher(&topic).await?;
    for (label, _, _) in MESSAGES {
        publisher.publish(Message::new().set_data(label)).await?;
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    while !MESSAGES
        .iter()
        .all(|(label, _, last)| log.last(label).as_deref() == Some(*last))
    {
        if Instant::now() > deadline {
            return Err("not every message reached its fate within 60 s".into());
        }
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }

    println!("\n{:<10} {:<30} what happened", "message", "expected");
    for (label, expected, _) in MESSAGES {
        let steps = log.0.lock().get(label).cloned().unwrap_or_default();
        println!("{label:<10} {expected:<30} {}", steps.join(" -> "));
    }
    let stats = orders.stats();
    println!(
        "\nreceived {}, acked {}, retried {}, held {}, dropped {}, dead-lettered {}",
        stats.received, stats.acked, stats.retried, stats.held, stats.dropped, stats.dead_lettered
    );

    orders.stop().await;
    dead_letters.stop().await;
    for s in [&subscription, &dead_subscription] {
        subscriptions
            .delete_subscription()
            .set_subscription(s)
            .send()
            .await?;
    }
    for t in [&topic, &dead_topic] {
        topics.delete_topic().set_topic(t).send().await?;
    }
    Ok(())
}
