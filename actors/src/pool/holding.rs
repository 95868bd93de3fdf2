//! What the worker pool holds for its breaker: the [`Circuit`], the failed jobs held while it is
//! open (each keeps its place in the schedule, so its ordering key's next message waits behind
//! it, and its right, so its lease actor keeps the lease), and the signal of its state that
//! the supervisor passes on to the connector.
//!
//! The pool calls it as each job ends and carries out what it returns: free the place or not,
//! run a held job again, arm a timer. It may use `rules`, `rt`, `status`, `lease` (rights) and
//! `pool/job`.

use crate::api::registration::Readiness;
use crate::lease::settle_right::Settlement;
use crate::pool::job::{Job, Returned, Ticket};
use crate::rt::breaker_signal::BreakerSignal;
use crate::rules::breaker::{Breaker, BreakerState, Change, Circuit};
use crate::rules::outcome::Outcome;
use crate::status::stats::Stats;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// What became of an ended job's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterEnd {
    /// Free it: the job settled its message (or the pool just did).
    Free,
    /// Kept: the job is held.
    Kept,
}

/// A breaker at work in one pool.
pub(crate) struct Holding {
    circuit: Circuit,
    /// The held jobs, in the order they were held; the one being tried keeps its place (its
    /// job out), so that it goes back there if it fails.
    held: VecDeque<Slot>,
    /// The next message to start is the try.
    new_try: bool,
    /// The message tried now, to go back first in line if it fails.
    probe: Option<u64>,
    /// The readiness check run at the end of each cooldown, if the user gave one.
    pub(crate) readiness: Option<Readiness>,
    signal: Arc<BreakerSignal>,
    stats: Arc<Stats>,
    subscription: Arc<str>,
    /// The earliest expiry a timer is armed for.
    pub(crate) expiry_armed: Option<Instant>,
}

/// One held job, or the place of the one being tried.
struct Slot {
    id: u64,
    key: String,
    job: Option<Job>,
    /// Tries of it that failed: one message that keeps failing is not tried first again.
    failed_tries: u32,
}

/// What the next try is. (Rare, and moved once: its size does not matter.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Try {
    /// This held message.
    Held(Job),
    /// The next message waiting to start (every held one failed a try already).
    New,
    /// Nothing to try.
    Nothing,
}

/// When a message waiting out the breaker must be nacked: before its lease budget ends.
pub(crate) fn expiry(job: &Job) -> Instant {
    let clock = job.delivery.clock;
    clock.deadline() - clock.hold_margin()
}

/// A message id as the circuit knows it.
pub(crate) fn id_key(id: &str) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    id.hash(&mut hasher);
    hasher.finish()
}

impl Holding {
    pub(crate) fn new(
        policy: Breaker,
        readiness: Option<Readiness>,
        signal: Arc<BreakerSignal>,
        stats: Arc<Stats>,
        subscription: Arc<str>,
    ) -> Self {
        let holding = Self {
            circuit: Circuit::new(policy, readiness.is_some()),
            held: VecDeque::new(),
            new_try: false,
            probe: None,
            readiness,
            signal,
            stats,
            subscription,
            expiry_armed: None,
        };
        holding.publish();
        holding
    }

    pub(crate) fn circuit(&mut self) -> &mut Circuit {
        &mut self.circuit
    }

    /// Whether the breaker is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.circuit.is_closed()
    }

    /// Whether a message is to be tried now.
    pub(crate) fn circuit_wants_try(&self) -> bool {
        self.circuit.wants_probe()
    }

    /// A job ended with `ticket`. Records its verdict; a failed job comes back unsettled: it is
    /// held while the breaker is not closed (and `may_hold`: no stop began), and settled now
    /// with its outcome otherwise.
    pub(crate) fn ended(&mut self, ticket: &mut Ticket, may_hold: bool) -> (AfterEnd, Change) {
        let id = id_key(&ticket.id);
        // In a stop nothing trips or closes any more.
        let change = if may_hold {
            self.circuit.record(ticket.verdict, id, Instant::now())
        } else {
            Change::None
        };
        let tried = self.probe == Some(id);
        if tried {
            self.probe = None;
        }
        let place = match ticket.back.take() {
            None => AfterEnd::Free,
            Some(back) if self.circuit.is_closed() || !may_hold => {
                let Returned { right, outcome, .. } = *back;
                right.settle(Settlement::of(outcome));
                AfterEnd::Free
            }
            Some(back) => {
                let Returned {
                    delivery,
                    data,
                    span,
                    right,
                    ..
                } = *back;
                let job = Job {
                    delivery,
                    data,
                    span,
                    right,
                    ticket: Ticket::new(std::mem::take(&mut ticket.key), ticket.id.clone()),
                };
                tracing::debug!(parent: &job.span, subscription = %self.subscription,
                    message_id = %job.delivery.message_id, "failed while the breaker is open: held");
                let place = self
                    .held
                    .iter_mut()
                    .find(|slot| tried && slot.id == id && slot.job.is_none());
                match place {
                    // The try failed: back in its place, ahead of its key's later messages.
                    Some(slot) => {
                        slot.job = Some(job);
                        slot.failed_tries += 1;
                    }
                    None => self.held.push_back(Slot {
                        id,
                        key: job.ticket.key.clone(),
                        job: Some(job),
                        failed_tries: u32::from(tried),
                    }),
                }
                AfterEnd::Kept
            }
        };
        if tried && place == AfterEnd::Free {
            // The try is settled: its place among the held goes.
            self.held.retain(|slot| slot.id != id || slot.job.is_some());
        }
        self.publish();
        (place, change)
    }

    /// How many jobs may start now: any number while closed, one (the try) when the cooldown
    /// is over and nothing is held, none otherwise.
    pub(crate) fn may_start(&self) -> usize {
        if self.circuit.is_closed() {
            usize::MAX
        } else if self.circuit.wants_probe() && (self.held.is_empty() || self.new_try) {
            1
        } else {
            0
        }
    }

    /// Message `id`, just started, is the try.
    pub(crate) fn trying(&mut self, id: &str) {
        self.new_try = false;
        let id = id_key(id);
        self.circuit.probing(id);
        self.probe = Some(id);
        self.publish();
    }

    /// The cooldown is over and a message is to be tried: of the held ones first of their
    /// ordering key (no key's later message runs before its earlier one), the earliest that
    /// failed the fewest tries; once every one failed a try, a message waiting to start if there
    /// could start now (`waiting`). So one message that keeps failing does not keep the
    /// breaker open.
    pub(crate) fn take_try(&mut self, waiting: bool) -> Try {
        let mut best: Option<(u32, usize)> = None;
        for (at, slot) in self.held.iter().enumerate() {
            let earlier_of_key = !slot.key.is_empty()
                && self.held.iter().take(at).any(|other| other.key == slot.key);
            if slot.job.is_some()
                && !earlier_of_key
                && best.is_none_or(|(f, _)| slot.failed_tries < f)
            {
                best = Some((slot.failed_tries, at));
            }
        }
        let every_held_failed = best.is_none_or(|(failed, _)| failed > 0);
        if waiting && every_held_failed {
            self.new_try = true;
            return Try::New;
        }
        let Some((_, at)) = best else {
            return Try::Nothing;
        };
        let Some(job) = self.held[at].job.take() else {
            return Try::Nothing;
        };
        self.trying(&job.ticket.id.clone());
        Try::Held(job)
    }

    /// The breaker closed: every held job, in the order they were held.
    pub(crate) fn take_all(&mut self) -> Vec<Job> {
        let jobs = self.held.drain(..).filter_map(|slot| slot.job).collect();
        self.publish();
        jobs
    }

    /// When the first held message must be nacked, before its lease budget ends.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.held
            .iter()
            .filter_map(|slot| slot.job.as_ref())
            .map(expiry)
            .min()
    }

    /// Nacks the held messages whose lease is about to run out: counted and logged. Returns
    /// their tickets, to free their places.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Ticket> {
        let mut due = Vec::new();
        for slot in std::mem::take(&mut self.held) {
            match slot.job {
                Some(job) if expiry(&job) <= now => due.push(job),
                _ => self.held.push_back(slot),
            }
        }
        let tickets = due
            .into_iter()
            .map(|job| self.nack_expired(job, "held by the open breaker"))
            .collect();
        self.publish();
        tickets
    }

    /// Nacks a message that waited (`why`) until its lease was about to run out: counted in
    /// `breaker_expired` and logged. Returns its ticket.
    pub(crate) fn nack_expired(&self, job: Job, why: &str) -> Ticket {
        Stats::bump(&self.stats.breaker_expired);
        tracing::warn!(parent: &job.span, subscription = %self.subscription,
            message_id = %job.delivery.message_id, attempt = ?job.delivery.delivery_attempt,
            "{why} until its lease (max_lease) was about to run out: nacked, Pub/Sub \
             redelivers it with its attempt counted");
        job.right.settle(Settlement::of(Outcome::retry()));
        job.ticket
    }

    /// A stop began: every held message is nacked (counted, and said in one line). Returns
    /// their tickets, to free their places.
    pub(crate) fn release_all(&mut self) -> Vec<Ticket> {
        let held: Vec<Job> = self.held.drain(..).filter_map(|slot| slot.job).collect();
        if !held.is_empty() {
            tracing::warn!(subscription = %self.subscription, messages = held.len(),
                state = self.circuit.state().as_str(),
                "stopping with the breaker open: the messages it held are nacked, Pub/Sub \
                 redelivers them with their attempt counted");
        }
        let tickets = held
            .into_iter()
            .map(|job| {
                Stats::bump(&self.stats.breaker_released);
                job.right.settle(Settlement::of(Outcome::retry()));
                job.ticket
            })
            .collect();
        self.signal.set(false);
        self.publish();
        tickets
    }

    /// Publishes the state and the held count, and signals the breaker open unless messages
    /// may come in to run: closed, or half-open with the next message as the try.
    pub(crate) fn publish(&self) {
        let state = self.circuit.state();
        self.stats.breaker.set(state);
        self.stats
            .breaker
            .held
            .store(self.held.len(), Ordering::Relaxed);
        let take = state == BreakerState::Closed
            || (self.circuit.wants_probe() && (self.held.is_empty() || self.new_try));
        self.signal.set(!take);
    }

    /// Logs and counts a change.
    pub(crate) fn report(&self, change: Change) {
        let subscription = &self.subscription;
        match change {
            Change::None => {}
            Change::Tripped(cooldown) => {
                Stats::bump(&self.stats.breaker_trips);
                tracing::warn!(%subscription, ?cooldown, held = self.held.len(),
                    "breaker open: the handler's dependency looks down; nothing new starts, failed \
                     messages held without spending a delivery attempt");
            }
            Change::Reopened(cooldown) => {
                tracing::info!(%subscription, ?cooldown, held = self.held.len(),
                    "breaker: the try failed; open again");
            }
            Change::Closed => {
                tracing::info!(%subscription, held = self.held.len(),
                    "breaker closed: the try succeeded; held messages run again, and so does \
                     what waited");
            }
        }
    }
}
