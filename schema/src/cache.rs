//! The process's revisions ([`Schemas`]): fetched once through a [`RevisionSource`], kept by
//! schema and revision id, bounded (least recently used out first), shared by every decoder made
//! from it. Concurrent lookups of one revision share one fetch. A revision the service does not
//! have is remembered a while ([`MISSING_TTL`]); one it could not give (unreachable, refused) is
//! asked again after a backoff ([`FETCH_BACKOFF_INITIAL`], doubling to [`FETCH_BACKOFF_MAX`]),
//! and meanwhile its lookups fail at once. Each is logged once: at its first failure, and when
//! it is fetched after failures.

use crate::attributes::shown;
use crate::error::{FetchError, SchemaError};
use crate::google::GoogleSchemas;
use crate::source::{Revision, RevisionSource, describe};
use crate::stats::{ReaderStats, bump};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use leasehold::Connection;
use leasehold::error::Cause;
use lru::LruCache;
use parking_lot::Mutex;
use std::num::NonZeroUsize;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How many revisions a process keeps by default: far more than its subscriptions read (Pub/Sub
/// keeps at most 20 revisions of a schema), so that only revisions nobody reads any more leave.
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;

/// How long the answer "no such revision" is kept before the service is asked again: its
/// messages meanwhile go to the failure policy without a fetch each.
pub const MISSING_TTL: Duration = Duration::from_secs(60);

/// The wait before a revision the service did not give is asked for again, after its first
/// failure; it doubles with each failure in a row.
pub const FETCH_BACKOFF_INITIAL: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a revision the service does not give: how soon after
/// an outage its messages are decoded again, at the most.
pub const FETCH_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Why a revision is not at hand.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The service does not have it.
    Missing,
    /// The service did not give it; try again in `retry_in`.
    Unavailable { cause: Cause, retry_in: Duration },
}

/// What a lookup gives.
pub(crate) type Fetched = Result<Arc<Revision>, Failure>;

type Key = (Arc<str>, Arc<str>);
type Fetch = Shared<BoxFuture<'static, Fetched>>;

/// What the cache knows of one revision.
enum Slot {
    Ready(Arc<Revision>),
    Missing {
        until: Instant,
    },
    Failing {
        until: Instant,
        failures: u32,
        cause: Cause,
    },
    Fetching(Fetch),
}

struct Inner {
    source: Arc<dyn RevisionSource>,
    slots: Mutex<LruCache<Key, Slot>>,
}

/// The process's schema revisions, shared by every decoder built from it: one fetch per revision
/// through its [`RevisionSource`] (Google's schema service with [`connect`](Self::connect)),
/// bounded to `capacity` revisions. Cheap to clone: clones share the cache.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold::{Connection, Delivery, Registration};
/// use leasehold_schema::{ReaderRevision, Schemas};
///
/// #[derive(serde::Deserialize)]
/// struct Order { id: i64 }
///
/// let schemas = Schemas::connect(&Connection::from_env()).await?; // one per process
/// let orders = schemas.avro::<Order>("projects/p/schemas/orders", ReaderRevision::Latest).await?;
/// let registration = Registration::decoded("projects/p/subscriptions/orders", orders,
///     |order: Order, delivery: Delivery| async move { delivery.ack() });
/// # let _ = registration; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Schemas {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas")
            .field("revisions", &self.inner.slots.lock().len())
            .finish_non_exhaustive()
    }
}

impl Schemas {
    /// Revisions fetched from `source`, at most [`DEFAULT_CACHE_CAPACITY`] kept.
    pub fn new(source: impl RevisionSource) -> Self {
        Self::with_capacity(source, DEFAULT_CACHE_CAPACITY)
    }

    /// Revisions fetched from `source`, at most `capacity` kept (at least 1).
    pub fn with_capacity(source: impl RevisionSource, capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Arc::new(Inner {
                source: Arc::new(source),
                slots: Mutex::new(LruCache::new(capacity)),
            }),
        }
    }

    /// Revisions fetched from the schema service `connection` reaches ([`GoogleSchemas`]).
    pub async fn connect(connection: &Connection) -> Result<Self, SchemaError> {
        Ok(Self::new(GoogleSchemas::connect(connection).await?))
    }

    /// The revisions kept now.
    pub fn len(&self) -> usize {
        self.inner.slots.lock().len()
    }

    /// Whether no revision is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest revision of `schema`, asked of the service now (and kept under its id).
    pub async fn latest(&self, schema: &str) -> Result<Arc<Revision>, SchemaError> {
        let what = describe(schema, None);
        let revision = self
            .inner
            .source
            .revision(schema, None)
            .await
            .map(Arc::new)
            .map_err(|e| start_error(what, e))?;
        let key = (Arc::from(schema), Arc::from(revision.revision_id.as_str()));
        self.inner
            .slots
            .lock()
            .put(key, Slot::Ready(revision.clone()));
        Ok(revision)
    }

    /// The revision `revision_id` of `schema`, from the cache or fetched now.
    pub async fn revision(
        &self,
        schema: &str,
        revision_id: &str,
    ) -> Result<Arc<Revision>, SchemaError> {
        self.lookup(schema, revision_id)
            .await
            .map_err(|failure| match failure {
                Failure::Missing => {
                    start_error(describe(schema, Some(revision_id)), FetchError::NotFound)
                }
                Failure::Unavailable { cause, .. } => SchemaError::Unavailable {
                    what: describe(schema, Some(revision_id)),
                    cause,
                },
            })
    }

    /// The revision, counted in `stats`: a hit (in the cache, or fetched by a lookup under way),
    /// a fetch this lookup started, or a failure.
    pub(crate) async fn lookup_for(
        &self,
        schema: &str,
        revision_id: &str,
        stats: &ReaderStats,
    ) -> Fetched {
        let (fetch, started) = match self.begin(schema, revision_id) {
            Ok(revision) => {
                bump(&stats.cache_hits);
                return Ok(revision);
            }
            Err(pending) => pending,
        };
        let fetched = fetch.await;
        match (&fetched, started) {
            (Ok(_), true) => bump(&stats.fetches),
            (Ok(_), false) => bump(&stats.cache_hits),
            (Err(Failure::Missing), _) => bump(&stats.missing),
            (Err(Failure::Unavailable { .. }), _) => bump(&stats.fetch_failures),
        }
        fetched
    }

    /// The revision, from the cache or fetched.
    async fn lookup(&self, schema: &str, revision_id: &str) -> Fetched {
        match self.begin(schema, revision_id) {
            Ok(revision) => Ok(revision),
            Err((fetch, _)) => fetch.await,
        }
    }

    /// A hit (`Ok`), or the fetch to await and whether this lookup started it (`Err`); a
    /// revision known missing, or failing within its backoff, is a fetch that has already ended.
    fn begin(&self, schema: &str, revision_id: &str) -> Result<Arc<Revision>, (Fetch, bool)> {
        let now = Instant::now();
        let mut slots = self.inner.slots.lock();
        let key: Key = (Arc::from(schema), Arc::from(revision_id));
        let (failures, missing_before) = match slots.get(&key) {
            Some(Slot::Ready(revision)) => return Ok(revision.clone()),
            Some(Slot::Fetching(fetch)) => return Err((fetch.clone(), false)),
            Some(Slot::Missing { until }) if now < *until => {
                return Err((ended(Err(Failure::Missing)), false));
            }
            Some(Slot::Failing { until, cause, .. }) if now < *until => {
                let failure = Failure::Unavailable {
                    cause: cause.clone(),
                    retry_in: *until - now,
                };
                return Err((ended(Err(failure)), false));
            }
            Some(Slot::Failing { failures, .. }) => (*failures, false),
            Some(Slot::Missing { .. }) => (0, true),
            None => (0, false),
        };
        let fetch = self.fetch(key.clone(), failures, missing_before);
        slots.put(key, Slot::Fetching(fetch.clone()));
        Err((fetch, true))
    }

    /// One fetch of `key`, shared by whoever looks it up meanwhile; its answer is kept.
    fn fetch(&self, key: Key, failures: u32, missing_before: bool) -> Fetch {
        let request = self.inner.source.revision(&key.0, Some(&key.1));
        let cache: Weak<Inner> = Arc::downgrade(&self.inner);
        async move {
            let answer = request.await;
            let (slot, fetched) = settle(&key, answer, failures, missing_before);
            if let Some(inner) = cache.upgrade() {
                inner.slots.lock().put(key, slot);
            }
            fetched
        }
        .boxed()
        .shared()
    }
}

/// A fetch that has already ended with `fetched`.
fn ended(fetched: Fetched) -> Fetch {
    futures::future::ready(fetched).boxed().shared()
}

/// What a fetch's answer is kept as and gives, logged once per run of failures.
fn settle(
    key: &Key,
    answer: Result<Revision, FetchError>,
    failures: u32,
    missing_before: bool,
) -> (Slot, Fetched) {
    let (schema, revision) = (&*key.0, shown(&key.1));
    match answer {
        Ok(found) => {
            if failures > 0 {
                tracing::info!(%schema, %revision, failed_tries = failures,
                    "schema revision fetched after failed tries; its messages are decoded again");
            } else {
                tracing::debug!(%schema, %revision, "schema revision fetched");
            }
            let found = Arc::new(found);
            (Slot::Ready(found.clone()), Ok(found))
        }
        Err(FetchError::NotFound) => {
            if !missing_before {
                tracing::warn!(%schema, %revision,
                    "the schema service has no such revision; its messages go to the failure \
                     policy (logged once per revision)");
            }
            let until = Instant::now() + MISSING_TTL;
            (Slot::Missing { until }, Err(Failure::Missing))
        }
        Err(FetchError::Unavailable(cause)) => {
            let retry_in = backoff(failures);
            if failures == 0 {
                tracing::warn!(%schema, %revision, error = %chain(&cause), ?retry_in,
                    "cannot fetch the schema revision; its messages are retried (held, then \
                     nacked) until it is fetched (logged once until then)");
            } else {
                tracing::debug!(%schema, %revision, error = %chain(&cause), ?retry_in,
                    failed_tries = failures + 1, "still cannot fetch the schema revision");
            }
            let until = Instant::now() + retry_in;
            let slot = Slot::Failing {
                until,
                failures: failures + 1,
                cause: cause.clone(),
            };
            (slot, Err(Failure::Unavailable { cause, retry_in }))
        }
    }
}

/// The wait after `failures` failed tries before this one: 1 s, doubling, at most 10 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    FETCH_BACKOFF_INITIAL
        .saturating_mul(1 << failures.min(8))
        .min(FETCH_BACKOFF_MAX)
}

/// An error and its causes on one line.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A fetch at start that failed, as a [`SchemaError`].
pub(crate) fn start_error(what: String, error: FetchError) -> SchemaError {
    match error {
        FetchError::NotFound => SchemaError::NotFound { what },
        FetchError::Unavailable(cause) => SchemaError::Unavailable { what, cause },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{FixedRevisions, SchemaType};

    const S: &str = "projects/p/schemas/orders";

    fn revision(id: &str) -> Revision {
        Revision::new(S, id, SchemaType::Avro, r#""long""#)
    }

    /// A source that counts its fetches, each taking a second.
    struct Counting(FixedRevisions, Arc<std::sync::atomic::AtomicU32>);

    impl RevisionSource for Counting {
        fn revision(
            &self,
            schema: &str,
            revision: Option<&str>,
        ) -> BoxFuture<'static, Result<Revision, FetchError>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = self.0.revision(schema, revision);
            // A second on the wire, so that lookups meanwhile find the fetch under way.
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                answer.await
            })
        }
    }

    fn counting(fixed: &FixedRevisions) -> (Schemas, Arc<std::sync::atomic::AtomicU32>) {
        let count = Arc::default();
        let schemas = Schemas::new(Counting(fixed.clone(), Arc::clone(&count)));
        (schemas, count)
    }

    fn fetches(count: &std::sync::atomic::AtomicU32) -> u32 {
        count.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn a_revision_is_fetched_once_however_many_look_it_up_at_once() {
        let fixed = FixedRevisions::new([revision("00000001")]);
        let (schemas, count) = counting(&fixed);
        let stats = ReaderStats::new(S);
        let lookups = (0..5).map(|_| schemas.lookup_for(S, "00000001", &stats));
        let found = futures::future::join_all(lookups).await;
        assert!(
            found
                .iter()
                .all(|f| f.as_ref().is_ok_and(|r| r.revision_id == "00000001"))
        );
        assert_eq!(fetches(&count), 1);
        assert!(schemas.lookup_for(S, "00000001", &stats).await.is_ok());
        assert_eq!(fetches(&count), 1, "kept");
        let report = crate::stats::SchemaStats(Arc::new(stats)).report();
        assert_eq!(
            (report.fetches, report.cache_hits),
            (1, 5),
            "one fetch; four lookups joined it, one found it kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_revision_is_remembered_for_its_ttl() {
        let fixed = FixedRevisions::new([revision("00000001")]);
        let (schemas, count) = counting(&fixed);
        let stats = ReaderStats::new(S);
        for _ in 0..3 {
            assert!(matches!(
                schemas.lookup_for(S, "0000dead", &stats).await,
                Err(Failure::Missing)
            ));
        }
        assert_eq!(fetches(&count), 1);
        tokio::time::advance(MISSING_TTL).await;
        fixed.add(revision("0000dead"));
        assert!(schemas.lookup_for(S, "0000dead", &stats).await.is_ok());
        assert_eq!(fetches(&count), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_retried_after_a_growing_backoff_and_fails_fast_meanwhile() {
        let fixed = FixedRevisions::new([revision("00000001")]);
        fixed.refuse("connection refused");
        let (schemas, count) = counting(&fixed);
        let stats = ReaderStats::new(S);
        let first = schemas.lookup_for(S, "00000001", &stats).await;
        let Err(Failure::Unavailable { retry_in, .. }) = first else {
            panic!("an outage is not a missing revision");
        };
        assert_eq!(retry_in, FETCH_BACKOFF_INITIAL);
        tokio::time::advance(Duration::from_millis(400)).await;
        let Err(Failure::Unavailable { retry_in, .. }) =
            schemas.lookup_for(S, "00000001", &stats).await
        else {
            panic!("still failing");
        };
        assert_eq!(
            retry_in,
            Duration::from_millis(600),
            "what is left of the backoff"
        );
        assert_eq!(fetches(&count), 1, "no fetch within the backoff");
        tokio::time::advance(Duration::from_millis(600)).await;
        let Err(Failure::Unavailable { retry_in, .. }) =
            schemas.lookup_for(S, "00000001", &stats).await
        else {
            panic!("still refused");
        };
        assert_eq!((retry_in, fetches(&count)), (Duration::from_secs(2), 2));
        fixed.answer();
        tokio::time::advance(retry_in).await;
        assert!(schemas.lookup_for(S, "00000001", &stats).await.is_ok());
        assert_eq!(backoff(20), FETCH_BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_keeps_at_most_its_capacity() {
        let fixed = FixedRevisions::new((1..=4).map(|n| revision(&format!("0000000{n}"))));
        let schemas = Schemas::with_capacity(fixed, 2);
        for n in 1..=4 {
            schemas.revision(S, &format!("0000000{n}")).await.unwrap();
        }
        assert_eq!(schemas.len(), 2);
        assert_eq!(
            schemas
                .revision(S, "00000009")
                .await
                .unwrap_err()
                .to_string(),
            "revision 00000009 of projects/p/schemas/orders does not exist"
        );
    }
}
