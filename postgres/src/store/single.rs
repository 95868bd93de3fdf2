//! `TransactionalStore` for `PostgresStore`: one message claimed in its transaction, its outcome
//! recorded with the commit, the rollback, and the health probe.
//!
//! It uses `error`, `records`, `transaction`, `progress` and `claim`.

use super::claim::{insert_claim, lock_key};
use super::error::backend;
use super::progress::{OUTCOME, PostgresStore};
use super::records::{completed, completed_text, taken_over};
use super::transaction::PgTransaction;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold_actors::{
    error::{Cause, StoreError},
    store::{Claim, Completed, TransactionalStore, loggable_key},
};
use std::sync::Arc;
use std::time::Duration;

/// How long the health probe waits for a pooled connection.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// Claims a message: takes the message's advisory lock (waits while another open transaction
/// holds it, up to the claim timeout), then inserts its record, or takes over an expired one or
/// one that was committed still claimed (by a handler that ran `COMMIT` itself). Returns a row
/// when the claim is this transaction's; no row when the message finished (and committed)
/// before. A claim written without the advisory lock is waited for on the row instead: the
/// primary key, not the lock, keeps two claims apart.
pub(crate) const CLAIM: &str = concat!(
    "WITH locked AS (
        SELECT pg_advisory_xact_lock(",
    lock_key!("$2::text"),
    ")
    )
    ",
    insert_claim!("    ", "$2::text", "locked"),
    "
    DO UPDATE SET outcome = 'claimed', claimed_at = now(), expires_at = EXCLUDED.expires_at
        WHERE ",
    taken_over!("p."),
    "
    RETURNING 1"
);
/// Records how the claimed message finished (sent together with the commit).
const SET_OUTCOME: &str =
    "UPDATE leasehold_progress SET outcome = $3 WHERE subscription = $1 AND message_id = $2";

impl PostgresStore {
    async fn begin_claim(
        self,
        subscription: String,
        message_id: Arc<str>,
    ) -> Result<Claim<PgTransaction>, StoreError> {
        let id = Arc::clone(&message_id);
        let (mut tx, claimed) = self
            .claim(CLAIM, subscription, vec![message_id], &id.as_ref())
            .await?;
        if !claimed.is_empty() {
            return Ok(Claim::Claimed(tx));
        }
        let row = tx
            .query_opt(OUTCOME, &[&tx.subscription, &tx.message_id()])
            .await
            .map_err(backend)?;
        tx.end("ROLLBACK").await.map_err(backend)?;
        match row.and_then(|r| completed(r.get(0))) {
            Some(done) => Ok(Claim::Finished(done)),
            // Deleted between the two statements (it expired meanwhile): claim again later.
            None => Err(StoreError::Backend(Cause::message(
                "the message's record vanished while it was read; retried",
            ))),
        }
    }
}

impl TransactionalStore for PostgresStore {
    type Transaction = PgTransaction;

    fn begin(
        &self,
        subscription: &str,
        message_id: &str,
    ) -> LocalBoxFuture<'static, Result<Claim<PgTransaction>, StoreError>> {
        self.clone()
            .begin_claim(subscription.to_owned(), Arc::from(message_id))
            .boxed_local()
    }

    fn commit(
        &self,
        mut tx: PgTransaction,
        completed: Completed,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        async move {
            let outcome = completed_text(completed);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&tx.subscription, &tx.message_id(), &outcome];
            let answers = tx.record_and_commit(SET_OUTCOME, &params).await?;
            if answers.recorded().is_some_and(|rows| rows != 1) {
                tracing::error!(subscription = %tx.subscription,
                    message_id = %loggable_key(tx.message_id()),
                    "the message's progress record was gone at commit (deleted by the \
                     handler?): its writes committed without it");
            }
            tx.ended(answers)
        }
        .boxed_local()
    }

    /// A pooled connection answers `SELECT 1`. A pool whose every connection is lent to the
    /// handlers counts as answering: they are at work.
    fn probe(&self) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let pool = self.pool.clone();
        async move {
            let client = match tokio::time::timeout(PROBE_WAIT, pool.get()).await {
                Ok(got) => got.map_err(backend)?,
                Err(_) => {
                    let status = pool.status();
                    if status.size >= status.max_size {
                        return Ok(());
                    }
                    return Err(StoreError::Backend(Cause::message(
                        "no pooled connection within a second",
                    )));
                }
            };
            client.simple_query("SELECT 1").await.map_err(backend)?;
            Ok(())
        }
        .boxed_local()
    }

    fn rollback(&self, mut tx: PgTransaction) -> LocalBoxFuture<'static, ()> {
        async move {
            if let Err(e) = tx.end("ROLLBACK").await {
                tracing::warn!(error = %e, "rollback failed; the connection is closed instead");
            }
        }
        .boxed_local()
    }
}
