//! `TransactionalStore` for `SpannerStore`: one message's claim (a read of its row in a new
//! read-write transaction) and commit (the row inserted with the handler's writes).
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
use leasehold_actors::store::{Claim, Completed, TransactionalStore};
use std::sync::Arc;
use std::time::Duration;

impl TransactionalStore for SpannerStore {
    type Transaction = SpannerTransaction;

    fn begin(
        &self,
        subscription: &str,
        message_id: &str,
    ) -> LocalBoxFuture<'static, Result<Claim<SpannerTransaction>, StoreError>> {
        let (client, signal) = (self.client.clone(), self.outbox.clone());
        let (subscription, message_id): (Arc<str>, Arc<str>) =
            (Arc::from(subscription), Arc::from(message_id));
        async move {
            let tx = client
                .begin_read_write_transaction()
                .await
                .map_err(client_error)?;
            let mut tx = SpannerTransaction::new(tx, subscription.clone(), signal);
            let row = tx
                .read_row(TABLE, &["outcome"], key(&subscription, &message_id))
                .await;
            match row {
                Ok(None) => {
                    tx.message_ids.push(message_id);
                    Ok(Claim::Claimed(tx))
                }
                Ok(Some(row)) => {
                    tx.rollback().await;
                    let text: String = row
                        .column(0)
                        .map_err(|e| StoreError::Backend(Cause::new(e)))?;
                    completed(&text).map(Claim::Finished).ok_or_else(|| {
                        StoreError::Backend(Cause::message(format!(
                            "a claim row holds an outcome Leasehold does not write: {text:?}"
                        )))
                    })
                }
                Err(status) => {
                    tx.rollback().await;
                    Err(store_error(status))
                }
            }
        }
        .boxed_local()
    }

    fn commit(
        &self,
        tx: SpannerTransaction,
        completed: Completed,
    ) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let row = finished(&tx.subscription, tx.message_id(), completed);
        tx.commit_with(vec![row]).boxed_local()
    }

    fn rollback(&self, tx: SpannerTransaction) -> LocalBoxFuture<'static, ()> {
        tx.rollback().boxed_local()
    }

    fn probe(&self) -> LocalBoxFuture<'static, Result<(), StoreError>> {
        let store = self.clone();
        async move { store.ping().await }.boxed_local()
    }

    fn aborted(&self, tx: &SpannerTransaction) -> bool {
        tx.was_aborted()
    }

    fn rerun_after(&self, aborts: u32) -> Option<Duration> {
        self.abort_wait(aborts)
    }
}
