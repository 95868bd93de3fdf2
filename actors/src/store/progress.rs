//! The processing-progress store ([`ProgressStore`], [`MemoryStore`]) and the guarded calls the
//! runtime makes into it. What a store does, what it prevents and what it cannot: the doc of
//! [`ProgressStore`].

use crate::error::{Chain, StoreError};
use crate::rt::guard::{self, Guarded, Panicked};
use crate::rules::outcome::Completed;
use crate::status::stats::Stats;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Records kept by the in-memory store, by default: a bound on memory (about 100 bytes each).
/// A store of 1,024 records or more is kept in 8 shards, each bounded to an eighth, so the bound
/// holds and the oldest records go first within each shard.
pub const DEFAULT_MEMORY_CAPACITY: usize = 100_000;
/// How long a record lives, by default: Pub/Sub redelivers an acked message, when it does, within
/// minutes (an ack lost in flight comes back after the ack deadline, at most 600 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15 * 60);

/// Where the progress of finished messages is kept, keyed by message id (or by a dedupe key,
/// `attribute=value`, for a registration that
/// [dedupes on an attribute](crate::Registration::dedupe_on): the methods' `message_id` is then
/// that key). One store per subscription.
///
/// It lets a redelivery after a failed or lost ack be settled again without running the
/// handler a second time. This follows Pub/Sub's advice for exactly-once subscriptions: keep a
/// message's progress until its ack is confirmed. The runtime
/// 1. looks a message up before running the handler: when it is recorded, it is settled with the
///    recorded outcome (counted in `replayed`) and the handler does not run;
/// 2. records `ack()` and `drop()` outcomes before their ack is sent (a handler's when it
///    returns, a [`Settler`](crate::Settler)'s when it is used);
/// 3. clears the record when Pub/Sub confirms the ack (exactly-once subscriptions); elsewhere the
///    record expires after the store's time to live.
///
/// A redelivery that arrives while the first delivery's handler is still running waits for that
/// run instead of running beside it, then goes through the store like any redelivery.
///
/// **What it prevents:** a second run of the handler for a message whose handler already
/// finished, when the ack was lost, refused or not sent (lost lease, connection cut, crash after
/// the record) and the message comes back to this process (or, with a persistent store, to this
/// process after a restart). **What it cannot prevent:** a redelivery to another replica with
/// its own store, a crash between the handler's side effect and the record (the effect and the
/// record are not one transaction), and a redelivery that arrives after the record expired. For
/// those, write the side effect in a transactional handler
/// ([`Registration::transactional_json`](crate::Registration::transactional_json)), or make it
/// idempotent, keyed by [`Delivery::message_id`](crate::Delivery::message_id).
///
/// The stores: [`MemoryStore`], the default, in memory and bounded
/// ([`DEFAULT_MEMORY_CAPACITY`] records); the `leasehold` crate's `RedbStore`
/// (`RedbStore::open(path, subscription, ttl)`), on disk and written in group commits, so a
/// restarted process does not redo work whose ack was lost. Neither sees another replica's
/// work: a transactional registration on `PostgresStore` (crate `leasehold-postgres`, a
/// [`TransactionalStore`](crate::store::TransactionalStore)) keeps its records in the
/// handler's transaction, shared by every replica. Records expire after a time to live:
/// [`DEFAULT_TTL`] (15 minutes) for a default `MemoryStore`, the one given to `RedbStore`.
///
/// Shared by the subscription's worker threads, so it is `Send + Sync`. Every call is guarded:
/// a store that panics is logged and counted (`panics`), and the message goes on as if the call
/// had failed (a lookup that panics runs the handler; a record that panics still settles).
pub trait ProgressStore: Send + Sync + 'static {
    /// The outcome recorded for `message_id`, if any and not expired.
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError>;
    /// Records that `message_id` finished; resolves when the record is kept (durably, for a
    /// persistent store).
    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> BoxFuture<'static, Result<(), StoreError>>;
    /// Forgets `message_id`: its ack was confirmed.
    fn clear(&self, message_id: &str);
}

/// A store's key as a log line may show it: a message id as it is, a dedupe key
/// (`attribute=value`, an attribute's value in it) as `"(a dedupe key)"`. Message ids have no
/// `=`.
///
/// ```
/// # extern crate leasehold_actors as leasehold;
/// use leasehold::store::loggable_key;
/// assert_eq!(loggable_key("1234567890"), "1234567890");
/// assert_eq!(loggable_key("event-id=order-7"), "(a dedupe key)");
/// ```
pub fn loggable_key(key: &str) -> &str {
    if key.contains('=') {
        "(a dedupe key)"
    } else {
        key
    }
}

/// A store shared behind an `Arc` is a store: keep a clone to look inside it.
impl<S: ProgressStore + ?Sized> ProgressStore for Arc<S> {
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError> {
        (**self).completed(message_id)
    }
    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        (**self).record(message_id, completed)
    }
    fn clear(&self, message_id: &str) {
        (**self).clear(message_id)
    }
}

/// Looks message `message_id` up by `key` (its message id, or its dedupe key: never logged),
/// guarded: a failed or panicking lookup runs the handler (as without a store), logged in `span`.
pub(crate) fn lookup_guarded(
    store: &dyn ProgressStore,
    subscription: &str,
    key: &str,
    message_id: &str,
    stats: &Stats,
    span: &tracing::Span,
) -> Option<Completed> {
    match guard::call(|| store.completed(key)) {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => {
            tracing::warn!(parent: span, %subscription, %message_id, error = %Chain(&error),
                "progress store lookup failed; running the handler");
            None
        }
        Err(Panicked) => {
            Stats::bump(&stats.panics);
            tracing::error!(parent: span, %subscription, %message_id,
                "the progress store panicked looking the message up; running the handler");
            None
        }
    }
}

/// Records that message `message_id` finished, under `key` (its message id, or its dedupe key:
/// never logged), guarded: a failure or a panic is logged in `span` (and a panic counted), and
/// the caller settles the message anyway (the work is done).
pub(crate) async fn record_guarded(
    store: &dyn ProgressStore,
    subscription: &str,
    key: &str,
    message_id: &str,
    completed: Completed,
    stats: &Stats,
    span: &tracing::Span,
) {
    let result = match start_record(store, key, completed) {
        Ok(recording) => recording.await,
        Err(panicked) => Err(panicked),
    };
    report_record(result, subscription, message_id, stats, span);
}

/// A record on its way: its future, guarded.
pub(crate) type Recording = Guarded<BoxFuture<'static, Result<(), StoreError>>>;

/// Starts recording that the message kept under `key` finished, guarded (the first half of
/// [`record_guarded`], for a caller that polls the recording itself).
pub(crate) fn start_record(
    store: &dyn ProgressStore,
    key: &str,
    completed: Completed,
) -> Result<Recording, Panicked> {
    guard::call(|| store.record(key, completed)).map(Guarded::new)
}

/// Logs a record that failed or panicked (the second half of [`record_guarded`]).
pub(crate) fn report_record(
    result: Result<Result<(), StoreError>, Panicked>,
    subscription: &str,
    message_id: &str,
    stats: &Stats,
    span: &tracing::Span,
) {
    match result {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(parent: span, %subscription, %message_id,
            error = %Chain(&error),
            "could not record the finished message; a redelivery would run it again"),
        Err(Panicked) => {
            Stats::bump(&stats.panics);
            tracing::error!(parent: span, %subscription, %message_id,
                "the progress store panicked recording the message; a redelivery would run it \
                 again");
        }
    }
}

/// Forgets `message_id`, guarded: a panic is logged in `span` and counted.
pub(crate) fn clear_guarded(
    store: &dyn ProgressStore,
    subscription: &str,
    message_id: &str,
    stats: &Stats,
    span: &tracing::Span,
) {
    if guard::call(|| store.clear(message_id)).is_err() {
        Stats::bump(&stats.panics);
        tracing::error!(parent: span, %subscription, %message_id,
            "the progress store panicked clearing a confirmed message");
    }
}

/// A bounded in-memory store: the oldest records go first when it is full, and records expire
/// after their time to live. Prevents duplicates within one process's life.
#[derive(Debug)]
pub struct MemoryStore {
    /// Records per shard.
    capacity: usize,
    /// The time to live, in milliseconds.
    ttl: u64,
    /// Where the store's clock starts: times are kept as milliseconds since.
    epoch: Instant,
    /// Shards by message id, so that worker threads seldom wait for one another; each evicts
    /// its own oldest records.
    shards: Box<[Mutex<MemoryInner>]>,
}

/// Shards of a large store (a small one keeps exact oldest-first eviction in one shard).
const SHARDS: usize = 8;
/// Stores at least this large are sharded.
const SHARDED_FROM: usize = 1024;

/// Records by message id, each a [`Stamp`]. Pub/Sub's ids are decimal numbers: those are kept as
/// a `u64`, with no allocation and a cheap hash, 16 bytes a record in the map and 16 in the
/// order (a store of 100,000 records is walked at random on every message, so its size is its
/// cost in cache misses); any other id is kept as text, shared by its map and its order. Ids
/// are assigned by Pub/Sub, so a fast non-keyed hash is safe here.
#[derive(Debug, Default)]
struct MemoryInner {
    numbers: FxHashMap<u64, Stamp>,
    texts: FxHashMap<Arc<str>, Stamp>,
    /// Insertion order with the time of each record, for eviction and expiry. May hold ids
    /// already cleared or recorded again.
    number_order: VecDeque<(u64, u64)>,
    text_order: VecDeque<(Arc<str>, u64)>,
}

/// A record: when it was made (milliseconds since the store's epoch) and what finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp(u64);

impl Stamp {
    fn new(at: u64, completed: Completed) -> Self {
        Self(at << 1 | u64::from(completed == Completed::Dropped))
    }

    fn at(self) -> u64 {
        self.0 >> 1
    }

    fn completed(self) -> Completed {
        if self.0 & 1 == 1 {
            Completed::Dropped
        } else {
            Completed::Acked
        }
    }
}

/// The id as a number, when it is a canonical decimal (no sign, no leading zero), so that two
/// different ids never share a number.
fn number(id: &str) -> Option<u64> {
    let canonical = !id.is_empty()
        && id.len() <= 19
        && id.bytes().all(|b| b.is_ascii_digit())
        && (id.len() == 1 || !id.starts_with('0'));
    if canonical { id.parse().ok() } else { None }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(DEFAULT_MEMORY_CAPACITY, DEFAULT_TTL)
    }
}

impl MemoryStore {
    /// At most `capacity` records, each kept for `ttl` (to the millisecond).
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = capacity.max(1);
        let shards = if capacity >= SHARDED_FROM { SHARDS } else { 1 };
        Self {
            capacity: capacity.div_ceil(shards),
            ttl: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX / 4),
            epoch: Instant::now(),
            shards: (0..shards).map(|_| Mutex::default()).collect(),
        }
    }

    /// The store's clock: milliseconds since its epoch.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX / 4)
    }

    /// The shard of `message_id`, whose numeric form (`number(message_id)`) is `numeric`.
    fn shard(&self, message_id: &str, numeric: Option<u64>) -> &Mutex<MemoryInner> {
        let n = self.shards.len();
        if n == 1 {
            return &self.shards[0];
        }
        let index = match numeric {
            Some(id) => id as usize,
            None => message_id
                .bytes()
                .fold(0usize, |h, b| h.rotate_left(5) ^ usize::from(b)),
        };
        &self.shards[index % n]
    }

    /// Records held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MemoryInner {
    fn len(&self) -> usize {
        self.numbers.len() + self.texts.len()
    }

    fn get(&self, id: &str, numeric: Option<u64>) -> Option<Stamp> {
        match numeric {
            Some(n) => self.numbers.get(&n).copied(),
            None => self.texts.get(id).copied(),
        }
    }

    fn insert(&mut self, id: &str, numeric: Option<u64>, stamp: Stamp) {
        match numeric {
            Some(n) => {
                self.numbers.insert(n, stamp);
                self.number_order.push_back((n, stamp.at()));
            }
            None => {
                let id: Arc<str> = Arc::from(id);
                self.texts.insert(id.clone(), stamp);
                self.text_order.push_back((id, stamp.at()));
            }
        }
    }

    fn remove(&mut self, id: &str, numeric: Option<u64>) {
        match numeric {
            Some(n) => {
                self.numbers.remove(&n);
            }
            None => {
                self.texts.remove(id);
            }
        }
    }

    /// Removes expired records, and the oldest while the shard is full.
    fn evict(&mut self, capacity: usize, ttl: u64, now: u64) {
        loop {
            let number = self.number_order.front().map(|&(_, at)| at);
            let text = self.text_order.front().map(|(_, at)| *at);
            let (at, numeric) = match (number, text) {
                (None, None) => break,
                (Some(n), Some(t)) => (n.min(t), n <= t),
                (Some(n), None) => (n, true),
                (None, Some(t)) => (t, false),
            };
            let expired = at.saturating_add(ttl) <= now;
            let orders = self.number_order.len() + self.text_order.len();
            // Cleared ids leave entries behind: bound those too.
            if !expired && self.len() < capacity && orders < 2 * capacity {
                break;
            }
            // Only remove the record this entry was made for (it may have been re-recorded).
            if numeric {
                if let Some((n, at)) = self.number_order.pop_front()
                    && self.numbers.get(&n).is_some_and(|s| s.at() == at)
                {
                    self.numbers.remove(&n);
                }
            } else if let Some((id, at)) = self.text_order.pop_front()
                && self.texts.get(&id).is_some_and(|s| s.at() == at)
            {
                self.texts.remove(&id);
            }
        }
    }
}

/// The memory store's record, done when it is made.
struct Recorded;

impl Future for Recorded {
    type Output = Result<(), StoreError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl ProgressStore for MemoryStore {
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError> {
        let numeric = number(message_id);
        let now = self.now();
        let inner = self.shard(message_id, numeric).lock();
        Ok(inner
            .get(message_id, numeric)
            .filter(|stamp| stamp.at().saturating_add(self.ttl) > now)
            .map(Stamp::completed))
    }

    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let now = self.now();
        let numeric = number(message_id);
        let mut inner = self.shard(message_id, numeric).lock();
        inner.evict(self.capacity, self.ttl, now);
        inner.insert(message_id, numeric, Stamp::new(now, completed));
        // Zero-sized: boxing it allocates nothing.
        Box::pin(Recorded)
    }

    fn clear(&self, message_id: &str) {
        let numeric = number(message_id);
        self.shard(message_id, numeric)
            .lock()
            .remove(message_id, numeric);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn records_until_cleared() {
        let store = MemoryStore::default();
        assert_eq!(store.completed("m1"), Ok(None));
        store.record("m1", Completed::Acked).await.unwrap();
        assert_eq!(store.completed("m1"), Ok(Some(Completed::Acked)));
        store.clear("m1");
        assert_eq!(store.completed("m1"), Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn records_expire_after_the_ttl() {
        let store = MemoryStore::new(10, Duration::from_secs(60));
        store.record("m1", Completed::Dropped).await.unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(store.completed("m1"), Ok(Some(Completed::Dropped)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(store.completed("m1"), Ok(None));
        store.record("m2", Completed::Acked).await.unwrap();
        assert_eq!(store.len(), 1, "the expired record was removed");
    }

    #[tokio::test(start_paused = true)]
    async fn numeric_and_other_ids_are_kept_apart() {
        let store = MemoryStore::default();
        store.record("7", Completed::Acked).await.unwrap();
        store.record("msg-7", Completed::Dropped).await.unwrap();
        assert_eq!(store.completed("7"), Ok(Some(Completed::Acked)));
        assert_eq!(store.completed("msg-7"), Ok(Some(Completed::Dropped)));
        // Not the number 7: a different id.
        assert_eq!(store.completed("007"), Ok(None));
        assert_eq!(store.completed("+7"), Ok(None));
        store.record("007", Completed::Dropped).await.unwrap();
        assert_eq!(store.completed("7"), Ok(Some(Completed::Acked)));
        assert_eq!(store.completed("007"), Ok(Some(Completed::Dropped)));
        // Larger than a u64: kept as text.
        let huge = "123456789012345678901234567890";
        store.record(huge, Completed::Acked).await.unwrap();
        assert_eq!(store.completed(huge), Ok(Some(Completed::Acked)));
        store.clear("7");
        store.clear("msg-7");
        assert_eq!(store.completed("7"), Ok(None));
        assert_eq!(store.completed("msg-7"), Ok(None));
        assert_eq!(store.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_store_is_sharded_and_stays_bounded() {
        let store = MemoryStore::new(4096, DEFAULT_TTL);
        for n in 0..10_000u32 {
            store
                .record(&n.to_string(), Completed::Acked)
                .await
                .unwrap();
        }
        assert!(store.len() <= 4096, "{} records", store.len());
        assert_eq!(store.completed("9999"), Ok(Some(Completed::Acked)));
        assert_eq!(store.completed("0"), Ok(None), "the oldest went first");
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_record_goes_first_when_full() {
        let store = MemoryStore::new(2, DEFAULT_TTL);
        for id in ["a", "b", "c"] {
            store.record(id, Completed::Acked).await.unwrap();
        }
        assert_eq!(store.completed("a"), Ok(None));
        assert_eq!(store.completed("c"), Ok(Some(Completed::Acked)));
        assert_eq!(store.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_goes_first_across_numeric_and_other_ids() {
        let store = MemoryStore::new(2, DEFAULT_TTL);
        for id in ["7", "msg-8", "9"] {
            store.record(id, Completed::Dropped).await.unwrap();
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(store.completed("7"), Ok(None));
        assert_eq!(store.completed("msg-8"), Ok(Some(Completed::Dropped)));
        assert_eq!(store.completed("9"), Ok(Some(Completed::Dropped)));
        store.record("msg-10", Completed::Acked).await.unwrap();
        assert_eq!(store.completed("msg-8"), Ok(None));
        assert_eq!(store.completed("9"), Ok(Some(Completed::Dropped)));
        assert_eq!(store.completed("msg-10"), Ok(Some(Completed::Acked)));
    }
}
