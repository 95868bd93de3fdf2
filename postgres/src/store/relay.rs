//! `OutboxStore` for `PostgresStore`: what a relay asks of the outbox table. A lease is one
//! transaction that locks free rows with `FOR UPDATE SKIP LOCKED` (two relays never wait on or
//! take one row), keeps of each ordering key only the run from its first unsent row (the rule
//! in `leasehold_actors::store::leasable`), and writes the lease. Wake-ups are this process's
//! commits and `LISTEN leasehold_outbox` on a connection of the relay's own.
//!
//! It uses `error` and `progress`, and from outside `store/`, `driver` (the notifications).

use super::error::{backend, statement};
use super::progress::PostgresStore;
use crate::driver::{OUTBOX_CHANNEL, outbox_notifications};
use deadpool_postgres::{ClientWrapper, Object, Pool};
use futures::future::LocalBoxFuture;
use futures::stream::LocalBoxStream;
use futures::{FutureExt, StreamExt};
use leasehold_actors::error::StoreError;
use leasehold_actors::store::{Backlog, Candidate, FailedRow, OutboxRow, OutboxStore, leasable};
use std::collections::HashMap;
use std::time::Duration;

/// Free, unsent rows, oldest first, locked without waiting for a lock another transaction
/// holds; a keyed row only when no earlier unsent row of its key is leased or waits for a retry.
const CANDIDATES: &str = "SELECT id, topic, ordering_key, seq FROM leasehold_outbox o
    WHERE sent_at IS NULL AND (lease_until IS NULL OR lease_until < now())
        AND next_attempt_at <= now()
        AND (ordering_key = '' OR NOT EXISTS (
            SELECT 1 FROM leasehold_outbox e
            WHERE e.topic = o.topic AND e.ordering_key = o.ordering_key AND e.seq < o.seq
                AND e.sent_at IS NULL
                AND (e.lease_until >= now() OR e.next_attempt_at > now())))
    ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
/// The first unsent row of each of these keys, whoever holds it.
const HEADS: &str = "SELECT topic, ordering_key, min(seq) FROM leasehold_outbox
    WHERE sent_at IS NULL
        AND (topic, ordering_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
    GROUP BY topic, ordering_key";
/// Leases the rows chosen, and reads them.
const LEASE: &str = "UPDATE leasehold_outbox
    SET lease_owner = $2, lease_until = now() + make_interval(secs => $3)
    WHERE id = ANY($1)
    RETURNING id, topic, ordering_key, seq, data, attribute_names, attribute_values, message_key,
        created_at, attempts";
const MARK_SENT: &str = "UPDATE leasehold_outbox
    SET sent_at = now(), lease_owner = NULL, lease_until = NULL
    WHERE id = ANY($1) AND sent_at IS NULL";
const MARK_FAILED: &str = "UPDATE leasehold_outbox o
    SET attempts = o.attempts + 1, next_attempt_at = now() + make_interval(secs => f.delay),
        last_error = f.reason, lease_owner = NULL, lease_until = NULL
    FROM unnest($1::int8[], $2::float8[], $3::text[]) AS f (id, delay, reason)
    WHERE o.id = f.id AND o.sent_at IS NULL";
const RELEASE: &str = "UPDATE leasehold_outbox SET lease_owner = NULL, lease_until = NULL
    WHERE id = ANY($1) AND lease_owner = $2 AND sent_at IS NULL";
/// Deletes a few old sent rows, oldest first: a short statement, no long lock.
const SWEEP: &str = "DELETE FROM leasehold_outbox WHERE id IN (
    SELECT id FROM leasehold_outbox
    WHERE sent_at < now() - make_interval(secs => $1) ORDER BY sent_at LIMIT $2)";
const BACKLOG: &str = "SELECT count(*), extract(epoch FROM now() - min(created_at))::float8
    FROM leasehold_outbox WHERE sent_at IS NULL";
/// How often a listening connection is checked, and how long a new one waits after a failure.
const LISTEN_CHECK: Duration = Duration::from_secs(5);

impl PostgresStore {
    async fn lease_rows(
        pool: Pool,
        owner: String,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let mut client = pool.get().await.map_err(backend)?;
        let tx = client.transaction().await.map_err(statement)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let candidates: Vec<Candidate> = tx
            .query(CANDIDATES, &[&limit])
            .await
            .map_err(statement)?
            .iter()
            .map(|r| Candidate {
                id: r.get(0),
                topic: r.get(1),
                ordering_key: r.get(2),
                seq: r.get(3),
            })
            .collect();
        let (topics, keys): (Vec<&str>, Vec<&str>) = candidates
            .iter()
            .filter(|c| !c.ordering_key.is_empty())
            .map(|c| (c.topic.as_str(), c.ordering_key.as_str()))
            .unzip();
        let heads: HashMap<(String, String), i64> = if topics.is_empty() {
            HashMap::new()
        } else {
            tx.query(HEADS, &[&topics, &keys])
                .await
                .map_err(statement)?
                .iter()
                .map(|r| ((r.get(0), r.get(1)), r.get(2)))
                .collect()
        };
        let chosen = leasable(&candidates, &heads);
        if chosen.is_empty() {
            tx.rollback().await.map_err(statement)?;
            return Ok(Vec::new());
        }
        let seconds = lease.as_secs_f64();
        let rows = tx
            .query(LEASE, &[&chosen, &owner, &seconds])
            .await
            .map_err(statement)?;
        tx.commit().await.map_err(statement)?;
        let mut by_id: HashMap<i64, OutboxRow> = rows.iter().map(row).map(|r| (r.id, r)).collect();
        Ok(chosen.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    /// Runs one statement on a pooled connection; the rows it changed.
    async fn run(
        pool: Pool,
        sql: &'static str,
        params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>,
    ) -> Result<u64, StoreError> {
        let client = pool.get().await.map_err(backend)?;
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| &**p as _).collect();
        client.execute(sql, &params).await.map_err(statement)
    }
}

/// An outbox row as `LEASE` returns it.
fn row(r: &tokio_postgres::Row) -> OutboxRow {
    let names: Vec<String> = r.get(5);
    let values: Vec<String> = r.get(6);
    let data: Vec<u8> = r.get(4);
    let attempts: i32 = r.get(9);
    OutboxRow::new(
        r.get(0),
        r.get(1),
        data.into(),
        names.into_iter().zip(values).collect(),
        r.get(2),
        r.get(3),
        r.get(7),
        r.get(8),
        u32::try_from(attempts).unwrap_or(0),
    )
}

/// A connection of the pool's own, taken out of it, that listens on the outbox's channel.
async fn listening(pool: &Pool) -> Result<ClientWrapper, StoreError> {
    let client = pool.get().await.map_err(backend)?;
    client
        .batch_execute(&format!("LISTEN {OUTBOX_CHANNEL}"))
        .await
        .map_err(statement)?;
    Ok(Object::take(client))
}

/// Yields for every notification on the outbox's channel, on a listening connection of its
/// own (opened again when it closes, and once more each time it does: notifications sent
/// while it was closed are lost).
fn notifications(pool: Pool) -> LocalBoxStream<'static, ()> {
    let mut notified = outbox_notifications().subscribe();
    notified.mark_unchanged();
    Box::pin(futures::stream::unfold(
        (pool, notified, None::<ClientWrapper>),
        |(pool, mut notified, mut listener)| async move {
            loop {
                match &listener {
                    Some(client) if !client.is_closed() => {
                        tokio::select! {
                            changed = notified.changed() => {
                                changed.ok()?;
                                return Some(((), (pool, notified, listener)));
                            }
                            () = tokio::time::sleep(LISTEN_CHECK) => {}
                        }
                    }
                    _ => match listening(&pool).await {
                        Ok(client) => {
                            // What was notified while no connection listened is read now.
                            return Some(((), (pool, notified, Some(client))));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e,
                                "cannot LISTEN for outbox rows; the relay polls meanwhile");
                            listener = None;
                            tokio::time::sleep(LISTEN_CHECK).await;
                        }
                    },
                }
            }
        },
    ))
}

impl OutboxStore for PostgresStore {
    fn lease(
        &self,
        owner: &str,
        limit: usize,
        lease: Duration,
    ) -> LocalBoxFuture<'static, Result<Vec<OutboxRow>, StoreError>> {
        Self::lease_rows(self.pool.clone(), owner.to_string(), limit, lease).boxed_local()
    }

    fn mark_sent(&self, ids: Vec<i64>) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        Self::run(self.pool.clone(), MARK_SENT, vec![Box::new(ids)])
            .map(|r| r.map(drop))
            .boxed_local()
    }

    fn mark_failed(
        &self,
        failed: Vec<FailedRow>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let ids: Vec<i64> = failed.iter().map(|f| f.id).collect();
        let delays: Vec<f64> = failed.iter().map(|f| f.retry_after.as_secs_f64()).collect();
        let reasons: Vec<&'static str> = failed.iter().map(|f| f.reason).collect();
        let params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> =
            vec![Box::new(ids), Box::new(delays), Box::new(reasons)];
        Self::run(self.pool.clone(), MARK_FAILED, params)
            .map(|r| r.map(drop))
            .boxed_local()
    }

    fn release(
        &self,
        owner: &str,
        ids: Vec<i64>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> =
            vec![Box::new(ids), Box::new(owner.to_string())];
        Self::run(self.pool.clone(), RELEASE, params)
            .map(|r| r.map(drop))
            .boxed_local()
    }

    fn sweep(
        &self,
        retention: Duration,
        limit: usize,
    ) -> LocalBoxFuture<'static, Result<u64, StoreError>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let params: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> =
            vec![Box::new(retention.as_secs_f64()), Box::new(limit)];
        Self::run(self.pool.clone(), SWEEP, params).boxed_local()
    }

    fn backlog(&self) -> LocalBoxFuture<'static, Result<Backlog, StoreError>> {
        let pool = self.pool.clone();
        async move {
            let client = pool.get().await.map_err(backend)?;
            let r = client.query_one(BACKLOG, &[]).await.map_err(statement)?;
            let pending: i64 = r.get(0);
            let oldest: Option<f64> = r.get(1);
            Ok(Backlog {
                pending: u64::try_from(pending).unwrap_or(0),
                oldest: oldest.map(|s| Duration::from_secs_f64(s.max(0.0))),
            })
        }
        .boxed_local()
    }

    /// This process's commits, and `LISTEN leasehold_outbox` on a connection taken out of the
    /// pool (one more connection than the pool's size; only with a pool built by
    /// [`manager`](crate::manager), whose connections pass notifications on).
    fn wakeups(&self) -> LocalBoxStream<'static, ()> {
        futures::stream::select(self.outbox.watch(), notifications(self.pool.clone())).boxed_local()
    }
}
