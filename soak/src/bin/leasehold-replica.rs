//! One replica of the multi-replica soak: consumes a subscription with a transactional handler
//! that inserts one row per message, prints its counters four times a second, and stops cleanly
//! on SIGTERM. Reads `PUBSUB_EMULATOR_HOST`, `DATABASE_URL` and the `LEASEHOLD_REPLICA_*`
//! variables (see `leasehold_soak::env`).

use leasehold::{Connection, Delivery, Registration, Subscription};
use leasehold_postgres::{PgTransaction, PostgresStore, tokio_postgres};
use leasehold_soak::{Report, env};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

#[derive(serde::Deserialize)]
struct Payload {
    seq: i64,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn report(subscription: &Subscription) {
    let s = subscription.stats();
    let report = Report {
        received: s.received,
        committed: s.committed,
        replayed: s.replayed,
        failed_acks: s.failed_acks,
        acked: s.acked,
        retried: s.retried,
    };
    println!("{}", report.line());
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let insert = format!(
        "INSERT INTO {} (seq, message_id, replica) VALUES ($1, $2, $3)",
        var(env::TABLE)
    );
    let name = var(env::NAME);
    let work = Duration::from_millis(var(env::WORK_MS).parse()?);
    let store = PostgresStore::connect(&var("DATABASE_URL")).await?;
    let registration = Registration::transactional_json(
        var(env::SUBSCRIPTION),
        store,
        async move |payload: Payload, delivery: Delivery, tx: &mut PgTransaction| {
            tx.execute(&insert, &[&payload.seq, &tx.message_id(), &name])
                .await?;
            // The transaction stays open a while, so that kills and cuts find some open.
            actix_rt::time::sleep(work).await;
            Ok::<_, tokio_postgres::Error>(delivery.ack())
        },
    )
    .workers(8)
    // The emulator keeps taking and leasing messages for a stream that was cut or whose process
    // died, for as long as the subscription exists, each for one lease extension: a short one
    // brings them back sooner. (Real Pub/Sub ends a closed stream's leases.)
    .max_lease_extension(Duration::from_secs(10))
    // Such a stream also keeps taking new messages up to its flow-control limit: a small one
    // leaves more for the live streams.
    .max_outstanding_messages(64);
    let subscription = leasehold::start(registration, &Connection::from_env()).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tick = actix_rt::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => report(&subscription),
            _ = terminate.recv() => break,
        }
    }
    subscription.stop().await;
    report(&subscription);
    Ok(())
}
