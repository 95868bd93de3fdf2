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

/// A comma-separated list after `flag`, or `default`; empty items are skipped.
fn items<'a>(args: &'a [String], flag: &str, default: &'a str) -> Vec<&'a str> {
    value(args, flag)
        .unwrap_or(default)
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// A comma-separated list of numbers after `flag`, or `default`.
fn list(args: &[String], flag: &str, default: &str) -> Vec<usize> {
    items(args, flag, default)
        .into_iter()
        .map(|c| c.parse().unwrap_or_else(|_| panic!("{flag} {default}")))
        .collect()
}

/// A server side of the benchmark: what answers the pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// Leasehold's push endpoint, every push's token checked (verified once, then from the cache
    /// of verified tokens).
    Push,
    /// Leasehold's push endpoint, every push's token verified (no cache).
    PushUncached,
    /// `push` with its handlers on the supervisor's thread (`worker_threads(0)`): what the
    /// crossing to the handler threads costs.
    PushInline,
    /// Leasehold's push endpoint without a token (`Push::allow_unauthenticated`): what
    /// `--against` compares with another build, whose push side took no token.
    PushOpen,
    /// The same, served by another build's benchmark binary (`--against`).
    Against,
    /// A bare actix-web endpoint: envelope read, data decoded, the token verified by Google's
    /// verifier, 204.
    Bare,
    /// The same without the token: the floor.
    BareOpen,
}

impl Server {
    /// Its name on the command line and in the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Server::Push => "push",
            Server::PushUncached => "push-uncached",
            Server::PushInline => "push-inline",
            Server::PushOpen => "push-open",
            Server::Against => "against",
            Server::Bare => "bare",
            Server::BareOpen => "bare-open",
        }
    }

    /// Whether its pushes carry a token.
    pub(crate) fn takes_token(self) -> bool {
        matches!(
            self,
            Server::Push | Server::PushUncached | Server::PushInline | Server::Bare
        )
    }

    fn parse(name: &str) -> Self {
        [
            Server::Push,
            Server::PushUncached,
            Server::PushInline,
            Server::PushOpen,
            Server::Against,
            Server::Bare,
            Server::BareOpen,
        ]
        .into_iter()
        .find(|s| s.name() == name)
        .unwrap_or_else(|| panic!("--sides: no side {name:?}"))
    }
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
    /// `--pull-streams` (1,5; empty for none; none with `--against`): the pull runs' streams.
    pub(crate) streams: Vec<usize>,
    /// `--sides` (push,push-uncached,push-inline,bare,bare-open; with `--against`:
    /// push-open,against): the servers run at each concurrency.
    pub(crate) servers: Vec<Server>,
    /// `--against BINARY`: another build's benchmark binary, whose `--serve` child is the
    /// `against` side.
    pub(crate) against: Option<String>,
    /// `--http-workers` (1): the servers' actix-web worker threads. One by default: the
    /// figures are per message, and a second worker would take the core the load generator
    /// runs on.
    pub(crate) http_workers: usize,
}

impl Options {
    /// The parent's options in `args`; every concurrency must be at most `max_outstanding`.
    pub(crate) fn parse(args: &[String], max_outstanding: usize) -> Self {
        let quick = args.iter().any(|a| a == "--quick");
        let against = value(args, "--against").map(str::to_string);
        let (sides, streams) = match against {
            Some(_) => ("push-open,against", ""),
            None => ("push,push-uncached,push-inline,bare,bare-open", "1,5"),
        };
        let options = Self {
            rounds: number(args, "--rounds").unwrap_or(if quick { 1 } else { 5 }),
            seconds: number(args, "--seconds").unwrap_or(if quick { 1.0 } else { 5.0 }),
            pull_messages: number(args, "--pull-messages").unwrap_or(if quick {
                4_000
            } else {
                20_000
            }),
            concurrency: list(args, "--concurrency", "1,16,64"),
            streams: list(args, "--pull-streams", streams),
            servers: items(args, "--sides", sides)
                .into_iter()
                .map(Server::parse)
                .collect(),
            against,
            http_workers: number(args, "--http-workers").unwrap_or(1),
        };
        assert!(
            options
                .concurrency
                .iter()
                .all(|c| (1..=max_outstanding).contains(c)),
            "concurrency 1 to {max_outstanding}: flow control would refuse pushes (429)"
        );
        assert!(
            options.against.is_some() || !options.servers.contains(&Server::Against),
            "the against side needs --against BINARY"
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
