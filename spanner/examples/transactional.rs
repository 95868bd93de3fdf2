//! Effectively-once payments on Spanner: two replicas on one subscription credit accounts in
//! Cloud Spanner, each credit committed in one read-write transaction with the message's claim,
//! before the ack.
//!
//! With no setup it starts Google's Pub/Sub emulator (or uses `PUBSUB_EMULATOR_HOST`) and
//! Google's Spanner emulator (or uses `SPANNER_EMULATOR_HOST`), creates a database of the run's
//! own, runs the migration step, publishes 100 payments and runs two replicas of the consumer.
//! The credit (`balance = balance + cents`) is not idempotent by itself, and the first delivery
//! of every tenth payment fails after its write: the transaction rolls back and the redelivery
//! credits it once. The emulator runs one read-write transaction at a time and aborts the
//! others, so many handlers run again (the aborts it prints). At the end it checks that every
//! account holds exactly what was paid to it, prints what each replica did, deletes the topic
//! and subscription, and exits 0 (1 if a balance is wrong).
//!
//! ```text
//! cargo run -p leasehold-spanner --example transactional
//! ```

use google_cloud_pubsub::model::{Message, Subscription};
use leasehold::emulator::EmulatorHost;
use leasehold::{Delivery, Outcome, Registration};
use leasehold_spanner::gcloud_spanner::mutation::insert;
use leasehold_spanner::gcloud_spanner::statement::Statement;
use leasehold_spanner::{SpannerHost, SpannerStore, SpannerTransaction};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROJECT: &str = "projects/leasehold-transactional";
const PAYMENTS: i64 = 100;
const ACCOUNTS: i64 = 5;

#[derive(serde::Deserialize)]
struct Payment {
    seq: i64,
    account: i64,
    cents: i64,
}

/// The handler: credits the account in the message's transaction.
async fn credit(
    payment: Payment,
    delivery: Delivery,
    tx: &mut SpannerTransaction,
    failed_once: Arc<Mutex<HashSet<i64>>>,
) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let mut add = Statement::new("UPDATE accounts SET balance = balance + @cents WHERE id = @id");
    add.add_param("cents", &payment.cents);
    add.add_param("id", &payment.account);
    tx.update(add).await?;
    if payment.seq % 10 == 0 && failed_once.lock().insert(payment.seq) {
        // A failure after the write (a crash would do the same): rolled back, retried.
        return Err(format!("payment {} failed after its write", payment.seq).into());
    }
    Ok(delivery.ack())
}

#[actix_rt::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();

    let emulator = EmulatorHost::from_env_or_start()?;
    let spanner = SpannerHost::from_env_or_start()?;
    let endpoint = spanner.endpoint();
    let run = std::process::id();
    let database = format!("projects/leasehold/instances/example/databases/payments{run}");
    println!(
        "Pub/Sub emulator at {}, Spanner emulator at {endpoint:?}",
        emulator.host()
    );
    let connection = emulator.connection();

    // The database, Leasehold's table (the migration step, once per database) and the
    // application's own.
    leasehold_spanner::create_database(&endpoint, &database).await?;
    leasehold_spanner::migrate(&endpoint, &database).await?;
    leasehold_spanner::apply_ddl(
        &endpoint,
        &database,
        &["CREATE TABLE accounts (id INT64 NOT NULL, balance INT64 NOT NULL) PRIMARY KEY (id)"],
    )
    .await?;
    let store = SpannerStore::connect_to(&endpoint, &database, Duration::from_secs(30)).await?;
    let rows = (0..ACCOUNTS)
        .map(|id| insert("accounts", &["id", "balance"], &[&id, &0i64]))
        .collect();
    store.client().apply(rows).await?;

    let topic = format!("{PROJECT}/topics/payments-{run}");
    let subscription = format!("{PROJECT}/subscriptions/payments-{run}");
    let topics = connection.topic_admin().await?;
    let subscriptions = connection.subscription_admin().await?;
    topics.create_topic().set_name(&topic).send().await?;
    subscriptions
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(&subscription)
                .set_topic(&topic)
                .set_ack_deadline_seconds(10),
        )
        .send()
        .await?;

    // What each account should hold.
    let mut expected = vec![0i64; ACCOUNTS as usize];
    let publisher = connection.publisher(&topic).await?;
    let mut sent = Vec::new();
    for seq in 0..PAYMENTS {
        let (account, cents) = (seq % ACCOUNTS, 100 + seq);
        expected[account as usize] += cents;
        let body = format!(r#"{{"seq":{seq},"account":{account},"cents":{cents}}}"#);
        sent.push(publisher.publish(Message::new().set_data(body)));
    }
    for published in futures::future::join_all(sent).await {
        published?;
    }
    println!(
        "published {PAYMENTS} payments to {ACCOUNTS} accounts (the first delivery of every tenth \
         fails after its write: the warnings below are those, rolled back and retried)"
    );

    // Two replicas of the consumer on one subscription, as two deployments would run, each with
    // a client of its own.
    let failed_once = Arc::new(Mutex::new(HashSet::new()));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let failed_once = failed_once.clone();
        let own = SpannerStore::connect_to(&endpoint, &database, Duration::from_secs(30)).await?;
        let registration = Registration::transactional_json(
            &subscription,
            own,
            async move |payment: Payment, delivery: Delivery, tx: &mut SpannerTransaction| {
                credit(payment, delivery, tx, failed_once.clone()).await
            },
        )
        .workers(4);
        replicas.push(leasehold::start(registration, &connection).await?);
    }

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut finished = true;
    while replicas.iter().map(|r| r.stats().committed).sum::<u64>() < PAYMENTS as u64 {
        if Instant::now() > deadline {
            finished = false;
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    for (n, replica) in replicas.iter().enumerate() {
        let s = replica.stats();
        println!(
            "replica {n}: received {}, committed {}, rolled back and retried {}, replayed {}, \
             aborts run again {}, store failures {}",
            s.received, s.committed, s.retried, s.replayed, s.store_aborts, s.store_failures
        );
    }
    for replica in replicas {
        replica.stop().await;
    }
    if !finished {
        eprintln!(
            "the payments were not all committed within two minutes (see the warnings above and \
             the store failures)"
        );
    }

    let mut read = store.client().single().await?;
    let mut rows = read
        .query(Statement::new(
            "SELECT id, balance FROM accounts ORDER BY id",
        ))
        .await?;
    let mut wrong = false;
    while let Some(row) = rows.next().await? {
        let (id, balance): (i64, i64) = (row.column(0)?, row.column(1)?);
        let want = expected[id as usize];
        let verdict = if balance == want { "ok" } else { "WRONG" };
        wrong |= balance != want;
        println!("account {id}: {balance} cents, expected {want}: {verdict}");
    }
    subscriptions
        .delete_subscription()
        .set_subscription(&subscription)
        .send()
        .await?;
    topics.delete_topic().set_topic(&topic).send().await?;
    if wrong || !finished {
        if wrong {
            eprintln!("a balance is wrong: a payment was credited twice or not at all");
        }
        std::process::exit(1);
    }
    println!("every payment credited exactly once");
    Ok(())
}
