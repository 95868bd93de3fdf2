//! The clocks of a measurement: this process's CPU time, wall time and allocations from a start
//! ([`Clock`]) to a [`Run`], and its peak resident set.
//!
//! Uses the kernel's clocks (`libc`), `/proc/self/status` and the allocation count of
//! [`alloc`](super::alloc).

use super::alloc::allocations;
use std::time::Instant;

/// This process's CPU time (all threads, user + system) in seconds, from the kernel's
/// nanosecond accounting (`CLOCK_PROCESS_CPUTIME_ID`): a five-stream run lasts about two
/// seconds, too short for the 10 ms ticks of `/proc/self/stat`.
pub(crate) fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(ok, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// This process image's peak resident set (VmHWM in `/proc/self/status`), in KiB.
///
/// Not getrusage's `ru_maxrss`: Linux carries that over from the parent through fork and exec,
/// so a side started by this benchmark would report the benchmark's own peak (its publisher's)
/// rather than the side's.
pub(crate) fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .expect("VmHWM in /proc/self/status")
}

/// One measured run of this process's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) per_second: f64,
    pub(crate) cpu_us_per_message: f64,
    pub(crate) allocations_per_message: f64,
}

/// Where a measurement starts: CPU time, wall clock and allocations so far.
pub(crate) struct Clock {
    cpu: f64,
    began: Instant,
    allocations: u64,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Self {
            cpu: cpu_seconds(),
            began: Instant::now(),
            allocations: allocations(),
        }
    }

    /// The run, for `messages` messages since the start.
    pub(crate) fn stop(&self, messages: f64) -> Run {
        let elapsed = self.began.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let allocations = allocations() - self.allocations;
        Run {
            per_second: messages / elapsed,
            cpu_us_per_message: cpu * 1e6 / messages,
            allocations_per_message: allocations as f64 / messages,
        }
    }
}
