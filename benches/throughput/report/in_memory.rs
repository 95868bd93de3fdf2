//! The in-memory figures of the full run: the pipeline alone (single messages and batches), the
//! CPU-bound handler on one worker thread against one per core, and memory per outstanding
//! message. Each runs its measurements, interleaved, and prints its line.
//!
//! Uses the in-memory side ([`in_memory`]) and the medians of [`stats`](super::stats).

use super::stats::{median, summary};
use crate::harness::clock::Run;
use crate::sides::in_memory::{self, PIPELINE_BATCH};

/// The actor pipeline alone, `reps` runs (at least 3) each of single messages and of batches,
/// interleaved; one line for each.
pub(crate) async fn pipeline_table(reps: usize, messages: u64) {
    let (runs, batch_runs): (Vec<Run>, Vec<Run>) = {
        let (mut single, mut batches) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(3) {
            single.push(in_memory::pipeline(messages, false).await);
            batches.push(in_memory::pipeline(messages, true).await);
        }
        (single, batches)
    };
    let ((rate, lo, hi), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&runs);
    println!(
        "\npipeline alone (in-memory source, no-op handler, {messages} messages, {} runs): \
         {rate:.0} msg/s [{lo:.0}–{hi:.0}], {cpu:.2} µs CPU/msg [{cpu_lo:.2}–{cpu_hi:.2}], \
         {allocs:.1} allocations/msg (3 of them the in-memory source's own)",
        runs.len()
    );
    let ((rate, lo, hi), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&batch_runs);
    println!(
        "pipeline alone, a batch handler on batches of {PIPELINE_BATCH} (the same source, runs \
         interleaved with the above): {rate:.0} msg/s [{lo:.0}–{hi:.0}], {cpu:.2} µs CPU/msg \
         [{cpu_lo:.2}–{cpu_hi:.2}], {allocs:.1} allocations/msg"
    );
}

/// What a closed outage breaker costs: the pipeline alone without and with one, `reps` runs
/// each, interleaved, and the ratio of their medians.
pub(crate) async fn breaker_table(reps: usize, messages: u64) {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(3) {
        without.push(in_memory::pipeline_with(messages, false, false).await);
        with.push(in_memory::pipeline_with(messages, false, true).await);
    }
    let ((rate, _, _), (cpu, cpu_lo, cpu_hi), (allocs, _, _)) = summary(&without);
    let ((b_rate, _, _), (b_cpu, b_lo, b_hi), (b_allocs, _, _)) = summary(&with);
    println!(
        "\npipeline alone, without and with a closed breaker ({messages} messages, {} runs \
         each, interleaved): without {rate:.0} msg/s, {cpu:.2} µs CPU/msg [{cpu_lo:.2}–{cpu_hi:.2}], \
         {allocs:.1} allocations/msg; with {b_rate:.0} msg/s, {b_cpu:.2} µs CPU/msg \
         [{b_lo:.2}–{b_hi:.2}], {b_allocs:.1} allocations/msg: CPU/msg {:.2}×",
        without.len(),
        b_cpu / cpu
    );
}

/// One worker thread against one per core, interleaved: the CPU-bound handler's throughput.
pub(crate) async fn cpu_bound_table(reps: usize, messages: u64) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let steps = in_memory::calibrate(200);
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        one.push(in_memory::cpu_bound(1, steps, messages).await);
        all.push(in_memory::cpu_bound(cores, steps, messages).await);
    }
    let ((o, olo, ohi), _, _) = summary(&one);
    let ((a, alo, ahi), _, _) = summary(&all);
    println!(
        "
CPU-bound handler (about 200 µs of computation, {messages} messages, in-memory source, \
         median [min–max] of {reps} interleaved runs): 1 worker thread {o:.0} msg/s [{olo:.0}–{ohi:.0}], \
         {cores} worker threads (one per core) {a:.0} msg/s [{alo:.0}–{ahi:.0}]: {:.2}×",
        a / o
    );
}

/// Memory per outstanding message, 10,000 held, three runs.
pub(crate) async fn memory_table() {
    let mut per_message = Vec::new();
    for _ in 0..3 {
        per_message.push(in_memory::memory_per_message(10_000).await);
    }
    let (mem, mem_lo, mem_hi) = median(per_message);
    println!(
        "memory per outstanding message (10,000 held): {mem:.0} B [{mem_lo:.0}–{mem_hi:.0}] \
         live heap"
    );
}
