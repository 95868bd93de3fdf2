//! One replica of the multi-replica soak and the scale benchmark: consumes a subscription with a
//! transactional handler that inserts one row per message (or, for comparison, a plain handler
//! with the in-memory progress store), prints its counters four times a second, and stops
//! cleanly on SIGTERM. Reads `PUBSUB_EMULATOR_HOST`, `DATABASE_URL` and the
//! `LEASEHOLD_REPLICA_*` variables (see `leasehold_soak::env`).

use leasehold::{Connection, Delivery, MemoryStore, Registration, Subscription};
use leasehold_postgres::{PgTransaction, PostgresStore, deadpool_postgres, tokio_postgres};
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

fn number(name: &str, default: u64) -> Result<u64, std::num::ParseIntError> {
    std::env::var(name).map_or(Ok(default), |v| v.parse())
}

fn report(subscription: &Subscription) {
    println!("{}", Report::from(&subscription.stats()).line());
}

/// The soak's handler: one row per message, written in the transaction that records the
/// message (no row when no table is named: the store's own cost alone).
async fn postgres(
    subscription: String,
    work: Duration,
) -> Result<Registration, Box<dyn std::error::Error>> {
    let insert = std::env::var(env::TABLE)
        .ok()
        .map(|table| format!("INSERT INTO {table} (seq, message_id, replica) VALUES ($1, $2, $3)"));
    let name = var(env::NAME);
    let store = match std::env::var(env::DRIVER).as_deref() {
        // For the benchmark's comparison: deadpool's own manager, which drives each connection
        // on the thread that opened it (a worker thread).
        Ok("opener") => {
            let config = var("DATABASE_URL").parse()?;
            let manager = deadpool_postgres::Manager::from_config(
                config,
                tokio_postgres::NoTls,
                deadpool_postgres::ManagerConfig {
                    recycling_method: deadpool_postgres::RecyclingMethod::Fast,
                },
            );
            let pool = deadpool_postgres::Pool::builder(manager)
                .max_size(16)
                .build()?;
            PostgresStore::with_pool(pool).await?
        }
        _ => PostgresStore::connect(&var("DATABASE_URL")).await?,
    };
    Ok(Registration::transactional_json(
        subscription,
        store,
        async move |payload: Payload, delivery: Delivery, tx: &mut PgTransaction| {
            if let Some(insert) = &insert {
                tx.execute(insert, &[&payload.seq, &tx.message_id(), &name])
                    .await?;
            }
            // The transaction stays open a while, so that kills and cuts find some open.
            if !work.is_zero() {
                actix_rt::time::sleep(work).await;
            }
            Ok::<_, tokio_postgres::Error>(delivery.ack())
        },
    ))
}

/// The same work without PostgreSQL: the in-memory progress store records each message.
fn memory(subscription: String, work: Duration) -> Registration {
    Registration::json(
        subscription,
        move |_: Payload, delivery: Delivery| async move {
            if !work.is_zero() {
                actix_rt::time::sleep(work).await;
            }
            delivery.ack()
        },
    )
    .progress_store(MemoryStore::new(100_000, Duration::from_secs(3600)))
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter =
        || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "error".into());
    match std::env::var(env::LOG) {
        // One line when each message's span opens (received) and closes (settled, with its
        // result), appended to the file: the soak's per-message timeline.
        Ok(path) => tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_span_events(
                tracing_subscriber::fmt::format::FmtSpan::NEW
                    | tracing_subscriber::fmt::format::FmtSpan::CLOSE,
            )
            .with_ansi(false)
            .with_timer(leasehold_soak::timeline::EpochTimer)
            .with_writer(std::sync::Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)?,
            ))
            .init(),
        Err(_) => tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .init(),
    }
    let subscription = var(env::SUBSCRIPTION);
    let work = Duration::from_millis(number(env::WORK_MS, 0)?);
    let registration = match std::env::var(env::STORE).as_deref() {
        Ok("memory") => memory(subscription, work),
        Ok("postgres") | Err(_) => postgres(subscription, work).await?,
        Ok(other) => {
            return Err(format!("{} must be postgres or memory, not {other}", env::STORE).into());
        }
    };
    let registration = registration
        .workers(8)
        .streams(number(env::STREAMS, 1)? as usize)
        // The emulator keeps taking and leasing messages for a stream that was cut or whose
        // process died, for as long as the subscription exists, each for one lease extension: a
        // short one brings them back sooner. (Real Pub/Sub ends a closed stream's leases.)
        .max_lease_extension(Duration::from_secs(10))
        // The emulator ignores the client's flow control (each stream's sender takes up to 100
        // messages every 50 ms, dead or alive), so this bounds only what a live replica holds.
        .max_outstanding_messages(number(env::OUTSTANDING, 64)? as usize);
    let subscription = leasehold::start(registration, &Connection::from_env()).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tick = actix_rt::time::interval(Duration::from_millis(number(env::REPORT_MS, 250)?));
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
