//! A long-running consumer that drains on SIGINT or SIGTERM.
//!
//! Consumes the subscription named on the command line (JSON payloads, acked), through
//! `PUBSUB_EMULATOR_HOST` when it is set, else real Pub/Sub with application-default
//! credentials. On Ctrl-C or SIGTERM it stops pulling, lets running handlers finish (up to the
//! drain timeout), nacks what is left, flushes the acks and prints the counters.
//!
//! ```text
//! cargo run --example consume -- projects/my-project/subscriptions/orders
//! ```

use leasehold::{Connection, Delivery, Outcome, Registration};
use std::time::Duration;

async fn on_message(value: serde_json::Value, delivery: Delivery) -> Outcome {
    tracing::info!(
        message_id = delivery.message_id(),
        fields = value.as_object().map_or(0, |o| o.len()),
        "handled"
    );
    delivery.ack()
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let subscription = std::env::args()
        .nth(1)
        .ok_or("usage: consume projects/PROJECT/subscriptions/NAME")?;
    let registration = Registration::json(&subscription, on_message)
        .workers(16)
        .drain_timeout(Duration::from_secs(20));
    let running = leasehold::start(registration, &Connection::from_env()).await?;
    println!("consuming {subscription}; Ctrl-C or SIGTERM to stop");

    let mut terminate =
        actix_rt::signal::unix::signal(actix_rt::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = actix_rt::signal::ctrl_c() => println!("SIGINT: draining"),
        _ = terminate.recv() => println!("SIGTERM: draining"),
    }
    running.stop().await;
    println!("stopped: {:?}", running.stats());
    Ok(())
}
