//! `SpannerTransaction`: the open read-write transaction a handler writes in, what it noticed
//! (an abort by Spanner), and how it ends (committed with its claim rows, rolled back, or rolled
//! back on the driver thread when dropped unfinished).
//!
//! It uses `error` and `records`.

use super::error::{is_abort, store_error};
use gcloud_gax::grpc::{Code, Status};
use gcloud_googleapis::spanner::v1::Mutation;
use gcloud_spanner::key::Key;
use gcloud_spanner::row::Row;
use gcloud_spanner::statement::Statement;
use gcloud_spanner::transaction_rw::ReadWriteTransaction;
use leasehold_actors::error::{Cause, StoreError};
use leasehold_actors::store::{CommitSignal, Places};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// An open read-write transaction in which the message (or a batch's messages) is claimed: the
/// handler's writes go here, with DML ([`update`](Self::update),
/// [`batch_update`](Self::batch_update)) or mutations ([`buffer_write`](Self::buffer_write)),
/// and its reads ([`query`](Self::query), [`read_row`](Self::read_row)) see a serializable
/// view with what it wrote.
///
/// Spanner may abort the transaction at any statement or at the commit. These methods note an
/// abort: whatever the handler returns then, the runtime rolls the transaction back and runs
/// the handler again on a fresh one (as the store's [`max_aborts`] allows). So a handler must
/// keep every effect inside the transaction: an HTTP call or a message published from inside
/// it may happen once per run. Do not commit or roll back yourself: the outcome the handler
/// returns does (`ack()` and `drop()` commit, anything else rolls back). Dropped unfinished
/// (the handler was cut by a stop) it is rolled back.
///
/// [`max_aborts`]: crate::SpannerStore::max_aborts
pub struct SpannerTransaction {
    tx: Option<ReadWriteTransaction>,
    aborted: bool,
    pub(crate) subscription: Arc<str>,
    /// The message claimed, or the messages a batch claimed.
    pub(crate) message_ids: Vec<Arc<str>>,
    /// The outbox messages published in it so far, by source message.
    pub(crate) places: Places,
    /// The last place given in each ordering key (topic, key) in this transaction: its reads
    /// do not see its own buffered rows.
    pub(crate) last_seqs: HashMap<(String, String), i64>,
    /// Told at the commit when it published: this process's relays wake.
    signal: CommitSignal,
    /// An application's own transaction, not a handler's: its outbox messages get random keys.
    pub(crate) application: bool,
    /// Outbox rows it wrote: at its commit, this process's relays wake.
    pub(crate) published: u32,
}

impl fmt::Debug for SpannerTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpannerTransaction")
            .field("subscription", &self.subscription)
            .field("message_ids", &self.message_ids)
            .field("aborted", &self.aborted)
            .finish_non_exhaustive()
    }
}

impl SpannerTransaction {
    pub(crate) fn new(
        tx: ReadWriteTransaction,
        subscription: Arc<str>,
        signal: CommitSignal,
    ) -> Self {
        Self {
            tx: Some(tx),
            aborted: false,
            subscription,
            message_ids: Vec::new(),
            places: Places::default(),
            last_seqs: HashMap::new(),
            signal,
            application: false,
            published: 0,
        }
    }

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
    /// a batch's that it claimed (not those finished before), in the batch's order.
    pub fn message_ids(&self) -> &[Arc<str>] {
        &self.message_ids
    }

    /// Runs a DML statement (`INSERT`, `UPDATE`, `DELETE`) in the transaction: the rows it
    /// changed. One round trip.
    pub async fn update(&mut self, statement: Statement) -> Result<i64, Status> {
        let result = self.open()?.update(statement).await;
        self.noted(result)
    }

    /// Runs DML statements in the transaction, in order, in one round trip: the rows each
    /// changed. Spanner stops at the first that fails.
    pub async fn batch_update(&mut self, statements: Vec<Statement>) -> Result<Vec<i64>, Status> {
        let asked = statements.len();
        let result = self.open()?.batch_update(statements).await;
        // Spanner answers a batch whose statement failed with the counts of those before it
        // (the failure's status is not passed on by the client): fewer counts is an error.
        let result = result.and_then(|counts| match counts.len() {
            ran if ran == asked => Ok(counts),
            ran => Err(Status::new(
                Code::Unknown,
                format!(
                    "Spanner ran {ran} of the batch's {asked} statements: statement {} failed",
                    ran + 1
                ),
            )),
        });
        self.noted(result)
    }

    /// Buffers mutations, written at the commit with the claim rows (no round trip now; the
    /// transaction's reads do not see them).
    pub fn buffer_write(&mut self, mutations: Vec<Mutation>) {
        if let Some(tx) = self.tx.as_mut() {
            tx.buffer_write(mutations);
        }
    }

    /// Runs a query in the transaction and reads every row it returns.
    pub async fn query(&mut self, statement: Statement) -> Result<Vec<Row>, Status> {
        let result = async {
            let mut rows = self.open()?.query(statement).await?;
            let mut all = Vec::new();
            while let Some(row) = rows.next().await? {
                all.push(row);
            }
            Ok(all)
        }
        .await;
        self.noted(result)
    }

    /// Reads one row of `table` by its key, in the transaction.
    pub async fn read_row(
        &mut self,
        table: &str,
        columns: &[&str],
        key: Key,
    ) -> Result<Option<Row>, Status> {
        let result = self.open()?.read_row(table, columns, key).await;
        self.noted(result)
    }

    /// Reads the rows of `table` with these keys, in the transaction (those that exist).
    pub(crate) async fn read_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        keys: Vec<Key>,
    ) -> Result<Vec<Row>, Status> {
        let result = async {
            let mut rows = self.open()?.read(table, columns, keys).await?;
            let mut all = Vec::new();
            while let Some(row) = rows.next().await? {
                all.push(row);
            }
            Ok(all)
        }
        .await;
        self.noted(result)
    }

    /// The client's own transaction, for what the methods above do not cover. An abort met
    /// through it is not noted here: return its error from the handler and the message is
    /// retried (nack) rather than run again, unless the commit sees the abort too.
    pub fn inner(&mut self) -> Option<&mut ReadWriteTransaction> {
        self.tx.as_mut()
    }

    /// Whether Spanner aborted the transaction under one of its statements.
    pub fn was_aborted(&self) -> bool {
        self.aborted
    }

    fn open(&mut self) -> Result<&mut ReadWriteTransaction, Status> {
        self.tx
            .as_mut()
            .ok_or_else(|| Status::new(Code::FailedPrecondition, "the transaction has ended"))
    }

    /// Notes an abort in a statement's result.
    pub(crate) fn noted<T>(&mut self, result: Result<T, Status>) -> Result<T, Status> {
        if let Err(status) = &result
            && is_abort(status)
        {
            self.aborted = true;
        }
        result
    }

    /// Commits an application's own transaction ([`SpannerStore::transaction`]): its writes and
    /// the outbox rows it published; this process's relays wake. An abort
    /// ([`StoreError::Aborted`]) keeps nothing: run the transaction again. (A handler's
    /// transaction is committed by the runtime, with the outcome the handler returns: the
    /// handler only borrows it.)
    ///
    /// [`SpannerStore::transaction`]: crate::SpannerStore::transaction
    pub async fn commit(self) -> Result<(), StoreError> {
        self.commit_with(Vec::new()).await
    }

    /// Writes `rows` with the handler's mutations and commits. An abort, or a claim row another
    /// transaction committed first (`ALREADY_EXISTS`), is [`StoreError::Aborted`]: nothing of
    /// this transaction is kept, and a run on a fresh one finds the other's row.
    pub(crate) async fn commit_with(mut self, rows: Vec<Mutation>) -> Result<(), StoreError> {
        let Some(mut tx) = self.tx.take() else {
            return Err(StoreError::Backend(Cause::message(
                "the transaction had ended",
            )));
        };
        tx.buffer_write(rows);
        match tx.end(Ok::<(), Status>(()), None).await {
            Ok(_) => {
                if self.published > 0 {
                    self.signal.committed();
                }
                Ok(())
            }
            // Another transaction committed this message's claim first.
            Err(status) if status.code() == Code::AlreadyExists && names_claims(&status) => {
                Err(StoreError::Aborted(Cause::new(redacted(&status))))
            }
            Err(status) => Err(store_error(redacted(&status))),
        }
    }

    /// Rolls back: nothing of it, its outbox rows included, is kept.
    pub async fn rollback(mut self) {
        if let Some(tx) = self.tx.take() {
            rollback(tx).await;
        }
    }
}

/// Whether a commit's error is about Leasehold's claims table (not the handler's own rows).
fn names_claims(status: &Status) -> bool {
    status.message().contains(crate::schema::TABLE)
}

/// A commit's error without its message when the message may quote the handler's data (a row's
/// key in `ALREADY_EXISTS`, a value in a constraint's failure): it is logged.
fn redacted(status: &Status) -> Status {
    match status.code() {
        Code::AlreadyExists
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::InvalidArgument
        | Code::OutOfRange => Status::new(
            status.code(),
            "Spanner refused the commit (its message, which may quote row data, is left out)",
        ),
        _ => status.clone(),
    }
}

/// Ends `tx` rolled back (the client sends the rollback and ignores its answer: an aborted
/// or expired transaction is over on Spanner's side anyway).
async fn rollback(mut tx: ReadWriteTransaction) {
    let ended = Status::new(Code::Cancelled, "rolled back by Leasehold");
    let _ = tx.end::<(), Status>(Err(ended), None).await;
}

impl Drop for SpannerTransaction {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            // The handler's future was dropped (its worker stopped): roll back off this thread.
            crate::driver::driver().spawn(rollback(tx));
        }
    }
}
