//! What one decoder counts ([`SchemaStats`], shared with whoever reports it, such as the
//! service's `/metrics`): messages decoded and failed per revision, those that failed before any
//! revision was known, and its revision lookups (answered by the process's cache, or fetched).

use crate::attributes::shown;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most revisions one decoder counts apart; the messages of any further revision are counted
/// under [`OTHER_REVISIONS`]. Pub/Sub keeps at most 20 revisions of a schema, so a decoder only
/// reaches it on a topic without a schema whose publishers set the attributes themselves: the
/// bound keeps their ids from growing the metrics without end.
pub const MAX_REVISION_LABELS: usize = 32;

/// What the revisions past [`MAX_REVISION_LABELS`] are counted as.
pub const OTHER_REVISIONS: &str = "(other)";

/// Messages of one revision.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) decoded: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// A decoder's counters.
#[derive(Debug)]
pub(crate) struct ReaderStats {
    schema: String,
    revisions: RwLock<BTreeMap<String, Arc<Counts>>>,
    /// Messages that failed before a revision was known: no attributes, another schema, a
    /// revision the service does not have.
    pub(crate) unresolved: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) fetches: AtomicU64,
    pub(crate) fetch_failures: AtomicU64,
    pub(crate) missing: AtomicU64,
}

impl ReaderStats {
    pub(crate) fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_string(),
            revisions: RwLock::default(),
            unresolved: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
            fetch_failures: AtomicU64::new(0),
            missing: AtomicU64::new(0),
        }
    }

    /// The counts of `revision`, a message's attribute (as [`shown`]; past the bound, those of
    /// [`OTHER_REVISIONS`]).
    pub(crate) fn counts(&self, revision: &str) -> Arc<Counts> {
        self.counts_of_known(shown(revision))
    }

    /// The counts of `revision`, one the schema service gave (past the bound, those of
    /// [`OTHER_REVISIONS`]).
    pub(crate) fn counts_of_known(&self, label: &str) -> Arc<Counts> {
        if let Some(counts) = self.revisions.read().get(label) {
            return counts.clone();
        }
        let mut revisions = self.revisions.write();
        let label = if revisions.len() >= MAX_REVISION_LABELS && !revisions.contains_key(label) {
            OTHER_REVISIONS
        } else {
            label
        };
        revisions.entry(label.to_string()).or_default().clone()
    }
}

/// Bumps a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A decoder's counters, shared: [`report`](Self::report) reads them. Every decoder of this
/// crate has one (`stats()`).
#[derive(Debug, Clone)]
pub struct SchemaStats(pub(crate) Arc<ReaderStats>);

impl SchemaStats {
    /// What the decoder counted so far.
    pub fn report(&self) -> SchemaReport {
        let s = &self.0;
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SchemaReport {
            schema: s.schema.clone(),
            revisions: s
                .revisions
                .read()
                .iter()
                .map(|(revision, c)| RevisionReport {
                    revision: revision.clone(),
                    decoded: read(&c.decoded),
                    failed: read(&c.failed),
                })
                .collect(),
            unresolved: read(&s.unresolved),
            cache_hits: read(&s.cache_hits),
            fetches: read(&s.fetches),
            fetch_failures: read(&s.fetch_failures),
            missing_revisions: read(&s.missing),
        }
    }
}

/// What one decoder counted: [`SchemaStats::report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaReport {
    /// The schema it reads.
    pub schema: String,
    /// Per revision the messages were written with, in the order of their ids.
    pub revisions: Vec<RevisionReport>,
    /// Messages that failed before any revision was known: schema attributes missing or naming
    /// another schema, a revision the schema service does not have. All went to the failure
    /// policy.
    pub unresolved: u64,
    /// Revision lookups the process's cache answered: the revision was there (fetched by another
    /// decoder, or at start), or a fetch of it was under way. A decoder looks a revision up
    /// until it has it, then keeps it.
    pub cache_hits: u64,
    /// Revisions this decoder fetched from the schema service.
    pub fetches: u64,
    /// Revision lookups the schema service did not answer (unreachable, refused, or a
    /// backoff after such a failure): their messages were retried.
    pub fetch_failures: u64,
    /// Revision lookups for revisions the schema service does not have.
    pub missing_revisions: u64,
}

impl SchemaReport {
    /// The counts of `revision`, if it was seen.
    pub fn revision(&self, revision: &str) -> Option<&RevisionReport> {
        self.revisions.iter().find(|r| r.revision == revision)
    }
}

/// The messages of one revision: [`SchemaReport::revisions`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevisionReport {
    /// The revision's id (a Pub/Sub revision id, or [`OTHER_REVISIONS`]).
    pub revision: String,
    /// Messages decoded and handed to the handler.
    pub decoded: u64,
    /// Messages of it that did not decode (to the failure policy).
    pub failed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_past_the_bound_are_counted_together() {
        let stats = ReaderStats::new("projects/p/schemas/s");
        for n in 0..MAX_REVISION_LABELS + 5 {
            bump(&stats.counts(&format!("{n:08x}")).decoded);
        }
        bump(&stats.counts("00000000").decoded);
        let report = SchemaStats(Arc::new(stats)).report();
        assert_eq!(report.revisions.len(), MAX_REVISION_LABELS + 1);
        assert_eq!(report.revision(OTHER_REVISIONS).unwrap().decoded, 5);
        assert_eq!(report.revision("00000000").unwrap().decoded, 2);
    }
}
