//! A handler registered for a subscription, with its options and policies.

use crate::delivery::Delivery;
use crate::error::{DecodeError, InvalidOption};
use crate::outcome::Outcome;
use crate::progress::{MemoryStore, ProgressStore};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
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
/// The shortest liveness timeout accepted: the heartbeat is asked four times within it.
pub const MIN_LIVENESS_TIMEOUT: Duration = Duration::from_secs(1);

/// What a handler may return: an [`Outcome`], or a `Result` whose error retries the message.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::{IntoOutcome, Outcome};
/// let failed: Result<Outcome, std::io::Error> = Err(std::io::Error::other("db down"));
/// assert_eq!(failed.into_outcome(), Outcome::retry());
/// ```
pub trait IntoOutcome {
    /// Converts into the outcome that settles the message.
    fn into_outcome(self) -> Outcome;

    /// Converts for one delivery, so that a log line can name the message, and says whether
    /// the handler failed (returned an error). Implement [`into_outcome`](Self::into_outcome);
    /// this one calls it.
    #[doc(hidden)]
    fn into_outcome_for(self, _subscription: &str, _message_id: &str) -> Handled
    where
        Self: Sized,
    {
        Handled::ran(self.into_outcome())
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl<E: fmt::Display> IntoOutcome for Result<Outcome, E> {
    /// An error retries the message (nack); the error is logged at warn.
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "handler returned an error; the message is retried");
            Outcome::retry()
        })
    }

    fn into_outcome_for(self, subscription: &str, message_id: &str) -> Handled {
        match self {
            Ok(outcome) => Handled::ran(outcome),
            Err(e) => {
                tracing::warn!(%subscription, %message_id, error = %e,
                    "handler returned an error; the message is retried");
                Handled {
                    outcome: Outcome::retry(),
                    note: Note::HandlerError,
                }
            }
        }
    }
}

/// A custom decision for payloads that do not decode.
pub type DecodeFailureFn = dyn Fn(&Delivery, &DecodeError) -> Outcome + Send + Sync;

/// What happens to a message whose payload does not decode into the handler's type.
#[derive(Clone, Default)]
pub enum FailurePolicy {
    /// Drop it (ack; dead-lettered on the last attempt), logged at warn with its message id.
    #[default]
    Drop,
    /// Retry it (nack): useful while a new payload version rolls out.
    Retry,
    /// Decide per message, on a worker thread. A function that panics is logged and counted as
    /// a panic, and the message is settled by the [`PanicPolicy`]. Build it with
    /// [`FailurePolicy::custom`].
    Custom(Arc<DecodeFailureFn>),
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Drop => f.write_str("Drop"),
            Self::Retry => f.write_str("Retry"),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl FailurePolicy {
    /// A policy that decides per message with `decide`.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// use leasehold::{FailurePolicy, Outcome};
    /// // Retry the first three deliveries (a new payload version may be rolling out), then drop.
    /// let policy = FailurePolicy::custom(|delivery, _error| {
    ///     if delivery.delivery_attempt().unwrap_or(1) < 3 { Outcome::retry() } else { Outcome::drop() }
    /// });
    /// # let _ = policy;
    /// ```
    pub fn custom(
        decide: impl Fn(&Delivery, &DecodeError) -> Outcome + Send + Sync + 'static,
    ) -> Self {
        Self::Custom(Arc::new(decide))
    }

    pub(crate) fn outcome(&self, delivery: &Delivery, error: &DecodeError) -> Outcome {
        match self {
            Self::Drop => Outcome::drop(),
            Self::Retry => Outcome::retry(),
            Self::Custom(f) => f(delivery, error),
        }
    }
}

/// What happens to a message whose handler panics. The worker keeps serving either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PanicPolicy {
    /// Retry it (nack), so it is redelivered.
    #[default]
    Retry,
    /// Drop it (ack; dead-lettered on the last attempt).
    Drop,
}

impl PanicPolicy {
    pub(crate) fn outcome(self) -> Outcome {
        match self {
            Self::Retry => Outcome::retry(),
            Self::Drop => Outcome::drop(),
        }
    }
}

/// The tunables of one registration, as set on it. Each default is a named constant that says
/// why; [`Registration::validate`] checks them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// Handlers running at once.
    pub workers: usize,
    /// Flow control: messages outstanding at once, all streams together.
    pub max_outstanding_messages: usize,
    /// Flow control: payload bytes outstanding at once, all streams together.
    pub max_outstanding_bytes: usize,
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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            max_outstanding_messages: DEFAULT_MAX_OUTSTANDING_MESSAGES,
            max_outstanding_bytes: DEFAULT_MAX_OUTSTANDING_BYTES,
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

    /// Checks each option against its range and the options against each other.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        let invalid =
            |option: &'static str, problem: String| Err(InvalidOption { option, problem });
        if self.workers == 0 {
            return invalid("workers", "must be at least 1".into());
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

/// What a handler settled its message with, and what else the worker counts.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    pub(crate) outcome: Outcome,
    pub(crate) note: Note,
}

/// What the worker counts for one handled message, besides its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// The handler ran and returned an outcome.
    Ran,
    /// The handler returned an error: the message is retried.
    HandlerError,
    /// A transactional handler's transaction committed with the message's record.
    Committed,
    /// A transactional store found the message finished: settled again, the handler not run.
    Replayed,
    /// A transactional store could not begin or commit: the message is retried.
    StoreFailed,
    /// A transactional handler panicked (its transaction was rolled back): the panic policy
    /// settles the message.
    Panicked,
}

impl Handled {
    pub(crate) fn ran(outcome: Outcome) -> Self {
        Self {
            outcome,
            note: Note::Ran,
        }
    }
}

/// What starting the handler on one message gave.
pub(crate) enum Started {
    /// An async handler is running. It runs on the worker thread that started it, so it need
    /// not be `Send`.
    Running(LocalBoxFuture<'static, Handled>),
    /// A blocking handler already returned.
    Done(Handled),
    /// The payload did not decode; the delivery is given back for the failure policy.
    Undecodable(DecodeError, Delivery),
}

/// Decodes a payload and starts the handler. Called on a worker thread.
pub(crate) type ErasedHandler = Arc<dyn Fn(Bytes, Delivery) -> Started + Send + Sync>;

/// How a registration's handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerKind {
    /// Async: many handlers share each worker thread.
    Async,
    /// Blocking: each handler has a worker thread to itself.
    Blocking,
}

/// A handler registered for one subscription.
///
/// Handlers run on worker threads of their own, never on the thread that runs the
/// subscription's supervisor, leases and acks, so a slow or blocking handler delays only
/// itself. An async handler (built with [`json`](Self::json) or [`raw`](Self::raw)) shares a
/// worker thread with other handlers: it must not block. Code that blocks (a synchronous
/// database driver, heavy computation, `std::thread::sleep`) goes in a blocking registration
/// ([`blocking_json`](Self::blocking_json), [`blocking_raw`](Self::blocking_raw)), where each of
/// the `workers` handlers has a thread to itself.
///
/// ```no_run
/// # extern crate leasehold_actors as leasehold;
/// # use leasehold::{Delivery, Outcome, Registration};
/// #[derive(serde::Deserialize)]
/// struct Order { id: u64 }
///
/// async fn on_order(order: Order, delivery: Delivery) -> Outcome {
///     if order.id == 0 { delivery.drop() } else { delivery.ack() }
/// }
///
/// let registration = Registration::json("projects/p/subscriptions/orders", on_order)
///     .workers(16)
///     .max_attempts(5);
/// ```
#[derive(Clone)]
#[must_use = "a registration does nothing until it is started"]
pub struct Registration {
    pub(crate) subscription: String,
    pub(crate) options: Options,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) panic_policy: PanicPolicy,
    pub(crate) handler: ErasedHandler,
    pub(crate) kind: HandlerKind,
    pub(crate) progress: Option<Arc<dyn ProgressStore>>,
    /// Set by `transactional_json`/`transactional_raw` (progress is kept in their transactional
    /// store): asks that store whether it answers, for the health probe.
    pub(crate) store_probe: Option<StoreProbe>,
}

/// Asks a transactional store whether it answers; `None` once the store is gone.
pub(crate) type StoreProbe = Arc<
    dyn Fn() -> Option<futures::future::LocalBoxFuture<'static, Result<(), crate::StoreError>>>
        + Send
        + Sync,
>;

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("subscription", &self.subscription)
            .field("options", &self.options)
            .field("failure_policy", &self.failure_policy)
            .field("panic_policy", &self.panic_policy)
            .field("blocking", &(self.kind == HandlerKind::Blocking))
            .field("progress_store", &self.progress.is_some())
            .field("transactional", &self.store_probe.is_some())
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// An async handler of JSON payloads decoded into `T`.
    pub fn json<T, F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            Arc::new(
                move |data: Bytes, delivery| match serde_json::from_slice::<T>(&data) {
                    Ok(value) => {
                        let names = delivery.names();
                        Started::Running(
                            handler(value, delivery)
                                .map(move |out| out.into_outcome_for(&names.0, &names.1))
                                .boxed_local(),
                        )
                    }
                    Err(e) => Started::Undecodable(DecodeError::json(&e), delivery),
                },
            ),
        )
    }

    /// An async handler of raw payload bytes.
    pub fn raw<F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Bytes, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            Arc::new(move |data, delivery: Delivery| {
                let names = delivery.names();
                Started::Running(
                    handler(data, delivery)
                        .map(move |out| out.into_outcome_for(&names.0, &names.1))
                        .boxed_local(),
                )
            }),
        )
    }

    /// A blocking handler of JSON payloads decoded into `T`: each of the `workers` handlers runs
    /// on a thread of its own, so it may block (a synchronous driver, a heavy computation).
    ///
    /// ```no_run
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Delivery, Outcome, Registration};
    /// #[derive(serde::Deserialize)]
    /// struct Report { id: u64 }
    ///
    /// fn render(report: Report, delivery: Delivery) -> Outcome {
    ///     std::thread::sleep(std::time::Duration::from_secs(2)); // blocks its own thread only
    ///     delivery.ack()
    /// }
    ///
    /// let registration = Registration::blocking_json("projects/p/subscriptions/reports", render)
    ///     .workers(4);
    /// ```
    pub fn blocking_json<T, F, O>(subscription: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Blocking,
            Arc::new(
                move |data: Bytes, delivery| match serde_json::from_slice::<T>(&data) {
                    Ok(value) => {
                        let names = delivery.names();
                        Started::Done(handler(value, delivery).into_outcome_for(&names.0, &names.1))
                    }
                    Err(e) => Started::Undecodable(DecodeError::json(&e), delivery),
                },
            ),
        )
    }

    /// A blocking handler of raw payload bytes: each of the `workers` handlers runs on a thread of
    /// its own.
    pub fn blocking_raw<F, O>(subscription: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Bytes, Delivery) -> O + Send + Sync + 'static,
        O: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Blocking,
            Arc::new(move |data, delivery: Delivery| {
                let names = delivery.names();
                Started::Done(handler(data, delivery).into_outcome_for(&names.0, &names.1))
            }),
        )
    }

    pub(crate) fn new(subscription: String, kind: HandlerKind, handler: ErasedHandler) -> Self {
        Self {
            subscription,
            options: Options::default(),
            failure_policy: FailurePolicy::default(),
            panic_policy: PanicPolicy::default(),
            handler,
            kind,
            progress: Some(Arc::new(MemoryStore::default())),
            store_probe: None,
        }
    }

    /// The subscription this handler consumes.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }
    /// The options as set so far.
    pub fn options(&self) -> &Options {
        &self.options
    }
    /// Checks every option against its range and the options against each other; `start`
    /// does the same. Call it where you build the registration to fail there.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Delivery, Registration};
    /// let zero = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///     d.ack()
    /// })
    /// .workers(0);
    /// let error = zero.validate().unwrap_err();
    /// assert_eq!(error.to_string(), "workers must be at least 1");
    /// ```
    pub fn validate(&self) -> Result<(), InvalidOption> {
        if self.store_probe.is_some() && self.progress.is_some() {
            return Err(InvalidOption {
                option: "progress_store",
                problem: "a transactional registration keeps progress in its transactional store"
                    .into(),
            });
        }
        self.options.validate()
    }
    /// Handlers running at once: default [`DEFAULT_WORKERS`], at least 1. For a blocking
    /// registration, also the number of threads that run them.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Delivery, Registration};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///     d.ack()
    /// })
    /// .workers(32);
    /// registration.validate()?;
    /// # Ok(()) }
    /// ```
    pub fn workers(mut self, n: usize) -> Self {
        self.options.workers = n;
        self
    }
    /// Threads that run async handlers: default one per core. The `workers` handlers running
    /// at once are spread over them; each thread takes a message when it is free, so a thread
    /// that a handler blocks by mistake takes no more messages.
    ///
    /// `0` runs handlers on the arbiter that called `start`, beside the supervisor, the leases
    /// and the acks: a handler that blocks then stalls the whole subscription. It is meant for
    /// tests that pause tokio's clock. Blocking registrations ignore this option (they run
    /// `workers` threads), except `0`: then their handlers run one at a time, on that arbiter.
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.options.worker_threads = Some(n);
        self
    }
    /// Flow control: messages outstanding at once (received and not settled: running, waiting
    /// or held), all streams together. Default [`DEFAULT_MAX_OUTSTANDING_MESSAGES`]; 1 to
    /// [`MAX_FLOW_LIMIT`]. Enforced by Leasehold whatever the server sends; each stream also
    /// asks the server for no more than this.
    pub fn max_outstanding_messages(mut self, n: usize) -> Self {
        self.options.max_outstanding_messages = n;
        self
    }
    /// Flow control: payload bytes outstanding at once, all streams together. Default
    /// [`DEFAULT_MAX_OUTSTANDING_BYTES`]; 1 to [`MAX_FLOW_LIMIT`]. A payload larger than the
    /// limit waits until nothing else is outstanding, then runs alone.
    pub fn max_outstanding_bytes(mut self, n: usize) -> Self {
        self.options.max_outstanding_bytes = n;
        self
    }
    /// The lease budget per message, counted from receipt: default [`DEFAULT_MAX_LEASE`], at
    /// least 10 s. Past it the lease is lost (logged, counted) and Pub/Sub redelivers. When it is
    /// shorter than the default lease extension, the extension shrinks to fit.
    pub fn max_lease(mut self, d: Duration) -> Self {
        self.options.max_lease = d;
        self
    }
    /// How far each lease extension reaches: default [`DEFAULT_MAX_LEASE_EXTENSION`] (or
    /// `max_lease` when shorter); [`MIN_LEASE_EXTENSION`] to [`MAX_LEASE_EXTENSION`], like
    /// Pub/Sub's ack deadline, and at most `max_lease`. On an exactly-once subscription, one
    /// warning at start when it is shorter than [`EXACTLY_ONCE_MIN_LEASE_EXTENSION`].
    pub fn max_lease_extension(mut self, d: Duration) -> Self {
        self.options.max_lease_extension = Some(d);
        self
    }
    /// The last delivery attempt (at least 1): `drop()` on it nacks so Pub/Sub dead-letters the
    /// message. Without it, the subscription's dead-letter policy gives the limit.
    ///
    /// It only decides what `drop()` does: Pub/Sub still dead-letters a message by its own
    /// policy, whatever the outcome (a `retry()` on the policy's last attempt is dead-lettered
    /// too). Set it lower than the policy's to give up early on `drop()`, not higher.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.options.max_attempts = Some(n);
        self
    }
    /// Streaming pulls opened in parallel for this subscription: default [`DEFAULT_STREAMS`], at
    /// least 1. They share the flow-control limits and the workers.
    pub fn streams(mut self, n: usize) -> Self {
        self.options.streams = n;
        self
    }
    /// How long a stop waits for running handlers: default [`DEFAULT_DRAIN_TIMEOUT`]. Zero nacks
    /// whatever runs at once.
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.options.drain_timeout = d;
        self
    }
    /// How long `start` may take to read the subscription, retrying what can be retried (each
    /// failed attempt logged at warn): default [`DEFAULT_START_TIMEOUT`], longer than zero.
    pub fn start_timeout(mut self, d: Duration) -> Self {
        self.options.start_timeout = d;
        self
    }
    /// How often the supervisor reads the subscription (and asks the progress store) to know
    /// the connection works: default [`DEFAULT_HEALTH_PROBE_INTERVAL`], at least
    /// [`MIN_HEALTH_PROBE_INTERVAL`]. Changes are logged (connected, unreachable since,
    /// recovered, broken) and reported by `Subscription::connectivity` and `health`.
    pub fn health_probe_interval(mut self, d: Duration) -> Self {
        self.options.health_probe_interval = d;
        self
    }
    /// How long the subscription's supervisor may go without answering its heartbeat before
    /// [`Subscription::health`](crate::Subscription::health) (and the service's `/livez`) says
    /// it is not live: default [`DEFAULT_LIVENESS_TIMEOUT`], at least [`MIN_LIVENESS_TIMEOUT`].
    ///
    /// The supervisor answers a heartbeat through its mailbox a few times per timeout (at most
    /// once a second). It goes silent when its thread is blocked: a handler blocking with
    /// `worker_threads(0)`, a progress store that blocks when the health probe asks it, a bug.
    /// Meanwhile no lease is extended or settled, so restarting the process is the cure.
    pub fn liveness_timeout(mut self, d: Duration) -> Self {
        self.options.liveness_timeout = d;
        self
    }
    /// The share of messages that get a per-message span, and so a trace when spans are
    /// exported: default 1 (all), 0 to 1. A message whose publisher sampled its trace (the
    /// `googclient_traceparent` attribute's sampled flag) always gets one. Exporting a span
    /// costs several microseconds a message; sample when exporting at high rates.
    pub fn trace_sample_ratio(mut self, ratio: f64) -> Self {
        self.options.trace_sample_ratio = ratio;
        self
    }
    /// What happens to payloads that do not decode (default: drop).
    pub fn failure_policy(mut self, p: FailurePolicy) -> Self {
        self.failure_policy = p;
        self
    }
    /// Where finished messages are remembered, so that a redelivery after a failed or lost ack
    /// does not run the handler again (default: a bounded [`MemoryStore`]). See
    /// [`ProgressStore`] for what it prevents and what it cannot.
    pub fn progress_store(mut self, store: impl ProgressStore) -> Self {
        self.progress = Some(Arc::new(store));
        self
    }
    /// Runs the handler on every delivery, redeliveries of finished messages included.
    pub fn without_progress_store(mut self) -> Self {
        self.progress = None;
        self
    }
    /// What happens when the handler panics (default: retry).
    pub fn panic_policy(mut self, p: PanicPolicy) -> Self {
        self.panic_policy = p;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> Registration {
        Registration::raw(
            "projects/p/subscriptions/orders",
            |_b, d: Delivery| async move { d.ack() },
        )
    }

    #[test]
    fn lease_extension_must_be_an_ack_deadline_pub_sub_accepts() {
        let short = registration().max_lease_extension(Duration::from_secs(1));
        assert_eq!(
            short.validate().unwrap_err().to_string(),
            "max_lease_extension must be 10s to 600s, like Pub/Sub's ack deadline (got 1s)"
        );
        let long = registration().max_lease_extension(Duration::from_secs(3600));
        assert!(long.validate().is_err());
        assert!(
            registration()
                .max_lease_extension(Duration::from_secs(600))
                .max_lease(Duration::from_secs(600))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn a_short_max_lease_alone_shrinks_the_default_extension() {
        let r = registration().max_lease(Duration::from_secs(30));
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(r.options().lease_extension(), Duration::from_secs(30));
        assert_eq!(
            registration().options().lease_extension(),
            DEFAULT_MAX_LEASE_EXTENSION
        );
        // Both set, and contradicting: refused.
        let both = registration()
            .max_lease(Duration::from_secs(30))
            .max_lease_extension(Duration::from_secs(60));
        assert_eq!(both.validate().unwrap_err().option, "max_lease");
    }

    #[test]
    fn zero_workers_streams_and_limits_are_refused() {
        assert_eq!(registration().validate(), Ok(()));
        for (r, option) in [
            (registration().workers(0), "workers"),
            (registration().streams(0), "streams"),
            (
                registration().max_outstanding_messages(0),
                "max_outstanding_messages",
            ),
            (
                registration().max_outstanding_bytes(0),
                "max_outstanding_bytes",
            ),
            (registration().max_attempts(0), "max_attempts"),
            (
                registration().start_timeout(Duration::ZERO),
                "start_timeout",
            ),
        ] {
            assert_eq!(r.validate().unwrap_err().option, option);
        }
    }

    #[test]
    fn handler_errors_retry() {
        let r: Result<Outcome, String> = Err("boom".into());
        assert_eq!(r.into_outcome(), Outcome::retry());
        let r: Result<Outcome, String> = Ok(Outcome::ack());
        assert_eq!(r.into_outcome(), Outcome::ack());
    }
}
