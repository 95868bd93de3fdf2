//! The report: one row per server side and concurrency and per pull stream count, medians
//! [min–max] over the rounds; then the comparisons the targets are about, each as the ratio of
//! the medians with the range of the same ratio round by round (the sides of one round ran one
//! after the other, so a round's ratio is the closest pair there is).
//!
//! Uses the runs of [`sides`](crate::sides) and the harness's side names; nothing else.

use crate::harness::args::Server;
use crate::sides::pull::PullRun;
use crate::sides::run::ServerRun;

/// A median with its minimum and maximum.
type Spread = (f64, f64, f64);

/// The median, minimum and maximum of `v`; `None` when it is empty.
fn median(mut v: Vec<f64>) -> Option<Spread> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

/// `median [min–max]`, or `–`.
fn cell(value: Option<Spread>, decimals: usize) -> String {
    match value {
        Some((m, lo, hi)) => format!("{m:.decimals$} [{lo:.decimals$}–{hi:.decimals$}]"),
        None => "–".to_string(),
    }
}

/// Every run of the benchmark, by side, in round order.
pub(crate) struct Runs {
    /// `(side, connections, its runs)`.
    pub(crate) servers: Vec<(Server, usize, Vec<ServerRun>)>,
    /// `(streams, its runs)`.
    pub(crate) pulls: Vec<(usize, Vec<PullRun>)>,
    pub(crate) pull_messages: usize,
}

impl Runs {
    fn server(&self, server: Server, connections: usize) -> Option<&[ServerRun]> {
        self.servers
            .iter()
            .find(|(s, c, _)| *s == server && *c == connections)
            .map(|(_, _, runs)| runs.as_slice())
    }

    /// The CPU per message of each round of `server` at `connections`.
    fn cpu(&self, server: Server, connections: usize) -> Vec<f64> {
        self.server(server, connections)
            .map(|runs| runs.iter().map(|r| r.cpu_us).collect())
            .unwrap_or_default()
    }

    /// The pull side's CPU per message at `streams`, each round.
    fn pull_cpu(&self, streams: usize) -> Vec<f64> {
        self.pulls
            .iter()
            .find(|(s, _)| *s == streams)
            .map(|(_, runs)| runs.iter().map(|r| r.cpu_us).collect())
            .unwrap_or_default()
    }
}

/// Prints the table and the comparisons.
pub(crate) fn report(runs: &Runs) {
    println!(
        "| side | connections or streams | msg/s | µs CPU/msg (server or consumer) | \
         allocations/msg | context switches/msg | load generator µs CPU/push | answers not 204 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (server, c, list) in &runs.servers {
        let of = |f: fn(&ServerRun) -> f64| median(list.iter().map(f).collect());
        println!(
            "| {} | {c} | {} | {} | {} | {} | {} | {} |",
            server.name(),
            cell(of(|r| r.per_second), 0),
            cell(of(|r| r.cpu_us), 1),
            cell(of(|r| r.allocations), 1),
            cell(of(|r| r.switches), 2),
            cell(of(|r| r.load_cpu_us), 1),
            list.iter().map(|r| r.not_204).sum::<u64>(),
        );
    }
    for (s, list) in &runs.pulls {
        let of = |f: fn(&PullRun) -> f64| median(list.iter().map(f).collect());
        println!(
            "| pull, {} messages | {s} | {} | {} | {} | – | – | – |",
            runs.pull_messages,
            cell(of(|r| r.per_second), 0),
            cell(of(|r| r.cpu_us), 1),
            cell(of(|r| r.allocations), 1),
        );
    }
    println!();
    let connections: Vec<usize> = {
        let mut c: Vec<usize> = runs.servers.iter().map(|(_, c, _)| *c).collect();
        c.dedup();
        c.sort_unstable();
        c.dedup();
        c
    };
    let pairs = [
        (Server::Push, Server::Bare, "push ÷ bare (target ≤ 1.3)"),
        (Server::PushUncached, Server::Bare, "push-uncached ÷ bare"),
        (
            Server::Push,
            Server::PushUncached,
            "push ÷ push-uncached (what a cache hit saves)",
        ),
        (
            Server::Bare,
            Server::BareOpen,
            "bare ÷ bare-open (what verifying the token costs)",
        ),
        (
            Server::PushInline,
            Server::Push,
            "push-inline ÷ push (handlers on the supervisor's thread)",
        ),
        (Server::PushOpen, Server::BareOpen, "push-open ÷ bare-open"),
        (Server::Against, Server::PushOpen, "against ÷ push-open"),
    ];
    for (a, b, what) in pairs {
        for &c in &connections {
            if let Some(line) = ratio(&runs.cpu(a, c), &runs.cpu(b, c)) {
                println!("{what}, {c} connection(s): {line}");
            }
        }
    }
    println!();
    for (server, c, list) in &runs.servers {
        if let Some(line) = threads(list) {
            println!(
                "CPU by thread, {}, {c} connection(s), µs/msg: {line}",
                server.name()
            );
        }
    }
    let pull = runs.pull_cpu(1);
    for &c in &connections {
        let (push, bare) = (runs.cpu(Server::Push, c), runs.cpu(Server::Bare, c));
        if let (Some(p), Some(b), Some(l)) = (
            median(push.clone()),
            median(bare.clone()),
            median(pull.clone()),
        ) {
            let (push_excess, bare_excess) = (p.0 - l.0, b.0 - l.0);
            let met = if push_excess <= bare_excess {
                "met"
            } else {
                "not met"
            };
            println!(
                "excess over pull at one stream ({:.1} µs), {c} connection(s): push {push_excess:+.1} \
                 µs, bare {bare_excess:+.1} µs (target: push's no more than bare's): {met}",
                l.0
            );
        }
    }
}

/// Each thread name's median CPU per message over `runs`, largest first; `None` when no run
/// counted them.
fn threads(runs: &[ServerRun]) -> Option<String> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for run in runs {
        for pair in run.threads.split(',').filter(|p| !p.is_empty()) {
            if let Some((name, us)) = pair.rsplit_once(':')
                && let Ok(us) = us.parse::<f64>()
            {
                by_name.entry(name).or_default().push(us);
            }
        }
    }
    let mut medians: Vec<(&str, f64)> = by_name
        .into_iter()
        .filter_map(|(name, mut v)| {
            // A thread idle in a round counts 0 there.
            v.resize(runs.len(), 0.0);
            Some((name, median(v)?.0))
        })
        .collect();
    medians.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown: Vec<String> = medians
        .iter()
        .filter(|(_, us)| *us >= 0.5)
        .map(|(name, us)| format!("{name} {us:.1}"))
        .collect();
    (!shown.is_empty()).then(|| shown.join(", "))
}

/// `A ÷ B` of the medians, with the range of the ratio round by round; `None` without runs.
fn ratio(a: &[f64], b: &[f64]) -> Option<String> {
    let (ma, mb) = (median(a.to_vec())?, median(b.to_vec())?);
    let rounds = median(a.iter().zip(b).map(|(a, b)| a / b).collect())?;
    Some(format!(
        "{:.2} ({:.1} ÷ {:.1} µs; round by round {:.2} [{:.2}–{:.2}])",
        ma.0 / mb.0,
        ma.0,
        mb.0,
        rounds.0,
        rounds.1,
        rounds.2
    ))
}
