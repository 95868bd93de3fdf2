//! The PostgreSQL transactional store and the transaction a handler writes in.

use crate::schema::{self, MigrateError};
use deadpool_postgres::{ClientWrapper, Object, Pool};
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold_actors::{
    error::{Cause, StoreError},
    store::{
        BatchClaim, BatchClaims, Claim, Completed, TransactionalBatchStore, TransactionalStore,
    },
};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a record is kept, by default: a day. Pub/Sub redelivers a finished message, when it
/// does, within minutes (a lost or refused ack, a lapsed lease); a day also covers a replica
/// that was down for hours with messages it had leased. Rows are small (about 100 bytes).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a claim waits for another replica's open transaction on the same message, by
/// default, before the message is retried (nack) instead.
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections in the pool [`PostgresStore::connect`] builds, by default. Each running
/// transactional handler holds one: keep it at least the registration's `workers` (twice that
/// for batch handlers: a running batch may hold a second one while messages another replica
/// held wait for their claims).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;
/// How often expired records are deleted, at most (by the first claim after the interval).
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// How long the health probe waits for a pooled connection.
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// The longest `lock_timeout` PostgreSQL accepts, in milliseconds (about 24.8 days).
const MAX_CLAIM_TIMEOUT_MS: u128 = i32::MAX as u128;

// Every claim, single or batch, first takes the message's advisory lock, held until its
// transaction ends: `hashtextextended(message_id, hashtext(subscription))`, a 64-bit hash of the
// message id seeded with the subscription's. So a batch can ask for it without waiting
// (`pg_try_advisory_xact_lock`) and leave out a message whose lock another transaction holds,
// where an `INSERT` would wait on that transaction's uncommitted row (a speculative insertion
// waits for the transaction that wrote the conflicting row to end). Two messages whose keys
// collide (one chance in 2⁶⁴ a pair) only wait for each other, or one is left out of a batch
// once: the record, not the lock, is the claim.
//
// The `WITH` queries that call a lock function run once per message, each message's lock taken
// before its row is inserted: PostgreSQL never folds a `WITH` query with a volatile function into
// the statement that reads it. (`hashtextextended` needs PostgreSQL 11 or later.)

/// Claims a message: takes the message's advisory lock (waits while another open transaction
/// holds it, up to the claim timeout), then inserts its record, or takes over an expired one or
/// one that was committed still claimed (by a handler that ran `COMMIT` itself). Returns a row
/// when the claim is this transaction's; no row when the message finished (and committed)
/// before. A claim from a Leasehold without the advisory lock (one from before batches, during a
/// rolling upgrade) is waited for on the row instead: the primary key keeps two claims apart
/// either way.
const CLAIM: &str = "WITH locked AS (
        SELECT pg_advisory_xact_lock(hashtextextended($2::text, hashtext($1::text)))
    )
    INSERT INTO leasehold_progress AS p (subscription, message_id, outcome, expires_at)
    SELECT $1::text, $2::text, 'claimed', now() + make_interval(secs => $3) FROM locked
    ON CONFLICT (subscription, message_id)
    DO UPDATE SET outcome = 'claimed', claimed_at = now(), expires_at = EXCLUDED.expires_at
        WHERE p.expires_at < now() OR p.outcome = 'claimed'
    RETURNING 1";
/// Claims a batch of messages (`$2`, distinct ids of subscription `$1`) in one statement: one
/// row per message, in the order asked (its ordinal from 1), saying what became of it.
/// - `acked` or `dropped`: finished before. Either its record says so in this statement's
///   snapshot (no lock is taken then), or the transaction that finished it committed after the
///   snapshot was taken, while this one tried its lock: the `INSERT` sees the record the commit
///   left and leaves it as it is (an update to the same values, so that `RETURNING` shows it).
/// - `claimed`: its advisory lock was free and is now this transaction's, and its record is
///   inserted or taken over (expired, or committed still claimed) as in [`CLAIM`].
/// - `busy`: another open transaction holds its advisory lock (it claims the message now): not
///   waited for.
///
/// The finished records are looked up one by one on the primary key (a subquery per message,
/// so that no plan scans a subscription's records). Nothing waits on another claim: the locks
/// are tried, and the `INSERT` touches only records whose lock this transaction holds. It may
/// wait on a sweep deleting an expired record it takes over (a statement's while), and on a
/// claim by a Leasehold from before batches (see [`CLAIM`]) up to the claim timeout, after which
/// the whole batch is retried.
const CLAIM_BATCH: &str = "WITH asked AS (
        SELECT a.n, a.message_id, (
            SELECT p.outcome FROM leasehold_progress p
            WHERE p.subscription = $1::text AND p.message_id = a.message_id
                AND p.expires_at >= now() AND p.outcome <> 'claimed'
        ) AS finished
        FROM unnest($2::text[]) WITH ORDINALITY AS a (message_id, n)
    ),
    free AS (
        SELECT message_id FROM asked
        WHERE CASE WHEN finished IS NULL
            THEN pg_try_advisory_xact_lock(hashtextextended(message_id, hashtext($1::text)))
            ELSE false END
    ),
    claimed AS (
        INSERT INTO leasehold_progress AS p (subscription, message_id, outcome, expires_at)
        SELECT $1::text, message_id, 'claimed', now() + make_interval(secs => $3) FROM free
        ON CONFLICT (subscription, message_id) DO UPDATE SET
            outcome = CASE WHEN p.expires_at < now() OR p.outcome = 'claimed'
                THEN 'claimed' ELSE p.outcome END,
            claimed_at = CASE WHEN p.expires_at < now() OR p.outcome = 'claimed'
                THEN now() ELSE p.claimed_at END,
            expires_at = CASE WHEN p.expires_at < now() OR p.outcome = 'claimed'
                THEN EXCLUDED.expires_at ELSE p.expires_at END
        RETURNING p.message_id, p.outcome
    )
    SELECT asked.n, coalesce(asked.finished, claimed.outcome, 'busy')
    FROM asked LEFT JOIN claimed ON claimed.message_id = asked.message_id
    ORDER BY asked.n";
/// The claim's lock wait is over: the handler's own statements wait as the server's, database's
/// or role's `lock_timeout` says.
const AFTER_CLAIM: &str = "SET LOCAL lock_timeout TO DEFAULT";
/// The recorded outcome of a finished message, when not expired.
const OUTCOME: &str = "SELECT outcome FROM leasehold_progress
    WHERE subscription = $1 AND message_id = $2 AND expires_at >= now()
        AND outcome <> 'claimed'";
/// Records how the claimed message finished (sent together with the commit).
const SET_OUTCOME: &str =
    "UPDATE leasehold_progress SET outcome = $3 WHERE subscription = $1 AND message_id = $2";
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
/// Deletes expired records, whoever wrote them.
const SWEEP: &str = "DELETE FROM leasehold_progress WHERE expires_at < now()";

/// The store could not be set up: nothing was consumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection URL (or `key=value` string) does not parse.
    #[error("invalid PostgreSQL connection string")]
    Config(#[source] tokio_postgres::Error),
    /// The pool could not be built.
    #[error("could not build the PostgreSQL connection pool")]
    Pool(#[source] deadpool_postgres::BuildError),
    /// No connection could be made.
    #[error("could not connect to PostgreSQL")]
    Connect(#[source] deadpool_postgres::PoolError),
    /// Leasehold's tables could not be created or migrated, or a query failed.
    #[error("PostgreSQL refused Leasehold's statements")]
    Database(#[source] tokio_postgres::Error),
    /// The database's tables were migrated by a newer Leasehold.
    #[error(
        "the database's Leasehold schema is version {found}, newer than this Leasehold's \
         ({supported}): upgrade Leasehold"
    )]
    NewerSchema {
        /// The version in the database.
        found: i32,
        /// The newest version this code knows.
        supported: i32,
    },
}

/// A transactional store on PostgreSQL, shared by every replica of a subscription: the handler's
/// writes and the message's progress record commit in one transaction before the ack is sent.
///
/// Give it to [`Registration::transactional_json`] (or `transactional_raw`). For each message
/// it opens a transaction on a pooled connection and claims the message id in it (one row in
/// `leasehold_progress`, keyed by subscription and message id); the handler writes through the
/// [`PgTransaction`]; `ack()` and `drop()` record the outcome and commit, anything else rolls
/// back. A redelivery of a committed message, to any replica, finds the row and is settled again
/// without the handler; a claim on a message another replica's open transaction holds waits for
/// it (up to the claim timeout), then finds the row or takes the claim.
///
/// It is a [`TransactionalBatchStore`] too, for `Registration::transactional_json_batch` (or
/// `transactional_raw_batch`): one transaction claims every message of a batch in one statement,
/// the handler writes the batch through the one [`PgTransaction`], and one statement records
/// each message's outcome (and releases the claims of those retried) before the commit. A
/// message of the batch that another open transaction claims is not waited for: it is left out
/// (`BatchClaim::Busy`). Every claim takes an advisory lock on its message (a hash of the
/// subscription and the message id) before it touches the row: that is what a batch can test
/// without waiting. (A replica of a Leasehold from before batches takes no such lock: while it
/// runs beside newer ones, a batch may wait on one of its claims, up to the claim timeout.) A
/// batch holds its messages' locks until it ends, in PostgreSQL's shared lock table
/// (`max_locks_per_transaction` × (`max_connections` + `max_prepared_transactions`) locks, 6,400
/// by default, with some slack): keep the messages of all the batches running at once, on every
/// replica, well below it. Past it, claims fail ("out of shared memory") and are retried as in
/// an outage.
///
/// Records expire after the time to live of the store that wrote them ([`DEFAULT_TTL`]);
/// expired rows are deleted at most once a minute, by the first claim after that. The tables
/// are created, or migrated, when the store connects.
///
/// [`Registration::transactional_json`]: leasehold_actors::Registration::transactional_json
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    ttl: Duration,
    claim_timeout: Duration,
    /// What opens each transaction: `BEGIN` and the claim's lock timeout.
    begin: Arc<str>,
    last_sweep: Arc<Mutex<Option<Instant>>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .field("ttl", &self.ttl)
            .field("claim_timeout", &self.claim_timeout)
            .finish()
    }
}

/// TCP keepalives on the client's sockets, unless the URL sets its own: a server that vanished
/// (a host down, a network cut) is noticed in about a minute instead of the kernel's default of
/// more than two hours. (The server's end, which releases a vanished replica's open
/// transactions and claims, is the server's or the role's `tcp_keepalives_*` settings.)
fn keepalives(config: &mut tokio_postgres::Config) {
    let untouched = tokio_postgres::Config::new();
    if config.get_keepalives() == untouched.get_keepalives()
        && config.get_keepalives_idle() == untouched.get_keepalives_idle()
    {
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
    }
}

/// `BEGIN`, with the claim's lock wait bounded by `claim_timeout`.
fn begin_statement(claim_timeout: Duration) -> Arc<str> {
    let ms = claim_timeout.as_millis().clamp(1, MAX_CLAIM_TIMEOUT_MS);
    Arc::from(format!("BEGIN; SET LOCAL lock_timeout = {ms}"))
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Cause::new(e))
}

/// A statement's error: a conflict with another transaction is [`StoreError::Busy`] (retried at
/// once, not an outage), anything else [`StoreError::Backend`].
fn statement(e: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    let conflict = e.code().is_some_and(|code| {
        [
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ]
        .contains(code)
    });
    if conflict {
        StoreError::Busy(Cause::new(e))
    } else {
        backend(e)
    }
}

impl PostgresStore {
    /// Connects to the database `url` names (`postgres://user:password@host:port/db`, or
    /// libpq's `key=value` form) without TLS, with a pool of [`DEFAULT_MAX_CONNECTIONS`], and
    /// creates or migrates Leasehold's tables. For TLS or other pool settings build the pool
    /// yourself, with [`manager`](crate::manager), and use [`with_pool`](Self::with_pool).
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(PostgresError::Config)?;
        keepalives(&mut config);
        let pool = Pool::builder(crate::manager(config, tokio_postgres::NoTls))
            .max_size(DEFAULT_MAX_CONNECTIONS)
            .build()
            .map_err(PostgresError::Pool)?;
        Self::with_pool(pool).await
    }

    /// Uses `pool`, and creates or migrates Leasehold's tables through it.
    ///
    /// Build its manager with [`manager`](crate::manager): a pool built on deadpool's own
    /// `Manager` drives each connection on the thread that opened it, a worker thread of the
    /// subscription, and loses the connection when that thread stops or is restarted. Keep its
    /// size at least the registration's `workers` (each running handler holds a connection).
    pub async fn with_pool(pool: Pool) -> Result<Self, PostgresError> {
        let mut client = pool.get().await.map_err(PostgresError::Connect)?;
        let migrated = schema::migrate(&mut client).await;
        // Not kept for the handlers: if the pool was built by another manager than `manager`,
        // this connection's I/O runs on the caller's thread, which may run the subscriptions.
        drop(Object::take(client));
        match migrated {
            Ok(from) if from < schema::VERSION => {
                tracing::info!(from, to = schema::VERSION, "migrated Leasehold's tables")
            }
            Ok(_) => {}
            Err(MigrateError::Database(e)) => return Err(PostgresError::Database(e)),
            Err(MigrateError::Newer(found)) => {
                return Err(PostgresError::NewerSchema {
                    found,
                    supported: schema::VERSION,
                });
            }
        }
        Ok(Self {
            pool,
            ttl: DEFAULT_TTL,
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
            begin: begin_statement(DEFAULT_CLAIM_TIMEOUT),
            last_sweep: Arc::new(Mutex::new(None)),
        })
    }

    /// How long the records this store writes are kept (default [`DEFAULT_TTL`]): a redelivery
    /// after that runs the handler again. Each record keeps the time to live of the store that
    /// wrote it. Zero keeps nothing: every redelivery runs the handler again (for tests).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a claim waits for another replica's open transaction on the same message
    /// (default [`DEFAULT_CLAIM_TIMEOUT`]) before the message is retried. Taken between 1 ms
    /// and PostgreSQL's longest `lock_timeout` (about 24.8 days). It limits the claim only: for
    /// the handler's own statements `lock_timeout` is set back to its default (the server's,
    /// the database's or the role's setting).
    pub fn claim_timeout(mut self, timeout: Duration) -> Self {
        self.claim_timeout = timeout;
        self.begin = begin_statement(timeout);
        self
    }

    /// The connection pool, for your own queries outside the handlers' transactions.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The outcome recorded for `message_id` of `subscription`, if it finished (committed)
    /// and the record has not expired.
    pub async fn completed(
        &self,
        subscription: &str,
        message_id: &str,
    ) -> Result<Option<Completed>, PostgresError> {
        let client = self.pool.get().await.map_err(PostgresError::Connect)?;
        let row = client
            .query_opt(OUTCOME, &[&subscription, &message_id])
            .await
            .map_err(PostgresError::Database)?;
        Ok(row.and_then(|r| completed(r.get(0))))
    }

    /// Deletes expired records now; returns how many. (Claims also do it, once a minute.)
    pub async fn sweep(&self) -> Result<u64, PostgresError> {
        let client = self.pool.get().await.map_err(PostgresError::Connect)?;
        client
            .execute(SWEEP, &[])
            .await
            .map_err(PostgresError::Database)
    }

    /// Starts a sweep in the background when the last one is older than the interval.
    fn sweep_now_and_then(&self) {
        let now = Instant::now();
        {
            let mut last = self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < SWEEP_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        let store = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match store.sweep().await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(deleted = n, "expired progress records deleted"),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not delete expired progress records")
                    }
                }
            });
        }
    }

    async fn begin_claim(
        self,
        subscription: String,
        message_id: Arc<str>,
    ) -> Result<Claim<PgTransaction>, StoreError> {
        self.sweep_now_and_then();
        let client = self.pool.get().await.map_err(backend)?;
        let claim = client.prepare_cached(CLAIM).await.map_err(backend)?;
        // From here the connection is in a transaction: dropped on an error, it is closed, not
        // pooled, and the server rolls back.
        let mut tx = PgTransaction {
            client: Some(client),
            subscription,
            message_ids: vec![message_id],
        };
        tx.batch_execute(&self.begin).await.map_err(backend)?;
        let ttl = self.ttl.as_secs_f64();
        // One round trip: the claim, then the lock timeout back to the session's (so that it
        // does not cut the handler's own lock waits). After a failed claim the second fails too.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&tx.subscription, &tx.message_id(), &ttl];
        let (claimed, reset) =
            futures::join!(tx.query_opt(&claim, &params), tx.batch_execute(AFTER_CLAIM));
        let claimed = claimed.map_err(statement)?;
        reset.map_err(backend)?;
        if claimed.is_some() {
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

impl PostgresStore {
    async fn begin_claim_batch(
        self,
        subscription: String,
        asked: Vec<Arc<str>>,
    ) -> Result<BatchClaims<PgTransaction>, StoreError> {
        self.sweep_now_and_then();
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
        let client = self.pool.get().await.map_err(backend)?;
        let claim = client.prepare_cached(CLAIM_BATCH).await.map_err(backend)?;
        // From here the connection is in a transaction: dropped on an error, it is closed, not
        // pooled, and the server rolls back.
        let mut tx = PgTransaction {
            client: Some(client),
            subscription,
            message_ids: Vec::new(),
        };
        tx.batch_execute(&self.begin).await.map_err(backend)?;
        let ttl = self.ttl.as_secs_f64();
        // One round trip, as for a single claim: the claim, then the lock timeout reset.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&tx.subscription, &distinct, &ttl];
        let (rows, reset) =
            futures::join!(tx.query(&claim, &params), tx.batch_execute(AFTER_CLAIM));
        let rows = rows.map_err(statement)?;
        reset.map_err(backend)?;
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

/// How an outcome is written in a record.
fn completed_text(completed: Completed) -> &'static str {
    match completed {
        Completed::Acked => "acked",
        Completed::Dropped => "dropped",
    }
}

fn completed(outcome: &str) -> Option<Completed> {
    match outcome {
        "acked" => Some(Completed::Acked),
        "dropped" => Some(Completed::Dropped),
        _ => None,
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
            let set = tx.prepare_cached(SET_OUTCOME).await.map_err(backend)?;
            // One round trip: the update, then the commit. Should the update fail (the
            // handler's own statement failed and aborted the transaction, say), the commit
            // that follows only ends the aborted transaction: nothing was committed.
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&tx.subscription, &tx.message_id(), &outcome];
            let (updated, committed) =
                futures::join!(tx.execute(&set, &params), tx.batch_execute("COMMIT"));
            if let (Ok(rows), Ok(())) = (&updated, &committed)
                && *rows != 1
            {
                tracing::error!(subscription = %tx.subscription,
                    message_id = %tx.message_id(),
                    "the message's progress record was gone at commit (deleted by the \
                     handler?): its writes committed without it");
            }
            tx.ended(updated, committed)
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

impl TransactionalBatchStore for PostgresStore {
    /// Claims the batch in one statement in a new transaction, with the claim timeout as for a
    /// single claim (only a sweep, or a claim by a Leasehold from before batches, can make it
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
            let (updated, committed) = {
                let claimed: HashSet<&str> = tx.message_ids.iter().map(|id| &**id).collect();
                // The last outcome given a message counts.
                let mut outcome: HashMap<&str, Completed> = HashMap::with_capacity(finished.len());
                for (id, completed) in &finished {
                    if claimed.contains(&**id) {
                        outcome.insert(id, *completed);
                    } else {
                        tracing::error!(subscription = %tx.subscription, message_id = %id,
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
                let record = tx.prepare_cached(RECORD_BATCH).await.map_err(backend)?;
                // One round trip: the records, then the commit. Should the records fail (the
                // handler's own statement failed and aborted the transaction, say), the commit
                // that follows only ends the aborted transaction: nothing was committed.
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&tx.subscription, &ids, &dropped, &release];
                let (updated, committed) =
                    futures::join!(tx.execute(&record, &params), tx.batch_execute("COMMIT"));
                if let (Ok(rows), Ok(())) = (&updated, &committed)
                    && *rows != ids.len() as u64
                {
                    tracing::error!(subscription = %tx.subscription, recorded = rows,
                        outcomes = ids.len(),
                        "progress records of the batch were gone at commit (deleted by the \
                         handler?): its writes committed without them");
                }
                (updated, committed)
            };
            tx.ended(updated, committed)
        }
        .boxed_local()
    }
}

/// An open transaction in which the message (or a batch's messages) is claimed: the handler's
/// writes go here.
///
/// Dereferences to the pooled connection's client (`execute`, `query`, `prepare_cached`, ...),
/// whose statements all run in this transaction. Do not `COMMIT` or `ROLLBACK` yourself: the
/// outcome the handler returns does (`ack()` and `drop()` commit, anything else rolls back).
/// Dropped unfinished (the handler was cut by a stop), its connection is closed, not pooled, and
/// the server rolls back.
pub struct PgTransaction {
    client: Option<Object>,
    subscription: String,
    /// The message claimed, or the messages a batch claimed.
    message_ids: Vec<Arc<str>>,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction")
            .field("subscription", &self.subscription)
            .field("message_ids", &self.message_ids)
            .finish_non_exhaustive()
    }
}

impl PgTransaction {
    /// The subscription of the message claimed.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// The message id claimed; in a batch's transaction, the first of
    /// [`message_ids`](Self::message_ids).
    pub fn message_id(&self) -> &str {
        self.message_ids.first().map_or("", |id| id)
    }

    /// The message ids claimed in this transaction: the one of a single message's, or those of
    /// a batch's that it claimed (not those finished before or busy elsewhere, which the batch
    /// handler does not get), in the batch's order.
    pub fn message_ids(&self) -> &[Arc<str>] {
        &self.message_ids
    }

    /// The client, for functions that take one (`&tokio_postgres::Client`, or a
    /// `tokio_postgres::GenericClient`). Its statements run in this transaction.
    pub fn client(&self) -> &tokio_postgres::Client {
        self
    }

    /// Ends the transaction with `statement` and returns the connection to the pool; on an
    /// error the connection is closed instead.
    async fn end(&mut self, statement: &str) -> Result<(), tokio_postgres::Error> {
        self.batch_execute(statement).await?;
        self.release();
        Ok(())
    }

    /// The transaction is over: the connection goes back to the pool.
    fn release(&mut self) {
        drop(self.client.take());
    }

    /// The end of a commit of the record update(s) `updated` and the `COMMIT` itself: once the
    /// `COMMIT` answered, the connection goes back to the pool (a failed update only aborted
    /// the transaction, which the `COMMIT` ended); a failed `COMMIT` leaves it to be dropped.
    fn ended(
        &mut self,
        updated: Result<u64, tokio_postgres::Error>,
        committed: Result<(), tokio_postgres::Error>,
    ) -> Result<(), StoreError> {
        committed.map_err(statement)?;
        self.release();
        updated.map(drop).map_err(statement)
    }
}

impl Deref for PgTransaction {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        self.client
            .as_ref()
            .expect("a PgTransaction is only reachable while it is open")
    }
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        if let Some(open) = self.client.take() {
            // Still in a transaction: closed rather than pooled, so the server rolls it back.
            drop(Object::take(open));
        }
    }
}
