//! Handlers on worker threads of their own: a blocked thread stalls nothing else, a worker that
//! dies is restarted, and a stop ends everything it started.

use leasehold::defaults::DEFAULT_TTL;
use leasehold::{
    Delivery, Registration, Subscription,
    error::StoreError,
    status::State,
    store::{Completed, ProgressStore, RedbStore},
};
use leasehold_test_support::{Scratch, eventually, never_within, unique};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longer than the 10 s ack deadline: without lease extensions going on beside it, the blocked
/// message (and every other one) would be redelivered.
const BLOCK: Duration = Duration::from_secs(15);
const MORE: usize = 200;
/// How soon the [`MORE`] messages settle while one thread is blocked.
const SETTLE_WITHIN: Duration = Duration::from_secs(5);

/// One message blocks its handler's thread for [`BLOCK`]; while it does, [`MORE`] messages are
/// published, and must all be handled and acked within [`SETTLE_WITHIN`], with no message
/// redelivered.
async fn one_blocked_thread_stalls_nothing_else(registration: impl FnOnce(&str) -> Registration) {
    let scratch = Scratch::new(|s| s).await;
    let sub = leasehold::start(registration(&scratch.subscription), &scratch.connection)
        .await
        .unwrap();
    scratch.publish("block", "").await;
    eventually(
        "the blocking handler running",
        Duration::from_secs(30),
        || sub.load().running == 1,
    )
    .await;
    let blocked_at = Instant::now();
    scratch.publish_all((0..MORE).map(|n| n.to_string())).await;
    let published = Instant::now();
    eventually(
        "the other messages acked while one thread is blocked",
        SETTLE_WITHIN,
        || sub.stats().acked == MORE as u64,
    )
    .await;
    println!(
        "{MORE} messages acked {:?} after they were published, one thread blocked",
        published.elapsed()
    );
    assert!(
        blocked_at.elapsed() < BLOCK,
        "handled while the block lasted"
    );
    eventually(
        "the blocked message acked",
        BLOCK + Duration::from_secs(30),
        || sub.stats().acked == MORE as u64 + 1,
    )
    .await;
    let stats = sub.stats();
    assert_eq!(stats.received, MORE as u64 + 1, "nothing was redelivered");
    assert_eq!((stats.lost_leases, stats.retried), (0, 0));
    sub.stop().await;
    scratch.cleanup().await;
}

#[actix_rt::test]
async fn an_async_handler_that_blocks_its_thread_stalls_nothing_else() {
    one_blocked_thread_stalls_nothing_else(|subscription| {
        Registration::raw(subscription, |data, d: Delivery| {
            if &data[..] == b"block" {
                // What a blocking driver does by mistake in async code.
                std::thread::sleep(BLOCK);
            }
            async move { d.ack() }
        })
        .workers(8)
        .worker_threads(2)
    })
    .await;
}

#[actix_rt::test]
async fn a_blocking_handler_blocks_only_its_own_thread() {
    one_blocked_thread_stalls_nothing_else(|subscription| {
        Registration::blocking_raw(subscription, |data, d: Delivery| {
            if &data[..] == b"block" {
                std::thread::sleep(BLOCK);
            }
            d.ack()
        })
        .workers(4)
    })
    .await;
}

#[actix_rt::test]
async fn a_worker_thread_that_dies_is_restarted_and_its_messages_come_back() {
    const COUNT: usize = 50;
    let scratch = Scratch::new(|s| s).await;
    let acked_ids = Arc::new(Mutex::new(BTreeSet::new()));
    let killed = Arc::new(AtomicBool::new(false));
    let (a, k) = (acked_ids.clone(), killed.clone());
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        let (a, k) = (a.clone(), k.clone());
        async move {
            if &data[..] == b"kill" && !k.swap(true, Ordering::SeqCst) {
                // The worker's arbiter ends under it, taking every handler on that thread.
                actix_rt::Arbiter::current().stop();
                futures::future::pending::<()>().await;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
            a.lock().insert(d.message_id().to_string());
            d.ack()
        }
    })
    .worker_threads(2);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    let mut published: BTreeSet<String> = scratch
        .publish_all((0..COUNT).map(|n| n.to_string()))
        .await
        .into_iter()
        .collect();
    published.insert(scratch.publish("kill", "").await);
    eventually("every message acked", Duration::from_secs(60), || {
        *acked_ids.lock() == published
    })
    .await;
    // The restart waits out its backoff; the other worker may have finished everything first.
    eventually("the worker restarted", Duration::from_secs(10), || {
        sub.stats().worker_restarts >= 1
    })
    .await;
    let stats = sub.stats();
    assert_eq!(stats.worker_restarts, 1);
    assert_eq!(stats.actor_failures, 1);
    assert!(
        stats.retried >= 1,
        "the killed handler's message was retried"
    );
    assert_eq!(sub.state(), State::Running);
    sub.stop().await;
    scratch.cleanup().await;
    assert!(
        leasehold_test_support::captured_logs().contains("a worker died"),
        "the death was logged"
    );
}

/// A progress store that counts its drops, around a `RedbStore`.
struct DropCounted {
    inner: RedbStore,
    dropped: Arc<AtomicBool>,
}

impl Drop for DropCounted {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl ProgressStore for DropCounted {
    fn completed(&self, id: &str) -> Result<Option<Completed>, StoreError> {
        self.inner.completed(id)
    }
    fn record(
        &self,
        id: &str,
        completed: Completed,
    ) -> futures::future::BoxFuture<'static, Result<(), StoreError>> {
        self.inner.record(id, completed)
    }
    fn clear(&self, id: &str) {
        self.inner.clear(id)
    }
}

#[actix_rt::test]
async fn stop_nacks_what_waits_finishes_what_runs_and_leaves_nothing_behind() {
    const COUNT: usize = 100;
    const WORKERS: usize = 10;
    let scratch = Scratch::new(|s| s).await;
    let dir = std::env::temp_dir().join(unique("stop"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("progress.redb");
    let dropped = Arc::new(AtomicBool::new(false));
    let store = DropCounted {
        inner: RedbStore::open(&path, &scratch.subscription, DEFAULT_TTL).unwrap(),
        dropped: dropped.clone(),
    };
    let started = Arc::new(Mutex::new(Vec::<String>::new()));
    let effects = Arc::new(Mutex::new(Vec::<String>::new()));
    let late = Arc::new(AtomicUsize::new(0));
    let watched: Arc<OnceLock<Subscription>> = Arc::new(OnceLock::new());
    let (s, e, l, w) = (
        started.clone(),
        effects.clone(),
        late.clone(),
        watched.clone(),
    );
    let registration = Registration::raw(&scratch.subscription, move |data, d: Delivery| {
        if w.get().is_some_and(|sub| sub.state() != State::Running) {
            l.fetch_add(1, Ordering::SeqCst);
        }
        s.lock().push(d.message_id().to_string());
        let e = e.clone();
        let n: u64 = String::from_utf8_lossy(&data).parse().unwrap();
        async move {
            actix_rt::time::sleep(Duration::from_millis(1000 + 1000 * (n % 3))).await;
            e.lock().push(d.message_id().to_string());
            d.ack()
        }
    })
    .workers(WORKERS)
    .drain_timeout(Duration::from_secs(10))
    .progress_store(store);
    let sub = leasehold::start(registration, &scratch.connection)
        .await
        .unwrap();
    watched.set(sub.clone()).unwrap();
    scratch.publish_all((0..COUNT).map(|n| n.to_string())).await;
    eventually(
        "every worker busy and messages waiting behind them",
        Duration::from_secs(30),
        || sub.load().running == WORKERS && sub.load().waiting > 0,
    )
    .await;
    sub.stop().await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the progress store was dropped by the time stop returned"
    );
    RedbStore::open(&path, &scratch.subscription, DEFAULT_TTL)
        .expect("the store's file opens again at once");
    let started_at_stop = started.lock().len();
    // The process lives on: nothing of the subscription may still run.
    never_within(
        "a handler started after stop() returned",
        Duration::from_secs(5),
        || started.lock().len() != started_at_stop,
    )
    .await;
    let stats = sub.stats();
    assert_eq!(
        late.load(Ordering::SeqCst),
        0,
        "a handler started after the drain began"
    );
    assert_eq!(
        effects.lock().len(),
        started_at_stop,
        "every handler that started finished: none was cut"
    );
    assert_eq!(stats.acked as usize, started_at_stop);
    assert_eq!(stats.retried, 0, "nothing was nacked at the drain timeout");
    assert!(
        stats.received - stats.acked <= stats.released,
        "every message received either ran to its ack or was released unrun: {stats:?}"
    );
    assert!(
        stats.released > 0,
        "messages waiting at the stop were released"
    );
    assert_eq!(sub.state(), State::Stopped);
    scratch.cleanup().await;
    let _ = std::fs::remove_dir_all(dir);
}
