//! The [`Registration`] builder: a handler for a subscription, with its options and policies.
//! The options and their limits are in `rules/options.rs`, the policies in `policy.rs`, and what
//! becomes of the handler's type in `handler.rs`.

use crate::api::batch::{Batch, IntoBatchOutcome};
use crate::api::decode::Prepare;
use crate::api::delivery::Delivery;
use crate::api::handler::{self, ErasedHandler, HandlerKind, IntoOutcome};
use crate::api::policy::{FailurePolicy, PanicPolicy};
use crate::error::InvalidOption;
use crate::rules::breaker::Breaker;
use crate::rules::options::*;
use crate::store::progress::{MemoryStore, ProgressStore};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

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
/// Decoding, the progress store's lookup and record, and the failure policy run on the worker
/// threads too. Messages with one ordering key still run one at a time, in order, whichever
/// thread takes them; flow control, the progress store's rules, panics and `settle_later` hold
/// across threads.
///
/// Each setter gives its option's default and range. An option out of range is never clamped:
/// [`validate`](Self::validate) (and `start`) refuses it with an
/// [`InvalidOption`](crate::error::InvalidOption) naming it. The defaults and limits are named
/// constants in [`defaults`](crate::defaults).
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
    /// Set with `store_probe`: where the transactional runner counts its store's aborts, shared
    /// with the subscription's counters (`store_aborts`).
    pub(crate) store_aborts: Option<Arc<AtomicU64>>,
    /// The breaker's readiness check of the dependency, if one was given.
    pub(crate) readiness: Option<Readiness>,
    /// Set by the constructors that take a [`Decoder`]: what it fetches before it decodes.
    pub(crate) prepare: Option<Prepare>,
}

/// A breaker's readiness check: whether the dependency answers. Called on the pool's thread.
pub(crate) type Readiness =
    Arc<dyn Fn() -> futures::future::LocalBoxFuture<'static, bool> + Send + Sync>;

/// Asks a transactional store whether it answers; `None` once the store is gone.
pub(crate) type StoreProbe = Arc<
    dyn Fn()
            -> Option<futures::future::LocalBoxFuture<'static, Result<(), crate::error::StoreError>>>
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
            .field("own_decoder", &self.prepare.is_some())
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// An async handler of JSON payloads decoded into `T`.
    ///
    /// The handler must be `Send + Sync`; the futures it returns need not be `Send`: each is
    /// created and polled on the one worker thread that runs it, so it may hold an `Rc` or a
    /// `RefCell` across an `.await`.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Delivery, Outcome, Registration};
    /// use std::{cell::RefCell, rc::Rc};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// async fn on_order(order: Order, delivery: Delivery) -> Outcome {
    ///     let seen = Rc::new(RefCell::new(Vec::new())); // not Send, held across the .await
    ///     std::future::ready(()).await;
    ///     seen.borrow_mut().push(order.id);
    ///     delivery.ack()
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registration = Registration::json("projects/p/subscriptions/orders", on_order);
    /// registration.validate()?;
    /// # Ok(()) }
    /// ```
    pub fn json<T, F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            ErasedHandler::One(handler::one(handler::json::<T>, handler)),
        )
    }

    /// An async handler of raw payload bytes. Its futures need not be `Send`, as for
    /// [`json`](Self::json).
    pub fn raw<F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Bytes, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            ErasedHandler::One(handler::one(handler::raw, handler)),
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
            ErasedHandler::One(handler::blocking_one(handler::json::<T>, handler)),
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
            ErasedHandler::One(handler::blocking_one(handler::raw, handler)),
        )
    }

    /// An async batch handler of JSON payloads decoded into `T`: it gets several messages at
    /// once, each with its own [`Delivery`], and settles each with its own outcome
    /// ([`BatchOutcome`](crate::BatchOutcome)).
    ///
    /// A batch forms from the messages that may run (flow control, ordering keys and redeliveries
    /// hold as for single messages) and is handed out when it holds
    /// [`max_batch_messages`](Self::max_batch_messages) messages or
    /// [`max_batch_bytes`](Self::max_batch_bytes) bytes, or
    /// [`max_batch_wait`](Self::max_batch_wait) after its first message: that wait is the latency a
    /// batch adds (who waits all of it: see that setter). `workers(n)` is how many batches run at
    /// once. Every message keeps its own lease (extended while it waits in a forming batch and
    /// while the batch runs), and is settled by the same rules as a single message (the
    /// dead-letter-aware `drop()`, `retry_after`'s check, exactly-once confirmations, the progress
    /// store: a message finished before is replayed from the store and left out of the batch). A
    /// payload that does not decode goes to the failure policy alone and is left out of the batch.
    /// A message left without an outcome is retried (logged, counted among the recent failures); an
    /// `Err` retries every message of the batch; a panic settles every message by the panic policy.
    /// Messages with one ordering key come in publish order and join their key's forming batch; a
    /// key is never in two batches running at once.
    ///
    /// `retry_after` in a batch handler: why to match its refusal rather than `?` it (an `Err`
    /// retries **every** message of the batch) is on
    /// [`BatchOutcome::retry_after`](crate::BatchOutcome::retry_after); what a hold given to a
    /// message with less lease left does (through `BatchOutcome::all`), on
    /// [`BatchOutcome`](crate::BatchOutcome).
    ///
    /// Each message still gets its own outcome within an ordering key: if the handler retries
    /// one message of a key and acks the later ones, those later ones are acked, and the retried
    /// one comes back after them. To keep a key's order through a retry, retry the key's later
    /// messages of the batch too.
    ///
    /// At a stop, a forming batch is released (nacked, counted in `released`) and a running one
    /// gets the drain timeout, like a running handler.
    ///
    /// Measured: `batches` in [`stats()`](crate::Subscription::stats) and the batch-size
    /// histogram in [`histograms().batch_size`](crate::status::Histograms::batch_size)
    /// (`leasehold_batches_total` and `leasehold_batch_size` in the service's metrics). Each
    /// batch has a span, which follows from each of its messages' spans (OpenTelemetry's
    /// convention for batch processing).
    ///
    /// ```no_run
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Batch, BatchOutcome, Registration};
    /// # use std::time::Duration;
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    ///
    /// async fn on_orders(batch: Batch<Order>) -> Result<BatchOutcome, std::io::Error> {
    ///     let mut outcomes = BatchOutcome::new();
    ///     for item in &batch {
    ///         // one bulk write for the whole batch would go here
    ///         outcomes.set(&item.delivery, item.delivery.ack());
    ///     }
    ///     Ok(outcomes)
    /// }
    ///
    /// let registration = Registration::json_batch("projects/p/subscriptions/orders", on_orders)
    ///     .max_batch_messages(500)
    ///     .max_batch_wait(Duration::from_millis(200));
    /// ```
    pub fn json_batch<T, F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            ErasedHandler::Batch(handler::async_batch(
                handler::batch_decode(handler::json::<T>),
                handler,
            )),
        )
    }

    /// An async batch handler of raw payload bytes (see [`json_batch`](Self::json_batch)).
    pub fn raw_batch<F, Fut>(subscription: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: IntoBatchOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Async,
            ErasedHandler::Batch(handler::async_batch(
                handler::batch_decode(handler::raw),
                handler,
            )),
        )
    }

    /// A blocking batch handler of JSON payloads decoded into `T` (see
    /// [`json_batch`](Self::json_batch)): each of the `workers` batches running at once has a
    /// thread to itself.
    pub fn blocking_json_batch<T, F, O>(subscription: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(Batch<T>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Blocking,
            ErasedHandler::Batch(handler::blocking_batch(
                handler::batch_decode(handler::json::<T>),
                handler,
            )),
        )
    }

    /// A blocking batch handler of raw payload bytes (see [`json_batch`](Self::json_batch)).
    pub fn blocking_raw_batch<F, O>(subscription: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Batch<Bytes>) -> O + Send + Sync + 'static,
        O: IntoBatchOutcome,
    {
        Self::new(
            subscription.into(),
            HandlerKind::Blocking,
            ErasedHandler::Batch(handler::blocking_batch(
                handler::batch_decode(handler::raw),
                handler,
            )),
        )
    }

    /// Whether the handler takes batches.
    pub(crate) fn is_batch(&self) -> bool {
        matches!(self.handler, ErasedHandler::Batch(_))
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
            store_aborts: None,
            readiness: None,
            prepare: None,
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
        if !self.is_batch()
            && let Some(option) = self.options.batch_options_set()
        {
            return Err(InvalidOption {
                option,
                problem: "applies to batch registrations only (json_batch, raw_batch, \
                          blocking_json_batch, blocking_raw_batch)"
                    .into(),
            });
        }
        if self.readiness.is_some() && self.options.breaker.is_none() {
            return Err(InvalidOption {
                option: "breaker_readiness",
                problem: "needs a breaker (Registration::breaker)".into(),
            });
        }
        if self.options.dedupe_on.is_some() && self.store_probe.is_none() && self.progress.is_none()
        {
            return Err(InvalidOption {
                option: "dedupe_on",
                problem: "needs a progress store (a transactional registration's store, or \
                          Registration::progress_store): it is where the key is kept"
                    .into(),
            });
        }
        if self.store_probe.is_some() && self.progress.is_some() {
            return Err(InvalidOption {
                option: "progress_store",
                problem: "a transactional registration keeps progress in its transactional store"
                    .into(),
            });
        }
        self.options.validate()
    }
    /// Pauses the subscription while the handler's dependency is down, instead of spending
    /// delivery attempts on messages that cannot succeed: off unless set. What trips it is on
    /// [`Breaker`]. While it is open, nothing new starts (what the streams read waits, leased,
    /// within flow control, then read ahead within [`Breaker::read_ahead`]; nothing is given
    /// back; a push endpoint answers new pushes 503); a message that
    /// fails is held in the process (its lease kept and extended, no delivery attempt spent)
    /// rather than nacked; after each cooldown one message is tried (a held one; once each held
    /// one failed a try, one that waited), and its success closes the breaker: the held messages
    /// run again, in their ordering key's order, then what waited. A held or waiting message
    /// whose lease (`max_lease`) is about to run out is nacked (counted in
    /// [`StatsSnapshot::breaker_expired`](crate::status::StatsSnapshot::breaker_expired)), and a
    /// stop nacks what is held. See [`Subscription::breaker`](crate::Subscription::breaker).
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Breaker, Delivery, Registration};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///     let database_up = false;
    ///     if database_up { d.ack() } else { d.unavailable() }
    /// })
    /// .breaker(Breaker::new());
    /// registration.validate()?;
    /// # Ok(()) }
    /// ```
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.options.breaker = Some(breaker);
        self
    }
    /// A check of the handler's dependency (for example `SELECT 1`), run at the end of each
    /// breaker cooldown before a held message is tried: `false` (or no answer within 10 s) opens
    /// the breaker again for the next cooldown without spending a message. Needs
    /// [`breaker`](Self::breaker). A transactional registration (`transactional_json`, ...)
    /// without one checks its store's connection (for a `PostgresStore`, `SELECT 1`).
    pub fn breaker_readiness<F, Fut>(mut self, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + 'static,
    {
        self.readiness = Some(Arc::new(move || Box::pin(check())));
        self
    }
    /// Handlers running at once: default [`DEFAULT_WORKERS`], at least 1. Messages with the
    /// same ordering key still run one at a time, in order. For a batch registration, it is how
    /// many batches run at once; for a blocking registration, also the number of threads that
    /// run them.
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
    /// [`MAX_FLOW_LIMIT`]. Enforced by Leasehold whatever the server sends; each of `streams`
    /// streams asks the server for its share (the limit divided among them), so Pub/Sub sends
    /// no more than Leasehold runs. What the server sends beyond it waits read ahead, within
    /// [`max_read_ahead_messages`](Self::max_read_ahead_messages).
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
    /// Messages read while flow control has no room that may wait for it (their leases kept),
    /// all streams together: default `max_outstanding_messages`; 0 to [`MAX_FLOW_LIMIT`].
    ///
    /// Pub/Sub's service sends each stream no more than its share of the flow-control limits,
    /// so little is read ahead there; the emulator sends everything it has. Google's client
    /// leases a message only once it is read, so Leasehold reads on while flow control is full
    /// rather than let what was sent wait unleased and come again with an attempt counted. What
    /// is read beyond this bound is given back at once (nacked, counted in
    /// [`StatsSnapshot::given_back`](crate::status::StatsSnapshot::given_back)) so that another
    /// consumer can run it now: one slow replica does not hoard what a fast one could run.
    /// While the outage breaker is open nothing is given back: see
    /// [`Breaker::read_ahead`](crate::Breaker::read_ahead).
    ///
    /// A message that waits read ahead until near the end of its lease budget (`max_lease`) is
    /// given back then, so that it is not redelivered while it waits.
    pub fn max_read_ahead_messages(mut self, n: usize) -> Self {
        self.options.max_read_ahead_messages = Some(n);
        self
    }
    /// The payload bytes of what waits read ahead (see
    /// [`max_read_ahead_messages`](Self::max_read_ahead_messages)): default
    /// `max_outstanding_bytes`; 0 to [`MAX_FLOW_LIMIT`]. A payload larger than the bound waits
    /// when nothing else does.
    pub fn max_read_ahead_bytes(mut self, n: usize) -> Self {
        self.options.max_read_ahead_bytes = Some(n);
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
    /// warning at start when it is shorter than [`EXACTLY_ONCE_MIN_LEASE_EXTENSION`]: Pub/Sub
    /// advises long extensions there, so that network delays do not expire ack ids. The value
    /// is kept as set.
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
    ///
    /// Without it, the limit is read from the subscription's dead-letter policy once, at start;
    /// that read needs `pubsub.subscriptions.get`, and without it there is one warning and
    /// `drop()` acks. When both are given and differ, there is one warning and this one wins. A
    /// delivery without an attempt number (Pub/Sub reports it only on subscriptions with a
    /// dead-letter policy) is never on its last attempt: `drop()` acks it.
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
    /// whatever runs at once; any duration is accepted.
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.options.drain_timeout = d;
        self
    }
    /// How long `start` may take to read the subscription, retrying what can be retried (each
    /// failed attempt logged at warn): default [`DEFAULT_START_TIMEOUT`], longer than zero.
    /// Past it, `start` returns [`StartError::Timeout`](crate::StartError::Timeout).
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
    /// The supervisor answers a heartbeat through its mailbox every quarter of the timeout, and
    /// at least once a second. It goes silent when its thread is blocked: a handler blocking with
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
    /// Batch registrations: the most messages in one batch: default
    /// [`DEFAULT_MAX_BATCH_MESSAGES`], 1 to [`MAX_BATCH_MESSAGES`]. Refused (by `validate` and
    /// `start`) on a registration that is not a batch one. A batch fills only as far as flow
    /// control lets messages in: keep `max_outstanding_messages` above it.
    pub fn max_batch_messages(mut self, n: usize) -> Self {
        self.options.max_batch_messages = Some(n);
        self
    }
    /// Batch registrations: the most payload bytes in one batch: default
    /// [`DEFAULT_MAX_BATCH_BYTES`], 1 to [`MAX_FLOW_LIMIT`]. A message larger than this is a
    /// batch of its own. Refused on a registration that is not a batch one.
    pub fn max_batch_bytes(mut self, n: usize) -> Self {
        self.options.max_batch_bytes = Some(n);
        self
    }
    /// Batch registrations: how long a forming batch waits for more messages after its first:
    /// default [`DEFAULT_MAX_BATCH_WAIT`], at most [`MAX_BATCH_WAIT`] and shorter than
    /// `max_lease`; zero hands out what one turn gathered. Refused on a registration that is
    /// not a batch one.
    ///
    /// A batch is handed out before the wait is over only when it fills (`max_batch_messages`
    /// or `max_batch_bytes`): the first message of a batch waits all of it unless the batch
    /// fills first, so a message that arrives alone always does, and so does a retried message
    /// that comes back alone (after the subscription's retry backoff). That is the latency a
    /// batch adds.
    pub fn max_batch_wait(mut self, d: Duration) -> Self {
        self.options.max_batch_wait = Some(d);
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
    /// [`without_progress_store`](Self::without_progress_store) turns it off. Refused (by
    /// [`validate`](Self::validate) and `start`) on a transactional registration, whose
    /// transaction is its progress store.
    pub fn progress_store(mut self, store: impl ProgressStore) -> Self {
        self.progress = Some(Arc::new(store));
        self
    }
    /// Keys each message's progress on the value of its attribute `attribute` rather than on its
    /// message id, so that a copy of a message published twice (Pub/Sub gives each copy its own
    /// message id, even on an exactly-once subscription) finds the first one's record: it is
    /// settled with the first one's outcome and the handler does not run again (counted in
    /// [`StatsSnapshot::deduplicated`](crate::status::StatsSnapshot::deduplicated)). A copy that
    /// arrives while the first one's handler runs waits for that run. Default: off, the message
    /// id.
    ///
    /// It works with every progress store: the default [`MemoryStore`] and `RedbStore` (within
    /// what each one remembers: its capacity and time to live, on one replica), and across
    /// replicas the transactional stores' claims (`PostgresStore`, `SpannerStore`) and
    /// `SpannerProgress`; refused without a store. A record kept on a key is not cleared when
    /// Pub/Sub confirms its ack (a copy may come minutes later): it lives for the store's time to
    /// live. A message that does not carry the attribute (or carries it empty) is keyed on its
    /// message id, as without this option, and counted in
    /// [`StatsSnapshot::dedupe_fallbacks`](crate::status::StatsSnapshot::dedupe_fallbacks).
    ///
    /// The key is an attribute's value: it is never logged. A publisher through an outbox sets
    /// a stable key on every message; dedupe on it with `dedupe_on(leasehold::OUTBOX_KEY_ATTRIBUTE)`.
    ///
    /// ```
    /// # extern crate leasehold_actors as leasehold;
    /// # use leasehold::{Delivery, Registration};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registration = Registration::raw("projects/p/subscriptions/orders", |_, d: Delivery| async move {
    ///     d.ack()
    /// })
    /// .dedupe_on("event-id");
    /// registration.validate()?;
    /// # Ok(()) }
    /// ```
    pub fn dedupe_on(mut self, attribute: impl Into<String>) -> Self {
        self.options.dedupe_on = Some(attribute.into());
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
}
