//! `SpannerProgress`: the claims table as a plain `ProgressStore`, for handlers that are not
//! transactional. Their progress is kept in Spanner, so every replica sees it and a restart
//! keeps it, but the record is not one transaction with the handler's effects.
//!
//! It uses `records` and `progress`, and the driver thread from outside `store/`.

use super::progress::SpannerStore;
use super::records::{COLUMNS, completed, key, outcome_text, shard};
use crate::driver::{driver, on_driver};
use crate::schema::TABLE;
use futures::FutureExt;
use futures::future::BoxFuture;
use gcloud_spanner::mutation::{delete, insert_or_update};
use gcloud_spanner::value::CommitTimestamp;
use leasehold_actors::error::{Cause, StoreError};
use leasehold_actors::store::{Completed, ProgressStore};
use std::sync::Arc;
use std::time::Duration;

/// How long a lookup waits for Spanner, by default, before the handler runs anyway.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`ProgressStore`] for one subscription on Spanner's claims table: what
/// `Registration::progress_store` takes for a handler that is not transactional (and what the
/// service's `progress_store = { kind = "spanner", ... }` opens).
///
/// A finished message's record is written (an upsert, outside any transaction of the
/// handler's) before its ack is sent, and deleted when Pub/Sub confirms the ack (on
/// exactly-once subscriptions; elsewhere nothing confirms it, and the row stays until the
/// table's deletion policy removes it, 7 days after it was written); a redelivery
/// to any replica that finds it is settled without the handler. So it prevents a second run
/// after a lost or refused ack on every replica, not only on this one; what it cannot prevent
/// is a crash between the handler's effect and the record. For that, use the
/// [`SpannerStore`] itself with a transactional registration.
///
/// The lookup is synchronous (the trait's): it blocks the worker thread for one strong read,
/// up to its timeout ([`DEFAULT_LOOKUP_TIMEOUT`]); past it, or on an error, the handler runs
/// (at-least-once, as without a store). Build it with [`SpannerStore::progress`].
#[derive(Clone, Debug)]
pub struct SpannerProgress {
    store: SpannerStore,
    subscription: Arc<str>,
    lookup_timeout: Duration,
}

impl SpannerStore {
    /// The claims table as the plain progress store of `subscription` (its full name).
    pub fn progress(&self, subscription: &str) -> SpannerProgress {
        SpannerProgress {
            store: self.clone(),
            subscription: Arc::from(subscription),
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
        }
    }
}

impl SpannerProgress {
    /// How long a lookup waits for Spanner before the handler runs anyway (default
    /// [`DEFAULT_LOOKUP_TIMEOUT`]).
    pub fn lookup_timeout(mut self, timeout: Duration) -> Self {
        self.lookup_timeout = timeout;
        self
    }

    /// The subscription whose progress this is.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Cause::new(e))
}

impl ProgressStore for SpannerProgress {
    fn completed(&self, message_id: &str) -> Result<Option<Completed>, StoreError> {
        let client = self.store.client.clone();
        let row_key = key(&self.subscription, message_id);
        let timeout = self.lookup_timeout;
        let lookup = on_driver(async move {
            tokio::time::timeout(timeout, async move {
                let mut tx = client.single().await.map_err(backend)?;
                let row = tx
                    .read_row(TABLE, &["outcome"], row_key)
                    .await
                    .map_err(backend)?;
                let text: Option<String> = match row {
                    Some(row) => Some(row.column(0).map_err(backend)?),
                    None => None,
                };
                Ok(text.as_deref().and_then(completed))
            })
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Backend(Cause::message(format!(
                    "Spanner did not answer the lookup within {timeout:?}"
                ))))
            })
        });
        // The trait's lookup is synchronous: wait here, on the worker thread, while the driver
        // thread does the read (and its timeout). Never called on the driver thread itself,
        // which runs no handler: there this wait would never end.
        futures::executor::block_on(lookup)
    }

    fn record(
        &self,
        message_id: &str,
        completed: Completed,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let client = self.store.client.clone();
        let row = insert_or_update(
            TABLE,
            &COLUMNS,
            &[
                &shard(message_id),
                &&*self.subscription,
                &message_id,
                &outcome_text(completed),
                &CommitTimestamp::new(),
            ],
        );
        on_driver(async move {
            // A blind write, in a transaction of its own: nothing to abort it.
            client
                .apply_at_least_once(vec![row])
                .await
                .map(|_| ())
                .map_err(backend)
        })
        .boxed()
    }

    fn clear(&self, message_id: &str) {
        let client = self.store.client.clone();
        let row = delete(TABLE, key(&self.subscription, message_id));
        driver().spawn(async move {
            if let Err(error) = client.apply_at_least_once(vec![row]).await {
                tracing::debug!(%error, "could not delete a confirmed message's record; it expires");
            }
        });
    }
}
