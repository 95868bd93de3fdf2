//! One replica of the multi-replica soak and the scale benchmark: consumes a subscription with a
//! transactional handler that inserts one row per message (or a transactional batch handler that
//! inserts a batch's rows with one statement, or, for comparison, a plain handler with the
//! in-memory progress store), prints its counters four times a second, and stops cleanly on
//! SIGTERM. The same handlers run on Spanner too. Stage one of the outbox pipeline
//! (`tests/pipeline.rs`) also publishes each order's confirmation through the transactional
//! outbox, with a relay in the replica. Reads `PUBSUB_EMULATOR_HOST`, `DATABASE_URL`,
//! `SPANNER_EMULATOR_HOST` and the
//! `LEASEHOLD_REPLICA_*` variables (see `leasehold_soak::env`).

use leasehold::{
    Batch, BatchOutcome, Connection, Delivery, OutboxMessage, Outcome, Registration, Subscription,
    store::{MemoryStore, OutboxStore},
};
use leasehold_postgres::{PgTransaction, PostgresStore, deadpool_postgres, tokio_postgres};
use leasehold_relay::{Relay, RelayOptions};
use leasehold_soak::{Report, env};
use leasehold_spanner::gcloud_spanner::{self, statement::Statement};
use leasehold_spanner::{SpannerStore, SpannerTransaction};
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

fn report(subscription: &Subscription, relay: Option<&Relay>) {
    let mut report = Report::of(subscription);
    if let Some(relay) = relay {
        let stats = relay.stats();
        report.outbox_sent = stats.sent;
        report.outbox_failures = stats.send_failures;
    }
    println!("{}", report.line());
}

/// The store, on Leasehold's connection thread or (`env::DRIVER` = `opener`, for the
/// benchmark's comparison) on deadpool's own manager, which drives each connection on the thread
/// that opened it (a worker thread).
async fn store() -> Result<PostgresStore, Box<dyn std::error::Error>> {
    Ok(match std::env::var(env::DRIVER).as_deref() {
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
    })
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
    Ok(Registration::transactional_json(
        subscription,
        store().await?,
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

/// The most messages in one batch of the batch handler.
const BATCH_MESSAGES: usize = 100;

/// The soak's batch handler: the rows of a whole batch, one per message, written with one
/// multi-row INSERT in the transaction that records the batch's messages (no row when no table
/// is named); every message acked.
async fn postgres_batch(
    subscription: String,
    work: Duration,
) -> Result<Registration, Box<dyn std::error::Error>> {
    let insert = std::env::var(env::TABLE).ok().map(|table| {
        format!(
            "INSERT INTO {table} (seq, message_id, replica) \
             SELECT seq, message_id, $3 FROM unnest($1::int8[], $2::text[]) AS b (seq, message_id)"
        )
    });
    let name = var(env::NAME);
    Ok(Registration::transactional_json_batch(
        subscription,
        store().await?,
        async move |batch: Batch<Payload>, tx: &mut PgTransaction| {
            if let Some(insert) = &insert {
                let seqs: Vec<i64> = batch.payloads().map(|p| p.seq).collect();
                let ids: Vec<&str> = batch.deliveries().map(|d| d.message_id()).collect();
                let insert = tx.prepare_cached(insert).await?;
                tx.execute(&insert, &[&seqs, &ids, &name]).await?;
            }
            // The transaction stays open a while, so that kills and cuts find some open.
            if !work.is_zero() {
                actix_rt::time::sleep(work).await;
            }
            Ok::<_, tokio_postgres::Error>(BatchOutcome::all(Outcome::ack()))
        },
    )
    .max_batch_messages(BATCH_MESSAGES))
}

/// The soak's handler on Spanner: one row per message (no row when no table is named),
/// written in the transaction that claims the message.
async fn spanner(
    subscription: String,
    work: Duration,
) -> Result<Registration, Box<dyn std::error::Error>> {
    let table = std::env::var(env::TABLE).ok();
    let name = var(env::NAME);
    let store = SpannerStore::connect(&var(env::SPANNER_DATABASE)).await?;
    Ok(Registration::transactional_json(
        subscription,
        store,
        async move |payload: Payload, delivery: Delivery, tx: &mut SpannerTransaction| {
            if let Some(table) = &table {
                let insert = spanner_row(table, payload.seq, tx.message_id(), &name);
                tx.update(insert).await?;
            }
            if !work.is_zero() {
                actix_rt::time::sleep(work).await;
            }
            Ok::<_, gcloud_spanner::client::Error>(delivery.ack())
        },
    ))
}

/// One effect row in Spanner: a fresh key, so that a second effect of a message shows.
fn spanner_row(table: &str, seq: i64, message_id: &str, replica: &str) -> Statement {
    let mut insert = Statement::new(format!(
        "INSERT INTO {table} (id, seq, message_id, replica, written_at) \
         VALUES (GENERATE_UUID(), @seq, @message_id, @replica, PENDING_COMMIT_TIMESTAMP())"
    ));
    insert.add_param("seq", &seq);
    insert.add_param("message_id", &message_id);
    insert.add_param("replica", &replica);
    insert
}

/// The soak's batch handler on Spanner: a batch's rows in one batch of DML statements (one
/// round trip), in the transaction that claims the batch's messages.
async fn spanner_batch(
    subscription: String,
    work: Duration,
) -> Result<Registration, Box<dyn std::error::Error>> {
    let table = std::env::var(env::TABLE).ok();
    let name = var(env::NAME);
    let store = SpannerStore::connect(&var(env::SPANNER_DATABASE)).await?;
    Ok(Registration::transactional_json_batch(
        subscription,
        store,
        async move |batch: Batch<Payload>, tx: &mut SpannerTransaction| {
            if let Some(table) = &table {
                let inserts = batch
                    .iter()
                    .map(|item| {
                        spanner_row(table, item.payload.seq, item.delivery.message_id(), &name)
                    })
                    .collect();
                tx.batch_update(inserts).await?;
            }
            if !work.is_zero() {
                actix_rt::time::sleep(work).await;
            }
            Ok::<_, gcloud_spanner::client::Error>(BatchOutcome::all(Outcome::ack()))
        },
    )
    .max_batch_messages(BATCH_MESSAGES))
}

/// Stage one of the outbox pipeline on PostgreSQL: the order's row (as the soak's handler
/// writes it) and its confirmation published through the outbox, in the message's transaction.
async fn postgres_outbox(
    subscription: String,
) -> Result<(Registration, PostgresStore), Box<dyn std::error::Error>> {
    let insert = format!(
        "INSERT INTO {} (seq, message_id, replica) VALUES ($1, $2, $3)",
        var(env::TABLE)
    );
    let (name, topic) = (var(env::NAME), var(env::OUTBOX_TOPIC));
    let notify = std::env::var(env::OUTBOX_NOTIFY).map_or(true, |v| v != "off");
    let store = store().await?.notify_relays(notify);
    let registration = Registration::transactional_json(
        subscription,
        store.clone(),
        async move |payload: Payload, delivery: Delivery, tx: &mut PgTransaction| {
            tx.execute(&insert, &[&payload.seq, &tx.message_id(), &name])
                .await
                .map_err(|e| e.to_string())?;
            let confirmed = OutboxMessage::new(&topic, payload.seq.to_string());
            tx.publish(confirmed).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(delivery.ack())
        },
    );
    Ok((registration, store))
}

/// Stage one of the outbox pipeline on Spanner: the order's row and its confirmation published
/// through the outbox, in the message's read-write transaction.
async fn spanner_outbox(
    subscription: String,
) -> Result<(Registration, SpannerStore), Box<dyn std::error::Error>> {
    let (table, name, topic) = (var(env::TABLE), var(env::NAME), var(env::OUTBOX_TOPIC));
    let store = SpannerStore::connect(&var(env::SPANNER_DATABASE)).await?;
    let registration = Registration::transactional_json(
        subscription,
        store.clone(),
        async move |payload: Payload, delivery: Delivery, tx: &mut SpannerTransaction| {
            let insert = spanner_row(&table, payload.seq, tx.message_id(), &name);
            tx.update(insert).await.map_err(|e| e.to_string())?;
            let confirmed = OutboxMessage::new(&topic, payload.seq.to_string());
            tx.publish(confirmed).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(delivery.ack())
        },
    );
    Ok((registration, store))
}

/// The relay of a stage-one replica: through [`env::RELAY_PUBSUB`] when set, with short
/// leases and timeouts, so that a killed relay's rows and an outage pass within a test.
async fn relay<S: OutboxStore>(store: S) -> Result<Relay, Box<dyn std::error::Error>> {
    let connection = match std::env::var(env::RELAY_PUBSUB) {
        Ok(host) => Connection::emulator(&host),
        Err(_) => Connection::from_env(),
    };
    let options = RelayOptions::default()
        .poll_interval(Duration::from_millis(500))
        .send_timeout(Duration::from_secs(2))
        .lease(Duration::from_secs(6))
        .retry_delay(Duration::from_millis(200))
        .max_retry_delay(Duration::from_secs(2))
        .backlog_interval(Duration::from_secs(1));
    Ok(Relay::start(store, &connection, options).await?)
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

/// A plain handler without a progress store, taking `work` to `max` per message (spread evenly
/// by the message's `seq`), and noting each message it handled (its `seq`, a line each) in the
/// file `handled` names.
fn plain(
    subscription: String,
    work: Duration,
    max: Duration,
    handled: Option<String>,
) -> Result<Registration, Box<dyn std::error::Error>> {
    let handled = match handled {
        Some(path) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ))),
        None => None,
    };
    let spread = max.saturating_sub(work).as_millis() as u64;
    Ok(
        Registration::json(subscription, move |payload: Payload, delivery: Delivery| {
            let handled = handled.clone();
            async move {
                // An odd multiplier spreads consecutive seqs over the range.
                let extra = (payload.seq as u64).wrapping_mul(7919) % (spread + 1);
                actix_rt::time::sleep(work + Duration::from_millis(extra)).await;
                if let Some(file) = &handled {
                    use std::io::Write;
                    let _ = writeln!(file.lock().unwrap(), "{}", payload.seq);
                }
                delivery.ack()
            }
        })
        .without_progress_store(),
    )
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
    let store = std::env::var(env::STORE);
    let mut relayed = None;
    let registration = match store.as_deref() {
        Ok("memory") => memory(subscription, work),
        Ok("plain") => plain(
            subscription,
            work,
            Duration::from_millis(number(env::WORK_MAX_MS, work.as_millis() as u64)?),
            std::env::var(env::HANDLED).ok(),
        )?,
        Ok("postgres") | Err(_) => postgres(subscription, work).await?,
        Ok("postgres-batch") => postgres_batch(subscription, work).await?,
        Ok("spanner") => spanner(subscription, work).await?,
        Ok("spanner-batch") => spanner_batch(subscription, work).await?,
        Ok("postgres-outbox") => {
            let (registration, store) = postgres_outbox(subscription).await?;
            relayed = Some(relay(store).await?);
            registration
        }
        Ok("spanner-outbox") => {
            let (registration, store) = spanner_outbox(subscription).await?;
            relayed = Some(relay(store).await?);
            registration
        }
        Ok(other) => {
            return Err(format!(
                "{} must be postgres, postgres-batch, spanner, spanner-batch, postgres-outbox, \
                 spanner-outbox, memory or plain, not {other}",
                env::STORE
            )
            .into());
        }
    };
    // A batch fills only as far as flow control lets messages in, and 8 batches run at once
    // (`workers(8)`): with the single handlers' 64 outstanding, a busy replica's batches would
    // hold about 8 messages each. 1000 (the runtime's default) lets 8 batches of 100 run (800)
    // while the next ones form.
    let outstanding = if matches!(store.as_deref(), Ok("postgres-batch" | "spanner-batch")) {
        1000
    } else {
        64
    };
    let registration = registration
        .workers(number(env::WORKERS, 8)? as usize)
        .streams(number(env::STREAMS, 1)? as usize)
        // The emulator keeps taking and leasing messages for a stream that was cut or whose
        // process died, for as long as the subscription exists, each for one lease extension: a
        // short one brings them back sooner. (Real Pub/Sub ends a closed stream's leases.)
        .max_lease_extension(Duration::from_secs(10))
        // The emulator ignores the client's flow control (each stream's sender takes up to 100
        // messages every 50 ms, dead or alive), so this bounds only what a live replica holds.
        .max_outstanding_messages(number(env::OUTSTANDING, outstanding)? as usize);
    let subscription = leasehold::start(registration, &Connection::from_env()).await?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tick = actix_rt::time::interval(Duration::from_millis(number(env::REPORT_MS, 250)?));
    loop {
        tokio::select! {
            _ = tick.tick() => report(&subscription, relayed.as_ref()),
            _ = terminate.recv() => break,
        }
    }
    subscription.stop().await;
    // After the subscription: what its last handlers committed is sent.
    if let Some(relay) = &relayed {
        relay.stop().await;
    }
    report(&subscription, relayed.as_ref());
    Ok(())
}
