//! What the outage breaker shows: its state and open time as the worker pool publishes them
//! ([`BreakerGauge`]), and the [`BreakerReport`] a `Subscription` reads. May use `rules`.

use crate::rules::breaker::BreakerState;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A breaker's state and open time, as the pool publishes them for reports.
#[derive(Debug, Default)]
pub(crate) struct BreakerGauge {
    inner: Mutex<BreakerShown>,
    pub(crate) held: AtomicUsize,
}

#[derive(Debug, Default)]
struct BreakerShown {
    /// `None`: no breaker.
    state: Option<BreakerState>,
    /// When the current open period began (not closed since).
    opened: Option<std::time::Instant>,
    /// The open periods that ended.
    open_before: Duration,
}

impl BreakerGauge {
    /// The breaker is now in `state`.
    pub(crate) fn set(&self, state: BreakerState) {
        let mut shown = self.inner.lock();
        match (state, shown.opened) {
            (BreakerState::Closed, Some(opened)) => {
                shown.open_before += opened.elapsed();
                shown.opened = None;
            }
            (BreakerState::Open | BreakerState::HalfOpen, None) => {
                shown.opened = Some(std::time::Instant::now());
            }
            _ => {}
        }
        shown.state = Some(state);
    }

    /// The breaker's state, held messages and open time; `None` without a breaker.
    pub(crate) fn report(&self, trips: u64) -> Option<BreakerReport> {
        let shown = self.inner.lock();
        let state = shown.state?;
        let open_for = shown.opened.map(|opened| opened.elapsed());
        Some(BreakerReport {
            state,
            held: self.held.load(Ordering::Relaxed),
            trips,
            open_for,
            open_total: shown.open_before + open_for.unwrap_or_default(),
        })
    }
}

/// A subscription's outage breaker now, as
/// [`Subscription::breaker`](crate::Subscription::breaker) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerReport {
    /// Closed, open or half-open.
    pub state: BreakerState,
    /// Failed messages the breaker holds now, in the process (leases kept, no attempt spent): a
    /// gauge, not [`StatsSnapshot::held`](crate::status::StatsSnapshot::held), which counts
    /// lease holds started.
    pub held: usize,
    /// Times it tripped since start.
    pub trips: u64,
    /// How long it has been open (or half-open) this time; `None` while closed.
    pub open_for: Option<Duration>,
    /// How long it has been open in all, since start.
    pub open_total: Duration,
}
