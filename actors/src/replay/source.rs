//! The replay's connector: the dead-letter subscription's own streams, with each delivery
//! admitted by the run's [`Ledger`] before the supervisor sees it. What is taken goes on, paced,
//! to the runtime like any pulled message; what is not (seen before in this run, left out by the
//! filter, over the maximum, or every candidate of a dry run) is held here until the run ends,
//! then nacked, so it stays on the dead-letter subscription and no handler runs for it.

use crate::error::{ReadError, SourceError};
use crate::replay::candidate::Candidate;
use crate::replay::rules::{Admission, Admitted, Filter, Ledger, Pacer};
use crate::source::{Connector, MessageSource, Received, StreamSettings, SubscriptionInfo};
use futures::channel::mpsc::UnboundedSender;
use futures::future::LocalBoxFuture;
use parking_lot::Mutex;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One run's state, shared by its streams and its driver (and read by status pages elsewhere).
#[derive(Debug)]
pub(crate) struct RunState {
    pub(crate) ledger: Mutex<Ledger>,
    pacer: Mutex<Pacer>,
    filter: Filter,
    pub(crate) dry_run: bool,
    listed: Option<UnboundedSender<Candidate>>,
}

impl RunState {
    pub(crate) fn new(
        filter: Filter,
        rate: Option<f64>,
        max: Option<u64>,
        dry_run: bool,
        listed: Option<UnboundedSender<Candidate>>,
    ) -> Self {
        Self {
            ledger: Mutex::new(Ledger::new(max, Instant::now().into_std())),
            pacer: Mutex::new(Pacer::new(rate)),
            filter,
            dry_run,
            listed,
        }
    }

    /// Ends a dry run's list: its receiver sees the end.
    pub(crate) fn end_listing(&self) {
        if let Some(listed) = &self.listed {
            listed.close_channel();
        }
    }

    pub(crate) fn counts(&self) -> Admitted {
        self.ledger.lock().counts()
    }

    /// Decides one delivery: [`Decided::Deliver`] when it goes to the runtime at its slot,
    /// [`Decided::Hold`] when the run keeps it, unhandled, until it ends.
    fn admit(&self, message: Received) -> Decided {
        let now = Instant::now();
        let taken = self.filter.matches(
            &message.message_id,
            &message.attributes,
            message.publish_time,
        );
        let admission = self
            .ledger
            .lock()
            .admit(&message.message_id, taken, now.into_std());
        match admission {
            Admission::Take if self.dry_run => {
                if let Some(listed) = &self.listed {
                    // The receiver may be gone (nobody lists): the run goes on.
                    let _ = listed.unbounded_send(Candidate::of(&message));
                }
                Decided::Hold(message)
            }
            Admission::Take => {
                let slot = self.pacer.lock().slot(now.into_std());
                Decided::Deliver(message, Instant::from_std(slot))
            }
            Admission::Again | Admission::Filtered | Admission::OverMax | Admission::Closed => {
                tracing::trace!(message_id = %message.message_id, ?admission, "replay: held until the run ends");
                Decided::Hold(message)
            }
        }
    }
}

/// What the source does with one delivery.
enum Decided {
    /// To the runtime, at this instant.
    Deliver(Received, Instant),
    /// Kept, unhandled, until the run ends; then nacked (dropped with the source).
    Hold(Received),
}

/// The connector a replay starts the registration with.
pub(crate) struct ReplayConnector {
    pub(crate) inner: Rc<dyn Connector>,
    pub(crate) run: Arc<RunState>,
}

impl Connector for ReplayConnector {
    fn read_subscription<'a>(
        &'a self,
        subscription: &'a str,
    ) -> LocalBoxFuture<'a, Result<SubscriptionInfo, ReadError>> {
        self.inner.read_subscription(subscription)
    }

    fn open(&self, settings: &StreamSettings) -> Box<dyn MessageSource> {
        Box::new(ReplaySource {
            inner: self.inner.open(settings),
            run: self.run.clone(),
            pending: None,
            held: Vec::new(),
        })
    }

    fn is_global_endpoint(&self) -> bool {
        self.inner.is_global_endpoint()
    }

    fn lease_limit(&self, info: Option<&SubscriptionInfo>) -> Option<Duration> {
        self.inner.lease_limit(info)
    }
}

/// One stream of the dead-letter subscription, admitted and paced.
struct ReplaySource {
    inner: Box<dyn MessageSource>,
    run: Arc<RunState>,
    /// A message taken and waiting for its slot. Kept here, not in the future, so a `next`
    /// dropped while it waits loses nothing; dropped with the source, it is nacked.
    pending: Option<(Received, Instant)>,
    /// What this run leaves: each message it will not hand to the runtime (seen before, left
    /// out by the filter, over the maximum, listed by a dry run) is held here, its lease kept by
    /// the client, so Pub/Sub does not deliver it again and again during the run. Dropped with
    /// the source at the run's stop, which nacks each: it stays on the dead-letter subscription.
    held: Vec<Received>,
}

impl MessageSource for ReplaySource {
    fn next(&mut self) -> LocalBoxFuture<'_, Option<Result<Received, SourceError>>> {
        Box::pin(async move {
            loop {
                if let Some((_, slot)) = &self.pending {
                    tokio::time::sleep_until(*slot).await;
                    return self.pending.take().map(|(message, _)| Ok(message));
                }
                let message = match self.inner.next().await? {
                    Ok(message) => message,
                    Err(e) => return Some(Err(e)),
                };
                match self.run.admit(message) {
                    Decided::Deliver(message, slot) => self.pending = Some((message, slot)),
                    Decided::Hold(message) => self.held.push(message),
                }
            }
        })
    }

    fn shutdown(&self) -> LocalBoxFuture<'static, ()> {
        self.inner.shutdown()
    }
}
