//! The tunables of a registration ([`Options`]), each default and limit a named constant whose
//! doc says why, and the check of every option against its range ([`Options::validate`]).

use crate::error::InvalidOption;
use crate::rules::breaker::Breaker;
use crate::rules::read_ahead::Bound;
use std::time::Duration;

/// Handlers running at once, by default. Handlers are async, so a few workers keep many
/// I/O-bound handlers busy; raise it for slow handlers. For a blocking registration it is also
/// the number of threads.
pub const DEFAULT_WORKERS: usize = 8;
/// Messages outstanding at once (running, waiting or held), by default: the official client's
/// default, which keeps memory bounded without starving the workers.
pub const DEFAULT_MAX_OUTSTANDING_MESSAGES: usize = 1000;
/// Payload bytes outstanding at once, by default: the official client's default (100 MiB).
pub const DEFAULT_MAX_OUTSTANDING_BYTES: usize = 100 * 1024 * 1024;
/// The most messages or bytes flow control counts: 2³² − 1.
pub const MAX_FLOW_LIMIT: usize = u32::MAX as usize;
/// How many times `max_outstanding_messages` may wait read ahead while the outage breaker is
/// open, by default (in bytes, `max_outstanding_bytes`, as with the breaker closed). Reading on
/// keeps what the server sends under lease instead of letting it expire and come again with an
/// attempt counted; ten times the limit lets a subscription whose server sends everything (the
/// emulator) ride out an outage of a backlog that size, and keeps memory bounded: a message that
/// waits costs its payload and about 1 KiB.
pub const DEFAULT_BREAKER_READ_AHEAD_FACTOR: usize = 10;
/// The lease budget per message, by default: the official client's default (one hour), long
/// enough for slow handlers and `retry_after` holds, short enough that a stuck handler's message
/// is redelivered the same hour.
pub const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(60 * 60);
/// How far each lease extension reaches, by default: the official client's default (60 s).
/// It is also how long a message stays invisible after its budget runs out.
pub const DEFAULT_MAX_LEASE_EXTENSION: Duration = Duration::from_secs(60);
/// Streams per subscription, by default. One stream carries what one handler pool usually needs;
/// the emulator serves about 2,000 messages a second per stream, real Pub/Sub more.
pub const DEFAULT_STREAMS: usize = 1;
/// How long a stop waits for running handlers, by default: long enough for typical handlers to
/// finish, short enough for a rolling deploy (Kubernetes sends SIGKILL 30 s after SIGTERM).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);
/// The shortest lease extension Pub/Sub accepts (its minimum ack deadline).
pub const MIN_LEASE_EXTENSION: Duration = Duration::from_secs(10);
/// The longest lease extension Pub/Sub accepts (its maximum ack deadline).
pub const MAX_LEASE_EXTENSION: Duration = Duration::from_secs(600);
/// The shortest lease extension advised on an exactly-once subscription. Pub/Sub's exactly-once
/// guide asks for long extensions so that network delays do not expire ack ids (a refused ack is
/// redelivered work); Google's Node client enforces this floor. Leasehold warns once, at start,
/// when the extension in force is shorter, and keeps it as set.
pub const EXACTLY_ONCE_MIN_LEASE_EXTENSION: Duration = Duration::from_secs(60);
/// How long `start` may take to read the subscription, retrying what can be retried, before it
/// fails with `StartError::Timeout`: short, so a wrong endpoint is reported in seconds rather
/// than after the client's own minute of retries. Outages after start are retried for as long
/// as they last.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor reads the subscription to know the connection works, by default:
/// cheap (one small RPC), and often enough for an orchestrator's probes.
pub const DEFAULT_HEALTH_PROBE_INTERVAL: Duration = Duration::from_secs(30);
/// The shortest probe interval accepted.
pub const MIN_HEALTH_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How long the supervisor may go without answering its heartbeat before the subscription is
/// not live, by default. A supervisor that only decides and sends answers within milliseconds
/// even at full load; ten seconds of silence means its thread is blocked, and every lease with
/// it. Short enough for a Kubernetes liveness probe (three failures ten seconds apart) to act
/// within a minute, long enough that a pause of the whole process (a debugger, a VM migration)
/// does not restart it.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest liveness timeout accepted: the heartbeat is asked every quarter of it.
pub const MIN_LIVENESS_TIMEOUT: Duration = Duration::from_secs(1);

/// The most messages in one batch, by default: a multi-row INSERT or a bulk request of a hundred
/// costs about one round trip instead of a hundred, and a hundred leases held for one call is
/// still little to redo when it fails.
pub const DEFAULT_MAX_BATCH_MESSAGES: usize = 100;
/// The most messages a batch may be set to hold: as many as Pub/Sub hands a pull at once.
pub const MAX_BATCH_MESSAGES: usize = 1000;
/// The most payload bytes in one batch, by default (a message larger than this is a batch of
/// its own): ten times Pub/Sub's largest message.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 100 * 1024 * 1024;
/// How long a forming batch waits for more messages after its first, by default: short against
/// a message's lease and an operator's patience, long enough to gather what arrives together.
pub const DEFAULT_MAX_BATCH_WAIT: Duration = Duration::from_millis(50);
/// The longest a batch may be set to wait: its messages' leases run meanwhile.
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(60);

/// What forms a batch, resolved from a registration's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchPolicy {
    /// At most this many messages.
    pub(crate) messages: usize,
    /// At most this many payload bytes (a larger message alone).
    pub(crate) bytes: usize,
    /// Handed out this long after its first message at the latest.
    pub(crate) wait: Duration,
}

impl BatchPolicy {
    /// How many messages may start at once with `workers` batches running: a whole batch for
    /// each, so that every worker's next batch can form while the others run.
    pub(crate) fn may_start(&self, workers: usize) -> usize {
        workers.saturating_mul(self.messages)
    }
}

/// The tunables of one registration, as set on it. Each default is a named constant that says
/// why; [`Registration::validate`](crate::Registration::validate) checks them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// Handlers running at once.
    pub workers: usize,
    /// Flow control: messages outstanding at once, all streams together.
    pub max_outstanding_messages: usize,
    /// Flow control: payload bytes outstanding at once, all streams together.
    pub max_outstanding_bytes: usize,
    /// Messages read while flow control had no room that may wait for it, all streams together;
    /// `None`: `max_outstanding_messages`.
    pub max_read_ahead_messages: Option<usize>,
    /// Their payload bytes; `None`: `max_outstanding_bytes`.
    pub max_read_ahead_bytes: Option<usize>,
    /// The lease budget per message, from receipt.
    pub max_lease: Duration,
    /// How far each lease extension reaches; `None` for the default (60 s, or `max_lease` when
    /// that is shorter).
    pub max_lease_extension: Option<Duration>,
    /// The last delivery attempt `drop()` dead-letters on; overrides the subscription's policy.
    pub max_attempts: Option<u32>,
    /// How long a stop waits for running handlers before nacking what is unsettled.
    pub drain_timeout: Duration,
    /// Streaming pulls opened in parallel (like the other clients' parallel pull count).
    pub streams: usize,
    /// Threads that run async handlers: `None` for one per core, `Some(0)` for none (handlers
    /// run on the arbiter that called `start`). Blocking registrations run `workers` threads.
    pub worker_threads: Option<usize>,
    /// How long `start` may take to read the subscription.
    pub start_timeout: Duration,
    /// How often the connection is probed (see `Subscription::connectivity`).
    pub health_probe_interval: Duration,
    /// The share of messages that get a span (and so a trace), 0 to 1.
    pub trace_sample_ratio: f64,
    /// How long the supervisor may go without answering its heartbeat before the subscription
    /// is not live.
    pub liveness_timeout: Duration,
    /// Batch registrations: the most messages in one batch; `None` for the default.
    pub max_batch_messages: Option<usize>,
    /// Batch registrations: the most payload bytes in one batch; `None` for the default.
    pub max_batch_bytes: Option<usize>,
    /// Batch registrations: how long a forming batch waits after its first message; `None`
    /// for the default.
    pub max_batch_wait: Option<Duration>,
    /// The outage breaker; `None`: off.
    pub breaker: Option<Breaker>,
    /// The attribute whose value the progress store keys a message on, instead of its message
    /// id; `None`: the message id.
    pub dedupe_on: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            max_outstanding_messages: DEFAULT_MAX_OUTSTANDING_MESSAGES,
            max_outstanding_bytes: DEFAULT_MAX_OUTSTANDING_BYTES,
            max_read_ahead_messages: None,
            max_read_ahead_bytes: None,
            max_lease: DEFAULT_MAX_LEASE,
            max_lease_extension: None,
            max_attempts: None,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            streams: DEFAULT_STREAMS,
            worker_threads: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            health_probe_interval: DEFAULT_HEALTH_PROBE_INTERVAL,
            trace_sample_ratio: 1.0,
            liveness_timeout: DEFAULT_LIVENESS_TIMEOUT,
            max_batch_messages: None,
            max_batch_bytes: None,
            max_batch_wait: None,
            breaker: None,
            dedupe_on: None,
        }
    }
}

impl Options {
    /// The lease extension in force: as set, else the default within `max_lease` (never below
    /// Pub/Sub's 10 s).
    pub fn lease_extension(&self) -> Duration {
        self.max_lease_extension.unwrap_or_else(|| {
            DEFAULT_MAX_LEASE_EXTENSION
                .min(self.max_lease)
                .max(MIN_LEASE_EXTENSION)
        })
    }

    /// What forms a batch (for a batch registration): as set, else the defaults.
    pub(crate) fn batch_policy(&self) -> BatchPolicy {
        BatchPolicy {
            messages: self
                .max_batch_messages
                .unwrap_or(DEFAULT_MAX_BATCH_MESSAGES),
            bytes: self.max_batch_bytes.unwrap_or(DEFAULT_MAX_BATCH_BYTES),
            wait: self.max_batch_wait.unwrap_or(DEFAULT_MAX_BATCH_WAIT),
        }
    }

    /// What may wait read ahead while the breaker is closed (or there is none), and while it is
    /// open: as set, else the defaults tied to the flow-control limits.
    pub(crate) fn read_ahead(&self) -> (Bound, Bound) {
        let closed = Bound {
            messages: self
                .max_read_ahead_messages
                .unwrap_or(self.max_outstanding_messages),
            bytes: self
                .max_read_ahead_bytes
                .unwrap_or(self.max_outstanding_bytes),
        };
        let breaker = self.breaker.unwrap_or_default();
        let open = Bound {
            messages: breaker.read_ahead_messages.unwrap_or(
                self.max_outstanding_messages
                    .saturating_mul(DEFAULT_BREAKER_READ_AHEAD_FACTOR),
            ),
            bytes: breaker.read_ahead_bytes.unwrap_or(closed.bytes),
        };
        (closed, open)
    }

    /// The first batch option set, if any (refused on a registration that is not a batch one).
    pub(crate) fn batch_options_set(&self) -> Option<&'static str> {
        if self.max_batch_messages.is_some() {
            Some("max_batch_messages")
        } else if self.max_batch_bytes.is_some() {
            Some("max_batch_bytes")
        } else if self.max_batch_wait.is_some() {
            Some("max_batch_wait")
        } else {
            None
        }
    }

    /// Checks each option against its range and the options against each other.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        let invalid =
            |option: &'static str, problem: String| Err(InvalidOption { option, problem });
        if let Some(n) = self.max_batch_messages
            && !(1..=MAX_BATCH_MESSAGES).contains(&n)
        {
            return invalid(
                "max_batch_messages",
                format!("must be 1 to {MAX_BATCH_MESSAGES}"),
            );
        }
        if self.max_batch_bytes == Some(0) || self.max_batch_bytes > Some(MAX_FLOW_LIMIT) {
            return invalid("max_batch_bytes", format!("must be 1 to {MAX_FLOW_LIMIT}"));
        }
        if let Some(wait) = self.max_batch_wait
            && (wait > MAX_BATCH_WAIT || wait >= self.max_lease)
        {
            return invalid(
                "max_batch_wait",
                format!(
                    "must be at most {MAX_BATCH_WAIT:?} and shorter than max_lease (a forming \
                     batch's messages hold their leases)"
                ),
            );
        }
        if let Some(attribute) = &self.dedupe_on
            && let Err(problem) = crate::rules::dedupe::check_attribute(attribute)
        {
            return invalid("dedupe_on", problem);
        }
        if self.workers == 0 {
            return invalid("workers", "must be at least 1".into());
        }
        if let Some(breaker) = &self.breaker {
            breaker.validate()?;
        }
        if self.streams == 0 {
            return invalid("streams", "must be at least 1".into());
        }
        if !(1..=MAX_FLOW_LIMIT).contains(&self.max_outstanding_messages) {
            return invalid(
                "max_outstanding_messages",
                format!("must be 1 to {MAX_FLOW_LIMIT}"),
            );
        }
        if !(1..=MAX_FLOW_LIMIT).contains(&self.max_outstanding_bytes) {
            return invalid(
                "max_outstanding_bytes",
                format!("must be 1 to {MAX_FLOW_LIMIT}"),
            );
        }
        let breaker = self.breaker.unwrap_or_default();
        for (option, value) in [
            ("max_read_ahead_messages", self.max_read_ahead_messages),
            ("max_read_ahead_bytes", self.max_read_ahead_bytes),
            ("breaker.read_ahead_messages", breaker.read_ahead_messages),
            ("breaker.read_ahead_bytes", breaker.read_ahead_bytes),
        ] {
            if value > Some(MAX_FLOW_LIMIT) {
                return invalid(option, format!("must be 0 to {MAX_FLOW_LIMIT}"));
            }
        }
        if self.max_lease < MIN_LEASE_EXTENSION {
            return invalid(
                "max_lease",
                format!("must be at least {MIN_LEASE_EXTENSION:?} (one lease extension)"),
            );
        }
        if let Some(extension) = self.max_lease_extension {
            if !(MIN_LEASE_EXTENSION..=MAX_LEASE_EXTENSION).contains(&extension) {
                return invalid(
                    "max_lease_extension",
                    format!(
                        "must be {MIN_LEASE_EXTENSION:?} to {MAX_LEASE_EXTENSION:?}, like \
                         Pub/Sub's ack deadline (got {extension:?})"
                    ),
                );
            }
            if self.max_lease < extension {
                return invalid(
                    "max_lease",
                    format!(
                        "must be at least max_lease_extension ({extension:?}): a lease is \
                         extended by max_lease_extension at a time, within max_lease"
                    ),
                );
            }
        }
        if self.max_attempts == Some(0) {
            return invalid("max_attempts", "must be at least 1".into());
        }
        if self.start_timeout.is_zero() {
            return invalid("start_timeout", "must be longer than zero".into());
        }
        if !(0.0..=1.0).contains(&self.trace_sample_ratio) {
            return invalid("trace_sample_ratio", "must be 0 to 1".into());
        }
        if self.liveness_timeout < MIN_LIVENESS_TIMEOUT {
            return invalid(
                "liveness_timeout",
                format!("must be at least {MIN_LIVENESS_TIMEOUT:?}"),
            );
        }
        if self.health_probe_interval < MIN_HEALTH_PROBE_INTERVAL {
            return invalid(
                "health_probe_interval",
                format!("must be at least {MIN_HEALTH_PROBE_INTERVAL:?}"),
            );
        }
        Ok(())
    }
}
