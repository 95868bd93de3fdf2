//! The deployable shape: a service consuming the subscriptions of a configuration file, with
//! the handlers bound in code, Prometheus metrics, health, readiness and a status page.
//!
//! ```text
//! cargo run --example service -- path/to/leasehold.toml   # the configuration's subscriptions
//! cargo run --example service                             # a demo on a local emulator
//! cargo run --example service -- path/to/leasehold.toml replay orders --dry-run
//! ```
//!
//! With a configuration (see `service/leasehold.example.toml`), it consumes the `orders`
//! (JSON) and `audit` (raw) subscriptions it names, serves `/metrics`, `/livez`, `/readyz` and
//! the status page on the configured address, drains on SIGTERM or SIGINT, and prints a line
//! per subscription of what it did.
//!
//! Without one it starts a Pub/Sub emulator (or uses `PUBSUB_EMULATOR_HOST`), creates both
//! subscriptions, publishes a message a second, and serves on 127.0.0.1:9090: open
//! http://127.0.0.1:9090/ and press Ctrl-C to stop. Its `orders` dead-letter after 5 attempts
//! (an order with id 0 is refused until then); it prints the `replay` command, with the demo's
//! configuration file, that replays them from another terminal while it runs.
//!
//! `replay KEY` runs the key's handler over its dead letters (service/README.md, "Replaying
//! dead letters"), then prints one line of what became of them.

use clap::Parser;
use leasehold::{Delivery, Outcome};
use leasehold_service::config::{self, ServiceConfig};
use leasehold_service::replay::{self, Cli, Command};
use leasehold_service::{Service, telemetry};
use std::time::Duration;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
    /// Takes a while: a drain has something to wait for.
    #[serde(default)]
    slow: bool,
    /// Milliseconds of work to simulate (the demo's orders take a few, for the charts).
    #[serde(default)]
    work_ms: u64,
}

async fn on_order(order: Order, delivery: Delivery) -> Outcome {
    if order.slow {
        actix_rt::time::sleep(Duration::from_secs(3)).await;
    }
    actix_rt::time::sleep(Duration::from_millis(order.work_ms)).await;
    if order.id == 0 {
        // Refused: retried up to the fifth attempt, then dropped. The demo's dead-letter
        // policy allows 5, so that drop dead-letters it; without a policy (no attempt number)
        // the first drop acks.
        return match delivery.delivery_attempt() {
            Some(attempt) if attempt < 5 => delivery.retry(),
            _ => delivery.drop(),
        };
    }
    delivery.ack()
}

async fn on_audit(_: bytes::Bytes, delivery: Delivery) -> Outcome {
    delivery.ack()
}

#[actix_rt::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // What went wrong and why, each cause on a line of its own.
            eprintln!("error: {error}");
            let mut cause = error.source();
            while let Some(c) = cause {
                eprintln!("  because: {c}");
                cause = c.source();
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let (config, demo) = match cli.load_config()? {
        Some(config) => (config, None),
        None if cli.command.is_some() => {
            return Err(
                "replay needs a configuration: service CONFIG replay KEY (the demo \
                        prints the command with its own)"
                    .into(),
            );
        }
        None => {
            let demo = demo::Demo::start().await?;
            (demo.config.clone(), Some(demo))
        }
    };
    let _telemetry = telemetry::init(&config.telemetry)?;
    let service = Service::new(config)
        .json("orders", on_order)
        .raw("audit", on_audit);
    if let Some(Command::Replay(args)) = cli.command {
        // `replay orders`: the dead letters of `orders` through `on_order`, then one line of
        // what became of them.
        let key = args.key.clone();
        let end = service.replay(*args).await?;
        println!("{}", replay::summary_line(&key, &end));
        return Ok(());
    }
    let publishing = demo.as_ref().map(demo::Demo::publish_every_second);
    let summary = service.run().await?;
    if let Some(publishing) = publishing {
        publishing.abort();
    }
    // One line per subscription: `orders: received 10, acked 9, retried 1, dropped 0, ...`.
    for (key, stats) in &summary.subscriptions {
        let settled: Vec<String> = stats
            .settled_by_outcome()
            .iter()
            .map(|(outcome, n)| format!("{} {n}", outcome.replace('_', "-")))
            .collect();
        println!("{key}: received {}, {}", stats.received, settled.join(", "));
    }
    if let Some(demo) = demo {
        demo.cleanup().await;
    }
    Ok(())
}

/// A local emulator with both subscriptions, for trying the service without a configuration.
mod demo {
    use super::*;
    use google_cloud_pubsub::model::{DeadLetterPolicy, Message, Subscription, Topic};
    use leasehold::emulator::EmulatorHost;

    pub struct Demo {
        pub config: ServiceConfig,
        _emulator: EmulatorHost,
        connection: leasehold::Connection,
        topics: Vec<String>,
        subscriptions: Vec<String>,
        config_file: Option<std::path::PathBuf>,
    }

    impl Demo {
        pub async fn start() -> Result<Self, Box<dyn std::error::Error>> {
            let emulator = EmulatorHost::from_env_or_start()?;
            let connection = emulator.connection();
            let topic_admin = connection.topic_admin().await?;
            let subscription_admin = connection.subscription_admin().await?;
            let run = std::process::id();
            let mut demo = Self {
                config: ServiceConfig::default(),
                connection,
                topics: Vec::new(),
                subscriptions: Vec::new(),
                config_file: None,
                _emulator: emulator,
            };
            let mut toml = format!(
                "[connection]\nemulator_host = \"{}\"\n[http]\naddress = \"127.0.0.1:9090\"\n",
                demo._emulator.host()
            );
            // `orders` dead-letters after 5 attempts, to a topic with a subscription of its own
            // that `replay orders` takes from.
            let dead_topic = format!("projects/leasehold-demo/topics/orders-dead-letters-{run}");
            let dead_subscription =
                format!("projects/leasehold-demo/subscriptions/orders-dead-letters-{run}");
            topic_admin
                .create_topic()
                .with_request(Topic::new().set_name(&dead_topic))
                .send()
                .await?;
            subscription_admin
                .create_subscription()
                .with_request(
                    Subscription::new()
                        .set_name(&dead_subscription)
                        .set_topic(&dead_topic)
                        .set_ack_deadline_seconds(10),
                )
                .send()
                .await?;
            for key in ["orders", "audit"] {
                let topic = format!("projects/leasehold-demo/topics/{key}-{run}");
                let name = format!("projects/leasehold-demo/subscriptions/{key}-{run}");
                topic_admin
                    .create_topic()
                    .with_request(Topic::new().set_name(&topic))
                    .send()
                    .await?;
                let mut subscription = Subscription::new()
                    .set_name(&name)
                    .set_topic(&topic)
                    .set_ack_deadline_seconds(10);
                toml.push_str(&format!(
                    "[subscriptions.{key}]\nname = \"{name}\"\nhealth_probe_interval = \"5s\"\n"
                ));
                if key == "orders" {
                    // On the emulator, what a replay leaves comes back once its last lease
                    // extension ends: keep it short.
                    toml.push_str("max_lease_extension = \"10s\"\n");
                    subscription = subscription.set_dead_letter_policy(
                        DeadLetterPolicy::new()
                            .set_dead_letter_topic(&dead_topic)
                            .set_max_delivery_attempts(5),
                    );
                    toml.push_str(&format!(
                        "dead_letter_subscription = \"{dead_subscription}\"\n"
                    ));
                }
                subscription_admin
                    .create_subscription()
                    .with_request(subscription)
                    .send()
                    .await?;
                demo.topics.push(topic);
                demo.subscriptions.push(name);
            }
            demo.topics.push(dead_topic);
            demo.subscriptions.push(dead_subscription);
            // Kept while the demo runs: another terminal can replay its dead letters with it.
            let path = std::env::temp_dir().join(format!("leasehold-demo-{run}.toml"));
            std::fs::write(&path, toml)?;
            demo.config = config::load(&path)?;
            println!("status page: http://127.0.0.1:9090/ (Ctrl-C to stop)");
            println!(
                "orders with id 0 are dead-lettered; replay them from another terminal:\n  \
                 cargo run --example service -- {} replay orders --dry-run",
                path.display()
            );
            demo.config_file = Some(path);
            Ok(demo)
        }

        /// Publishes an order and an audit record every second.
        pub fn publish_every_second(&self) -> actix_rt::task::JoinHandle<()> {
            let connection = self.connection.clone();
            let topics = self.topics.clone();
            actix_rt::spawn(async move {
                let (Ok(orders), Ok(audit)) = (
                    connection.publisher(&topics[0]).await,
                    connection.publisher(&topics[1]).await,
                ) else {
                    return;
                };
                for n in 1u64.. {
                    let order = format!(r#"{{"id": {}, "work_ms": {}}}"#, n % 10, n * 7 % 45);
                    let _ = orders.publish(Message::new().set_data(order)).await;
                    let _ = audit.publish(Message::new().set_data("seen")).await;
                    actix_rt::time::sleep(Duration::from_secs(1)).await;
                }
            })
        }

        pub async fn cleanup(self) {
            if let Some(path) = &self.config_file {
                let _ = std::fs::remove_file(path);
            }
            if let Ok(admin) = self.connection.subscription_admin().await {
                for s in &self.subscriptions {
                    let _ = admin.delete_subscription().set_subscription(s).send().await;
                }
            }
            if let Ok(admin) = self.connection.topic_admin().await {
                for t in &self.topics {
                    let _ = admin.delete_topic().set_topic(t).send().await;
                }
            }
        }
    }
}
