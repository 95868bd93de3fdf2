//! CPU per message and pushes per second of Leasehold's push endpoint on loopback, against a
//! bare endpoint on the same HTTP stack and against the pull path, measured side by side in one
//! run (BENCHMARKS.md, "Push").
//!
//! ```text
//! cargo bench -p leasehold-push --bench push              # 5 interleaved rounds
//! cargo bench -p leasehold-push --bench push -- --quick   # 1 round, short runs: a smoke test
//! cargo bench -p leasehold-push --bench push -- --rounds 3 --seconds 5 --concurrency 1,16,64
//! cargo bench -p leasehold-push --bench push -- --sides push --pull-streams '' --concurrency 64 --seconds 20
//!                                             # pushes alone, long enough for a profiler
//! cargo bench -p leasehold-push --bench push -- --against OTHER   # another build's push side
//! cargo bench -p leasehold-push --bench push -- --http-workers 2  # actix-web workers (default 1)
//! ```
//!
//! Only `cargo bench` runs it (it passes `--bench`): under `cargo test --benches` the binary
//! says so and returns. Needs the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, or one started
//! here). Every measured side is this binary again in a child mode, a process of its own, so
//! that its CPU is its own:
//!
//! ```text
//! push --serve --subscription NAME [--jwks-url URL [--token-cache N]] [--worker-threads N] [--http-workers N]
//! push --bare --subscription NAME [--jwks-url URL] [--http-workers N]
//! push --pull --subscription NAME --messages N --streams K
//! ```
//!
//! - **The servers** (`--sides`, by default `push,push-uncached,push-inline,bare,bare-open`),
//!   each at every `--concurrency`, served by actix-web on 127.0.0.1:
//!   - `push`: Leasehold's push endpoint (`Push::new` with a `TokenCheck`) bound to a
//!     registration of `Registration::raw(..).workers(64)` with a no-op handler that acks. Its
//!     subscription is real, created on the emulator and read at start (its ack deadline
//!     becomes the push deadline); it is a plain pull subscription that nobody pulls and
//!     nothing is published to: the requests are Pub/Sub-shaped pushes that this benchmark
//!     sends itself. Every push carries the run's RS256 token, signed by this benchmark's own
//!     key (`leasehold_test_support::issuer`, served as a key set by the parent on 127.0.0.1),
//!     verified once and then taken from the cache of verified tokens, as a real push's token
//!     is (Pub/Sub reuses one for up to an hour).
//!   - `push-uncached`: the same with `with_token_cache(0)`: every push's token verified.
//!   - `push-inline`: `push` with its handlers on the supervisor's thread (`worker_threads(0)`,
//!     `--worker-threads 0` to the child): what the crossing to the handler threads costs.
//!   - `bare`: the least a correct endpoint does on the same HTTP stack, nothing of Leasehold:
//!     the token verified by Google's verifier (the one `TokenCheck` builds on) once per
//!     request, the body read, the envelope parsed, the data decoded, 204.
//!   - `bare-open`: the bare endpoint without the token: the floor.
//!   - `push-open`: Leasehold's endpoint without a token (`Push::allow_unauthenticated`), and
//!     `against`: another build's benchmark binary's `--serve` child (`--against BINARY`, whose
//!     push side took no token): with `--against`, the sides are these two and no pull runs.
//!
//!   The load generator is in this process (the parent): `C` keep-alive HTTP/1.1 connections,
//!   each sending one push and waiting for its answer before the next (a closed loop: C pushes
//!   outstanding at most), every push with its own message id. Its CPU is the parent's, not
//!   the server's; it is printed too.
//! - **pull**: the same registration started with `leasehold::start` on a subscription holding
//!   `N` messages of 200 bytes published before the child starts, its handler counting as it
//!   acks: the Leasehold side of benches/throughput.rs (`with_leasehold`), repeated here so that
//!   every figure comes from one run.
//!
//! Each child measures its own user + system time (`CLOCK_PROCESS_CPUTIME_ID`), allocations (a
//! counting global allocator, the same as benches/throughput.rs's) and context switches (all
//! its threads', from `/proc`) over the measured window and prints one `RESULT ..` line. A server's window is opened and closed by the parent on its
//! stdin, around the measured load (after one push alone and a warm-up on the same
//! connections); the pull side's runs from just before the stream opens to the handler's `N`-th
//! ack, which it learns of by a signal (the count that reaches `N` wakes it), not by polling.
//! The rounds run every configuration once, in an order that rotates from one round to the
//! next.
//!
//! # Layout
//!
//! This file reads the mode and runs the rounds. [`sides`] holds what is measured (the servers
//! and their load generator, the pull path); [`harness`] what the measurements stand on (the
//! command line, the counting allocator, the CPU clock, the completion signal, topics and
//! subscriptions, child processes); [`report`] the table it prints. Each imports only the ones
//! listed after it: report, sides, harness.

mod harness;
mod report;
mod sides;

use harness::args::{Options, Server};
use harness::clock::load_average;
use harness::topics::Admin;
use leasehold::emulator::EmulatorHost;
use leasehold_test_support::issuer::Issuer;
use report::Runs;
use sides::pull::pull_run;
use sides::run::{ServerPlan, server_run};
use std::cell::Cell;
use std::rc::Rc;

/// One configuration of a round.
#[derive(Debug, Clone, Copy)]
enum Config {
    /// A server at this many connections.
    Server(Server, usize),
    /// The pull side at this many streams.
    Pull(usize),
}

#[actix_rt::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--serve") {
        sides::push::serve(&args).await;
        return;
    }
    if args.iter().any(|a| a == "--bare") {
        sides::bare::bare(&args).await;
        return;
    }
    if args.iter().any(|a| a == "--pull") {
        sides::pull::pull(&args).await;
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not, and
    // a test run must not start an emulator and load the machine for minutes.
    if !args.iter().any(|a| a == "--bench") {
        println!("push benchmark: not run without --bench (run it with `cargo bench`)");
        return;
    }
    let options = Options::parse(&args, sides::MAX_OUTSTANDING);
    let (warm_up, duration) = (options.warm_up(), options.duration());

    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let admin = Admin::connect(&emulator.connection()).await;
    // The key set every token is verified against, for the whole run.
    let issuer = Issuer::start().await;
    let jwks_url = issuer.jwks_url();
    let configs: Vec<Config> = options
        .servers
        .iter()
        .flat_map(|&s| {
            options
                .concurrency
                .iter()
                .map(move |&c| Config::Server(s, c))
        })
        .chain(options.streams.iter().map(|&s| Config::Pull(s)))
        .collect();
    println!(
        "# Push ({} round(s); servers {:?}: {} s per run after one push alone and a {:.1} s \
         warm-up, concurrency {:?}; pull: {} messages per run, streams {:?}; {} actix-web \
         worker thread(s); load average at start {})",
        options.rounds,
        options.servers.iter().map(|s| s.name()).collect::<Vec<_>>(),
        options.seconds,
        warm_up.as_secs_f64(),
        options.concurrency,
        options.pull_messages,
        options.streams,
        options.http_workers,
        load_average()
    );
    let ids = Rc::new(Cell::new(1_000_000_000_000_000u64));
    let mut runs = Runs {
        servers: configs
            .iter()
            .filter_map(|c| match c {
                Config::Server(s, c) => Some((*s, *c, Vec::new())),
                Config::Pull(_) => None,
            })
            .collect(),
        pulls: options.streams.iter().map(|&s| (s, Vec::new())).collect(),
        pull_messages: options.pull_messages,
    };
    for round in 0..options.rounds {
        for i in 0..configs.len() {
            match configs[(round + i) % configs.len()] {
                Config::Server(server, c) => {
                    let plan = ServerPlan {
                        server,
                        connections: c,
                        warm_up,
                        duration,
                        http_workers: options.http_workers,
                        jwks_url: &jwks_url,
                        against: options.against.as_deref(),
                        ids: &ids,
                    };
                    let run = server_run(&admin, emulator.host(), plan).await;
                    eprintln!(
                        "round {round}: {}, {c} connection(s): {run:?}",
                        server.name()
                    );
                    let at = runs
                        .servers
                        .iter_mut()
                        .find(|(s, x, _)| *s == server && *x == c);
                    at.expect("a configured side").2.push(run);
                }
                Config::Pull(s) => {
                    let run = pull_run(&admin, emulator.host(), options.pull_messages, s).await;
                    eprintln!("round {round}: pull, {s} stream(s): {run:?}");
                    let at = runs.pulls.iter_mut().find(|(x, _)| *x == s);
                    at.expect("a configured stream count").1.push(run);
                }
            }
        }
    }

    println!("\nload average at the end: {}\n", load_average());
    report::report(&runs);
}
