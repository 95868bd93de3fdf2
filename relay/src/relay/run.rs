//! The relay's loop, a thin shell over the store, the sender and the rules: wait for a wake-up
//! (a commit, a notification) or the poll interval, then lease rows and send them, round after
//! round while rounds come back full; now and then read the backlog and sweep old sent rows. A
//! stop is seen between rounds: the round being sent finishes (its rows are marked), the rest
//! stays in the outbox for the next start.

use crate::rules::options::RelayOptions;
use crate::rules::round::settle;
use crate::sender::Sender;
use crate::stats::Counters;
use futures::{FutureExt, StreamExt};
use leasehold::error::StoreError;
use leasehold::store::{OutboxRow, OutboxStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Sweep statements one turn runs at most before the relay sends again.
const SWEEPS_PER_TURN: usize = 100;

/// How long the loop waits after the store failed `n` times in a row (from 1): 100 ms, doubling,
/// at most 10 s.
pub(crate) fn store_retry_delay(n: u32) -> Duration {
    Duration::from_millis((100u64 << n.saturating_sub(1).min(7)).min(10_000))
}

/// One relay: its store, its sender, its options, its name in leases, its counters.
pub(crate) struct Looping<S, P> {
    pub(crate) store: S,
    pub(crate) sender: P,
    pub(crate) options: RelayOptions,
    pub(crate) owner: String,
    pub(crate) counters: Arc<Counters>,
}

fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

impl<S: OutboxStore, P: Sender> Looping<S, P> {
    /// Runs until `stop` turns true (or its sender is dropped), then returns, having finished
    /// the round it was sending.
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut wakeups = self.store.wakeups();
        let mut next_backlog = Instant::now();
        let mut next_sweep = Instant::now();
        let mut failures_in_a_row = 0u32;
        loop {
            let wait = match self.rounds(&stop).await {
                Ok(()) => {
                    failures_in_a_row = 0;
                    self.options.poll_interval
                }
                Err(e) => {
                    failures_in_a_row += 1;
                    self.store_failed("lease or mark rows", &e, failures_in_a_row);
                    store_retry_delay(failures_in_a_row)
                }
            };
            if stopping(&stop) {
                break;
            }
            self.housekeeping(&mut next_backlog, &mut next_sweep, &stop)
                .await;
            let until = (Instant::now() + wait).min(next_backlog);
            // Biased: a stop wins over a wake-up that came with it. A failing store is not
            // woken by commits, only by its retry delay.
            tokio::select! {
                biased;
                changed = stop.changed() => if changed.is_err() || stopping(&stop) { break },
                Some(()) = wakeups.next(), if failures_in_a_row == 0 => {
                    // The commits of the next moment go with this one; the wake-ups they
                    // raise meanwhile (a `NOTIFY` of a commit already seen) are spent.
                    if !self.options.gather.is_zero() {
                        tokio::time::sleep(self.options.gather).await;
                    }
                    while let Some(Some(())) = wakeups.next().now_or_never() {}
                }
                () = tokio::time::sleep_until(until) => {}
            }
        }
        self.counters.stopped();
    }

    /// Rounds until one leases less than a full batch (or a stop comes). While a full round is
    /// sent, the next one is leased (the database's work beside Pub/Sub's): its rows are other
    /// rows (a lease never takes leased rows, nor a key's rows behind a leased one). Leased for
    /// a round that a stop then cancels, rows are given back at once.
    async fn rounds(&self, stop: &watch::Receiver<bool>) -> Result<(), StoreError> {
        let mut leased = self.lease().await?;
        loop {
            if leased.is_empty() {
                return Ok(());
            }
            if leased.len() < self.options.max_batch || stopping(stop) {
                return self.send(leased).await;
            }
            let (sent, next) = futures::join!(self.send(leased), self.lease());
            sent?;
            leased = next?;
            if stopping(stop) && !leased.is_empty() {
                let ids = leased.iter().map(|r| r.id).collect();
                return self.store.release(&self.owner, ids).await;
            }
        }
    }

    /// Leases the next round's rows.
    async fn lease(&self) -> Result<Vec<OutboxRow>, StoreError> {
        let options = &self.options;
        self.store
            .lease(&self.owner, options.max_batch, options.lease)
            .await
    }

    /// Sends a round's rows and marks them.
    async fn send(&self, rows: Vec<OutboxRow>) -> Result<(), StoreError> {
        let options = &self.options;
        let answers = self.sender.send(&rows, options.send_timeout).await;
        let settled = settle(&rows, &answers, options);
        self.counters.round(settled.sent.len(), &settled.failures);
        for ((topic, kind), rows) in &settled.by_topic {
            let reason = kind.reason();
            if kind.needs_a_fix() {
                tracing::error!(%topic, reason, rows,
                    "outbox rows were not sent and are kept until Pub/Sub takes them \
                     (create the topic, or let the relay's account publish to it)");
            } else {
                tracing::warn!(%topic, reason, rows,
                    "outbox rows were not sent; each is tried again after its wait");
            }
        }
        if !settled.sent.is_empty() {
            let sent = settled.sent.len();
            if let Err(e) = self.store.mark_sent(settled.sent).await {
                tracing::error!(rows = sent, error = %chain(&e),
                    "outbox rows were sent but could not be marked: they are sent again once \
                     their lease lapses (their key lets consumers drop the copies)");
                return Err(e);
            }
        }
        if !settled.failed.is_empty() {
            self.store.mark_failed(settled.failed).await?;
        }
        Ok(())
    }

    /// Reads the backlog and sweeps, each when it is due.
    async fn housekeeping(
        &self,
        next_backlog: &mut Instant,
        next_sweep: &mut Instant,
        stop: &watch::Receiver<bool>,
    ) {
        let now = Instant::now();
        if now >= *next_backlog {
            *next_backlog = now + self.options.backlog_interval;
            match self.store.backlog().await {
                Ok(backlog) => self.counters.backlog(backlog),
                Err(e) => self.store_failed("read the outbox's backlog", &e, 1),
            }
        }
        if now >= *next_sweep {
            *next_sweep = now + self.options.sweep_interval;
            for _ in 0..SWEEPS_PER_TURN {
                let batch = self.options.sweep_batch;
                match self.store.sweep(self.options.retention, batch).await {
                    Ok(n) => {
                        self.counters.swept(n);
                        if n < batch as u64 || stopping(stop) {
                            break;
                        }
                    }
                    Err(e) => {
                        self.store_failed("delete old sent outbox rows", &e, 1);
                        break;
                    }
                }
            }
        }
    }

    /// Counts a store failure, logged at warn for the first of a run and once in a hundred.
    fn store_failed(&self, what: &str, error: &StoreError, in_a_row: u32) {
        self.counters.store_failed();
        if in_a_row == 1 || in_a_row.is_multiple_of(100) {
            tracing::warn!(error = %chain(error), failures_in_a_row = in_a_row,
                "the relay could not {what}; it tries again");
        }
    }
}

/// An error and its causes, for a log line.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_waits_double_up_to_ten_seconds() {
        let ms: Vec<u128> = (1..=9).map(|n| store_retry_delay(n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
    }
}
