//! What flow control holds, measured on replica processes against Google's emulator, which
//! sends a stream everything it has whatever its flow control (Pub/Sub's service does not):
//!
//! - a slow handler's memory: 50,000 messages of 1 KiB, `max_outstanding_messages` 1,000, 64
//!   handlers of 40 to 80 ms (about 1,000 a second against the emulator's 2,000): the replica's
//!   resident memory stays flat once flow control and the read-ahead are full, because what the
//!   emulator sends beyond them is given back;
//! - a fast and a slow replica on one subscription: the fast one runs the great majority, since
//!   the slow one holds no more than its limit and its read-ahead, and gives the rest back.
//!
//! Each test prints what it measured (`--nocapture`). Uses the emulator `PUBSUB_EMULATOR_HOST`
//! names (or starts one).

use leasehold_soak::{Report, env};
use leasehold_test_support::{Scratch, host, unique};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A `plain` replica process, killed when dropped.
struct Replica {
    child: Child,
    last: Arc<Mutex<Report>>,
    /// Reports it printed: it prints the first once its subscription started.
    reports: Arc<AtomicU64>,
    /// Where it notes what it handled.
    handled: std::path::PathBuf,
}

impl Replica {
    /// Starts a replica on `subscription` with `workers` handlers of `work_ms` (to `max_ms`)
    /// each and `outstanding` messages outstanding at most.
    fn start(subscription: &str, workers: u32, work_ms: (u64, u64), outstanding: u32) -> Self {
        let handled = std::env::temp_dir().join(format!("{}.handled", unique("flow")));
        let env = [
            ("PUBSUB_EMULATOR_HOST", host()),
            (env::SUBSCRIPTION, subscription.to_string()),
            (env::STORE, "plain".to_string()),
            (env::NAME, "flow".to_string()),
            (env::WORKERS, workers.to_string()),
            (env::WORK_MS, work_ms.0.to_string()),
            (env::WORK_MAX_MS, work_ms.1.to_string()),
            (env::OUTSTANDING, outstanding.to_string()),
            (env::REPORT_MS, "100".to_string()),
            (env::HANDLED, handled.display().to_string()),
        ];
        let (child, last, reports) =
            leasehold_soak::launch_counted(env!("CARGO_BIN_EXE_leasehold-replica"), &env);
        Self {
            child,
            last,
            reports,
            handled,
        }
    }

    fn report(&self) -> Report {
        *self.last.lock()
    }

    /// Its resident memory now, in bytes (`VmRSS` of `/proc/PID/status`).
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the replica runs");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in kB");
        kib * 1024
    }

    /// The `seq` of every message it handled, a line each, in order.
    fn handled(&self) -> Vec<u64> {
        std::fs::read_to_string(&self.handled)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    }

    /// SIGTERM, and wait for the clean stop.
    fn stop(&mut self) {
        leasehold_soak::terminate(&self.child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the replica did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Waits until it has reported once: its subscription started.
    async fn started(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.reports.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the replica did not start");
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.handled);
    }
}

/// `n` payloads of about `size` bytes: `{"seq":N,"pad":"xxx…"}`.
fn payloads(range: std::ops::Range<u64>, size: usize) -> impl Iterator<Item = String> {
    range.map(move |seq| {
        let head = format!(r#"{{"seq":{seq},"pad":""#);
        format!(
            "{head}{}\"}}",
            "x".repeat(size.saturating_sub(head.len() + 2))
        )
    })
}

/// How many seqs were handled more than once, across `replicas`, and how many distinct.
fn tally(replicas: &[&Replica]) -> (usize, usize) {
    let mut times: HashMap<u64, usize> = HashMap::new();
    for replica in replicas {
        for seq in replica.handled() {
            *times.entry(seq).or_default() += 1;
        }
    }
    let again = times.values().filter(|n| **n > 1).count();
    (times.len(), again)
}

const MIB: f64 = 1024.0 * 1024.0;

#[actix_rt::test]
async fn a_slow_handlers_memory_stays_flat_whatever_the_emulator_sends() {
    const MESSAGES: u64 = 50_000;
    let scratch = Scratch::new(|s| s.set_ack_deadline_seconds(10)).await;
    for chunk in 0..10 {
        let from = chunk * MESSAGES / 10;
        scratch
            .publish_all(payloads(from..from + MESSAGES / 10, 1024))
            .await;
    }
    let began = Instant::now();
    let mut replica = Replica::start(&scratch.subscription, 64, (40, 80), 1000);
    // Resident memory at 10, 25, 50, 75 and 100 % of the messages handled, and the peak.
    let marks = [10, 25, 50, 75, 100];
    let mut at_mark = Vec::new();
    let mut peak = 0;
    let mut peak_read_ahead = 0;
    let deadline = began + Duration::from_secs(300);
    loop {
        let report = replica.report();
        let rss = replica.rss();
        peak = peak.max(rss);
        peak_read_ahead = peak_read_ahead.max(report.read_ahead);
        let done = report.acked * 100 / MESSAGES;
        while at_mark.len() < marks.len() && done >= marks[at_mark.len()] {
            at_mark.push((rss, began.elapsed()));
        }
        if at_mark.len() == marks.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {MESSAGES} handled in 300 s: {report:?}",
            report.acked
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let report = replica.report();
    replica.stop();
    let (distinct, again) = tally(&[&replica]);
    let growth = at_mark[4].0 as f64 - at_mark[1].0 as f64;
    eprintln!(
        "{MESSAGES} x 1 KiB, 64 handlers of 40-80 ms, max_outstanding_messages 1000: resident \
         memory at {}; peak {:.1} MiB; growth from 25 % to the end {:.1} MiB; read ahead at \
         most {} (peak {}), given back {}, handled twice {again}",
        marks
            .iter()
            .zip(&at_mark)
            .map(|(m, (rss, at))| format!(
                "{m} % {:.1} MiB ({:.0} s)",
                *rss as f64 / MIB,
                at.as_secs_f64()
            ))
            .collect::<Vec<_>>()
            .join(", "),
        peak as f64 / MIB,
        growth / MIB,
        peak_read_ahead,
        report.peak_read_ahead,
        report.given_back,
    );
    assert_eq!(distinct as u64, MESSAGES, "every message handled");
    assert!(
        report.peak_read_ahead <= 1000,
        "the read-ahead's bound is the limit: {report:?}"
    );
    assert!(
        report.given_back > 0,
        "the emulator sent beyond flow control"
    );
    assert!(
        growth < 5.0 * MIB,
        "resident memory grew {:.1} MiB from 25 % to the end",
        growth / MIB
    );
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn a_fast_replica_runs_the_great_majority_beside_a_slow_one() {
    const MESSAGES: u64 = 4_000;
    let scratch = Scratch::new(|s| s.set_ack_deadline_seconds(10)).await;
    let mut fast = Replica::start(&scratch.subscription, 32, (2, 2), 200);
    let mut slow = Replica::start(&scratch.subscription, 8, (250, 250), 50);
    fast.started().await;
    slow.started().await;
    let published = Instant::now();
    scratch.publish_all(payloads(0..MESSAGES, 64)).await;
    let deadline = published + Duration::from_secs(180);
    let last = loop {
        let (distinct, _) = tally(&[&fast, &slow]);
        if distinct as u64 == MESSAGES {
            break published.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{distinct} of {MESSAGES} handled in 180 s: fast {:?}, slow {:?}",
            fast.report(),
            slow.report()
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    fast.stop();
    slow.stop();
    let (fast_share, slow_share) = (fast.handled().len(), slow.handled().len());
    let (_, again) = tally(&[&fast, &slow]);
    let (f, s) = (fast.report(), slow.report());
    eprintln!(
        "{MESSAGES} messages on two replicas: the fast one (32 handlers of 2 ms, limit 200) \
         handled {fast_share} ({:.1} %), the slow one (8 handlers of 250 ms, limit 50) \
         {slow_share} ({:.1} %); the last one was handled {:.1} s after publishing began; \
         handled twice: {again}; given back: fast {}, slow {}; peak read ahead: fast {}, slow {}",
        fast_share as f64 * 100.0 / MESSAGES as f64,
        slow_share as f64 * 100.0 / MESSAGES as f64,
        last.as_secs_f64(),
        f.given_back,
        s.given_back,
        f.peak_read_ahead,
        s.peak_read_ahead,
    );
    assert_eq!(again, 0, "every message handled once");
    assert!(
        fast_share as f64 >= 0.9 * MESSAGES as f64,
        "the fast replica handled {fast_share} of {MESSAGES}"
    );
    assert!(s.peak_read_ahead <= 50, "{s:?}");
    scratch.cleanup().await;
}
