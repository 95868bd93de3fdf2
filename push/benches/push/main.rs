//! Pushes per second and CPU per message of the push endpoint on loopback, against the pull
//! path's CPU per message, measured side by side in one run (BENCHMARKS.md, "Push against
//! pull").
//!
//! ```text
//! cargo bench -p leasehold-push --bench push              # 5 interleaved rounds
//! cargo bench -p leasehold-push --bench push -- --quick   # 1 round, short runs: a smoke test
//! cargo bench -p leasehold-push --bench push -- --rounds 3 --seconds 5 --concurrency 1,16,64
//! cargo bench -p leasehold-push --bench push -- --pull-streams '' --concurrency 64 --seconds 20
//!                                             # pushes alone, long enough for a profiler
//! cargo bench -p leasehold-push --bench push -- --http-workers 2   # actix-web workers (default 1)
//! ```
//!
//! Only `cargo bench` runs it (it passes `--bench`): under `cargo test --benches` the binary
//! says so and returns. Needs the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, or one started
//! here). Every measured side is this binary again in a child mode, a process of its own, so
//! that its CPU is its own:
//!
//! ```text
//! push --serve --subscription NAME [--http-workers N]    # the push endpoint + a registration
//! push --pull --subscription NAME --messages N --streams K   # the pull path, as benches/throughput.rs
//! ```
//!
//! - **push**: `Push::allow_unauthenticated("/push")` bound to a registration of
//!   `Registration::raw(..).workers(64)` with a no-op handler that acks, served by actix-web on
//!   127.0.0.1. Its subscription is real, created on the emulator and read at start (its ack
//!   deadline becomes the push deadline); it is a plain pull subscription that nobody pulls and
//!   nothing is published to: the requests are Pub/Sub-shaped pushes that this benchmark sends
//!   itself. The load generator is in this process (the parent): `C` keep-alive HTTP/1.1
//!   connections, each sending one push and waiting for its answer before the next (a closed
//!   loop: C pushes outstanding at most), every push with its own message id.
//!   Its CPU is the parent's, not the server's; it is printed too.
//! - **pull**: the same registration started with `leasehold::start` on a subscription holding
//!   `N` messages of 200 bytes published before the child starts, its handler counting as it
//!   acks: the Leasehold side of benches/throughput.rs (`with_leasehold`), repeated here so that
//!   both figures come from one run.
//!
//! Each child measures its own user + system time (`CLOCK_PROCESS_CPUTIME_ID`) and allocations
//! (a counting global allocator, the same as benches/throughput.rs's) over the measured window
//! and prints one `RESULT ..` line. The push server's window is opened and closed by the parent
//! on its stdin, around the measured load (after a warm-up on the same connections); the pull
//! side's runs from just before the stream opens to the handler's `N`-th ack, which it learns of
//! by a signal (the count that reaches `N` wakes it), not by polling. The rounds run every
//! configuration once, in an order that rotates from one round to the next.
//!
//! # Layout
//!
//! This file reads the mode and runs the rounds. [`sides`] holds what is measured (the push
//! server and its load generator, the pull path); [`harness`] what the measurements stand on
//! (the command line, the counting allocator, the CPU clock, the completion signal, topics and
//! subscriptions, child processes); [`report`] the table it prints. Each imports only the ones
//! listed after it: report, sides, harness.

mod harness;
mod report;
mod sides;

use harness::args::Options;
use harness::clock::load_average;
use harness::topics::Admin;
use leasehold::emulator::EmulatorHost;
use sides::pull::{PullRun, pull_run};
use sides::push::{PushPlan, PushRun, push_run};
use std::cell::Cell;
use std::rc::Rc;

/// One configuration of a round.
#[derive(Debug, Clone, Copy)]
enum Config {
    /// The push side at this many connections.
    Push(usize),
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
    let Options {
        rounds,
        seconds,
        pull_messages,
        ref concurrency,
        ref streams,
        http_workers,
    } = options;
    let (warm_up, duration) = (options.warm_up(), options.duration());

    let emulator = EmulatorHost::from_env_or_start().expect("the Pub/Sub emulator");
    let admin = Admin::connect(&emulator.connection()).await;
    let configs: Vec<Config> = concurrency
        .iter()
        .map(|&c| Config::Push(c))
        .chain(streams.iter().map(|&s| Config::Pull(s)))
        .collect();
    println!(
        "# Push against pull ({rounds} round(s); push: {seconds} s per run after a {:.1} s \
         warm-up, concurrency {concurrency:?}; pull: {pull_messages} messages per run, \
         streams {streams:?}; {http_workers} actix-web worker thread(s); load average at start \
         {})",
        warm_up.as_secs_f64(),
        load_average()
    );
    let ids = Rc::new(Cell::new(1_000_000_000_000_000u64));
    let mut pushes: Vec<Vec<PushRun>> = vec![Vec::new(); concurrency.len()];
    let mut pulls: Vec<Vec<PullRun>> = vec![Vec::new(); streams.len()];
    for round in 0..rounds {
        for i in 0..configs.len() {
            match configs[(round + i) % configs.len()] {
                Config::Push(c) => {
                    let plan = PushPlan {
                        connections: c,
                        warm_up,
                        duration,
                        http_workers,
                        ids: &ids,
                    };
                    let run = push_run(&admin, emulator.host(), plan).await;
                    eprintln!("round {round}: push, {c} connection(s): {run:?}");
                    let at = concurrency.iter().position(|&x| x == c).unwrap();
                    pushes[at].push(run);
                }
                Config::Pull(s) => {
                    let run = pull_run(&admin, emulator.host(), pull_messages, s).await;
                    eprintln!("round {round}: pull, {s} stream(s): {run:?}");
                    let at = streams.iter().position(|&x| x == s).unwrap();
                    pulls[at].push(run);
                }
            }
        }
    }

    println!("\nload average at the end: {}\n", load_average());
    report::table(concurrency, &pushes, streams, &pulls, pull_messages);
}
