//! The command line: the parent's options ([`Options`]) and the values of the child modes'
//! flags ([`value`]). The flags themselves are listed in `main.rs`'s doc.
//!
//! Uses nothing but the standard library.

use std::time::Duration;

/// The value after `flag` in `args`.
pub(crate) fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The number after `flag` in `args`, if there is one that parses.
pub(crate) fn number<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    value(args, flag).and_then(|n| n.parse().ok())
}

/// A comma-separated list of numbers after `flag`, or `default`; empty items are skipped.
fn list(args: &[String], flag: &str, default: &str) -> Vec<usize> {
    value(args, flag)
        .unwrap_or(default)
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(|c| {
            c.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{flag} {default}"))
        })
        .collect()
}

/// What the parent runs.
pub(crate) struct Options {
    /// `--rounds` (5; `--quick`: 1): every configuration once per round.
    pub(crate) rounds: usize,
    /// `--seconds` (5; `--quick`: 1): the measured pushes of one push run.
    pub(crate) seconds: f64,
    /// `--pull-messages` (20,000; `--quick`: 4,000): the messages of one pull run.
    pub(crate) pull_messages: usize,
    /// `--concurrency` (1,16,64): the push runs' connections.
    pub(crate) concurrency: Vec<usize>,
    /// `--pull-streams` (1,5; empty for none): the pull runs' streams.
    pub(crate) streams: Vec<usize>,
    /// `--http-workers` (1): the push server's actix-web worker threads. One by default: the
    /// figures are per message, and a second worker would take the core the load generator
    /// runs on.
    pub(crate) http_workers: usize,
}

impl Options {
    /// The parent's options in `args`; every concurrency must be at most `max_outstanding`.
    pub(crate) fn parse(args: &[String], max_outstanding: usize) -> Self {
        let quick = args.iter().any(|a| a == "--quick");
        let options = Self {
            rounds: number(args, "--rounds").unwrap_or(if quick { 1 } else { 5 }),
            seconds: number(args, "--seconds").unwrap_or(if quick { 1.0 } else { 5.0 }),
            pull_messages: number(args, "--pull-messages").unwrap_or(if quick {
                4_000
            } else {
                20_000
            }),
            concurrency: list(args, "--concurrency", "1,16,64"),
            streams: list(args, "--pull-streams", "1,5"),
            http_workers: number(args, "--http-workers").unwrap_or(1),
        };
        assert!(
            options
                .concurrency
                .iter()
                .all(|c| (1..=max_outstanding).contains(c)),
            "concurrency 1 to {max_outstanding}: flow control would refuse pushes (429)"
        );
        options
    }

    /// The measured pushes of one push run.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    /// The warm-up before them, on the same connections: a fifth of it, at least 0.5 s.
    pub(crate) fn warm_up(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / 5.0).max(0.5))
    }
}
