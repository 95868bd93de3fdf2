//! The replica processes of one run, their reports, and the CPU they and the machine use. The
//! run learns that its replicas have started receiving, and that they have acked every message,
//! from a signal raised by the threads that read their report lines, not by polling.
//!
//! Uses the `leasehold-replica` binary and its report lines (`leasehold_soak::Report`), and
//! `/proc` for the CPU ticks.

use leasehold_soak::{Report, env};
use parking_lot::Mutex;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::Instant;

/// How far the replicas of a run have come, as their report lines add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Progress {
    /// No replica has reported a delivery yet.
    Connecting,
    /// Deliveries received; fewer than the run's messages acked.
    Receiving,
    /// The run's messages all acked, or more (redeliveries acked again), and as many outbox
    /// rows sent when the handler publishes through the outbox.
    Acked,
}

/// What the reading threads share: each replica's last report, the messages the run expects,
/// and the signal they raise when the total moves on to a further [`Progress`].
struct Reports {
    last: Mutex<Vec<Report>>,
    messages: u64,
    /// Outbox rows the relays must send before the run is over (0: none).
    outbox: u64,
    progress: watch::Sender<Progress>,
}

impl Reports {
    /// Every replica's last report, added up.
    fn total(&self) -> Report {
        self.last
            .lock()
            .iter()
            .fold(Report::default(), |sum, r| sum.plus(*r))
    }

    /// Replica `n` reported `report`: the signal is raised when that moves the total on (a
    /// report line every `env::REPORT_MS` per replica; a wake-up only when the progress moves).
    fn reported(&self, n: usize, report: Report) {
        self.last.lock()[n] = report;
        let total = self.total();
        let now = if total.acked >= self.messages && total.outbox_sent >= self.outbox {
            Progress::Acked
        } else if total.received > 0 {
            Progress::Receiving
        } else {
            Progress::Connecting
        };
        self.progress.send_if_modified(|progress| {
            let moved = now > *progress;
            if moved {
                *progress = now;
            }
            moved
        });
    }
}

/// The replicas of one run on one subscription.
pub(crate) struct Replicas {
    children: Vec<Child>,
    reports: Arc<Reports>,
    progress: watch::Receiver<Progress>,
}

impl Replicas {
    /// Starts `count` replicas with `env` (each named `replica-N`), which are to ack `messages`
    /// messages between them (and send as many outbox rows, when `outbox`); a thread per
    /// replica reads its report lines.
    pub(crate) fn spawn(
        count: usize,
        env: &[(&'static str, String)],
        messages: u64,
        outbox: bool,
    ) -> Self {
        let (send, progress) = watch::channel(Progress::Connecting);
        let reports = Arc::new(Reports {
            last: Mutex::new(vec![Report::default(); count]),
            messages,
            outbox: if outbox { messages } else { 0 },
            progress: send,
        });
        let children = (0..count)
            .map(|n| {
                let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-replica"))
                    .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                    .env(env::NAME, format!("replica-{n}"))
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("the replica binary runs");
                let stdout = child.stdout.take().expect("piped");
                let reports = reports.clone();
                std::thread::spawn(move || {
                    for line in std::io::BufReader::new(stdout).lines() {
                        let Ok(line) = line else { return };
                        if let Some(report) = Report::parse(&line) {
                            reports.reported(n, report);
                        }
                    }
                });
                child
            })
            .collect();
        Self {
            children,
            reports,
            progress,
        }
    }

    /// Waits, until `deadline`, for the replicas to reach `progress`; `false` when they have not
    /// by then.
    pub(crate) async fn reached(&mut self, progress: Progress, deadline: Instant) -> bool {
        tokio::time::timeout_at(deadline, self.progress.wait_for(|now| *now >= progress))
            .await
            .is_ok_and(|changed| changed.is_ok())
    }

    /// Every replica's last report, added up.
    pub(crate) fn total(&self) -> Report {
        self.reports.total()
    }

    /// The replicas' user and system CPU so far, in clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        self.children.iter().map(|c| process_ticks(c.id())).sum()
    }

    /// Asks each replica to stop cleanly, and waits for it to exit.
    pub(crate) fn stop(self) {
        for mut child in self.children {
            leasehold_soak::terminate(&child);
            let _ = child.wait();
        }
    }
}

/// Clock ticks per second.
pub(crate) fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// User and system CPU of one process, in clock ticks.
fn process_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields of the line: 12th and 13th after the name.
    field(11) + field(12)
}

/// Busy CPU of the machine (every core, idle and iowait excluded), in clock ticks.
pub(crate) fn machine_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    let f: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal
    f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
}
