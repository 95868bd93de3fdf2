//! The report: a line per run as it ends, then per configuration the median [min–max] of
//! throughput, replica CPU and machine CPU per message, and the ratios of medians that
//! BENCHMARKS.md quotes.
//!
//! Uses the configurations of [`configs`](crate::configs) and the samples of
//! [`run`](crate::run).

use crate::configs::{
    BATCH_STREAMS, BATCHES, CONFIGS, Config, MEMORY, MEMORY_STREAMS, NO_ROW, OPENER, OUTBOX,
    OUTBOX_QUIET, REPLICAS, ROW, ROW_ONE_WORKER, SPANNER, SPANNER_BATCHES, SPANNER_ONE_WORKER,
    STREAMS,
};
use crate::run::Sample;

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The line of one run, printed as it ends.
pub(crate) fn run_line(round: usize, config: &Config, s: &Sample) {
    let batches = s
        .batch_size
        .map_or(String::new(), |n| format!("  {n:.0} messages a batch"));
    println!(
        "  round {round}  {:<42} {:>8.0} msg/s  replicas {:>6.1} µs/msg  machine {:>6.1} µs/msg{batches}",
        config.name, s.per_second, s.replica_us, s.machine_us
    );
}

/// The table of medians and the ratios; `samples[i]` are the runs of `CONFIGS[i]`.
pub(crate) fn table(samples: &[Vec<Sample>]) {
    println!(
        "\n{:<42} {:>22} {:>26} {:>26}",
        "configuration", "msg/s (min–max)", "replica CPU µs/msg", "machine CPU µs/msg"
    );
    let mut medians = Vec::new();
    for (config, samples) in CONFIGS.iter().zip(samples) {
        if samples.is_empty() {
            // Not run (`LEASEHOLD_SCALE_ONLY`): its ratios are left out.
            medians.push((f64::NAN, f64::NAN, f64::NAN));
            continue;
        }
        let (t, t0, t1) = median(samples.iter().map(|s| s.per_second).collect());
        let (r, r0, r1) = median(samples.iter().map(|s| s.replica_us).collect());
        let (m, m0, m1) = median(samples.iter().map(|s| s.machine_us).collect());
        println!(
            "{:<42} {:>7.0} ({:>5.0}–{:>5.0}) {:>8.1} ({:>5.1}–{:>5.1}) {:>8.1} ({:>5.1}–{:>5.1})",
            config.name, t, t0, t1, r, r0, r1, m, m0, m1
        );
        medians.push((t, r, m));
    }
    let ratio =
        |a: usize, b: usize, f: fn(&(f64, f64, f64)) -> f64| f(&medians[a]) / f(&medians[b]);
    println!("\nratios of medians:");
    println!(
        "  postgres + row + outbox publish / postgres + row, replica CPU {:.2}×   machine CPU {:.2}×   throughput {:.2}×",
        ratio(OUTBOX, ROW, |m| m.1),
        ratio(OUTBOX, ROW, |m| m.2),
        ratio(OUTBOX, ROW, |m| m.0)
    );
    println!(
        "  postgres + row + outbox publish without NOTIFY / postgres + row, replica CPU {:.2}×   machine CPU {:.2}×   throughput {:.2}×",
        ratio(OUTBOX_QUIET, ROW, |m| m.1),
        ratio(OUTBOX_QUIET, ROW, |m| m.2),
        ratio(OUTBOX_QUIET, ROW, |m| m.0)
    );
    println!(
        "  3 replicas / 1 replica (postgres + row), throughput  {:.2}×",
        ratio(REPLICAS, ROW, |m| m.0)
    );
    println!(
        "  1 replica with 3 streams / 1 stream, throughput      {:.2}×",
        ratio(STREAMS, ROW, |m| m.0)
    );
    println!(
        "  connections on Leasehold's thread / on the opener's, replica CPU  {:.2}×   machine CPU {:.2}×",
        ratio(ROW, OPENER, |m| m.1),
        ratio(ROW, OPENER, |m| m.2)
    );
    println!(
        "  postgres, no row / memory store, replica CPU         {:.2}×   machine CPU {:.2}×",
        ratio(NO_ROW, MEMORY, |m| m.1),
        ratio(NO_ROW, MEMORY, |m| m.2)
    );
    println!(
        "  postgres + row / memory store, replica CPU           {:.2}×   machine CPU {:.2}×",
        ratio(ROW, MEMORY, |m| m.1),
        ratio(ROW, MEMORY, |m| m.2)
    );
    println!(
        "  batches of 100 + rows / memory store, replica CPU    {:.2}×   machine CPU {:.2}×",
        ratio(BATCHES, MEMORY, |m| m.1),
        ratio(BATCHES, MEMORY, |m| m.2)
    );
    println!(
        "  batches of 100 + rows / postgres + row, throughput   {:.2}×   replica CPU {:.2}×",
        ratio(BATCHES, ROW, |m| m.0),
        ratio(BATCHES, ROW, |m| m.1)
    );
    // Spanner's emulator runs one read-write transaction at a time and aborts the others: a
    // ratio of emulators, not of Spanner against PostgreSQL.
    println!(
        "  spanner + row / postgres + row, throughput           {:.2}×   replica CPU {:.2}×   machine CPU {:.2}×",
        ratio(SPANNER, ROW, |m| m.0),
        ratio(SPANNER, ROW, |m| m.1),
        ratio(SPANNER, ROW, |m| m.2)
    );
    println!(
        "  spanner + row / memory store, replica CPU            {:.2}×   machine CPU {:.2}×",
        ratio(SPANNER, MEMORY, |m| m.1),
        ratio(SPANNER, MEMORY, |m| m.2)
    );
    println!(
        "  one worker: spanner + row / postgres + row, throughput {:.2}×   replica CPU {:.2}×   machine CPU {:.2}×",
        ratio(SPANNER_ONE_WORKER, ROW_ONE_WORKER, |m| m.0),
        ratio(SPANNER_ONE_WORKER, ROW_ONE_WORKER, |m| m.1),
        ratio(SPANNER_ONE_WORKER, ROW_ONE_WORKER, |m| m.2)
    );
    println!(
        "  spanner batches (1 worker) / postgres batches (8), throughput {:.2}×   replica CPU {:.2}×   machine CPU {:.2}×",
        ratio(SPANNER_BATCHES, BATCHES, |m| m.0),
        ratio(SPANNER_BATCHES, BATCHES, |m| m.1),
        ratio(SPANNER_BATCHES, BATCHES, |m| m.2)
    );
    // One stream holds every configuration near the emulator's pace for a stream; with three
    // the emulator allows about 6,000 msg/s and the machine's CPU is what limits.
    println!(
        "  with 3 streams: batches / postgres + row, throughput  {:.2}×   replica CPU {:.2}×   machine CPU {:.2}×",
        ratio(BATCH_STREAMS, STREAMS, |m| m.0),
        ratio(BATCH_STREAMS, STREAMS, |m| m.1),
        ratio(BATCH_STREAMS, STREAMS, |m| m.2)
    );
    println!(
        "  with 3 streams: batches / memory store, throughput    {:.2}×   replica CPU {:.2}×",
        ratio(BATCH_STREAMS, MEMORY_STREAMS, |m| m.0),
        ratio(BATCH_STREAMS, MEMORY_STREAMS, |m| m.1)
    );
}
