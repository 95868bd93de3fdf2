//! The loop on an in-memory outbox and a scripted sender, with tokio's paused clock: wake-ups,
//! failures kept and retried, one key in order, the drain, a failing store, the sweep.

use super::run::Looping;
use crate::rules::failure::FailureKind;
use crate::rules::options::{DEFAULT_GATHER, RelayOptions};
use crate::rules::round::Sent;
use crate::sender::Sender;
use crate::stats::Counters;
use futures::future::LocalBoxFuture;
use futures::stream::LocalBoxStream;
use leasehold::error::{Cause, StoreError};
use leasehold::store::{
    Backlog, Candidate, CommitSignal, FailedRow, OutboxRow, OutboxStore, leasable,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::time::Instant;

/// One row of the in-memory outbox.
#[derive(Debug, Clone)]
struct Stored {
    row: OutboxRow,
    leased_until: Option<Instant>,
    ready_at: Option<Instant>,
    sent_at: Option<Instant>,
    reasons: Vec<&'static str>,
}

#[derive(Debug, Default)]
struct Inner {
    rows: Vec<Stored>,
    failing: bool,
    leases: u32,
    sweeps: Vec<u64>,
    swept: usize,
    released: u32,
}

/// An in-memory outbox: the rows, and the commit signal its "transactions" raise.
#[derive(Clone, Default)]
struct Memory {
    inner: Arc<Mutex<Inner>>,
    signal: CommitSignal,
}

impl Memory {
    /// Commits a row (id = seq order of insertion) and wakes the relays.
    fn commit(&self, topic: &str, key: &str) -> i64 {
        let mut inner = self.inner.lock().unwrap();
        let id = inner.rows.len() as i64 + 1;
        let seq = if key.is_empty() {
            0
        } else {
            inner
                .rows
                .iter()
                .filter(|s| s.row.ordering_key == key)
                .count() as i64
                + 1
        };
        inner.rows.push(Stored {
            row: OutboxRow::new(
                id,
                topic.into(),
                bytes::Bytes::from(format!("m{id}")),
                Vec::new(),
                key.into(),
                seq,
                format!("key-{id}"),
                SystemTime::now(),
                0,
            ),
            leased_until: None,
            ready_at: None,
            sent_at: None,
            reasons: Vec::new(),
        });
        drop(inner);
        self.signal.committed();
        id
    }

    fn row(&self, id: i64) -> Stored {
        self.inner.lock().unwrap().rows[id as usize - 1].clone()
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.inner.lock().unwrap().failing {
            return Err(StoreError::Backend(Cause::message("the database is down")));
        }
        Ok(())
    }
}

impl OutboxStore for Memory {
    fn lease(
        &self,
        _owner: &str,
        limit: usize,
        lease: Duration,
    ) -> LocalBoxFuture<'static, Result<Vec<OutboxRow>, StoreError>> {
        self.inner.lock().unwrap().leases += 1;
        let result = self.check().map(|()| {
            let mut inner = self.inner.lock().unwrap();
            let now = Instant::now();
            let free = |s: &Stored| {
                s.sent_at.is_none()
                    && s.leased_until.is_none_or(|t| t <= now)
                    && s.ready_at.is_none_or(|t| t <= now)
            };
            let candidates: Vec<Candidate> = inner
                .rows
                .iter()
                .filter(|s| free(s))
                .take(limit)
                .map(|s| Candidate {
                    id: s.row.id,
                    topic: s.row.topic.clone(),
                    ordering_key: s.row.ordering_key.clone(),
                    seq: s.row.seq,
                })
                .collect();
            let mut heads: HashMap<(String, String), i64> = HashMap::new();
            for s in inner.rows.iter().filter(|s| s.sent_at.is_none()) {
                let head = heads
                    .entry((s.row.topic.clone(), s.row.ordering_key.clone()))
                    .or_insert(s.row.seq);
                *head = (*head).min(s.row.seq);
            }
            leasable(&candidates, &heads)
                .into_iter()
                .map(|id| {
                    let stored = &mut inner.rows[id as usize - 1];
                    stored.leased_until = Some(now + lease);
                    stored.row.clone()
                })
                .collect()
        });
        Box::pin(async move { result })
    }

    fn mark_sent(&self, ids: Vec<i64>) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let result = self.check().map(|()| {
            let mut inner = self.inner.lock().unwrap();
            for id in ids {
                let stored = &mut inner.rows[id as usize - 1];
                stored.sent_at = Some(Instant::now());
                stored.leased_until = None;
            }
        });
        Box::pin(async move { result })
    }

    fn mark_failed(
        &self,
        failed: Vec<FailedRow>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let result = self.check().map(|()| {
            let mut inner = self.inner.lock().unwrap();
            for f in failed {
                let stored = &mut inner.rows[f.id as usize - 1];
                stored.row.attempts += 1;
                stored.ready_at = Some(Instant::now() + f.retry_after);
                stored.leased_until = None;
                stored.reasons.push(f.reason);
            }
        });
        Box::pin(async move { result })
    }

    fn release(&self, _: &str, ids: Vec<i64>) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let mut inner = self.inner.lock().unwrap();
        for id in ids {
            inner.rows[id as usize - 1].leased_until = None;
            inner.released += 1;
        }
        Box::pin(async { Ok(()) })
    }

    fn sweep(
        &self,
        _retention: Duration,
        limit: usize,
    ) -> LocalBoxFuture<'static, Result<u64, StoreError>> {
        let result = self.check().map(|()| {
            let mut inner = self.inner.lock().unwrap();
            // The rows stay (their ids are their places): what was swept is counted.
            let sent = inner.rows.iter().filter(|s| s.sent_at.is_some()).count();
            let n = (sent - inner.swept).min(limit);
            inner.swept += n;
            inner.sweeps.push(n as u64);
            n as u64
        });
        Box::pin(async move { result })
    }

    fn backlog(&self) -> LocalBoxFuture<'static, Result<Backlog, StoreError>> {
        let result = self.check().map(|()| {
            let inner = self.inner.lock().unwrap();
            Backlog {
                pending: inner.rows.iter().filter(|s| s.sent_at.is_none()).count() as u64,
                oldest: None,
            }
        });
        Box::pin(async move { result })
    }

    fn wakeups(&self) -> LocalBoxStream<'static, ()> {
        self.signal.watch()
    }
}

type Script = Box<dyn Fn(&OutboxRow, u32) -> Sent>;

/// A sender that answers each row as its script says (given the row and how many times it was
/// sent before), after `delay`, and remembers what was sent and when.
struct Scripted {
    script: Script,
    delay: Duration,
    tries: RefCell<HashMap<i64, u32>>,
    sent: Rc<RefCell<Vec<(i64, Instant)>>>,
}

impl Sender for Scripted {
    fn send<'a>(&'a self, rows: &'a [OutboxRow], _: Duration) -> LocalBoxFuture<'a, Vec<Sent>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            rows.iter()
                .map(|row| {
                    let mut tries = self.tries.borrow_mut();
                    let n = tries.entry(row.id).or_default();
                    let answer = (self.script)(row, *n);
                    *n += 1;
                    if answer.is_ok() {
                        self.sent.borrow_mut().push((row.id, Instant::now()));
                    }
                    answer
                })
                .collect()
        })
    }
}

/// A relay on `store` with `script`, running on this thread until `stop` is set.
struct Running {
    stop: watch::Sender<bool>,
    counters: Arc<Counters>,
    sent: Rc<RefCell<Vec<(i64, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

fn start(store: &Memory, options: RelayOptions, delay: Duration, script: Script) -> Running {
    let (stop, stopped) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let sent = Rc::new(RefCell::new(Vec::new()));
    let relay = Looping {
        store: store.clone(),
        sender: Scripted {
            script,
            delay,
            tries: RefCell::default(),
            sent: sent.clone(),
        },
        options,
        owner: "test".into(),
        counters: counters.clone(),
    };
    let task = tokio::task::spawn_local(relay.run(stopped));
    Running {
        stop,
        counters,
        sent,
        task,
    }
}

fn options() -> RelayOptions {
    RelayOptions {
        poll_interval: Duration::from_secs(30),
        ..RelayOptions::default()
    }
}

fn always_ok() -> Script {
    Box::new(|_, _| Ok(()))
}

async fn local<F: Future>(test: F) -> F::Output {
    tokio::task::LocalSet::new().run_until(test).await
}

#[tokio::test(start_paused = true)]
async fn a_commit_is_sent_at_once_not_at_the_next_poll() {
    local(async {
        let store = Memory::default();
        let relay = start(&store, options(), Duration::ZERO, always_ok());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let committed = Instant::now();
        let id = store.commit("projects/p/topics/events", "");
        tokio::time::sleep(Duration::from_millis(10)).await;
        let sent = relay.sent.borrow().clone();
        assert_eq!(sent.len(), 1, "sent at the commit's wake-up");
        assert_eq!(sent[0], (id, committed + DEFAULT_GATHER));
        assert!(store.row(id).sent_at.is_some());
        assert_eq!(relay.counters.snapshot().sent, 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn failed_rows_are_kept_and_sent_after_their_wait() {
    local(async {
        let store = Memory::default();
        let script: Script = Box::new(|row, tries| match (row.topic.as_str(), tries) {
            (_, 0 | 1) => Err(FailureKind::Unavailable),
            ("projects/p/topics/missing", _) => Err(FailureKind::TopicMissing),
            _ => Ok(()),
        });
        let relay = start(&store, options(), Duration::ZERO, script);
        let flaky = store.commit("projects/p/topics/events", "");
        let missing = store.commit("projects/p/topics/missing", "");
        // Waits of 1 s, then 2 s: tried again at the polls after them.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(store.row(flaky).sent_at.is_some());
        let kept = store.row(missing);
        assert!(kept.sent_at.is_none(), "a missing topic's row is kept");
        assert_eq!(
            kept.reasons[..3],
            ["unavailable", "unavailable", "topic_missing"]
        );
        let stats = relay.counters.snapshot();
        assert_eq!(stats.sent, 1);
        assert_eq!(stats.failures[0], (FailureKind::Unavailable, 4));
        assert!(stats.failures[1].1 >= 1, "{stats:?}");
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn one_keys_rows_are_sent_in_commit_order_behind_a_failure() {
    local(async {
        let store = Memory::default();
        // The key's first row fails once; the publisher holds back the others of its round.
        let script: Script = Box::new(|row, tries| match (row.seq, tries) {
            (1, 0) => Err(FailureKind::Unavailable),
            (_, 0) => Err(FailureKind::OrderingKeyPaused),
            _ => Ok(()),
        });
        let relay = start(&store, options(), Duration::ZERO, script);
        let ids: Vec<i64> = (0..3)
            .map(|_| store.commit("projects/p/topics/events", "customer-1"))
            .collect();
        tokio::time::sleep(Duration::from_secs(60)).await;
        let order: Vec<i64> = relay.sent.borrow().iter().map(|(id, _)| *id).collect();
        assert_eq!(order, ids);
        assert_eq!(store.row(ids[2]).reasons, ["ordering_key_paused"]);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_stop_finishes_the_round_being_sent_and_leaves_the_rest() {
    local(async {
        let store = Memory::default();
        let relay = start(&store, options(), Duration::from_secs(5), always_ok());
        let first = store.commit("projects/p/topics/events", "");
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Committed while the first round is being sent: left for the next start.
        let second = store.commit("projects/p/topics/events", "");
        relay.stop.send(true).unwrap();
        relay.task.await.unwrap();
        assert!(store.row(first).sent_at.is_some(), "the round finished");
        assert!(store.row(second).sent_at.is_none(), "the rest stays");
        assert!(relay.counters.snapshot().stopped);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_is_counted_and_tried_with_growing_waits() {
    local(async {
        let store = Memory::default();
        store.inner.lock().unwrap().failing = true;
        let relay = start(&store, options(), Duration::ZERO, always_ok());
        for _ in 0..20 {
            store.signal.committed();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // 2 s of commits: waits of 0.1, 0.2, 0.4, 0.8 s, not one lease per wake-up.
        let leases = store.inner.lock().unwrap().leases;
        assert!((3..=6).contains(&leases), "{leases} leases");
        assert!(relay.counters.snapshot().store_failures >= 3);
        store.inner.lock().unwrap().failing = false;
        let id = store.commit("projects/p/topics/events", "");
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(store.row(id).sent_at.is_some());
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn sent_rows_are_swept_in_small_batches_until_fewer_are_left() {
    local(async {
        let store = Memory::default();
        for _ in 0..5 {
            store.commit("projects/p/topics/events", "");
        }
        let sweeping = RelayOptions {
            sweep_batch: 2,
            sweep_interval: Duration::from_secs(10),
            ..options()
        };
        let relay = start(&store, sweeping, Duration::ZERO, always_ok());
        tokio::time::sleep(Duration::from_secs(15)).await;
        // The first turn, after the first round: 2, 2, then 1 (fewer than a batch: done);
        // the next, 10 s later, finds nothing.
        assert_eq!(store.inner.lock().unwrap().sweeps, [2, 2, 1, 0]);
        assert_eq!(relay.counters.snapshot().swept, 5);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_next_round_is_leased_while_one_is_sent_and_given_back_at_a_stop() {
    local(async {
        let store = Memory::default();
        let ids: Vec<i64> = (0..6)
            .map(|_| store.commit("projects/p/topics/events", ""))
            .collect();
        let relay = start(
            &store,
            options().max_batch(2),
            Duration::from_secs(5),
            always_ok(),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Sending rows 1 and 2; rows 3 and 4 are leased beside it.
        assert!(store.row(ids[2]).leased_until.is_some());
        assert!(store.row(ids[4]).leased_until.is_none());
        relay.stop.send(true).unwrap();
        relay.task.await.unwrap();
        assert!(
            store.row(ids[1]).sent_at.is_some(),
            "the round being sent finished"
        );
        for id in &ids[2..] {
            let row = store.row(*id);
            assert!(
                row.sent_at.is_none() && row.leased_until.is_none(),
                "{row:?}"
            );
        }
        assert_eq!(store.inner.lock().unwrap().released, 2);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_commits_of_a_moment_go_in_one_round() {
    local(async {
        let store = Memory::default();
        let relay = start(&store, options(), Duration::ZERO, always_ok());
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..3 {
            store.commit("projects/p/topics/events", "");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stats = relay.counters.snapshot();
        assert_eq!((stats.sent, stats.rounds), (3, 1), "{stats:?}");
        // One lease for the three: the wake-ups of the second and third commit were spent.
        assert_eq!(
            store.inner.lock().unwrap().leases,
            2,
            "the first at the start"
        );
    })
    .await;
}
