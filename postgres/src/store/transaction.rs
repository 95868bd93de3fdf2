//! `PgTransaction`: the open transaction a handler writes in, and how it ends (committed with
//! its records in one round trip, rolled back, or closed with its connection).
//!
//! It uses `error`.

use super::error::{backend, statement};
use deadpool_postgres::{ClientWrapper, Object};
use leasehold_actors::error::StoreError;
use leasehold_actors::store::{CommitSignal, Places};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use tokio_postgres::types::ToSql;

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
    pub(crate) subscription: String,
    /// The message claimed, or the messages a batch claimed.
    pub(crate) message_ids: Vec<Arc<str>>,
    /// The outbox messages published in it so far, by source message.
    pub(crate) places: Places,
    /// Told at the commit when it published: this process's relays wake.
    signal: CommitSignal,
    /// Whether its outbox rows notify other processes' relays (`NOTIFY`).
    pub(crate) notify: bool,
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
    /// [`message_ids`](Self::message_ids). For a registration that dedupes on an attribute
    /// (`Registration::dedupe_on`), the key it is claimed under instead: `attribute=value`
    /// (the message id is the delivery's, `Delivery::message_id`).
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

    /// The pooled connection `client`, about to begin the transaction that claims `message_ids`
    /// of `subscription`: from here, dropped on an error, the connection is closed, not pooled,
    /// and the server rolls back.
    pub(crate) fn new(
        client: Object,
        subscription: String,
        message_ids: Vec<Arc<str>>,
        signal: CommitSignal,
        notify: bool,
    ) -> Self {
        Self {
            client: Some(client),
            subscription,
            message_ids,
            places: Places::default(),
            signal,
            notify,
        }
    }

    /// Ends the transaction with `statement` and returns the connection to the pool; on an
    /// error the connection is closed instead.
    pub(crate) async fn end(&mut self, statement: &str) -> Result<(), tokio_postgres::Error> {
        self.batch_execute(statement).await?;
        self.release();
        Ok(())
    }

    /// Sends the statement `record` that writes the outcomes into the records, with `params`,
    /// then `COMMIT`, in one round trip. Should the records fail (the handler's own statement
    /// failed and aborted the transaction, say), the commit that follows only ends the aborted
    /// transaction: nothing was committed.
    pub(crate) async fn record_and_commit(
        &self,
        record: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<CommitAnswers, StoreError> {
        let record = self.prepare_cached(record).await.map_err(backend)?;
        let (updated, committed) =
            futures::join!(self.execute(&record, params), self.batch_execute("COMMIT"));
        Ok(CommitAnswers { updated, committed })
    }

    /// The transaction is over: the connection goes back to the pool.
    fn release(&mut self) {
        drop(self.client.take());
    }

    /// The end of a commit, from what the record update(s) and the `COMMIT` itself answered:
    /// once the `COMMIT` answered, the connection goes back to the pool (a failed update only
    /// aborted the transaction, which the `COMMIT` ended); a failed `COMMIT` leaves it to be
    /// dropped.
    pub(crate) fn ended(&mut self, answers: CommitAnswers) -> Result<(), StoreError> {
        let CommitAnswers { updated, committed } = answers;
        committed.map_err(statement)?;
        self.release();
        updated.map_err(statement)?;
        if self.places.published() > 0 {
            self.signal.committed();
        }
        Ok(())
    }
}

/// What the statement that writes the records and the `COMMIT` sent with it answered.
pub(crate) struct CommitAnswers {
    updated: Result<u64, tokio_postgres::Error>,
    committed: Result<(), tokio_postgres::Error>,
}

impl CommitAnswers {
    /// How many records the statement wrote, when it and the `COMMIT` both succeeded.
    pub(crate) fn recorded(&self) -> Option<u64> {
        match (&self.updated, &self.committed) {
            (Ok(rows), Ok(())) => Some(*rows),
            _ => None,
        }
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
