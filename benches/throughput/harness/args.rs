//! The command line: which mode a run of this binary is in ([`Mode`]), read from its arguments
//! (the list of them is in `main.rs`'s doc).
//!
//! Uses nothing but the standard library.

use std::path::Path;

/// What this run of the binary does; the first that applies, in this order.
#[derive(Debug)]
pub(crate) enum Mode<'a> {
    /// `--pipeline-only [--messages N] [--batch]`: the pipeline alone, for a profiler.
    PipelineOnly { messages: u64, batch: bool },
    /// `--observability`: traces exported against not, each run a child.
    Observability,
    /// `--cpu-bound`: a CPU-bound handler on one worker thread against one per core.
    CpuBound,
    /// `--memory`: memory per outstanding message, alone.
    Memory,
    /// `--breaker [--messages N]`: the pipeline alone without and with a closed breaker.
    Breaker { messages: u64 },
    /// `--against OTHER [--messages N] [--reps N]`: this build's Rust sides against another
    /// build's binary.
    Against {
        other: &'a Path,
        messages: usize,
        reps: usize,
    },
    /// `--side plain|leasehold --subscription NAME --messages N [--streams K]`: a child of an
    /// end-to-end table, one side on one subscription.
    Side(Child<'a>),
    /// `--one SIDE [K] [eo]`: one end-to-end run of one side on 60,000 messages.
    One {
        side: &'a str,
        streams: usize,
        exactly_once: bool,
    },
    /// No mode flag: the whole benchmark (`--quick`: fewer messages and repetitions;
    /// `--no-peers`: without Python, Node and gcloud-pubsub).
    Full { quick: bool, no_peers: bool },
}

/// The arguments of the child mode. (A child finds out by itself whether its subscription is
/// exactly-once: `--exactly-once` is accepted and not needed.)
#[derive(Debug)]
pub(crate) struct Child<'a> {
    pub(crate) side: &'a str,
    pub(crate) subscription: &'a str,
    pub(crate) messages: u64,
    pub(crate) streams: usize,
}

/// Whether `flag` is among `args`.
pub(crate) fn flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// The value after `flag` in `args`.
fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The number after `flag` in `args`, if there is one that parses.
fn number<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    value(args, flag).and_then(|n| n.parse().ok())
}

/// The mode `args` ask for.
pub(crate) fn mode(args: &[String]) -> Mode<'_> {
    if flag(args, "--pipeline-only") {
        return Mode::PipelineOnly {
            messages: number(args, "--messages").unwrap_or(2_000_000),
            batch: flag(args, "--batch"),
        };
    }
    if flag(args, "--observability") {
        return Mode::Observability;
    }
    if flag(args, "--cpu-bound") {
        return Mode::CpuBound;
    }
    if flag(args, "--memory") {
        return Mode::Memory;
    }
    if flag(args, "--breaker") {
        return Mode::Breaker {
            messages: number(args, "--messages").unwrap_or(500_000),
        };
    }
    if let Some(other) = value(args, "--against") {
        return Mode::Against {
            other: Path::new(other),
            messages: number(args, "--messages").unwrap_or(20_000),
            reps: number(args, "--reps").unwrap_or(5),
        };
    }
    if let Some(side) = value(args, "--side") {
        return Mode::Side(Child {
            side,
            subscription: value(args, "--subscription").expect("--subscription NAME"),
            messages: number(args, "--messages").expect("--messages N"),
            streams: number(args, "--streams").unwrap_or(1),
        });
    }
    if let Some(at) = args.iter().position(|a| a == "--one") {
        return Mode::One {
            side: args.get(at + 1).map(String::as_str).unwrap_or("leasehold"),
            streams: args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(1),
            exactly_once: args.get(at + 3).is_some_and(|a| a == "eo"),
        };
    }
    Mode::Full {
        quick: flag(args, "--quick"),
        no_peers: flag(args, "--no-peers"),
    }
}
