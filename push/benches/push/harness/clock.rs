//! The clocks of a measured window: this process's CPU time, wall time and allocations from a
//! start ([`Clock`]) to its `RESULT` fields, its peak resident set, and the machine's load.
//!
//! Uses the kernel's clocks (`libc`), `/proc` and the allocation count of
//! [`alloc`](super::alloc).

use super::alloc::allocations;
use std::time::Instant;

/// This process's CPU time, all threads, user + system, in seconds
/// (`CLOCK_PROCESS_CPUTIME_ID`, nanoseconds).
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

/// This process image's peak resident set (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The machine's load averages, as `uptime` prints them.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Where a measured window starts.
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

    /// `RESULT` fields for `messages` messages settled since the start.
    pub(crate) fn result(&self, messages: u64) -> String {
        let elapsed = self.began.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let allocations = allocations() - self.allocations;
        let n = messages.max(1) as f64;
        format!(
            "messages={messages} per_second={:.1} cpu_us_per_message={:.3} \
             allocations_per_message={:.2} peak_rss_kb={}",
            messages as f64 / elapsed,
            cpu * 1e6 / n,
            allocations as f64 / n,
            peak_rss_kb()
        )
    }
}
