//! The end-to-end table: every side that can run, each a child process on its own fresh
//! subscription, in rounds that rotate; one row per delivery type and stream count, with
//! throughput, CPU per message, peak RSS, allocations, and the ratios between the sides.
//!
//! Uses the sides' commands ([`Side`]), the rounds of [`harness::child`](crate::harness::child),
//! the subscriptions of [`harness::topics`](crate::harness::topics), and the cells of
//! [`stats`](super::stats).

use super::stats::{Spread, cell, ratio, spread};
use crate::harness::child::{Measured, Outcome, Row, rotate};
use crate::harness::topics::Admin;
use crate::sides::{Side, peers};

/// Every side on its own fresh subscription, `reps` times, in an order that rotates from one
/// repetition to the next; one table row per delivery type and stream count.
pub(crate) async fn end_to_end_table(
    admin: &Admin,
    host: &str,
    peers: &[peers::Peer],
    messages: usize,
    reps: usize,
) {
    let sides: Vec<Side> = Side::ALL
        .into_iter()
        .filter(|s| s.command(peers).is_some())
        .collect();
    println!(
        "\nend to end, {messages} messages of 200 bytes, median [min–max] of {reps} interleaved \
         runs of each side ({}), each a process of its own on a fresh subscription; CPU is the \
         side's own user + system time, peak RSS its VmHWM\n",
        sides
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| delivery | streams | plain msg/s | Leasehold msg/s | throughput Leasehold/plain \
         | Python msg/s | Node msg/s | gcloud-pubsub msg/s | plain µs CPU/msg \
         | Leasehold µs CPU/msg | Python µs CPU/msg | Node µs CPU/msg | gcloud-pubsub µs CPU/msg \
         | CPU Leasehold/plain | CPU Python/Leasehold | CPU Node/Leasehold \
         | CPU gcloud-pubsub/Leasehold | plain peak RSS MiB | Leasehold peak RSS MiB \
         | Python peak RSS MiB | Node peak RSS MiB | gcloud-pubsub peak RSS MiB \
         | RSS Python/Leasehold | RSS Node/Leasehold | RSS gcloud-pubsub/Leasehold \
         | allocations/msg plain, Leasehold | notes |"
    );
    println!("|{}", "---|".repeat(27));
    for exactly_once in [false, true] {
        for streams in [1usize, 5] {
            let row = Row {
                host,
                messages,
                streams,
                exactly_once,
            };
            let outcomes = rotate(
                admin,
                row,
                reps,
                &sides,
                |side| side.command(peers).expect("a side that can run"),
                |side| side.name().to_string(),
            )
            .await;
            // Each side's outcomes at its place in `Side::ALL` (none for a side not run).
            let mut results: [Vec<Outcome>; 5] = Default::default();
            for (side, runs) in sides.iter().zip(outcomes) {
                results[side.index()] = runs;
            }
            println!("| {} |", cells(row, &sides, &results).join(" | "));
        }
    }
}

/// Why a side's figures are missing or partial, for the notes column.
fn notes(sides: &[Side], results: &[Vec<Outcome>; 5]) -> String {
    let mut notes = Vec::new();
    for side in Side::ALL {
        let runs = &results[side.index()];
        let failed: Vec<&String> = runs.iter().filter_map(|r| r.as_ref().err()).collect();
        if !sides.contains(&side) {
            notes.push(format!(
                "{} not run (see the peer lines above)",
                side.name()
            ));
        } else if !failed.is_empty() && failed.len() == runs.len() {
            notes.push(format!(
                "{} failed in every run ({})",
                side.name(),
                failed[0]
            ));
        } else if !failed.is_empty() {
            notes.push(format!(
                "{} failed in {} of {} runs ({}): its figures are of the others",
                side.name(),
                failed.len(),
                runs.len(),
                failed[0]
            ));
        }
    }
    if notes.is_empty() {
        "–".to_string()
    } else {
        notes.join("; ")
    }
}

/// One row's cells.
fn cells(row: Row, sides: &[Side], results: &[Vec<Outcome>; 5]) -> Vec<String> {
    let of = |side: Side, figure: fn(&Measured) -> Option<f64>| -> Option<Spread> {
        spread(&results[side.index()], figure)
    };
    let rate = |s| of(s, |m| Some(m.per_second));
    let cpu = |s| of(s, |m| Some(m.cpu_us_per_message));
    let rss = |s| of(s, |m| Some(m.peak_rss_kb / 1024.0));
    let allocs = |s| of(s, |m| m.allocations_per_message);
    let allocations = match (allocs(Side::Plain), allocs(Side::Leasehold)) {
        (Some((p, _, _)), Some((l, _, _))) => format!("{p:.1}, {l:.1}"),
        _ => "–".to_string(),
    };
    vec![
        row.delivery().to_string(),
        row.streams.to_string(),
        cell(rate(Side::Plain), 0),
        cell(rate(Side::Leasehold), 0),
        ratio(rate(Side::Leasehold), rate(Side::Plain), 2),
        cell(rate(Side::Python), 0),
        cell(rate(Side::Node), 0),
        cell(rate(Side::Gcloud), 0),
        cell(cpu(Side::Plain), 1),
        cell(cpu(Side::Leasehold), 1),
        cell(cpu(Side::Python), 1),
        cell(cpu(Side::Node), 1),
        cell(cpu(Side::Gcloud), 1),
        ratio(cpu(Side::Leasehold), cpu(Side::Plain), 2),
        ratio(cpu(Side::Python), cpu(Side::Leasehold), 1),
        ratio(cpu(Side::Node), cpu(Side::Leasehold), 1),
        ratio(cpu(Side::Gcloud), cpu(Side::Leasehold), 1),
        cell(rss(Side::Plain), 1),
        cell(rss(Side::Leasehold), 1),
        cell(rss(Side::Python), 1),
        cell(rss(Side::Node), 1),
        cell(rss(Side::Gcloud), 1),
        ratio(rss(Side::Python), rss(Side::Leasehold), 1),
        ratio(rss(Side::Node), rss(Side::Leasehold), 1),
        ratio(rss(Side::Gcloud), rss(Side::Leasehold), 1),
        allocations,
        notes(sides, results),
    ]
}
