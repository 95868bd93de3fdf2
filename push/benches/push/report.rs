//! The report: the table of push against pull, one row per push concurrency and per pull stream
//! count, medians [min–max] over the rounds, and each row's CPU per message divided by the pull
//! side's at each stream count.
//!
//! Uses the runs of [`sides`](crate::sides) and nothing else.

use crate::sides::pull::PullRun;
use crate::sides::push::PushRun;

/// A median with its minimum and maximum.
type Spread = (f64, f64, f64);

/// The median, minimum and maximum of `v`; `None` when it is empty.
fn median(mut v: Vec<f64>) -> Option<Spread> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

/// `median [min–max]`, or `–`.
fn cell(value: Option<Spread>, decimals: usize) -> String {
    match value {
        Some((m, lo, hi)) => format!("{m:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
        None => "–".to_string(),
    }
}

/// Prints the table: `pushes[i]` are the runs at `concurrency[i]` connections, `pulls[i]` at
/// `streams[i]` streams of `pull_messages` messages.
pub(crate) fn table(
    concurrency: &[usize],
    pushes: &[Vec<PushRun>],
    streams: &[usize],
    pulls: &[Vec<PullRun>],
    pull_messages: usize,
) {
    let pull_cpu: Vec<Option<Spread>> = pulls
        .iter()
        .map(|runs| median(runs.iter().map(|r| r.cpu_us).collect()))
        .collect();
    let mut header = "| side | msg/s | µs CPU/msg (server or consumer) | allocations/msg \
                      | load generator µs CPU/push | answers not 204"
        .to_string();
    for s in streams {
        header.push_str(&format!(" | CPU ÷ pull {s} stream(s)"));
    }
    println!("{header} |");
    println!("|{}", "---|".repeat(6 + streams.len()));
    let ratios = |cpu: Option<Spread>| -> String {
        pull_cpu
            .iter()
            .map(|p| match (cpu, p) {
                (Some((a, _, _)), Some((b, _, _))) => format!(" | {:.2}", a / b),
                _ => " | –".to_string(),
            })
            .collect()
    };
    for (c, runs) in concurrency.iter().zip(pushes) {
        let cpu = median(runs.iter().map(|r| r.cpu_us).collect());
        println!(
            "| push, {c} connection(s) | {} | {} | {} | {} | {}{} |",
            cell(median(runs.iter().map(|r| r.per_second).collect()), 0),
            cell(cpu, 1),
            cell(median(runs.iter().map(|r| r.allocations).collect()), 1),
            cell(median(runs.iter().map(|r| r.load_cpu_us).collect()), 1),
            runs.iter().map(|r| r.not_204).sum::<u64>(),
            ratios(cpu),
        );
    }
    for (s, runs) in streams.iter().zip(pulls) {
        let cpu = median(runs.iter().map(|r| r.cpu_us).collect());
        println!(
            "| pull, {s} stream(s), {pull_messages} messages | {} | {} | {} | – | –{} |",
            cell(median(runs.iter().map(|r| r.per_second).collect()), 0),
            cell(cpu, 1),
            cell(median(runs.iter().map(|r| r.allocations).collect()), 1),
            ratios(cpu),
        );
    }
}
