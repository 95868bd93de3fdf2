//! The worker pool: decodes payloads and runs the handler, `workers` messages at a time.
//!
//! Messages that share an ordering key run one at a time in arrival order ([`Schedule`]). A
//! payload that does not decode goes to the failure policy; a handler that panics is caught, its
//! message settled by the panic policy, and the worker goes on serving. A message already
//! finished (per the progress store) is settled without the handler, and a redelivery of a
//! message whose handler is still running waits for that run instead of running beside it.

use crate::delivery::Delivery;
use crate::lease::{LeaseActor, Settle};
use crate::outcome::Outcome;
use crate::progress::{Completed, ProgressStore};
use crate::registration::{ErasedHandler, FailurePolicy, PanicPolicy};
use crate::schedule::Schedule;
use crate::stats::Stats;
use crate::tasks::Tasks;
use actix::prelude::*;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use futures::future::{Either, ready};
use rustc_hash::FxHashMap;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use tracing::Instrument;

/// Command: run the handler on this message.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Dispatch {
    /// The delivery handed to the handler.
    pub delivery: Delivery,
    /// The payload to decode.
    pub data: Bytes,
    /// The message's span.
    pub span: tracing::Span,
    /// The lease actor the outcome goes to.
    pub lease: Addr<LeaseActor>,
}

/// Query: how many handlers run and how many messages wait.
#[derive(Debug, Message)]
#[rtype(result = "LoadReport")]
pub struct Load;

/// How busy the pool is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, MessageResponse)]
pub struct LoadReport {
    /// Handlers running now.
    pub running: usize,
    /// Messages waiting for a worker or for their ordering key.
    pub waiting: usize,
}

/// Runs handlers on a bounded number of workers.
pub struct WorkerPool {
    schedule: Schedule<Dispatch>,
    handler: ErasedHandler,
    failure_policy: FailurePolicy,
    panic_policy: PanicPolicy,
    progress: Option<Rc<dyn ProgressStore>>,
    stats: Arc<Stats>,
    /// Message ids whose handler is running, with redeliveries of them that wait for it.
    running_ids: FxHashMap<Arc<str>, Vec<(String, Dispatch)>>,
    /// The running handlers, polled as one stream: only those woken are polled.
    jobs: Tasks<LocalBoxFuture<'static, JobDone>>,
}

/// A handler finished and its message was settled.
struct JobDone {
    /// Its ordering key.
    key: String,
    /// Its message id.
    id: Arc<str>,
}

impl WorkerPool {
    /// A pool of `workers` running `handler`.
    pub(crate) fn new(
        workers: usize,
        handler: ErasedHandler,
        failure_policy: FailurePolicy,
        panic_policy: PanicPolicy,
        progress: Option<Rc<dyn ProgressStore>>,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            schedule: Schedule::new(workers),
            handler,
            failure_policy,
            panic_policy,
            progress,
            stats,
            running_ids: FxHashMap::default(),
            jobs: Tasks::new(),
        }
    }

    fn run(&mut self, key: String, job: Dispatch) {
        let Dispatch {
            delivery,
            data,
            span,
            lease,
        } = job;
        let message_id = delivery.message_id.clone();
        if let Some(parked) = self.running_ids.get_mut(&*message_id) {
            // Pub/Sub redelivered a message whose handler is still running here (its lease ran
            // out). Running it twice at once would do the work twice: it waits for the first
            // run, then goes through the progress store like any redelivery.
            tracing::debug!(parent: &span, "redelivered while still running; waiting for that run");
            parked.push((
                key.clone(),
                Dispatch {
                    delivery,
                    data,
                    span,
                    lease,
                },
            ));
            // The worker is free again; the loop in `start_ready` goes on.
            return self.schedule.finished(&key);
        }
        if let Some(completed) = self.finished_before(&message_id, &span) {
            Stats::bump(&self.stats.replayed);
            tracing::debug!(parent: &span, ?completed,
                "finished before: settled again without running the handler");
            lease.do_send(Settle(Outcome::replay(completed)));
            // The worker is free again; the loop in `start_ready` goes on.
            return self.schedule.finished(&key);
        }
        let handler = self.handler.clone();
        // Decoding and the synchronous part of the handler run inside catch_unwind too.
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| handler(data, delivery)));
        // Either the handler's future or an outcome known now: no second box per message.
        let outcome = match started {
            Ok(Ok(running)) => Either::Left(
                AssertUnwindSafe(running)
                    .catch_unwind()
                    .instrument(span.clone()),
            ),
            Ok(Err(undecodable)) => {
                let (error, delivery) = *undecodable;
                Stats::bump(&self.stats.decode_failures);
                tracing::warn!(parent: &span, %error, policy = ?self.failure_policy,
                    "payload did not decode");
                let outcome = self.failure_policy.outcome(&delivery, &error);
                Either::Right(ready(Ok(outcome)))
            }
            Err(panic) => Either::Right(ready(Err(panic))),
        };
        let (stats, panic_policy, store) =
            (self.stats.clone(), self.panic_policy, self.progress.clone());
        self.running_ids.insert(message_id.clone(), Vec::new());
        let job = async move {
            let outcome = outcome.await.unwrap_or_else(|_| {
                Stats::bump(&stats.panics);
                tracing::error!(parent: &span, policy = ?panic_policy,
                    "handler panicked; the worker goes on");
                panic_policy.outcome()
            });
            // Finished work is recorded before its ack is sent.
            if let (Some(store), Some(completed)) = (store, outcome.completed())
                && let Err(error) = store.record(&message_id, completed).await
            {
                tracing::warn!(parent: &span, %error,
                    "could not record the finished message; a redelivery would run it again");
            }
            lease.do_send(Settle(outcome));
            JobDone {
                key,
                id: message_id,
            }
        };
        // A handler that finishes at once (and a payload that did not decode) is done here,
        // inside the loop of `start_ready`, which then starts what may start.
        if let Some(done) = self.jobs.start(job.boxed_local()) {
            self.job_done(done);
        }
    }

    /// A job finished: frees its worker and queues the redeliveries that waited for it (they go
    /// through the schedule and the store like any delivery). Starts nothing itself.
    fn job_done(&mut self, JobDone { key, id }: JobDone) {
        self.schedule.finished(&key);
        for (key, job) in self.running_ids.remove(&*id).unwrap_or_default() {
            self.schedule.submit(key, job);
        }
    }

    /// Starts every job the schedule lets start now.
    fn start_ready(&mut self) {
        while let Some((key, job)) = self.schedule.next_to_start() {
            self.run(key, job);
        }
    }

    /// The progress store's record of this message, if any.
    fn finished_before(&self, message_id: &str, span: &tracing::Span) -> Option<Completed> {
        let store = self.progress.as_ref()?;
        store.completed(message_id).unwrap_or_else(|error| {
            tracing::warn!(parent: span, %error, "progress store lookup failed; running the handler");
            None
        })
    }
}

impl Actor for WorkerPool {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.add_stream(self.jobs.completions());
    }
}

impl StreamHandler<JobDone> for WorkerPool {
    fn handle(&mut self, done: JobDone, _: &mut Self::Context) {
        self.job_done(done);
        self.start_ready();
    }

    /// The jobs stream never ends while the pool lives. (The default would stop it.)
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Dispatch> for WorkerPool {
    type Result = ();

    fn handle(&mut self, msg: Dispatch, _: &mut Self::Context) {
        let key = msg.delivery.ordering_key.clone();
        self.schedule.submit(key, msg);
        self.start_ready();
    }
}

impl Handler<Load> for WorkerPool {
    type Result = LoadReport;

    fn handle(&mut self, _: Load, _: &mut Self::Context) -> Self::Result {
        LoadReport {
            running: self.schedule.running(),
            waiting: self.schedule.waiting(),
        }
    }
}
