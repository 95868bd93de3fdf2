//! What the supervisor starts when it starts, and supervises: the ack sink, the worker pool
//! (which starts the workers), and what every lease actor of the subscription shares.
//!
//! The pool and the sink get a [`Lifeline`] back to the supervisor, a weak address: their death
//! reaches it, and they keep it alive no more than it keeps them (each is stopped by a command
//! at the end of the drain).

use crate::api::decode::Prepare;
use crate::api::handler::{ErasedHandler, HandlerKind};
use crate::api::policy::{FailurePolicy, PanicPolicy};
use crate::api::registration::Readiness;
use crate::lease::ack_sink::AckSink;
use crate::lease::actor::LeaseContext;
use crate::pool::crew::Layout;
use crate::pool::holding::Holding;
use crate::pool::job::JobContext;
use crate::pool::messages::{DispatchSender, PoolInbox};
use crate::pool::worker_pool::WorkerPool;
use crate::rt::lifeline::Role;
use crate::rt::lifeline::{ActorDied, Lifeline};
use crate::rules::breaker::Breaker;
use crate::rules::options::BatchPolicy;
use crate::status::shared::Shared;
use crate::store::progress::ProgressStore;
use actix::WeakAddr;
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// What the workers are built from when the supervisor starts.
pub(crate) struct Handlers {
    pub(crate) handler: ErasedHandler,
    /// The registration's own decoder's fetch before it decodes, when it has one.
    pub(crate) prepare: Option<Prepare>,
    pub(crate) kind: HandlerKind,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) panic_policy: PanicPolicy,
    pub(crate) progress: Option<Arc<dyn ProgressStore>>,
    /// The registration dedupes on an attribute: its records outlive their ack's confirmation
    /// (a copy may come later), so the ack sink clears none.
    pub(crate) dedupes: bool,
    pub(crate) workers: usize,
    pub(crate) worker_threads: Option<usize>,
    /// What forms a batch, for a batch handler.
    pub(crate) batch: Option<BatchPolicy>,
    /// The breaker and its readiness check, when set.
    pub(crate) breaker: Option<(Breaker, Option<Readiness>)>,
}

/// The actors the supervisor starts and supervises.
pub(crate) struct Children {
    pub(crate) pool: Addr<WorkerPool>,
    /// Messages for the pool: a channel rather than the pool's mailbox, whose envelope and
    /// queue node per message cost two allocations.
    pub(crate) dispatch: DispatchSender,
    pub(crate) sink: Addr<AckSink>,
    /// What every lease actor shares, the registry of live leases among it.
    pub(crate) lease_context: Rc<LeaseContext>,
}

impl Drop for Children {
    /// The subscription's stop is over (or the supervisor failed): the idle lease actors end.
    fn drop(&mut self) {
        self.lease_context.close();
    }
}

impl Children {
    /// Starts the sink and the pool on the current arbiter (the pool starts the workers), with
    /// lifelines to `supervisor`.
    pub(crate) fn start<A>(
        handlers: Handlers,
        shared: &Arc<Shared>,
        subscription: &Arc<str>,
        draining: &Arc<AtomicBool>,
        supervisor: WeakAddr<A>,
    ) -> Self
    where
        A: Actor + Handler<ActorDied>,
        A::Context: actix::dev::ToEnvelope<A, ActorDied>,
    {
        let stats = shared.stats.clone();
        let (confirmations, inbox) = tokio::sync::mpsc::unbounded_channel();
        let sink = AckSink::new(
            subscription.clone(),
            inbox,
            stats.clone(),
            handlers.progress.clone().filter(|_| !handlers.dedupes),
            Lifeline::to(supervisor.clone(), Role::AckSink),
            &shared.alive,
        )
        .start();
        let (finished, finished_jobs) = tokio::sync::mpsc::unbounded_channel();
        // The workers' settlements, delivered to the lease actors on this thread.
        let (settlements, settled) = tokio::sync::mpsc::unbounded_channel();
        actix::spawn(crate::lease::settle_right::deliver(settled));
        let jobs = Arc::new(JobContext {
            handler: handlers.handler,
            prepare: handlers.prepare,
            failure_policy: handlers.failure_policy,
            panic_policy: handlers.panic_policy,
            progress: handlers.progress,
            stats: stats.clone(),
            draining: draining.clone(),
            finished,
            settlements,
            subscription: subscription.clone(),
            holds_failures: handlers.breaker.is_some(),
        });
        let holding = handlers.breaker.map(|(policy, readiness)| {
            Holding::new(
                policy,
                readiness,
                shared.breaker.clone(),
                stats.clone(),
                subscription.clone(),
            )
        });
        let (dispatch, dispatched) = tokio::sync::mpsc::unbounded_channel();
        let pool = WorkerPool::new(
            handlers.workers,
            handlers.batch,
            Layout::new(handlers.kind, handlers.workers, handlers.worker_threads),
            PoolInbox {
                dispatched,
                finished: finished_jobs,
            },
            jobs,
            shared.clone(),
            Lifeline::to(supervisor, Role::WorkerPool),
        )
        .with_breaker(holding)
        .start();
        Self {
            lease_context: Rc::new(LeaseContext::new(
                confirmations,
                stats,
                shared.alive.clone(),
                subscription.clone(),
            )),
            pool,
            dispatch,
            sink,
        }
    }
}
