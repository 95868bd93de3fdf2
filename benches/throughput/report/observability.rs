//! The traces-on table (`--observability`): the pipeline alone with traces off, every span
//! exported, and one message in a hundred, alternating.
//!
//! Uses the traces-on children of [`harness::observability`](crate::harness::observability)
//! and the medians of [`stats`](super::stats).

use super::stats::median;
use crate::harness::observability::pipeline_cpu;

/// `runs` alternating runs of each side: traces off, every message's span exported, one
/// message in a hundred.
pub(crate) fn table(runs: usize) {
    let (mut off, mut all, mut some) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        off.push(pipeline_cpu(None));
        all.push(pipeline_cpu(Some(1.0)));
        some.push(pipeline_cpu(Some(0.01)));
    }
    let (off, off_lo, off_hi) = median(off);
    let (all, all_lo, all_hi) = median(all);
    let (some, some_lo, some_hi) = median(some);
    println!(
        "pipeline alone, 500000 messages, median [min–max] of {runs} alternating runs, \
         µs CPU per message: traces off {off:.2} [{off_lo:.2}–{off_hi:.2}]; every span \
         exported {all:.2} [{all_lo:.2}–{all_hi:.2}] ({:.2}×); trace_sample_ratio 0.01 \
         {some:.2} [{some_lo:.2}–{some_hi:.2}] ({:.2}×)",
        all / off,
        some / off
    );
}
