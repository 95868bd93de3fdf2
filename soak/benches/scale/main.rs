//! Scale figures for BENCHMARKS.md: the same backlog consumed by one and by three
//! `leasehold-replica` processes on one subscription, and what the store costs per message
//! (the transactional handler on PostgreSQL, and the transactional batch handler writing
//! batches of 100 with one INSERT each, against a plain handler with the in-memory progress
//! store, and the same two transactional handlers on Spanner's emulator), with one stream (held near the emulator's pace for a stream) and with three (where
//! the machine's CPU limits). Every configuration runs in each round, rounds interleaved;
//! medians and the spread.
//!
//! ```text
//! cargo bench -p leasehold-soak --bench scale
//! ```
//!
//! `LEASEHOLD_SCALE_MESSAGES` (default 10,000) and `LEASEHOLD_SCALE_ROUNDS` (default 3) change
//! the load; `LEASEHOLD_SCALE_ONLY=outbox` runs only the transactional handler with and without
//! one message published through the transactional outbox (its replica's relay sending it). Uses the emulator `PUBSUB_EMULATOR_HOST` names (or starts one), the database
//! `DATABASE_URL` names (or starts a throwaway cluster) and the Spanner emulator
//! `SPANNER_EMULATOR_HOST` names (or starts one).
//!
//! Each run is measured from its replicas' first delivery to their last ack, as their report
//! lines (every 20 ms) show them; the threads that read those lines raise a signal when the
//! total reaches each, and the run waits on it.
//!
//! # Layout
//!
//! This file runs the rounds. [`configs`] lists what each round runs, [`run`] is one run of one
//! configuration, [`replicas`] starts the replica processes and follows their reports and CPU,
//! and [`report`] prints the lines and the table.

mod configs;
mod replicas;
mod report;
mod run;

use configs::{CONFIGS, OUTBOX_PAIR};
use leasehold_postgres::PostgresStore;
use leasehold_test_support::database_url;

/// The number in the environment variable `name`, or `default`.
fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[actix_rt::main]
async fn main() {
    let messages = number("LEASEHOLD_SCALE_MESSAGES", 10_000);
    let rounds = number("LEASEHOLD_SCALE_ROUNDS", 3);
    let store = PostgresStore::connect(database_url()).await.unwrap();
    println!(
        "scale: {messages} messages published before each run, {rounds} interleaved rounds, \
         handlers of 8 workers per replica that ack at once (batch handlers: 8 batches of up \
         to 100 at once)"
    );
    // `LEASEHOLD_SCALE_ONLY=outbox`: the transactional handler with and without one outbox
    // publish, alone.
    let only_outbox = std::env::var("LEASEHOLD_SCALE_ONLY").is_ok_and(|v| v == "outbox");
    let mut samples: Vec<Vec<run::Sample>> = CONFIGS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, (config, samples)) in CONFIGS.iter().zip(&mut samples).enumerate() {
            if only_outbox && !OUTBOX_PAIR.contains(&i) {
                continue;
            }
            let s = run::run(config, messages, &store, database_url()).await;
            report::run_line(round, config, &s);
            samples.push(s);
        }
    }
    report::table(&samples);
}
