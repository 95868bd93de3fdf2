//! The dedupe contract (`leasehold_test_support::dedupe`) on the in-memory store and on redb: a
//! publisher's two copies of one event run the handler once.

use leasehold::store::{MemoryStore, RedbStore};
use leasehold::{Delivery, Registration};
use leasehold_test_support::dedupe::published_twice_runs_once;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn counting(subscription: &str, runs: Arc<AtomicUsize>) -> Registration {
    Registration::raw(subscription, move |_, d: Delivery| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { d.ack() }
    })
}

#[actix_rt::test]
async fn a_message_published_twice_runs_once_with_the_memory_store() {
    published_twice_runs_once(|subscription, runs| {
        counting(subscription, runs).progress_store(MemoryStore::default())
    })
    .await;
}

#[actix_rt::test]
async fn a_message_published_twice_runs_once_with_redb() {
    let dir = std::env::temp_dir().join(leasehold_test_support::unique("dedupe-redb"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("progress.redb");
    published_twice_runs_once(|subscription, runs| {
        let store = RedbStore::open(&path, subscription, Duration::from_secs(3600)).unwrap();
        counting(subscription, runs).progress_store(store)
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
