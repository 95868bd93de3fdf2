//! The worker pool's side of the outage breaker: what it does when the circuit changes, at the
//! end of a cooldown, for a try, for a held job that runs again, and for held messages whose
//! lease is about to run out. The decisions are in `rules/breaker.rs` and `pool/holding.rs`;
//! this is the shell that arms timers and hands jobs out.

use super::{PoolState, WorkerPool};
use crate::pool::holding::{AfterEnd, Holding};
use crate::pool::job::{Job, Ticket, Work};
use crate::rules::breaker::{AfterCooldown, Change};
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
            if place == AfterEnd::Kept {
                self.expire_later(ctx);
                return;
            }
        }
        self.free_place(ticket);
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
                let checked = async move {
                    tokio::time::timeout(READINESS_TIMEOUT, check())
                        .await
                        .unwrap_or(false)
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

    /// Half-open: the first held message runs again as the try; with none held, the next
    /// message to start is the try (the gate lets one in).
    pub(super) fn try_one(&mut self, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        match holding.take_try() {
            Some(job) => {
                self.run_again(job);
                self.hand_out_later(ctx);
                self.batch_later(ctx);
            }
            None => {
                holding.publish();
                self.start_ready();
                self.hand_out_later(ctx);
            }
        }
    }

    /// A held job runs again: it kept its place (and its key), so it goes straight out.
    pub(super) fn run_again(&mut self, job: Job) {
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
    pub(super) fn expire_later(&mut self, ctx: &mut Context<Self>) {
        let Some(holding) = &mut self.holding else {
            return;
        };
        let Some(at) = holding.next_expiry() else {
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
            for ticket in holding.expire(Instant::now()) {
                pool.free_place(ticket);
            }
            pool.expire_later(ctx);
            pool.hand_out_later(ctx);
        });
    }
}
