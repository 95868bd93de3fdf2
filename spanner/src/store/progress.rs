//! `SpannerStore` itself: its defaults and settings, connecting (the client on the driver
//! thread, the checks that the database and the table are there), and the claim rows read
//! outside any handler's transaction.
//!
//! It uses `error` and `records`, and from outside `store/`, `endpoint`, `driver` and
//! `schema`.

use super::error::client_error;
use super::records::{completed, key};
use crate::endpoint::{DEFAULT_CONNECT_TIMEOUT, Endpoint};
use crate::error::{SpannerError, check_name};
use crate::schema::TABLE;
use gcloud_gax::grpc::Code;
use gcloud_spanner::client::{Client, ClientConfig};
use gcloud_spanner::statement::Statement;
use leasehold_actors::error::StoreError;
use leasehold_actors::store::{CommitSignal, Completed};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How many times in a row a message's handler runs again after Spanner aborted its
/// transaction, by default, before the message is retried (nack) instead.
pub const DEFAULT_MAX_ABORTS: u32 = 10;
/// Sessions the store's client keeps open at most. Each running transactional handler holds
/// one: keep the `workers` of the registrations on one store at this many or fewer (the size
/// cannot be set yet).
pub const DEFAULT_SESSIONS: usize = 100;
/// The first wait before a run after an abort; it doubles with each abort in a row, up to
/// [`LONGEST_ABORT_WAIT`], with jitter.
const FIRST_ABORT_WAIT: Duration = Duration::from_millis(20);
/// The longest wait before a run after an abort.
const LONGEST_ABORT_WAIT: Duration = Duration::from_secs(2);

/// A transactional store on Cloud Spanner, shared by every replica of a subscription, in any
/// region: the handler's writes and the message's claim commit in one read-write transaction
/// before the ack is sent.
///
/// Give it to [`Registration::transactional_json`] (or `transactional_raw`, or the batch
/// forms). For each message it begins a read-write transaction and reads the message's claim
/// row in `leasehold_claims` (keyed by a shard of the id, the subscription and the id): a row
/// means the message finished before, on any replica, and it is settled again with the row's
/// outcome without the handler. Otherwise the handler writes through the
/// [`SpannerTransaction`]; `ack()` and `drop()` insert the claim row and commit, anything else
/// rolls back. Two replicas given the same message may both run the handler, but only one
/// commits: Spanner aborts the other (their reads of the claim row conflict with the first
/// commit's insert), whose run on a fresh transaction then finds the row.
///
/// An aborted transaction runs the handler again on a fresh one, after a short wait that
/// doubles each time, up to [`max_aborts`](Self::max_aborts) times in a row and while the
/// message's lease leaves room; past that the message is retried (nack), counted in
/// `store_failures`, and every abort in `store_aborts`.
///
/// The table is not created here: run [`migrate`](crate::migrate) (or the DDL in
/// [`SCHEMA`](crate::SCHEMA)) once per database. Connecting checks that it is there.
///
/// [`Registration::transactional_json`]: leasehold_actors::Registration::transactional_json
/// [`SpannerTransaction`]: super::transaction::SpannerTransaction
#[derive(Clone)]
pub struct SpannerStore {
    pub(crate) client: Client,
    database: Arc<str>,
    max_aborts: u32,
    /// What its transactions tell this process's relays when they commit outbox rows.
    pub(crate) outbox: CommitSignal,
}

impl fmt::Debug for SpannerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpannerStore")
            .field("database", &self.database)
            .field("sessions", &self.client.session_count())
            .field("max_aborts", &self.max_aborts)
            .finish()
    }
}

impl SpannerStore {
    /// Connects to `database` (`projects/P/instances/I/databases/D`) at the emulator
    /// `SPANNER_EMULATOR_HOST` names, else on Google Cloud with Application Default
    /// Credentials, and checks that the database and Leasehold's table are there.
    pub async fn connect(database: &str) -> Result<Self, SpannerError> {
        Self::connect_to(&Endpoint::from_env(), database, DEFAULT_CONNECT_TIMEOUT).await
    }

    /// Connects to `database` at `endpoint`, giving Spanner `timeout` to answer, with
    /// [`DEFAULT_SESSIONS`] sessions; then checks that the database and Leasehold's table are
    /// there.
    pub async fn connect_to(
        endpoint: &Endpoint,
        database: &str,
        timeout: Duration,
    ) -> Result<Self, SpannerError> {
        check_name(database)?;
        let unreachable = || SpannerError::Unreachable {
            endpoint: endpoint.describe(),
            timeout,
        };
        let described = endpoint.describe();
        let (endpoint, name, inner) = (endpoint.clone(), database.to_string(), described.clone());
        let built = crate::driver::on_driver(tokio::time::timeout(timeout, async move {
            let mut config = ClientConfig {
                environment: endpoint.environment().await?,
                ..Default::default()
            };
            config.channel_config.connect_timeout = timeout;
            config.channel_config.timeout = timeout;
            config.session_config.min_opened = 4;
            config.session_config.max_opened = DEFAULT_SESSIONS;
            Client::new(name.clone(), config)
                .await
                .map_err(|e| classify(e, &name, &inner, timeout))
        }))
        .await;
        let client = match built {
            Ok(client) => client?,
            Err(_) => return Err(unreachable()),
        };
        let store = Self {
            client,
            database: Arc::from(database),
            max_aborts: DEFAULT_MAX_ABORTS,
            outbox: CommitSignal::default(),
        };
        match tokio::time::timeout(timeout, store.has_table()).await {
            Ok(Ok(true)) => Ok(store),
            Ok(Ok(false)) => Err(SpannerError::SchemaMissing(database.to_string())),
            Ok(Err(e)) => Err(classify(e, database, &described, timeout)),
            Err(_) => Err(unreachable()),
        }
    }

    /// How many times in a row a message's handler runs again after an abort (default
    /// [`DEFAULT_MAX_ABORTS`]); zero never runs it again (an abort retries the message).
    pub fn max_aborts(mut self, max: u32) -> Self {
        self.max_aborts = max;
        self
    }

    /// The client, for your own reads and writes outside the handlers' transactions.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The outcome recorded for `message_id` of `subscription`, if it finished (committed).
    pub async fn completed(
        &self,
        subscription: &str,
        message_id: &str,
    ) -> Result<Option<Completed>, SpannerError> {
        let mut tx = self.client.single().await.map_err(SpannerError::client)?;
        let row = tx
            .read_row(TABLE, &["outcome"], key(subscription, message_id))
            .await
            .map_err(SpannerError::client)?;
        match row {
            None => Ok(None),
            Some(row) => {
                let text: String = row.column(0).map_err(SpannerError::client)?;
                Ok(completed(&text))
            }
        }
    }

    /// Whether the database has Leasehold's table.
    async fn has_table(&self) -> Result<bool, gcloud_spanner::client::Error> {
        let mut tx = self.client.single().await?;
        let mut statement = Statement::new(
            "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES \
             WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @name",
        );
        statement.add_param("name", &TABLE);
        let mut rows = tx.query(statement).await?;
        let found = match rows.next().await? {
            Some(row) => row.column::<i64>(0)? > 0,
            None => false,
        };
        Ok(found)
    }

    /// How long to wait before the `aborts`-th run after an abort, if one is left.
    pub(crate) fn abort_wait(&self, aborts: u32) -> Option<Duration> {
        abort_wait(self.max_aborts, aborts, jitter())
    }

    /// Is Spanner there (a query of no table)? For the subscription's health probe.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        let mut tx = self.client.single().await.map_err(client_error)?;
        let mut rows = tx
            .query(Statement::new("SELECT 1"))
            .await
            .map_err(super::error::store_error)?;
        rows.next().await.map_err(super::error::store_error)?;
        Ok(())
    }
}

/// The wait before the `aborts`-th run in a row after an abort, when no more than `max` are
/// allowed: 20 ms, doubling, at most 2 s, less up to a quarter by `jitter` (in [0, 1)), so that
/// transactions aborted together do not meet again.
fn abort_wait(max: u32, aborts: u32, jitter: f64) -> Option<Duration> {
    (aborts <= max).then(|| {
        let doubled = FIRST_ABORT_WAIT.saturating_mul(1 << aborts.saturating_sub(1).min(16));
        let wait = doubled.min(LONGEST_ABORT_WAIT);
        wait - wait.mul_f64(jitter.clamp(0.0, 1.0) * 0.25)
    })
}

/// A number in [0, 1) that differs from call to call: the clock's nanoseconds and a counter,
/// mixed (a clock may tick in microseconds, leaving the low digits at zero).
fn jitter() -> f64 {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mixed = ((nanos / 1000) ^ call.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
    f64::from(mixed >> 8) / f64::from(1u32 << 24)
}

/// A client's error at connect: a database or instance that is not there says so, and so does
/// a Spanner that cannot be reached (a refused connection, a name that does not resolve, a
/// call that timed out).
fn classify(
    e: gcloud_spanner::client::Error,
    database: &str,
    endpoint: &str,
    timeout: Duration,
) -> SpannerError {
    use gcloud_spanner::client::Error;
    let unreachable = || SpannerError::Unreachable {
        endpoint: endpoint.to_string(),
        timeout,
    };
    match &e {
        Error::GRPC(status) => match status.code() {
            Code::NotFound => SpannerError::DatabaseNotFound(database.to_string()),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => unreachable(),
            _ => SpannerError::client(e),
        },
        Error::Connection(_) => unreachable(),
        Error::InvalidSession(s) if s.to_string().to_ascii_lowercase().contains("not found") => {
            SpannerError::DatabaseNotFound(database.to_string())
        }
        _ => SpannerError::client(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_waits_double_up_to_two_seconds_and_stop_after_the_maximum() {
        let ms = |aborts| abort_wait(10, aborts, 0.0).map(|d| d.as_millis());
        assert_eq!(
            (1..=8).map(ms).collect::<Vec<_>>(),
            [20, 40, 80, 160, 320, 640, 1280, 2000].map(Some)
        );
        assert_eq!(ms(10), Some(2000));
        assert_eq!(ms(11), None);
        assert_eq!(abort_wait(0, 1, 0.0), None, "zero never runs again");
        assert_eq!(
            abort_wait(10, 1, 0.999).map(|d| d.as_micros()),
            Some(15_005),
            "jitter takes up to a quarter off"
        );
    }

    #[test]
    fn database_names_must_be_complete() {
        assert!(check_name("projects/p/instances/i/databases/d").is_ok());
        for bad in [
            "",
            "d",
            "projects/p/instances/i",
            "projects/p/instances//databases/d",
            "projects/p/instance/i/databases/d",
            "projects/p/instances/i/databases/d/x",
        ] {
            assert!(
                matches!(check_name(bad), Err(SpannerError::Name(_))),
                "{bad:?}"
            );
        }
    }
}
