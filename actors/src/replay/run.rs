//! A replay's life: the checks before anything is taken, the registration started on the
//! dead-letter subscription through the replay's connector, the driver that ends the run (idle,
//! at its maximum, cancelled) with a stop, and the [`Replay`] handle with its progress.

use crate::api::registration::Registration;
use crate::error::{ReadError, ReplayError, StartError};
use crate::replay::candidate::Candidate;
use crate::replay::rules::ReplayOptions;
use crate::replay::source::{ReplayConnector, RunState};
use crate::rules::supervision::validate_subscription_name;
use crate::source::Connector;
use crate::status::shared::State;
use crate::supervisor::entry::start;
use crate::supervisor::subscription::Subscription;
use futures::channel::{mpsc, oneshot};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the driver looks whether the run is over.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Replays `registration`'s dead letters: runs its handler, with its options, policies and
/// progress store, over `from`, a subscription on the dead-letter topic of
/// `registration.subscription()`. What the handler acks or drops is acked on `from`, gone for
/// good; what it retries (`retry()`, `retry_after`, an `Err`, a panic) is nacked there, counted
/// as still failing and not taken again in this run. Nothing is published anywhere: the
/// topic's other subscriptions never see a replayed message again.
///
/// Checks first, taking nothing when any fails: the options, that the registration's
/// subscription has a dead-letter policy, that `from` exists and is on its dead-letter topic.
/// The run ends once nothing taken is still running and either `max` messages were taken or no
/// message it would take arrived for the `idle` time; or when [`Replay::cancel`] is called.
/// Ending is a [`Subscription::stop`]: running handlers finish, what was not started is nacked.
///
/// The dead-letter copy of a message has a message id of its own, so the progress store (and a
/// transactional store's claim) knows it by `from` and that id: two replays of `from` at once,
/// or a replay run again after a crash, do a message's work once; the work its original did on
/// the source subscription is not known to them.
pub async fn replay(
    mut registration: Registration,
    from: impl Into<String>,
    options: ReplayOptions,
    connector: Rc<dyn Connector>,
) -> Result<Replay, ReplayError> {
    let from = from.into();
    options.validate().map_err(ReplayError::InvalidOption)?;
    for name in [&registration.subscription, &from] {
        validate_subscription_name(name).map_err(ReplayError::Start)?;
    }
    let source_subscription = registration.subscription.clone();
    let read = |subscription: &str, cause: ReadError| ReplayError::Read {
        subscription: subscription.to_owned(),
        cause,
    };
    let source = connector
        .read_subscription(&source_subscription)
        .await
        .map_err(|e| match e {
            ReadError::NotFound(cause) => ReplayError::Start(StartError::NotFound {
                subscription: source_subscription.clone(),
                cause,
            }),
            e => read(&source_subscription, e),
        })?;
    let Some(dead_letter_topic) = source.dead_letter_topic else {
        return Err(ReplayError::NoDeadLetterPolicy {
            subscription: source_subscription,
        });
    };
    let target = match connector.read_subscription(&from).await {
        Ok(info) => info,
        Err(ReadError::NotFound(_)) => {
            return Err(ReplayError::DeadLetterSubscriptionNotFound {
                subscription: from,
                dead_letter_topic,
            });
        }
        Err(e) => return Err(read(&from, e)),
    };
    if let Some(topic) = target.topic
        && topic != dead_letter_topic
    {
        return Err(ReplayError::NotOnDeadLetterTopic {
            subscription: from,
            topic,
            dead_letter_topic,
            source_subscription,
        });
    }

    let (listed, candidates) = if options.dry_run {
        let (tx, rx) = mpsc::unbounded();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let run = Arc::new(RunState::new(
        options.filter.clone(),
        options.rate,
        options.max,
        options.dry_run,
        listed,
    ));
    registration.subscription = from.clone();
    let connector: Rc<dyn Connector> = Rc::new(ReplayConnector {
        inner: connector,
        run: run.clone(),
    });
    let subscription = start(registration, connector)
        .await
        .map_err(ReplayError::Start)?;
    tracing::info!(
        subscription = %source_subscription,
        from = %from,
        dry_run = options.dry_run,
        rate = ?options.rate,
        max = ?options.max,
        filtered = !options.filter.is_empty(),
        "replay started"
    );
    let cancel = CancellationToken::new();
    let (done, finished) = oneshot::channel();
    actix::spawn(drive(
        subscription.clone(),
        run.clone(),
        options.idle,
        cancel.clone(),
        done,
    ));
    Ok(Replay {
        subscription,
        run,
        cancel,
        finished,
        candidates,
        source_subscription,
        from,
    })
}

/// Ends the run when it is over or cancelled, with a stop, and reports the end.
async fn drive(
    subscription: Subscription,
    run: Arc<RunState>,
    idle: Duration,
    cancel: CancellationToken,
    done: oneshot::Sender<ReplayProgress>,
) {
    let mut check = tokio::time::interval(CHECK_EVERY);
    let cancelled = loop {
        tokio::select! {
            _ = cancel.cancelled() => break true,
            _ = check.tick() => {}
        }
        if matches!(subscription.state(), State::Failed(_) | State::Stopped) {
            break false;
        }
        let running = progress(&subscription, &run, false).running;
        let now = tokio::time::Instant::now().into_std();
        if run.ledger.lock().over(running, idle, now) {
            break false;
        }
    };
    run.ledger.lock().close();
    subscription.stop().await;
    run.end_listing();
    let end = progress(&subscription, &run, cancelled);
    tracing::info!(
        replayed = end.replayed,
        still_failing = end.still_failing,
        filtered = end.filtered,
        listed = end.listed,
        left = end.left(),
        cancelled,
        "replay ended"
    );
    let _ = done.send(end);
}

fn progress(subscription: &Subscription, run: &RunState, cancelled: bool) -> ReplayProgress {
    let admitted = run.counts();
    let stats = subscription.stats();
    // Taken but not handed to the runtime yet: waiting for its slot (the rate).
    let waiting = if run.dry_run {
        0
    } else {
        admitted.taken.saturating_sub(stats.received)
    };
    // Once the consumer stopped, a message that waited for its slot was nacked with its stream:
    // released, like one no worker had started.
    let stopped = matches!(subscription.state(), State::Stopped);
    let (running, unrun) = if stopped {
        (stats.received.saturating_sub(stats.settled()), waiting)
    } else {
        (stats.received.saturating_sub(stats.settled()) + waiting, 0)
    };
    let listed = if run.dry_run { admitted.taken } else { 0 };
    ReplayProgress {
        replayed: stats.acked + stats.dropped,
        still_failing: stats.retried + stats.dead_lettered,
        released: stats.released + unrun,
        filtered: admitted.filtered,
        not_taken: admitted.not_taken,
        listed,
        running,
        redelivered: admitted.again,
        failed_acks: stats.failed_acks,
        cancelled,
    }
}

/// Where a replay is, or how it ended. Counts are of distinct messages unless said otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayProgress {
    /// Acked (or dropped) by the handler: gone from the dead-letter subscription.
    pub replayed: u64,
    /// Retried by the handler (`retry()`, `retry_after`, an `Err`, a panic): left on the
    /// dead-letter subscription, not taken again in this run.
    pub still_failing: u64,
    /// Taken but never run: the run was cancelled before a worker was free. Left there.
    pub released: u64,
    /// Left out by the filter. Left there.
    pub filtered: u64,
    /// Delivered after the maximum was reached or once the run was ending. Left there.
    pub not_taken: u64,
    /// Listed by a dry run. Left there.
    pub listed: u64,
    /// Taken and not settled yet (in a handler, waiting for a worker or a `retry_after`).
    pub running: u64,
    /// Deliveries (not messages) of a message this run had already decided, nacked at once.
    pub redelivered: u64,
    /// Acks or nacks Pub/Sub refused (exactly-once): such a message is delivered again later.
    pub failed_acks: u64,
    /// The run was cancelled.
    pub cancelled: bool,
}

impl ReplayProgress {
    /// What this run saw and left on the dead-letter subscription: still failing, released,
    /// filtered, not taken and listed. Messages it never saw (after a maximum or a cancel)
    /// are there too, uncounted: Pub/Sub does not tell how many a subscription holds.
    pub fn left(&self) -> u64 {
        self.still_failing + self.released + self.filtered + self.not_taken + self.listed
    }
}

/// A replay running: its progress, its cancel, its end.
#[must_use = "a replay runs until it ends; keep the handle to see it end"]
pub struct Replay {
    subscription: Subscription,
    run: Arc<RunState>,
    cancel: CancellationToken,
    finished: oneshot::Receiver<ReplayProgress>,
    candidates: Option<mpsc::UnboundedReceiver<Candidate>>,
    source_subscription: String,
    from: String,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("subscription", &self.source_subscription)
            .field("from", &self.from)
            .field("progress", &self.progress())
            .finish_non_exhaustive()
    }
}

/// Reads a running replay's progress from any thread (a status page, a metrics scrape).
#[derive(Clone)]
pub struct ReplayWatch {
    subscription: Subscription,
    run: Arc<RunState>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for ReplayWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayWatch")
            .field("progress", &self.progress())
            .finish()
    }
}

impl ReplayWatch {
    /// Where the run is.
    pub fn progress(&self) -> ReplayProgress {
        progress(&self.subscription, &self.run, self.cancel.is_cancelled())
    }

    /// [`Replay::cancel`], from anywhere.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Whether this is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.run.dry_run
    }

    /// Whether the run is over (its consumer stopped).
    pub fn is_over(&self) -> bool {
        matches!(self.subscription.state(), State::Stopped)
    }
}

impl Replay {
    /// A handle that reads this run's progress from any thread.
    pub fn watch(&self) -> ReplayWatch {
        ReplayWatch {
            subscription: self.subscription.clone(),
            run: self.run.clone(),
            cancel: self.cancel.clone(),
        }
    }

    /// Where the run is.
    pub fn progress(&self) -> ReplayProgress {
        progress(&self.subscription, &self.run, self.cancel.is_cancelled())
    }

    /// The consumer running the handler on the dead-letter subscription: its counters, load
    /// and health, as for any subscription.
    pub fn consumer(&self) -> &Subscription {
        &self.subscription
    }

    /// The registration's subscription, whose dead letters these are.
    pub fn source_subscription(&self) -> &str {
        &self.source_subscription
    }

    /// The dead-letter subscription the run takes from.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// Stops taking messages; running handlers finish (within the registration's drain
    /// timeout) and settle; what waits is nacked. [`finished`](Self::finished) then reports.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A dry run's candidates, as they are listed (once: `None` after the first call, and for
    /// a run that is not dry). The stream ends with the run.
    pub fn candidates(&mut self) -> Option<mpsc::UnboundedReceiver<Candidate>> {
        self.candidates.take()
    }

    /// Waits for the end and reports it.
    pub async fn finished(self) -> ReplayProgress {
        let Self {
            subscription,
            run,
            finished,
            ..
        } = self;
        match finished.await {
            Ok(end) => end,
            // The driver's task was dropped with the actix system: report what is known.
            Err(_) => progress(&subscription, &run, true),
        }
    }
}
