//! A persistent processing-progress store on [redb], an embedded database: records survive a
//! restart, so a restarted process does not redo work whose ack was lost.
//!
//! Records are written by one background thread that commits whatever has queued up in one
//! durable transaction (group commit), so a busy subscription pays one disk sync per batch, not
//! per message. [`ProgressStore::record`] resolves once its batch is durable.
//!
//! [redb]: https://www.redb.org

use futures::future::BoxFuture;
use leasehold_actors::error::{Cause, StoreError};
use leasehold_actors::store::{Completed, ProgressStore};
use redb::{Database, ReadableDatabase, TableDefinition, TableError};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// How often the writer removes expired records.
const PURGE_PERIOD: Duration = Duration::from_secs(60);
/// The most writes committed in one transaction.
const MAX_BATCH: usize = 4096;

enum Write {
    Record {
        message_id: String,
        completed: Completed,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    Clear(String),
}

/// A progress store for one subscription in a redb database file.
///
/// ```no_run
/// use leasehold::{Delivery, Registration, store::RedbStore};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let subscription = "projects/p/subscriptions/orders";
/// let store = RedbStore::open("/var/lib/orders/progress.redb", subscription, leasehold::defaults::DEFAULT_TTL)?;
/// let registration = Registration::raw(subscription, |_, d: Delivery| async move { d.ack() })
///     .progress_store(store);
/// # Ok(()) }
/// ```
///
/// Dropping the store waits for its writer thread to commit what is queued and let go of the
/// database, so the file can be opened again at once.
pub struct RedbStore {
    db: Arc<Database>,
    table: String,
    ttl: Duration,
    /// `None` once dropped: closing it ends the writer thread.
    writes: Option<mpsc::Sender<Write>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("table", &self.table)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Cause::new(e))
}

fn writer_stopped() -> StoreError {
    StoreError::Backend(Cause::message("the progress-store writer has stopped"))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn encode(completed: Completed) -> u8 {
    match completed {
        Completed::Acked => 1,
        Completed::Dropped => 2,
    }
}

fn decode(code: u8) -> Option<Completed> {
    match code {
        1 => Some(Completed::Acked),
        2 => Some(Completed::Dropped),
        _ => None,
    }
}

impl RedbStore {
    /// Opens (or creates) the database at `path`, keeping `subscription`'s records for `ttl`.
    ///
    /// A redb file is opened by one process at a time; to keep several subscriptions in one
    /// file, open the [`Database`] once and use [`RedbStore::with_database`].
    pub fn open(
        path: impl AsRef<Path>,
        subscription: &str,
        ttl: Duration,
    ) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(backend)?;
        Ok(Self::with_database(Arc::new(db), subscription, ttl))
    }

    /// A store for `subscription` in an open database.
    pub fn with_database(db: Arc<Database>, subscription: &str, ttl: Duration) -> Self {
        let (writes, queue) = mpsc::channel();
        let table = subscription.to_string();
        let (writer_db, writer_table) = (db.clone(), table.clone());
        let writer = std::thread::Builder::new()
            .name("leasehold-progress".into())
            .spawn(move || write_loop(&writer_db, &writer_table, ttl, &queue))
            .expect("spawning the progress-store writer thread");
        Self {
            db,
            table,
            ttl,
            writes: Some(writes),
            writer: Some(writer),
        }
    }

    fn send(&self, write: Write) -> Result<(), StoreError> {
        self.writes
            .as_ref()
            .and_then(|w| w.send(write).ok())
            .ok_or_else(writer_stopped)
    }

    fn definition(&self) -> TableDefinition<'_, &'static str, (u8, u64)> {
        TableDefinition::new(&self.table)
    }
}

impl ProgressStore for RedbStore {
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError> {
        let read = self.db.begin_read().map_err(backend)?;
        let table = match read.open_table(self.definition()) {
            Ok(table) => table,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(backend(e)),
        };
        let Some(value) = table.get(message_id).map_err(backend)? else {
            return Ok(None);
        };
        let (code, recorded_at) = value.value();
        let fresh = recorded_at.saturating_add(self.ttl.as_secs()) > now_secs();
        Ok(fresh.then(|| decode(code)).flatten())
    }

    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let (done, result) = oneshot::channel();
        let sent = self.send(Write::Record {
            message_id: message_id.to_string(),
            completed,
            done,
        });
        Box::pin(async move {
            sent?;
            result.await.map_err(|_| writer_stopped())?
        })
    }

    fn clear(&self, message_id: &str) {
        let _ = self.send(Write::Clear(message_id.to_string()));
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // The writer commits what is queued, sees the queue closed and ends.
        drop(self.writes.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The writer thread: commits queued writes in batches until the store is dropped.
fn write_loop(db: &Database, table: &str, ttl: Duration, queue: &mpsc::Receiver<Write>) {
    let definition: TableDefinition<&str, (u8, u64)> = TableDefinition::new(table);
    let mut last_purge = std::time::Instant::now();
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let purge = last_purge.elapsed() >= PURGE_PERIOD;
        let result = commit(db, definition, ttl, &batch, purge);
        if purge {
            last_purge = std::time::Instant::now();
        }
        if let Err(e) = &result {
            tracing::warn!(error = %e, "progress store: a batch of records was not written");
        }
        for write in batch {
            if let Write::Record { done, .. } = write {
                let _ = done.send(result.clone());
            }
        }
    }
}

fn commit(
    db: &Database,
    definition: TableDefinition<&str, (u8, u64)>,
    ttl: Duration,
    batch: &[Write],
    purge: bool,
) -> Result<(), StoreError> {
    let now = now_secs();
    let tx = db.begin_write().map_err(backend)?;
    {
        let mut table = tx.open_table(definition).map_err(backend)?;
        for write in batch {
            match write {
                Write::Record {
                    message_id,
                    completed,
                    ..
                } => {
                    table
                        .insert(message_id.as_str(), (encode(*completed), now))
                        .map_err(backend)?;
                }
                Write::Clear(message_id) => {
                    table.remove(message_id.as_str()).map_err(backend)?;
                }
            }
        }
        if purge {
            let ttl = ttl.as_secs();
            table
                .retain(|_, (_, at)| at.saturating_add(ttl) > now)
                .map_err(backend)?;
        }
    }
    tx.commit().map_err(backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "projects/p/subscriptions/s";
    const HOUR: Duration = Duration::from_secs(3600);

    fn path(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("leasehold-redb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        path
    }

    #[tokio::test]
    async fn records_survive_reopening_the_database() {
        let path = path("reopen.redb");
        {
            let store = RedbStore::open(&path, SUB, HOUR).unwrap();
            assert_eq!(store.completed("m1"), Ok(None));
            store.record("m1", Completed::Acked).await.unwrap();
            store.record("m2", Completed::Dropped).await.unwrap();
        }
        // Dropping the store let go of the file: it opens again at once.
        let store = RedbStore::open(&path, SUB, HOUR).unwrap();
        assert_eq!(store.completed("m1"), Ok(Some(Completed::Acked)));
        assert_eq!(store.completed("m2"), Ok(Some(Completed::Dropped)));
    }

    #[tokio::test]
    async fn cleared_and_expired_records_are_gone() {
        let store = RedbStore::open(path("clear.redb"), SUB, HOUR).unwrap();
        store.record("m1", Completed::Acked).await.unwrap();
        store.clear("m1");
        // A clear is applied in order with later writes: once m2 is durable, m1 is gone.
        store.record("m2", Completed::Acked).await.unwrap();
        assert_eq!(store.completed("m1"), Ok(None));

        let expired = RedbStore::with_database(store.db.clone(), "other", Duration::ZERO);
        expired.record("m3", Completed::Acked).await.unwrap();
        assert_eq!(expired.completed("m3"), Ok(None));
    }

    #[tokio::test]
    async fn subscriptions_do_not_see_each_others_records() {
        let store = RedbStore::open(path("two.redb"), SUB, HOUR).unwrap();
        let other = RedbStore::with_database(store.db.clone(), "projects/p/subscriptions/t", HOUR);
        store.record("m1", Completed::Acked).await.unwrap();
        assert_eq!(other.completed("m1"), Ok(None));
    }
}
