//! How a Leasehold actor's death reaches its supervisor.
//!
//! Each supervised actor holds a [`Lifeline`] that it disarms only where it stops on purpose;
//! dropped armed (a panic in its own code, or its arbiter stopped under it) it tells whoever
//! supervises it, so that no message is stranded behind a dead mailbox. The worker pool watches
//! its workers this way, and the supervisor watches the pool and the ack sink ([`ActorDied`]).
//! Weak in both directions: a lifeline keeps nothing alive.

use actix::WeakAddr;
use actix::prelude::*;

/// Event: a supervised actor died without being stopped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct ActorDied(pub(crate) Role);

/// Runs its closure when dropped, unless [`disarm`](Self::disarm)ed first.
///
/// An actor holds one and disarms it only where it stops on purpose (the command that stops it).
/// A panic in the actor's own code, or its arbiter stopping under it, drops the actor with the
/// lifeline armed, and the closure tells its supervisor. (`stopped()` is no place to disarm:
/// actix calls it on those deaths too, when it drops the context.)
pub(crate) struct Lifeline(Option<Box<dyn FnOnce() + Send>>);

impl Lifeline {
    pub(crate) fn new(on_death: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(on_death)))
    }

    /// The actor stopped cleanly: nothing to report.
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        if let Some(on_death) = self.0.take() {
            on_death();
        }
    }
}

impl std::fmt::Debug for Lifeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Lifeline(armed)"
        } else {
            "Lifeline(disarmed)"
        })
    }
}

impl Lifeline {
    /// A lifeline that tells `supervisor`, if it is still alive, that the actor in `role` died.
    pub(crate) fn to<A>(supervisor: WeakAddr<A>, role: Role) -> Self
    where
        A: Actor + Handler<ActorDied>,
        A::Context: actix::dev::ToEnvelope<A, ActorDied>,
    {
        Self::new(move || {
            if let Some(supervisor) = supervisor.upgrade() {
                supervisor.do_send(ActorDied(role));
            }
        })
    }
}

/// One of Leasehold's own actors, as a [`Failure`](crate::status::Failure) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The supervisor (`SubscriptionActor`): the streams, the leases, the drain.
    Supervisor,
    /// The worker pool: which message runs next, and the worker threads.
    WorkerPool,
    /// The ack sink: exactly-once confirmations.
    AckSink,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Supervisor => "supervisor",
            Role::WorkerPool => "worker pool",
            Role::AckSink => "ack sink",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_lifeline_reports_unless_disarmed() {
        let died = Arc::new(AtomicBool::new(false));
        let d = died.clone();
        let mut clean = Lifeline::new(move || d.store(true, Ordering::SeqCst));
        clean.disarm();
        drop(clean);
        assert!(!died.load(Ordering::SeqCst));
        let d = died.clone();
        drop(Lifeline::new(move || d.store(true, Ordering::SeqCst)));
        assert!(died.load(Ordering::SeqCst));
    }
}
