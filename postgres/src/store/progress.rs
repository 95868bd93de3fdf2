//! `PostgresStore` itself: its defaults, connecting (the pool, the migration), its settings, and
//! the progress records read and swept outside any handler's transaction.
//!
//! It uses `error` and `records`, and from outside `store/`, `schema` (the tables) and `driver`
//! (the pool's manager).

use super::error::PostgresError;
use super::records::{completed, finished};
use crate::driver::manager;
use crate::schema::{self, MigrateError};
use deadpool_postgres::{Object, Pool};
use leasehold_actors::store::{CommitSignal, Completed};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a record is kept, by default: a week, NServiceBus's default for its dedupe data.
/// Pub/Sub redelivers a finished message, when it does, within minutes (a lost or refused ack, a
/// lapsed lease), but a publisher's second copy of an event (a registration that dedupes on a
/// key, `Registration::dedupe_on`) can come days later, from a retry queue or a replay; Pub/Sub
/// keeps a message at most 7 days by default. Rows are small (about 100 bytes).
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);
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
/// Expired records deleted by one statement of a sweep: each statement is its own short
/// transaction, so a sweep holds no lock long, whatever it has to delete.
const SWEEP_BATCH: i64 = 1000;
/// The longest `lock_timeout` PostgreSQL accepts, in milliseconds (about 24.8 days).
const MAX_CLAIM_TIMEOUT_MS: u128 = i32::MAX as u128;

/// The recorded outcome of a finished message, when not expired.
pub(crate) const OUTCOME: &str = concat!(
    "SELECT outcome FROM leasehold_progress
    WHERE subscription = $1 AND message_id = $2 AND ",
    finished!("")
);
/// Deletes up to `$1` expired records, whoever wrote them, skipping rows a claim holds now (it
/// takes them over).
const SWEEP: &str = "DELETE FROM leasehold_progress WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM leasehold_progress WHERE expires_at < now()
    LIMIT $1 FOR UPDATE SKIP LOCKED))";

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
/// without waiting. (A claim written without that lock can still make a batch wait, up to the
/// claim timeout: the primary key, not the lock, is the claim.) A batch holds its messages'
/// locks until it ends, in PostgreSQL's shared lock table (`max_locks_per_transaction` ×
/// (`max_connections` + `max_prepared_transactions`) locks, 6,400 by default, with some
/// slack): keep the messages of all the batches running at once, on every replica, well below
/// it. Past it, claims fail ("out of shared memory") and are retried as in an outage.
///
/// Records expire after the time to live of the store that wrote them ([`DEFAULT_TTL`]);
/// expired rows are deleted at most once a minute, by the first claim after that. The tables
/// are created, or migrated, when the store connects.
///
/// [`Registration::transactional_json`]: leasehold_actors::Registration::transactional_json
/// [`PgTransaction`]: super::transaction::PgTransaction
/// [`TransactionalBatchStore`]: leasehold_actors::store::TransactionalBatchStore
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    pub(crate) ttl: Duration,
    claim_timeout: Duration,
    /// What opens each transaction: `BEGIN` and the claim's lock timeout.
    pub(crate) begin: Arc<str>,
    last_sweep: Arc<Mutex<Option<Instant>>>,
    /// What its transactions tell this process's relays when they commit outbox rows.
    pub(crate) outbox: CommitSignal,
    /// Whether its handlers' outbox rows notify other processes' relays (`NOTIFY`).
    pub(crate) notify: bool,
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

impl PostgresStore {
    /// Connects to the database `url` names (`postgres://user:password@host:port/db`, or
    /// libpq's `key=value` form) without TLS, with a pool of [`DEFAULT_MAX_CONNECTIONS`], and
    /// creates or migrates Leasehold's tables. For TLS or other pool settings build the pool
    /// yourself, with [`manager`](crate::manager), and use [`with_pool`](Self::with_pool).
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(PostgresError::Config)?;
        keepalives(&mut config);
        let pool = Pool::builder(manager(config, tokio_postgres::NoTls))
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
            outbox: CommitSignal::default(),
            notify: true,
        })
    }

    /// How long the records this store writes are kept, its retention (default
    /// [`DEFAULT_TTL`], a week): a redelivery (or, for a registration that dedupes on a key, a
    /// copy) after that runs the handler again. Expired records are deleted in batches of a
    /// thousand, at most once a minute. Each record keeps the time to live of the store that
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

    /// Whether a handler's transaction that publishes through the outbox also notifies the
    /// relays of other processes (`NOTIFY leasehold_outbox`, delivered at the commit; default
    /// yes). This process's relays are woken by the commit either way, and other processes'
    /// find the rows at their next poll (`poll_interval`, a second by default) without it.
    ///
    /// Turn it off when every process that publishes runs a relay of its own: PostgreSQL
    /// serializes the commits of transactions that notified (they take a lock on its
    /// notification queue), and with 8 handlers committing at once that cut the commits a
    /// second to a third on this machine (BENCHMARKS.md, "The transactional outbox").
    pub fn notify_relays(mut self, notify: bool) -> Self {
        self.notify = notify;
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

    /// Deletes expired records now, a thousand per statement (each its own short transaction,
    /// so no lock is held long), until none is left; returns how many. (Claims also do it, once
    /// a minute.)
    pub async fn sweep(&self) -> Result<u64, PostgresError> {
        let client = self.pool.get().await.map_err(PostgresError::Connect)?;
        let mut deleted = 0;
        loop {
            let n = client
                .execute(SWEEP, &[&SWEEP_BATCH])
                .await
                .map_err(PostgresError::Database)?;
            deleted += n;
            if n < SWEEP_BATCH as u64 {
                return Ok(deleted);
            }
        }
    }

    /// Starts a sweep in the background when the last one is older than the interval.
    pub(crate) fn sweep_now_and_then(&self) {
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
}
