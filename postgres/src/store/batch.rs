//! `TransactionalBatchStore` for `PostgresStore`: a batch's messages claimed in one statement of
//! one transaction, and their outcomes recorded (the others' claims released) with the commit.
//!
//! It uses `error`, `records`, `transaction`, `progress` and `claim`; the batch's transaction
//! rolls back through `single`'s `TransactionalStore::rollback`, the trait it extends.

use super::claim::{insert_claim, lock_key};
use super::error::backend;
use super::progress::PostgresStore;
use super::records::{completed, finished, taken_over};
use super::transaction::PgTransaction;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold_actors::{
    error::{Cause, StoreError},
    store::{BatchClaim, BatchClaims, Completed, TransactionalBatchStore, loggable_key},
};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// `CASE WHEN` the record `p` is taken over `THEN $new ELSE $old END`, for the batch's
/// `DO UPDATE`, which leaves a finished record as it is.
macro_rules! if_taken_over {
    ($new:literal, $old:literal) => {
        concat!(
            "CASE WHEN ",
            taken_over!("p."),
            "\n                THEN ",
            $new,
            " ELSE ",
            $old,
            " END"
        )
    };
}

/// Claims a batch of messages (`$2`, distinct ids of subscription `$1`) in one statement: one
/// row per message, in the order asked (its ordinal from 1), saying what became of it.
/// - `acked` or `dropped`: finished before. Either its record says so in this statement's
///   snapshot (no lock is taken then), or the transaction that finished it committed after the
///   snapshot was taken, while this one tried its lock: the `INSERT` sees the record the commit
///   left and leaves it as it is (an update to the same values, so that `RETURNING` shows it).
/// - `claimed`: its advisory lock was free and is now this transaction's, and its record is
///   inserted or taken over (expired, or committed still claimed) as in
///   [`CLAIM`](super::single::CLAIM).
/// - `busy`: another open transaction holds its advisory lock (it claims the message now): not
///   waited for.
///
/// The finished records are looked up one by one on the primary key (a subquery per message,
/// so that no plan scans a subscription's records). Nothing waits on another claim: the locks
/// are tried, and the `INSERT` touches only records whose lock this transaction holds. It may
/// wait on a sweep deleting an expired record it takes over (a statement's while), and on a
/// claim written without the advisory lock (see [`CLAIM`](super::single::CLAIM)) up to the
/// claim timeout, after which the whole batch is retried.
const CLAIM_BATCH: &str = concat!(
    "WITH asked AS (
        SELECT a.n, a.message_id, (
            SELECT p.outcome FROM leasehold_progress p
            WHERE p.subscription = $1::text AND p.message_id = a.message_id
                AND ",
    finished!("p."),
    "
        ) AS finished
        FROM unnest($2::text[]) WITH ORDINALITY AS a (message_id, n)
    ),
    free AS (
        SELECT message_id FROM asked
        WHERE CASE WHEN finished IS NULL
            THEN pg_try_advisory_xact_lock(",
    lock_key!("message_id"),
    ")
            ELSE false END
    ),
    claimed AS (
        ",
    insert_claim!("        ", "message_id", "free"),
    " DO UPDATE SET
            outcome = ",
    if_taken_over!("'claimed'", "p.outcome"),
    ",
            claimed_at = ",
    if_taken_over!("now()", "p.claimed_at"),
    ",
            expires_at = ",
    if_taken_over!("EXCLUDED.expires_at", "p.expires_at"),
    "
        RETURNING p.message_id, p.outcome
    )
    SELECT asked.n, coalesce(asked.finished, claimed.outcome, 'busy')
    FROM asked LEFT JOIN claimed ON claimed.message_id = asked.message_id
    ORDER BY asked.n"
);
/// Records how the messages a batch claimed finished (`$2`: every finished one, `$3`: those of
/// them dropped, the others acked) and deletes the claims it releases (`$4`), in one statement
/// sent together with the commit. The sets `$2` and `$4` are apart; each is found on the
/// primary key (`= ANY`). A released claim's record goes whether this transaction inserted it
/// or took it over (expired, or committed still claimed: either way the next claim takes it).
const RECORD_BATCH: &str = "WITH released AS (
        DELETE FROM leasehold_progress
        WHERE subscription = $1::text AND message_id = ANY($4::text[])
    )
    UPDATE leasehold_progress
    SET outcome = CASE WHEN message_id = ANY($3::text[]) THEN 'dropped' ELSE 'acked' END
    WHERE subscription = $1::text AND message_id = ANY($2::text[])";

impl PostgresStore {
    async fn begin_claim_batch(
        self,
        subscription: String,
        asked: Vec<Arc<str>>,
    ) -> Result<BatchClaims<PgTransaction>, StoreError> {
        // Each id's place among the distinct ids sent: an id asked twice is claimed once, and
        // its later asks are busy (their claim is the first's).
        let mut places: HashMap<&str, usize> = HashMap::with_capacity(asked.len());
        let mut distinct: Vec<&str> = Vec::with_capacity(asked.len());
        let place: Vec<Option<usize>> = asked
            .iter()
            .map(|id| match places.entry(&**id) {
                Entry::Occupied(_) => None,
                Entry::Vacant(vacant) => {
                    vacant.insert(distinct.len());
                    distinct.push(id);
                    Some(distinct.len() - 1)
                }
            })
            .collect();
        let (mut tx, rows) = self
            .claim(CLAIM_BATCH, subscription, Vec::new(), &distinct)
            .await?;
        let found = read_batch_claims(&rows, distinct.len())?;
        let claims: Vec<BatchClaim> = place
            .iter()
            .map(|place| place.map_or(BatchClaim::Busy, |n| found[n]))
            .collect();
        tx.message_ids = asked
            .iter()
            .zip(&claims)
            .filter(|(_, claim)| **claim == BatchClaim::Claimed)
            .map(|(id, _)| id.clone())
            .collect();
        if tx.message_ids.is_empty() {
            tx.end("ROLLBACK").await.map_err(backend)?;
            return Ok(BatchClaims {
                transaction: None,
                claims,
            });
        }
        Ok(BatchClaims {
            transaction: Some(tx),
            claims,
        })
    }
}

/// What [`CLAIM_BATCH`] found of each of `n` messages, in order.
fn read_batch_claims(
    rows: &[tokio_postgres::Row],
    n: usize,
) -> Result<Vec<BatchClaim>, StoreError> {
    if rows.len() != n {
        return Err(StoreError::Backend(Cause::message(
            "the batch claim answered for another number of messages than it was asked",
        )));
    }
    rows.iter()
        .map(|row| {
            let state: &str = row.try_get(1).map_err(backend)?;
            match state {
                "claimed" => Ok(BatchClaim::Claimed),
                "busy" => Ok(BatchClaim::Busy),
                finished => completed(finished)
                    .map(BatchClaim::Finished)
                    .ok_or_else(|| {
                        StoreError::Backend(Cause::message(
                            "an unknown outcome in a progress record",
                        ))
                    }),
            }
        })
        .collect()
}

impl TransactionalBatchStore for PostgresStore {
    /// Claims the batch in one statement in a new transaction, with the claim timeout as for a
    /// single claim (only a sweep, or a claim written without the advisory lock, can make it
    /// wait); with no message claimed, the transaction is rolled back at once. An id asked
    /// twice is claimed once, and is [`BatchClaim::Busy`] the second time.
    // The statement is `CLAIM_BATCH`.
    fn begin_batch(
        &self,
        subscription: &str,
        message_ids: &[Arc<str>],
    ) -> LocalBoxFuture<'static, Result<BatchClaims<PgTransaction>, StoreError>> {
        self.clone()
            .begin_claim_batch(subscription.to_owned(), message_ids.to_vec())
            .boxed_local()
    }

    /// Records the outcomes and releases the other claims in one statement, sent with `COMMIT`
    /// in one round trip. Only the messages this transaction claimed are recorded (an outcome
    /// for another is logged and ignored: its record is not this transaction's to write); every
    /// message it claimed without an outcome in `finished`
    /// is released, whether `released` names it or not (the transaction knows its claims).
    // The statement is `RECORD_BATCH`.
    fn commit_batch(
        &self,
        mut tx: PgTransaction,
        finished: Vec<(Arc<str>, Completed)>,
        _released: Vec<Arc<str>>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        async move {
            let answers = {
                let claimed: HashSet<&str> = tx.message_ids.iter().map(|id| &**id).collect();
                // The last outcome given a message counts.
                let mut outcome: HashMap<&str, Completed> = HashMap::with_capacity(finished.len());
                for (id, completed) in &finished {
                    if claimed.contains(&**id) {
                        outcome.insert(id, *completed);
                    } else {
                        tracing::error!(subscription = %tx.subscription,
                            message_id = %loggable_key(id),
                            "an outcome for a message this batch's transaction did not claim: \
                             not recorded");
                    }
                }
                let ids: Vec<&str> = outcome.keys().copied().collect();
                let dropped: Vec<&str> = outcome
                    .iter()
                    .filter(|(_, completed)| **completed == Completed::Dropped)
                    .map(|(id, _)| *id)
                    .collect();
                let release: Vec<&str> = tx
                    .message_ids
                    .iter()
                    .map(|id| &**id)
                    .filter(|id| !outcome.contains_key(id))
                    .collect();
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&tx.subscription, &ids, &dropped, &release];
                let answers = tx.record_and_commit(RECORD_BATCH, &params).await?;
                if let Some(rows) = answers.recorded()
                    && rows != ids.len() as u64
                {
                    tracing::error!(subscription = %tx.subscription, recorded = rows,
                        outcomes = ids.len(),
                        "progress records of the batch were gone at commit (deleted by the \
                         handler?): its writes committed without them");
                }
                answers
            };
            tx.ended(answers)
        }
        .boxed_local()
    }
}
