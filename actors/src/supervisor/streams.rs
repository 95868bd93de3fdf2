//! A subscription's streams ([`Streams`]): `Options::streams` of them, pulling in parallel, each
//! asking the server for its share of the flow-control limits and read by a pull loop of its own
//! (`super::pull`). It opens them, keeps each one's reopening backoff and its shutdown, and
//! counts the open ones.
//!
//! May use `super::pull` and the folders below `supervisor`.

use crate::rules::read_ahead::{Bound, ReadAhead, share};
use crate::rules::supervision::{Backoff, RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX};
use crate::source::{Connector, StreamSettings};
use crate::status::shared::Shared;
use crate::supervisor::pull::{Common, Pulled, StopSignals, pull};
use futures::future::LocalBoxFuture;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One of the subscription's streams.
struct StreamSlot {
    backoff: Backoff,
    /// Shuts the open stream down once every message is settled (see `MessageSource::shutdown`).
    shutdown: Option<LocalBoxFuture<'static, ()>>,
}

/// The streams of one subscription (`Options::streams` of them, pulling in parallel).
pub(crate) struct Streams {
    slots: Vec<StreamSlot>,
    connector: Rc<dyn Connector>,
    /// The subscription's settings: its whole limits, which each stream asks a share of.
    settings: StreamSettings,
    common: Common,
    /// The stop signals of every pull loop.
    pub(crate) stop: StopSignals,
}

impl Streams {
    /// `count` streams opened with `settings` (each asking for its share of the limits), under
    /// `shared`'s flow control and breaker, reading ahead within `read_ahead` (while the breaker
    /// is closed, and while it is open), on a subscription that dead-letters after
    /// `dead_letter_after` attempts (when it does).
    pub(crate) fn new(
        count: usize,
        connector: Rc<dyn Connector>,
        settings: StreamSettings,
        shared: &Shared,
        read_ahead: (Bound, Bound),
        dead_letter_after: Option<u32>,
    ) -> Self {
        Self {
            slots: (0..count)
                .map(|_| StreamSlot {
                    backoff: Backoff::new(RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX),
                    shutdown: None,
                })
                .collect(),
            common: Common {
                flow: shared.flow.clone(),
                stats: shared.stats.clone(),
                breaker: shared.breaker.clone(),
                ahead: Rc::new(RefCell::new(ReadAhead::new(read_ahead.0, read_ahead.1))),
                dead_letter_after,
                subscription: Arc::from(settings.subscription.as_str()),
            },
            connector,
            settings,
            stop: StopSignals::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// What the streams open with, all of them together.
    pub(crate) fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// What stream `stream` opens with: its share of the flow-control limits, so that the
    /// server sends all the streams together no more than the subscription's limits.
    fn settings_of(&self, stream: usize) -> StreamSettings {
        let count = self.slots.len();
        StreamSettings {
            max_outstanding_messages: share(self.settings.max_outstanding_messages, count, stream),
            max_outstanding_bytes: share(self.settings.max_outstanding_bytes, count, stream),
            ..self.settings.clone()
        }
    }

    /// Opens stream `stream`: its pull loop, for the supervisor to poll.
    pub(crate) fn open(
        &mut self,
        stream: usize,
    ) -> impl futures::Stream<Item = (usize, Pulled)> + 'static {
        let source = self.connector.open(&self.settings_of(stream));
        self.common
            .stats
            .open_streams
            .fetch_add(1, Ordering::Relaxed);
        self.slots[stream].shutdown = Some(source.shutdown());
        pull(
            source,
            stream,
            self.common.clone(),
            self.settings.max_lease,
            self.stop.clone(),
        )
    }

    /// Stream `stream` delivered a message: its next failure is reopened after the shortest
    /// wait again.
    pub(crate) fn delivered(&mut self, stream: usize) {
        self.slots[stream].backoff.reset(RESTART_BACKOFF_INITIAL);
    }

    /// Stream `stream` ended: no longer counted open. How long to wait before reopening it.
    pub(crate) fn ended(&mut self, stream: usize) -> Duration {
        self.common
            .stats
            .open_streams
            .fetch_sub(1, Ordering::Relaxed);
        self.slots[stream].backoff.next_delay(fastrand::f64())
    }

    /// Each open stream's shutdown, for the end of a drain.
    pub(crate) fn take_shutdowns(&mut self) -> Vec<LocalBoxFuture<'static, ()>> {
        self.slots
            .iter_mut()
            .filter_map(|slot| slot.shutdown.take())
            .collect()
    }
}
