//! What the single and the batch claim share: the advisory lock on a message, the record a claim
//! writes, and opening the transaction that runs a claim statement.
//!
//! It uses `error`, `transaction` and `progress`. The statements themselves are beside their
//! transactions (`single`'s `CLAIM`, `batch`'s `CLAIM_BATCH`), built with the macros here and in
//! `records`.
//!
//! Every claim, single or batch, first takes the message's advisory lock, held until its
//! transaction ends: `hashtextextended(message_id, hashtext(subscription))`, a 64-bit hash of
//! the message id seeded with the subscription's. So a batch can ask for it without waiting
//! (`pg_try_advisory_xact_lock`) and leave out a message whose lock another transaction holds,
//! where an `INSERT` would wait on that transaction's uncommitted row (a speculative insertion
//! waits for the transaction that wrote the conflicting row to end). Two messages whose keys
//! collide (one chance in 2⁶⁴ a pair) only wait for each other, or one is left out of a batch
//! once: the record, not the lock, is the claim.
//!
//! The `WITH` queries that call a lock function run once per message, each message's lock taken
//! before its row is inserted: PostgreSQL never folds a `WITH` query with a volatile function
//! into the statement that reads it. (`hashtextextended` needs PostgreSQL 11 or later.)

use super::error::{backend, statement};
use super::progress::PostgresStore;
use super::transaction::PgTransaction;
use leasehold_actors::error::StoreError;
use std::sync::Arc;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// The key of the advisory lock on the message id `$id` (an SQL expression) of the subscription
/// `$1`.
macro_rules! lock_key {
    ($id:literal) => {
        concat!("hashtextextended(", $id, ", hashtext($1::text))")
    };
}

/// The start of the `INSERT` that claims each message id `$id` (an SQL expression) that `$from`
/// yields, for the subscription `$1`, with the time to live `$3` in seconds: the record is
/// written `claimed`, and a conflict on the primary key goes to the `DO UPDATE` that follows.
/// `$indent` starts its second and third lines.
macro_rules! insert_claim {
    ($indent:literal, $id:literal, $from:literal) => {
        concat!(
            "INSERT INTO leasehold_progress AS p (subscription, message_id, outcome, expires_at)\n",
            $indent,
            "SELECT $1::text, ",
            $id,
            ", 'claimed', now() + make_interval(secs => $3) FROM ",
            $from,
            "\n",
            $indent,
            "ON CONFLICT (subscription, message_id)"
        )
    };
}

pub(crate) use {insert_claim, lock_key};

/// The claim's lock wait is over: the handler's own statements wait as the server's, database's
/// or role's `lock_timeout` says.
const AFTER_CLAIM: &str = "SET LOCAL lock_timeout TO DEFAULT";

impl PostgresStore {
    /// Opens a transaction on a pooled connection, for `message_ids` of `subscription`, and runs
    /// the claim statement `claim` in it with `$1` the subscription, `$2` the `ids` and `$3` the
    /// time to live in seconds; returns the transaction and the statement's rows. A sweep is
    /// started first when one is due.
    pub(crate) async fn claim(
        &self,
        claim: &str,
        subscription: String,
        message_ids: Vec<Arc<str>>,
        ids: &(dyn ToSql + Sync),
    ) -> Result<(PgTransaction, Vec<Row>), StoreError> {
        self.sweep_now_and_then();
        let client = self.pool.get().await.map_err(backend)?;
        let claim = client.prepare_cached(claim).await.map_err(backend)?;
        let tx = PgTransaction::new(
            client,
            subscription,
            message_ids,
            self.outbox.clone(),
            self.notify,
        );
        tx.batch_execute(&self.begin).await.map_err(backend)?;
        let ttl = self.ttl.as_secs_f64();
        // One round trip: the claim, then the lock timeout back to the session's (so that it
        // does not cut the handler's own lock waits). After a failed claim the second fails too.
        let params: [&(dyn ToSql + Sync); 3] = [&tx.subscription, ids, &ttl];
        let (rows, reset) =
            futures::join!(tx.query(&claim, &params), tx.batch_execute(AFTER_CLAIM));
        let rows = rows.map_err(statement)?;
        reset.map_err(backend)?;
        Ok((tx, rows))
    }
}
