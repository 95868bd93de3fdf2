//! Leasehold's multi-replica soak (`tests/replicas.rs`) and the replica it runs
//! (`leasehold-replica`): several processes consuming one subscription with a transactional
//! handler on PostgreSQL, killed with SIGKILL and cut off mid-run, then checked for duplicate
//! and lost effects. The same replica, with a plain handler, is what the flow-control tests
//! (`tests/flow.rs`) measure: a process's memory under a slow handler, and how replicas of
//! different speeds share a subscription.

pub mod timeline;

/// What a replica prints, one line every quarter second (see [`env::REPORT_MS`]) and once more
/// after a clean stop:
/// `stats received=.. committed=.. replayed=.. failed_acks=.. acked=.. retried=.. batches=..
/// unsettled=.. aborts=.. given_back=.. read_ahead=.. peak_read_ahead=.. outbox_sent=..
/// outbox_failures=..`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Deliveries received.
    pub received: u64,
    /// Transactions committed (messages whose effect this replica wrote).
    pub committed: u64,
    /// Redeliveries of committed messages settled without the handler.
    pub replayed: u64,
    /// Acks Pub/Sub refused (exactly-once subscriptions).
    pub failed_acks: u64,
    /// Acks sent.
    pub acked: u64,
    /// Nacks sent.
    pub retried: u64,
    /// Batches handed to a batch handler (0 for single-message handlers).
    pub batches: u64,
    /// Messages received and not settled yet: what the replica holds leases on.
    pub unsettled: u64,
    /// Transactions the database aborted (each run again or, past the store's limit, retried).
    pub aborts: u64,
    /// Deliveries given back unrun: read while flow control and the read-ahead were full.
    pub given_back: u64,
    /// Messages waiting read ahead now.
    pub read_ahead: u64,
    /// The most that ever waited read ahead at once.
    pub peak_read_ahead: u64,
    /// Outbox rows this replica's relay sent (the `*-outbox` stores).
    pub outbox_sent: u64,
    /// Its relay's failed sends (each row kept and tried again).
    pub outbox_failures: u64,
}

impl Report {
    /// A running subscription's counters now.
    pub fn of(subscription: &leasehold::Subscription) -> Self {
        Self {
            read_ahead: subscription.load().read_ahead as u64,
            ..Self::from(&subscription.stats())
        }
    }
}

impl From<&leasehold::status::StatsSnapshot> for Report {
    /// The counters of `s` (what waits read ahead now is not among them: see [`Report::of`]).
    fn from(s: &leasehold::status::StatsSnapshot) -> Self {
        Self {
            received: s.received,
            committed: s.committed,
            replayed: s.replayed,
            failed_acks: s.failed_acks,
            acked: s.acked,
            retried: s.retried,
            batches: s.batches,
            unsettled: s.unsettled(),
            aborts: s.store_aborts,
            given_back: s.given_back,
            read_ahead: 0,
            peak_read_ahead: s.peak_read_ahead,
            outbox_sent: 0,
            outbox_failures: 0,
        }
    }
}

impl Report {
    /// The line a replica prints.
    pub fn line(&self) -> String {
        format!(
            "stats received={} committed={} replayed={} failed_acks={} acked={} retried={} \
             batches={} unsettled={} aborts={} given_back={} read_ahead={} peak_read_ahead={} \
             outbox_sent={} outbox_failures={}",
            self.received,
            self.committed,
            self.replayed,
            self.failed_acks,
            self.acked,
            self.retried,
            self.batches,
            self.unsettled,
            self.aborts,
            self.given_back,
            self.read_ahead,
            self.peak_read_ahead,
            self.outbox_sent,
            self.outbox_failures
        )
    }

    /// Reads a line a replica printed; `None` for any other line.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = line.strip_prefix("stats ")?;
        let mut report = Self::default();
        for field in fields.split_whitespace() {
            let (name, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match name {
                "received" => report.received = value,
                "committed" => report.committed = value,
                "replayed" => report.replayed = value,
                "failed_acks" => report.failed_acks = value,
                "acked" => report.acked = value,
                "retried" => report.retried = value,
                "batches" => report.batches = value,
                "unsettled" => report.unsettled = value,
                "aborts" => report.aborts = value,
                "given_back" => report.given_back = value,
                "read_ahead" => report.read_ahead = value,
                "peak_read_ahead" => report.peak_read_ahead = value,
                "outbox_sent" => report.outbox_sent = value,
                "outbox_failures" => report.outbox_failures = value,
                _ => return None,
            }
        }
        Some(report)
    }

    /// Both added up.
    pub fn plus(self, other: Self) -> Self {
        Self {
            received: self.received + other.received,
            committed: self.committed + other.committed,
            replayed: self.replayed + other.replayed,
            failed_acks: self.failed_acks + other.failed_acks,
            acked: self.acked + other.acked,
            retried: self.retried + other.retried,
            batches: self.batches + other.batches,
            unsettled: self.unsettled + other.unsettled,
            aborts: self.aborts + other.aborts,
            given_back: self.given_back + other.given_back,
            read_ahead: self.read_ahead + other.read_ahead,
            peak_read_ahead: self.peak_read_ahead.max(other.peak_read_ahead),
            outbox_sent: self.outbox_sent + other.outbox_sent,
            outbox_failures: self.outbox_failures + other.outbox_failures,
        }
    }
}

/// Starts the replica `binary` with `env`, its stdout read by a thread that keeps the last
/// [`Report`] it printed.
pub fn launch(
    binary: &str,
    env: &[(&str, String)],
) -> (
    std::process::Child,
    std::sync::Arc<parking_lot::Mutex<Report>>,
) {
    let (child, last, _) = launch_counted(binary, env);
    (child, last)
}

/// [`launch`], and how many reports it printed so far (the first one says its subscription
/// started).
pub fn launch_counted(
    binary: &str,
    env: &[(&str, String)],
) -> (
    std::process::Child,
    std::sync::Arc<parking_lot::Mutex<Report>>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::io::BufRead;
    let reports = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = reports.clone();
    let mut child = std::process::Command::new(binary)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the replica binary runs");
    let last = std::sync::Arc::new(parking_lot::Mutex::new(Report::default()));
    let stdout = child.stdout.take().expect("piped");
    let reported = last.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(report) = Report::parse(&line) {
                *reported.lock() = report;
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    (child, last, reports)
}

/// Asks a replica to stop cleanly (SIGTERM: it drains, prints its last report and exits).
pub fn terminate(replica: &std::process::Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &replica.id().to_string()])
        .status();
}

/// The environment a replica reads.
pub mod env {
    /// The subscription to consume.
    pub const SUBSCRIPTION: &str = "LEASEHOLD_REPLICA_SUBSCRIPTION";
    /// The table the handler writes one row per message into.
    pub const TABLE: &str = "LEASEHOLD_REPLICA_TABLE";
    /// This replica's name, written in each row.
    pub const NAME: &str = "LEASEHOLD_REPLICA_NAME";
    /// Milliseconds each handler keeps its transaction open after its write (the `plain`
    /// handler: how long it takes).
    pub const WORK_MS: &str = "LEASEHOLD_REPLICA_WORK_MS";
    /// The `plain` handler: it takes from [`WORK_MS`] to this many milliseconds, spread evenly
    /// over the messages by their `seq` (default: [`WORK_MS`]).
    pub const WORK_MAX_MS: &str = "LEASEHOLD_REPLICA_WORK_MAX_MS";
    /// The `plain` handler: a file it appends each handled message's `seq` to, a line each.
    pub const HANDLED: &str = "LEASEHOLD_REPLICA_HANDLED";
    /// `postgres` (the default: a transactional handler on `PostgresStore`), `postgres-batch` (a
    /// transactional batch handler on `PostgresStore`, batches of up to 100 written with one
    /// INSERT each), `spanner` and `spanner-batch` (the same on `SpannerStore`, in the database
    /// [`SPANNER_DATABASE`] names, at `SPANNER_EMULATOR_HOST`; the batch's rows with one batch of
    /// DML), `postgres-outbox` and `spanner-outbox` (stage one of the outbox pipeline: the
    /// single handler's row, and a confirmation published through the transactional outbox to
    /// [`OUTBOX_TOPIC`], with a relay in the replica), `memory` (a plain handler with the
    /// in-memory progress store, writing nothing) or `plain` (a plain handler with no progress
    /// store, taking [`WORK_MS`] to [`WORK_MAX_MS`] per message, noting each one it handled in
    /// [`HANDLED`]).
    /// [`OUTSTANDING`] defaults to 64 for all but the batch handlers.
    pub const STORE: &str = "LEASEHOLD_REPLICA_STORE";
    /// The Spanner database of the `spanner` stores (`projects/P/instances/I/databases/D`).
    pub const SPANNER_DATABASE: &str = "LEASEHOLD_REPLICA_SPANNER_DATABASE";
    /// Streaming pulls the replica opens (default 1).
    pub const STREAMS: &str = "LEASEHOLD_REPLICA_STREAMS";
    /// The replica's `max_outstanding_messages` (default 64; 1000 for `postgres-batch`, so that
    /// batches can fill).
    pub const OUTSTANDING: &str = "LEASEHOLD_REPLICA_OUTSTANDING";
    /// The topic the `postgres-outbox` and `spanner-outbox` stores' handlers publish each
    /// order's confirmation to, through the transactional outbox.
    pub const OUTBOX_TOPIC: &str = "LEASEHOLD_REPLICA_OUTBOX_TOPIC";
    /// `off`: the `postgres-outbox` store's handlers do not `NOTIFY` other processes' relays
    /// (`PostgresStore::notify_relays(false)`); its own relay is woken by its commits.
    pub const OUTBOX_NOTIFY: &str = "LEASEHOLD_REPLICA_OUTBOX_NOTIFY";
    /// The emulator's `host:port` the replica's outbox relay publishes through (default:
    /// `PUBSUB_EMULATOR_HOST`): a proxy of its own, to cut the relays alone.
    pub const RELAY_PUBSUB: &str = "LEASEHOLD_REPLICA_RELAY_PUBSUB";
    /// `opener` drives each PostgreSQL connection on the thread that opened it (deadpool's own
    /// manager) instead of Leasehold's connection thread: for the benchmark's comparison.
    pub const DRIVER: &str = "LEASEHOLD_REPLICA_DRIVER";
    /// Handlers (batch handlers: batches) running at once (default 8).
    pub const WORKERS: &str = "LEASEHOLD_REPLICA_WORKERS";
    /// Milliseconds between two report lines (default 250).
    pub const REPORT_MS: &str = "LEASEHOLD_REPLICA_REPORT_MS";
    /// A file the replica appends its log to (instead of stderr), with a line when each
    /// message's span opens and closes: with `RUST_LOG=leasehold_actors::supervisor=debug`, one
    /// line per delivery received and one per delivery settled, naming the message id.
    pub const LOG: &str = "LEASEHOLD_REPLICA_LOG";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_what_it_printed() {
        let report = Report {
            received: 5,
            committed: 4,
            replayed: 1,
            failed_acks: 2,
            acked: 5,
            retried: 3,
            batches: 2,
            unsettled: 7,
            aborts: 6,
            given_back: 8,
            read_ahead: 9,
            peak_read_ahead: 10,
            outbox_sent: 11,
            outbox_failures: 12,
        };
        assert_eq!(Report::parse(&report.line()), Some(report));
        assert_eq!(Report::parse("something else"), None);
    }
}
