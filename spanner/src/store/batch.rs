//! `TransactionalBatchStore` for `SpannerStore`: a batch's claim (one read of every message's
//! row in a new read-write transaction) and commit (the finished messages' rows inserted with
//! the handler's writes).
//!
//! It uses `error`, `records`, `transaction` and `progress`.

use super::error::{client_error, store_error};
use super::progress::SpannerStore;
use super::records::{completed, finished, key};
use super::transaction::SpannerTransaction;
use crate::schema::TABLE;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use leasehold_actors::error::{Cause, StoreError};
use leasehold_actors::store::{BatchClaim, BatchClaims, Completed, TransactionalBatchStore};
use std::collections::HashMap;
use std::sync::Arc;

impl TransactionalBatchStore for SpannerStore {
    /// Never [`BatchClaim::Busy`]: a claim is a read until the commit, so two replicas with the
    /// same message both get it, and Spanner aborts all but one at their commits.
    fn begin_batch(
        &self,
        subscription: &str,
        message_ids: &[Arc<str>],
    ) -> LocalBoxFuture<'static, Result<BatchClaims<SpannerTransaction>, StoreError>> {
        let (client, signal) = (self.client.clone(), self.outbox.clone());
        let subscription: Arc<str> = Arc::from(subscription);
        let ids = message_ids.to_vec();
        async move {
            let tx = client
                .begin_read_write_transaction()
                .await
                .map_err(client_error)?;
            let mut tx = SpannerTransaction::new(tx, subscription.clone(), signal);
            let keys = ids.iter().map(|id| key(&subscription, id)).collect();
            let rows = match tx.read_rows(TABLE, &["message_id", "outcome"], keys).await {
                Ok(rows) => rows,
                Err(status) => {
                    tx.rollback().await;
                    return Err(store_error(status));
                }
            };
            let mut found: HashMap<String, Completed> = HashMap::with_capacity(rows.len());
            for row in rows {
                let (id, text): (String, String) = match (row.column(0), row.column(1)) {
                    (Ok(id), Ok(text)) => (id, text),
                    (Err(e), _) | (_, Err(e)) => {
                        tx.rollback().await;
                        return Err(StoreError::Backend(Cause::new(e)));
                    }
                };
                if let Some(done) = completed(&text) {
                    found.insert(id, done);
                }
            }
            let claims: Vec<BatchClaim> = ids
                .iter()
                .map(|id| match found.get(&**id) {
                    Some(done) => BatchClaim::Finished(*done),
                    None => BatchClaim::Claimed,
                })
                .collect();
            tx.message_ids = ids
                .iter()
                .zip(&claims)
                .filter(|(_, claim)| **claim == BatchClaim::Claimed)
                .map(|(id, _)| id.clone())
                .collect();
            let transaction = if tx.message_ids.is_empty() {
                tx.rollback().await;
                None
            } else {
                Some(tx)
            };
            Ok(BatchClaims {
                transaction,
                claims,
            })
        }
        .boxed_local()
    }

    /// The messages retried wrote no row, so `released` needs nothing.
    fn commit_batch(
        &self,
        tx: SpannerTransaction,
        finished_messages: Vec<(Arc<str>, Completed)>,
        _released: Vec<Arc<str>>,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let rows = finished_messages
            .iter()
            .map(|(id, done)| finished(&tx.subscription, id, *done))
            .collect();
        tx.commit_with(rows).boxed_local()
    }
}
