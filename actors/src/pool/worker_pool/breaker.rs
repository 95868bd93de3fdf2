//! The worker pool's side of the outage breaker: what it does when the circuit changes, at the
//! end of a cooldown, for a try, for a held job that runs again, and for held messages whose
//! lease is about to run out. The decisions are in `rules/breaker.rs` and `pool/holding.rs`;
//! this is the shell that arms timers and hands jobs out.

use super::{PoolState, WorkerPool};
use crate::pool::holding::{AfterEnd, Holding, Try, expiry};
use crate::pool::job::{Job, Ticket};
use crate::pool::work::Work;
use crate::rt::guard::{self, Guarded, Panicked};
use crate::rules::breaker::{AfterCooldown, Change};
use crate::status::stats::Stats;
use actix::prelude::*;
use std::time::Duration;
use tokio::time::Instant;

/// How long a breaker's readiness check may take before it counts as not ready.
const READINESS_TIMEOUT: Duration = Duration::from_secs(10);

impl WorkerPool {
    /// `job` just started as the try, if `trying`.
    pub(super) fn mark_try(&mut self, trying: bool, job: &Job) {
        if trying && let Some(holding) = &mut self.holding {
            holding.trying(&job.ticket.id);
        }
    }

    /// A stop began: the held jobs ran and failed; they are nacked (as retried), and their
    /// places freed.
    pub(super) fn release_held(&mut self) {
        if let Some(holding) = &mut self.holding {
            for ticket in holding.release_all() {
                self.schedule.unhold();
                self.free_place(ticket);
            }
        }
    }

    /// With a breaker: the pool holds failed jobs while it is open.
    pub(crate) fn with_breaker(mut self, holding: Option<Holding>) -> Self {
        self.holding = holding;
        self
    }

    /// A job ended on a worker: the breaker hears how, and holds it if it failed while open;
    /// otherwise its place is freed.
    pub(super) fn job_ended(&mut self, mut ticket: Ticket, ctx: &mut Context<Self>) {
        if let Some(holding) = &mut self.holding {
            let (place, change) = holding.ended(&mut ticket, self.state == PoolState::Running);
            self.on_change(change, ctx);
            // A try that settled nothing of the dependency (its worker died, a replay, a
            // deferral): the next one at once.
            if self.state == PoolState::Running
                && self
                    .holding
                    .as_ref()
                    .is_some_and(Holding::circuit_wants_try)
            {
                self.try_one(ctx);
            }
            if place == AfterEnd::Kept {
                self.schedule.hold();
                self.expire_later(ctx);
                return;
            }
        }
        self.free_place(ticket);
    }

    /// A message came in: while the breaker is open it waits, and may need the timer that
    /// nacks it before its lease runs out.
    pub(super) fn dispatched(&mut self, ctx: &mut Context<Self>) {
        if self.holding.as_ref().is_some_and(|h| !h.is_closed()) {
            self.expire_later(ctx);
        }
    }

    /// Carries out what changed with the breaker.
    pub(super) fn on_change(&mut self, change: Change, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        holding.report(change);
        match change {
            Change::None => {}
            Change::Tripped(cooldown) | Change::Reopened(cooldown) => {
                ctx.run_later(cooldown, |pool, ctx| pool.cooldown_over(ctx));
                self.expire_later(ctx);
            }
            Change::Closed => {
                for job in holding.take_all() {
                    self.run_again(job);
                }
                self.start_ready();
                self.hand_out_later(ctx);
                self.batch_later(ctx);
            }
        }
    }

    /// The cooldown ended: check the dependency, or try a message.
    pub(super) fn cooldown_over(&mut self, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        if self.state != PoolState::Running {
            return;
        }
        match holding.circuit().cooldown_over(Instant::now()) {
            AfterCooldown::Wait => {}
            AfterCooldown::Probe => self.try_one(ctx),
            AfterCooldown::Check => {
                let Some(check) = holding.readiness.clone() else {
                    return;
                };
                // The user's code, guarded like every call into it: a panic is "not ready".
                let (stats, subscription) = (
                    self.context.stats.clone(),
                    self.context.subscription.clone(),
                );
                let checked = async move {
                    let answer = match guard::call(|| check()) {
                        Ok(check) => {
                            tokio::time::timeout(READINESS_TIMEOUT, Guarded::new(check)).await
                        }
                        Err(Panicked) => Ok(Err(Panicked)),
                    };
                    match answer {
                        Ok(Ok(ready)) => ready,
                        Ok(Err(Panicked)) => {
                            Stats::bump(&stats.panics);
                            tracing::error!(%subscription,
                                "the breaker's readiness check panicked: taken as not ready");
                            false
                        }
                        // No answer in time.
                        Err(_) => false,
                    }
                };
                ctx.spawn(checked.into_actor(self).map(|ready, pool, ctx| {
                    let Some(holding) = &mut pool.holding else {
                        return;
                    };
                    if !ready {
                        tracing::info!(subscription = %pool.context.subscription,
                            "breaker: the readiness check says the dependency is still down");
                    }
                    let change = holding.circuit().checked(ready, Instant::now());
                    pool.on_change(change, ctx);
                    if pool.holding.as_ref().is_some_and(|h| h.circuit_wants_try()) {
                        pool.try_one(ctx);
                    }
                }));
            }
        }
        if let Some(holding) = &self.holding {
            holding.publish();
        }
    }

    /// Half-open: a held message runs again as the try ([`Holding::take_try`] says which), or
    /// the next message to start is the try.
    pub(super) fn try_one(&mut self, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        match holding.take_try(self.schedule.could_start()) {
            Try::Held(job) => {
                self.run_again(job);
                self.hand_out_later(ctx);
                self.batch_later(ctx);
            }
            // The next message to start is the try (with none held, the next to come in).
            Try::New | Try::Nothing => {
                holding.publish();
                self.start_ready();
                self.hand_out_later(ctx);
                self.batch_later(ctx);
            }
        }
    }

    /// A held job runs again: it kept its place (and its key), so it goes straight out.
    pub(super) fn run_again(&mut self, job: Job) {
        self.schedule.unhold();
        match &mut self.batcher {
            None => self.outgoing.push(Work::One(job)),
            Some(batcher) => {
                let (key, bytes) = (job.ticket.key.clone(), job.data.len());
                for full in batcher.add(job, &key, bytes, Instant::now()) {
                    self.outgoing.push(Work::Batch(full));
                }
            }
        }
    }

    /// Arms a timer for the first held message whose lease is about to run out.
    /// Arms a timer for the first message waiting out the breaker (held, or waiting to start
    /// while it is not closed) whose lease is about to run out.
    pub(super) fn expire_later(&mut self, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        let waiting = if holding.is_closed() {
            None
        } else {
            self.schedule.waiting_jobs().map(expiry).min()
        };
        let Some(at) = holding.next_expiry().into_iter().chain(waiting).min() else {
            return;
        };
        if holding.expiry_armed.is_some_and(|armed| armed <= at) {
            return;
        }
        holding.expiry_armed = Some(at);
        let wait = at.saturating_duration_since(Instant::now());
        ctx.run_later(wait, move |pool, ctx| {
            let Some(holding) = &mut pool.holding else {
                return;
            };
            if holding.expiry_armed == Some(at) {
                holding.expiry_armed = None;
            }
            let now = Instant::now();
            for ticket in holding.expire(now) {
                pool.schedule.unhold();
                pool.free_place(ticket);
            }
            if let Some(holding) = &pool.holding
                && !holding.is_closed()
            {
                // Waiting, not started: they hold no place.
                for (_, job) in pool.schedule.take_waiting(|job| expiry(job) <= now) {
                    holding.nack_expired(job, "waited for the open breaker to close");
                }
                pool.publish_load();
            }
            pool.expire_later(ctx);
            pool.hand_out_later(ctx);
        });
    }
}
