//! `OutboxStore` for `SpannerStore`: what a relay asks of the outbox table. Spanner has no
//! `SKIP LOCKED`: a lease is a read-write transaction that reads the free rows and writes its
//! lease on those it takes (of each ordering key, the run from its first unsent row: the rule in
//! `leasehold_actors::store::leasable`); two relays that read the same rows conflict, Spanner
//! aborts one, and its run again finds the other's lease. Every relay call runs again after an
//! abort, within a bound. Wake-ups are this process's commits only (Spanner cannot notify
//! other processes): elsewhere the relay's poll finds the rows.
//!
//! It uses `error` and `progress`.

use super::error::{client_error, is_abort, store_error};
use super::outbox::emulator_hint;
use super::progress::SpannerStore;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use futures::stream::LocalBoxStream;
use gcloud_gax::grpc::Status;
use gcloud_spanner::client::Client;
use gcloud_spanner::row::Row;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::transaction_rw::ReadWriteTransaction;
use leasehold_actors::error::{Cause, StoreError};
use leasehold_actors::store::{Backlog, Candidate, FailedRow, OutboxRow, OutboxStore, leasable};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// Free, unsent rows, oldest first (every column: the chosen ones are returned as read); a
/// keyed row only when no earlier unsent row of its key is leased or waits for a retry.
const CANDIDATES: &str = concat!(
    emulator_hint!(),
    "SELECT o.id, o.topic, IFNULL(o.ordering_key, ''), o.seq, o.data,
        o.attribute_names, o.attribute_values, o.message_key, UNIX_MICROS(o.created_at),
        o.attempts
    FROM leasehold_outbox@{FORCE_INDEX=leasehold_outbox_pending} o
    WHERE o.pending_shard IS NOT NULL
        AND (o.lease_until IS NULL OR o.lease_until < CURRENT_TIMESTAMP())
        AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= CURRENT_TIMESTAMP())
        AND (o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM leasehold_outbox@{FORCE_INDEX=leasehold_outbox_order} e
            WHERE e.topic = o.topic AND e.ordering_key = o.ordering_key AND e.seq < o.seq
                AND e.pending_shard IS NOT NULL
                AND (e.lease_until >= CURRENT_TIMESTAMP()
                    OR e.next_attempt_at > CURRENT_TIMESTAMP())))
    ORDER BY o.created_at LIMIT @limit"
);
/// The first unsent row of each of these keys (`topic` and key joined by a newline).
const HEADS: &str = "SELECT topic, ordering_key, MIN(seq) FROM leasehold_outbox
    WHERE pending_shard IS NOT NULL AND ordering_key IS NOT NULL
        AND CONCAT(topic, '\\n', ordering_key) IN UNNEST(@keys)
    GROUP BY topic, ordering_key";
const LEASE: &str = "UPDATE leasehold_outbox
    SET lease_owner = @owner,
        lease_until = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @ms MILLISECOND)
    WHERE id IN UNNEST(@ids)";
const MARK_SENT: &str = "UPDATE leasehold_outbox
    SET sent_at = CURRENT_TIMESTAMP(), pending_shard = NULL, lease_owner = NULL,
        lease_until = NULL
    WHERE id IN UNNEST(@ids) AND pending_shard IS NOT NULL";
const MARK_FAILED: &str = "UPDATE leasehold_outbox
    SET attempts = attempts + 1,
        next_attempt_at = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @ms MILLISECOND),
        last_error = @reason, lease_owner = NULL, lease_until = NULL
    WHERE id IN UNNEST(@ids) AND pending_shard IS NOT NULL";
const RELEASE: &str = "UPDATE leasehold_outbox SET lease_owner = NULL, lease_until = NULL
    WHERE id IN UNNEST(@ids) AND lease_owner = @owner AND pending_shard IS NOT NULL";
/// A few old sent rows, oldest first (then deleted by id: a short transaction).
const OLD_SENT: &str = concat!(
    emulator_hint!(),
    "SELECT id FROM leasehold_outbox@{FORCE_INDEX=leasehold_outbox_sent}
    WHERE sent_at < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL @seconds SECOND)
    ORDER BY sent_at LIMIT @limit"
);
const DELETE: &str = "DELETE FROM leasehold_outbox WHERE id IN UNNEST(@ids)";
const BACKLOG: &str = concat!(
    emulator_hint!(),
    "SELECT COUNT(*),
        TIMESTAMP_DIFF(CURRENT_TIMESTAMP(), MIN(created_at), MILLISECOND)
    FROM leasehold_outbox@{FORCE_INDEX=leasehold_outbox_pending}
    WHERE pending_shard IS NOT NULL"
);
/// How many times in a row a relay's transaction runs again after an abort before its call
/// fails (the relay then tries again after its own wait).
const RELAY_MAX_ABORTS: u32 = 20;
/// The abort count whose wait the relay's waits stop growing at (the store's 2 s).
const ABORT_WAIT_CAP: u32 = 8;

/// A transaction's work: given the open transaction, what it read or wrote.
type Work<T> =
    Box<dyn for<'t> Fn(&'t mut ReadWriteTransaction) -> LocalBoxFuture<'t, Result<T, Status>>>;

/// Runs `work` in a read-write transaction and commits it, again on a fresh one after an abort.
async fn retried<T>(store: SpannerStore, work: Work<T>) -> Result<T, StoreError> {
    let mut aborts = 0;
    loop {
        let mut tx = store
            .client
            .begin_read_write_transaction()
            .await
            .map_err(client_error)?;
        let status = match work(&mut tx).await {
            Ok(value) => match tx.end(Ok::<(), Status>(()), None).await {
                Ok(_) => return Ok(value),
                Err(status) => status,
            },
            Err(status) => {
                let _ = tx.end::<(), Status>(Err(status.clone()), None).await;
                status
            }
        };
        aborts += 1;
        if !is_abort(&status) || aborts > RELAY_MAX_ABORTS {
            return Err(store_error(status));
        }
        // The store's waits after an abort (20 ms doubling), capped where they stop growing.
        let wait = store.abort_wait(aborts.min(ABORT_WAIT_CAP));
        tokio::time::sleep(wait.unwrap_or(Duration::from_millis(100))).await;
    }
}

fn ids_statement(sql: &str, ids: Vec<i64>) -> Statement {
    let mut statement = Statement::new(sql);
    statement.add_param("ids", &ids);
    statement
}

/// An outbox row as `CANDIDATES` reads it.
fn read(row: &Row) -> Result<OutboxRow, Status> {
    let column_error = |e: gcloud_spanner::row::Error| Status::internal(e.to_string());
    let names: Vec<String> = row.column(5).map_err(column_error)?;
    let values: Vec<String> = row.column(6).map_err(column_error)?;
    let micros: i64 = row.column(8).map_err(column_error)?;
    let attempts: i64 = row.column(9).map_err(column_error)?;
    Ok(OutboxRow::new(
        row.column(0).map_err(column_error)?,
        row.column(1).map_err(column_error)?,
        row.column::<Vec<u8>>(4).map_err(column_error)?.into(),
        names.into_iter().zip(values).collect(),
        row.column(2).map_err(column_error)?,
        row.column(3).map_err(column_error)?,
        row.column(7).map_err(column_error)?,
        SystemTime::UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0)),
        u32::try_from(attempts).unwrap_or(0),
    ))
}

/// Every row a query returns.
async fn all(tx: &mut ReadWriteTransaction, statement: Statement) -> Result<Vec<Row>, Status> {
    let mut rows = tx.query(statement).await?;
    let mut all = Vec::new();
    while let Some(row) = rows.next().await? {
        all.push(row);
    }
    Ok(all)
}

/// Leases up to `limit` rows to `owner` in `tx`.
async fn lease_in(
    tx: &mut ReadWriteTransaction,
    owner: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<OutboxRow>, Status> {
    let mut candidates = Statement::new(CANDIDATES);
    candidates.add_param("limit", &limit);
    let mut found: HashMap<i64, OutboxRow> = HashMap::new();
    for row in all(tx, candidates).await? {
        let row = read(&row)?;
        found.insert(row.id, row);
    }
    let listed: Vec<Candidate> = found
        .values()
        .map(|r| Candidate {
            id: r.id,
            topic: r.topic.clone(),
            ordering_key: r.ordering_key.clone(),
            seq: r.seq,
        })
        .collect();
    let keys: Vec<String> = listed
        .iter()
        .filter(|c| !c.ordering_key.is_empty())
        .map(|c| format!("{}\n{}", c.topic, c.ordering_key))
        .collect();
    let mut heads: HashMap<(String, String), i64> = HashMap::new();
    if !keys.is_empty() {
        let mut statement = Statement::new(HEADS);
        statement.add_param("keys", &keys);
        for row in all(tx, statement).await? {
            let column_error = |e: gcloud_spanner::row::Error| Status::internal(e.to_string());
            let topic: String = row.column(0).map_err(column_error)?;
            let key: String = row.column(1).map_err(column_error)?;
            heads.insert((topic, key), row.column(2).map_err(column_error)?);
        }
    }
    // Oldest first among the keyless rows, as the query gave them.
    let mut listed = listed;
    listed.sort_by_key(|c| (found[&c.id].created_at, c.id));
    let chosen = leasable(&listed, &heads);
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let mut statement = ids_statement(LEASE, chosen.clone());
    statement.add_param("owner", &owner);
    statement.add_param("ms", &i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
    tx.update(statement).await?;
    Ok(chosen.iter().filter_map(|id| found.remove(id)).collect())
}

impl OutboxStore for SpannerStore {
    fn lease(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> LocalBoxFuture<'static, Result<Vec<OutboxRow>, StoreError>> {
        let owner = owner.to_string();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let work: Work<Vec<OutboxRow>> = Box::new(move |tx| {
            let owner = owner.clone();
            async move { lease_in(tx, &owner, limit, lease).await }.boxed_local()
        });
        retried(self.clone(), work).boxed_local()
    }

    fn mark_sent(&self, ids: Vec<i64>) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let work: Work<()> = Box::new(move |tx| {
            let statement = ids_statement(MARK_SENT, ids.clone());
            async move { tx.update(statement).await.map(drop) }.boxed_local()
        });
        retried(self.clone(), work).boxed_local()
    }

    fn mark_failed(
        &self,
        failed: Vec<FailedRow>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        // One statement per wait and reason, all in one round trip.
        let mut groups: BTreeMap<(u128, &'static str), Vec<i64>> = BTreeMap::new();
        for f in failed {
            groups
                .entry((f.retry_after.as_millis(), f.reason))
                .or_default()
                .push(f.id);
        }
        let work: Work<()> = Box::new(move |tx| {
            let statements: Vec<Statement> = groups
                .iter()
                .map(|((ms, reason), ids)| {
                    let mut s = ids_statement(MARK_FAILED, ids.clone());
                    s.add_param("ms", &i64::try_from(*ms).unwrap_or(i64::MAX));
                    s.add_param("reason", reason);
                    s
                })
                .collect();
            async move { tx.batch_update(statements).await.map(drop) }.boxed_local()
        });
        retried(self.clone(), work).boxed_local()
    }

    fn release(
        &self,
        owner: &str,
        ids: Vec<i64>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let owner = owner.to_string();
        let work: Work<()> = Box::new(move |tx| {
            let mut statement = ids_statement(RELEASE, ids.clone());
            statement.add_param("owner", &owner);
            async move { tx.update(statement).await.map(drop) }.boxed_local()
        });
        retried(self.clone(), work).boxed_local()
    }

    fn sweep(
        &self,
        retention: Duration,
        limit: usize,
    ) -> LocalBoxFuture<'static, Result<u64, StoreError>> {
        let seconds = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let work: Work<u64> = Box::new(move |tx| {
            let mut old = Statement::new(OLD_SENT);
            old.add_param("seconds", &seconds);
            old.add_param("limit", &limit);
            async move {
                let mut ids = Vec::new();
                for row in all(tx, old).await? {
                    ids.push(
                        row.column::<i64>(0)
                            .map_err(|e| Status::internal(e.to_string()))?,
                    );
                }
                if ids.is_empty() {
                    return Ok(0);
                }
                let deleted = tx.update(ids_statement(DELETE, ids)).await?;
                Ok(u64::try_from(deleted).unwrap_or(0))
            }
            .boxed_local()
        });
        retried(self.clone(), work).boxed_local()
    }

    fn backlog(&self) -> LocalBoxFuture<'static, Result<Backlog, StoreError>> {
        let client: Client = self.client.clone();
        async move {
            let mut tx = client.single().await.map_err(client_error)?;
            let mut rows = tx
                .query(Statement::new(BACKLOG))
                .await
                .map_err(store_error)?;
            let Some(row) = rows.next().await.map_err(store_error)? else {
                return Ok(Backlog::default());
            };
            let column = |e: gcloud_spanner::row::Error| StoreError::Backend(Cause::new(e));
            let pending: i64 = row.column(0).map_err(column)?;
            let oldest: Option<i64> = row.column(1).map_err(column)?;
            Ok(Backlog {
                pending: u64::try_from(pending).unwrap_or(0),
                oldest: oldest.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            })
        }
        .boxed_local()
    }

    /// This process's commits only: Spanner tells no other process; the relay's poll
    /// (`poll_interval`) finds their rows.
    fn wakeups(&self) -> LocalBoxStream<'static, ()> {
        self.outbox.watch()
    }
}
