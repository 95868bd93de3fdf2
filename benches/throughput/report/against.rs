//! Binary against binary (`--against OTHER`): the plain and Leasehold sides of this build and of
//! another build of this benchmark, one table row per delivery type and stream count, with the
//! ratios that say what a change buys.
//!
//! Uses the rounds of [`harness::child`](crate::harness::child), the subscriptions of
//! [`harness::topics`](crate::harness::topics), and the cells of [`stats`](super::stats).

use super::stats::{cell, median_cell, ratio, spread};
use crate::harness::child::{Measured, Outcome, Row, rotate};
use crate::harness::topics::Admin;
use std::path::Path;

/// The plain and Leasehold sides of this build and of `other` (another build of this benchmark,
/// which must take the same `--side` child mode), each a child process on its own fresh
/// subscription, `reps` rounds in an order that rotates from one round to the next; one row per
/// delivery type and stream count. For what a change buys: one harness against another, or a
/// runtime change against its parent.
pub(crate) async fn against_binary(
    admin: &Admin,
    host: &str,
    other: &Path,
    messages: usize,
    reps: usize,
) {
    assert!(
        other.is_file(),
        "--against {}: no such file (the benchmark binary of another build, e.g. a copy of \
         target/release/deps/throughput-…)",
        other.display()
    );
    let this = std::env::current_exe().expect("this benchmark's executable");
    // (binary, side): other's plain, this plain, other's Leasehold, this Leasehold.
    let runs: [(&Path, &str); 4] = [
        (other, "plain"),
        (&this, "plain"),
        (other, "leasehold"),
        (&this, "leasehold"),
    ];
    println!(
        "binary against binary, {messages} messages of 200 bytes, median [min–max] of {reps} \
         rounds, each side a process of its own on a fresh subscription, in an order that \
         rotates:\n  A = {}\n  B = {} (this one)\n",
        other.display(),
        this.display()
    );
    println!(
        "| delivery | streams | plain µs CPU/msg A | plain B | Leasehold A | Leasehold B \
         | Leasehold/plain A | Leasehold/plain B | B/A plain | B/A Leasehold \
         | msg/s plain A, B; Leasehold A, B | allocations/msg plain A, B; Leasehold A, B | notes |"
    );
    println!("|{}", "---|".repeat(13));
    for exactly_once in [false, true] {
        for streams in [1usize, 5] {
            let row = Row {
                host,
                messages,
                streams,
                exactly_once,
            };
            let results = rotate(
                admin,
                row,
                reps,
                &runs,
                |(binary, side)| {
                    let mut command = tokio::process::Command::new(binary);
                    command.args(["--side", side]);
                    command
                },
                |(binary, side)| format!("{side} of {}", binary.display()),
            )
            .await;
            println!("| {} |", cells(row, &runs, &results, reps).join(" | "));
        }
    }
}

/// One row's cells, from the outcomes of each of `runs` in turn.
fn cells(
    row: Row,
    runs: &[(&Path, &str); 4],
    results: &[Vec<Outcome>],
    reps: usize,
) -> Vec<String> {
    let of = |at: usize, figure: fn(&Measured) -> Option<f64>| spread(&results[at], figure);
    let cpu = |at| of(at, |m| Some(m.cpu_us_per_message));
    let rate = |at| of(at, |m| Some(m.per_second));
    let allocs = |at| of(at, |m| m.allocations_per_message);
    let failures: Vec<String> = (0..runs.len())
        .filter_map(|at| {
            let failed = results[at].iter().filter(|r| r.is_err()).count();
            (failed > 0).then(|| {
                format!(
                    "{} {} failed in {failed} of {reps} runs",
                    runs[at].1,
                    if at % 2 == 0 { "A" } else { "B" }
                )
            })
        })
        .collect();
    vec![
        row.delivery().to_string(),
        row.streams.to_string(),
        cell(cpu(0), 1),
        cell(cpu(1), 1),
        cell(cpu(2), 1),
        cell(cpu(3), 1),
        ratio(cpu(2), cpu(0), 2),
        ratio(cpu(3), cpu(1), 2),
        ratio(cpu(1), cpu(0), 2),
        ratio(cpu(3), cpu(2), 2),
        (0..4)
            .map(|at| median_cell(rate(at), 0))
            .collect::<Vec<_>>()
            .join(", "),
        (0..4)
            .map(|at| median_cell(allocs(at), 1))
            .collect::<Vec<_>>()
            .join(", "),
        if failures.is_empty() {
            "–".to_string()
        } else {
            failures.join("; ")
        },
    ]
}
