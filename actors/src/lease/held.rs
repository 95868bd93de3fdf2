//! All that a lease actor holds of one message, as one value: a lease actor is reused message
//! after message, and what it resets between two of them is exactly this value, taken whole when
//! the message is handed over and given up whole when it is settled.
//!
//! Plain data and one bookkeeping step; `actor.rs` uses it, never the reverse.

use crate::lease::registry::{LeaseLink, Leases};
use crate::lease::settle_right::{SettleRight, Settlement};
use crate::rules::flow::FlowPermit;
use crate::rules::lease_state::LeaseState;
use crate::source::SettleHandle;
use crate::status::stats::Stats;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Waker};
use std::time::SystemTime;
use tokio::sync::oneshot;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// A message just received, for its lease actor.
pub(crate) struct NewLease {
    pub(crate) state: LeaseState,
    pub(crate) handle: Box<dyn SettleHandle>,
    pub(crate) message_id: Arc<str>,
    pub(crate) span: tracing::Span,
    pub(crate) permit: Option<FlowPermit>,
    pub(crate) publish_time: Option<SystemTime>,
}

/// Everything of one message its lease actor holds: its lease state and clock, handle, id,
/// span, flow-control permit, registry key, holding flag, the receiver of its settlement right,
/// and its tracker token. Given up with [`give_up`](Self::give_up).
pub(crate) struct Held {
    /// Which of its actor's messages this is: what is sent for another one is ignored.
    pub(crate) generation: u64,
    pub(crate) state: LeaseState,
    /// The client's handle: taken to settle, so `Some` means unsettled.
    pub(crate) handle: Option<Box<dyn SettleHandle>>,
    pub(crate) message_id: Arc<str>,
    pub(crate) span: tracing::Span,
    /// The end of the message's settlement right, awaited until it comes back.
    pub(crate) right: Option<oneshot::Receiver<Settlement>>,
    /// The message's place in the registry of live leases.
    pub(crate) key: usize,
    /// When Pub/Sub accepted the message.
    pub(crate) publish_time: Option<SystemTime>,
    /// Counted among the holds running now.
    pub(crate) holding: bool,
    /// The message's share of flow control, returned when it is given up.
    _permit: Option<FlowPermit>,
    /// Counted among the subscription's live leases until it is given up.
    _alive: TaskTrackerToken,
}

impl Held {
    /// What a lease actor holds of `lease`, its `generation`-th message, entered in the
    /// registry under `key`; returns it with the message's settlement right.
    pub(crate) fn new(
        lease: NewLease,
        generation: u64,
        key: usize,
        alive: TaskTrackerToken,
    ) -> (Self, SettleRight) {
        let (right, from_right) = SettleRight::new();
        let held = Self {
            generation,
            state: lease.state,
            handle: Some(lease.handle),
            message_id: lease.message_id,
            span: lease.span,
            right: Some(from_right),
            key,
            publish_time: lease.publish_time,
            holding: false,
            _permit: lease.permit,
            _alive: alive,
        };
        (held, right)
    }

    /// Registers `waker` (its lease actor's) with the message's settlement right, so that the
    /// right's return wakes the actor; `true` when the actor will be woken without being woken
    /// now. Called at the hand-over, while the right has not left the supervisor (its receiver
    /// cannot be ready yet). (When the supervisor's task has used up tokio's cooperative budget,
    /// the receiver does not register `waker` but wakes it at the thread's next yield: the actor
    /// then takes the message and registers with the right itself.)
    pub(crate) fn listen(&mut self, waker: &Waker) -> bool {
        let Some(right) = self.right.as_mut() else {
            return false;
        };
        let polled = Pin::new(right).poll(&mut Context::from_waker(waker));
        debug_assert!(
            polled.is_pending(),
            "a right that has not left cannot be back"
        );
        polled.is_pending()
    }

    /// The message leaves its actor, settled or not: it leaves the registry, its hold and its
    /// permit end. Unsettled (its actor's arbiter ended under it, or a bug), its handle's drop
    /// nacks it, which is counted as retried and logged.
    pub(crate) fn give_up<L: LeaseLink + 'static>(
        self,
        stats: &Stats,
        leases: &Leases<L>,
        subscription: &str,
    ) {
        if self.holding {
            stats.holding.fetch_sub(1, Ordering::Relaxed);
        }
        if self.handle.is_some() {
            Stats::bump(&stats.retried);
            tracing::warn!(%subscription, message_id = %self.message_id,
                "a lease actor ended without settling its message (its arbiter ended, or a bug); \
                 the message is nacked and will be redelivered");
        }
        leases.leave(self.key);
    }
}
