//! The clocks of a measured window: this process's CPU time (also by thread, from `/proc`),
//! wall time, allocations and context switches from a start ([`Clock`]) to its `RESULT`
//! fields, its peak resident set, and the machine's load.
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

/// Context switches so far, voluntary and not, of every thread of this process
/// (`/proc/self/task/*/status`).
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// CPU time so far of each thread of this process, in clock ticks (`utime` + `stime` of
/// `/proc/self/task/*/stat`), keyed `name#k`: its name (`comm`, at most 15 bytes) and its rank
/// among the threads of that name in the order they were started (thread ids ascending), so
/// that the runtime's handler threads and actix-web's worker, all `actix-rt|system`, stay apart.
fn thread_ticks() -> std::collections::BTreeMap<String, u64> {
    let mut threads: Vec<(u64, String, u64)> = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Default::default();
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `tid (comm) state ...`: the name may hold spaces, so split at the last `)`.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let tid = stat[..open].trim().parse().unwrap_or(0);
        let name = stat[open + 1..close].replace([' ', ',', ':'], "_");
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let (Some(user), Some(system)) = (fields.get(11), fields.get(12)) else {
            continue;
        };
        let used = user.parse::<u64>().unwrap_or(0) + system.parse::<u64>().unwrap_or(0);
        threads.push((tid, name, used));
    }
    threads.sort();
    let mut ranks: std::collections::BTreeMap<String, usize> = Default::default();
    threads
        .into_iter()
        .map(|(_, name, used)| {
            let rank = ranks.entry(name.clone()).or_insert(0);
            *rank += 1;
            (format!("{name}#{rank}"), used)
        })
        .collect()
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
    switches: u64,
    threads: std::collections::BTreeMap<String, u64>,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Self {
            cpu: cpu_seconds(),
            began: Instant::now(),
            allocations: allocations(),
            switches: context_switches(),
            threads: thread_ticks(),
        }
    }

    /// `RESULT` fields for `messages` messages settled since the start.
    pub(crate) fn result(&self, messages: u64) -> String {
        let elapsed = self.began.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        let allocations = allocations() - self.allocations;
        let switches = context_switches().saturating_sub(self.switches);
        let n = messages.max(1) as f64;
        // Clock ticks are 10 ms here (USER_HZ 100): µs per message by thread name.
        let threads: Vec<String> = thread_ticks()
            .into_iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    t - self.threads.get(&name).copied().unwrap_or(0),
                )
            })
            .filter(|(_, t)| *t > 0)
            .map(|(name, t)| format!("{name}:{:.1}", t as f64 * 10_000.0 / n))
            .collect();
        format!(
            "messages={messages} per_second={:.1} cpu_us_per_message={:.3} \
             allocations_per_message={:.2} context_switches_per_message={:.2} peak_rss_kb={} \
             thread_cpu_us_per_message={}",
            messages as f64 / elapsed,
            cpu * 1e6 / n,
            allocations as f64 / n,
            switches as f64 / n,
            peak_rss_kb(),
            threads.join(",")
        )
    }
}
